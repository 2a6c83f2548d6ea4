-- The router's own objects: the routing functions (schema lease_router) and
-- its one setting.  The partitions are the foreign server `pg_lease`
-- (SQL/MED, FOREIGN DATA WRAPPER plproxy), created by the operator
-- (docs/scale-out.md, "Deploying").

CREATE SCHEMA lease_router;
COMMENT ON SCHEMA lease_router IS
    'pg_lease_router internals: routing functions and the proxies the lease.* functions and views call.';
-- PL/Proxy evaluates the routing functions as the caller, and the SQL
-- wrappers call the proxies as the caller: the schema and its functions are
-- usable by every role.  They grant nothing: each call runs on a partition
-- as the calling role, where pg_lease checks its privileges.
GRANT USAGE ON SCHEMA lease_router TO PUBLIC;

-- Conversations made before the partitions had routable ids
-- (lease.conversation_id_partition on each partition): ids below `below`
-- live on partition `partition_index`.  Empty by default.
CREATE TABLE lease_router.legacy_conversations (
    only_row        boolean NOT NULL DEFAULT true PRIMARY KEY,
    below           bigint  NOT NULL,
    partition_index integer NOT NULL,
    CONSTRAINT legacy_conversations_only_row_check CHECK (only_row),
    CONSTRAINT legacy_conversations_partition_check CHECK (partition_index >= 0)
);
SELECT pg_catalog.pg_extension_config_dump('lease_router.legacy_conversations', '');
GRANT SELECT ON lease_router.legacy_conversations TO PUBLIC;

-- Where streams live (docs/scale-out.md, "Moving a stream"): one row per
-- stream that lease_router.move_stream moved (or that sync_directory found
-- moved on the partitions, whose records are the truth: a router whose row
-- is old sends the call to a partition that refuses it, 40L01).  A stream
-- with no row lives where the hash places it.  Serves stream_partition's
-- one lookup per call (its primary key).
CREATE TABLE lease_router.stream_directory (
    app_name        text        NOT NULL,
    stream_name     text        NOT NULL,
    partition_index integer     NOT NULL,
    generation      bigint      NOT NULL,
    changed_at      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (app_name, stream_name),
    CONSTRAINT stream_directory_partition_check CHECK (partition_index >= 0),
    CONSTRAINT stream_directory_generation_check CHECK (generation >= 0)
);
SELECT pg_catalog.pg_extension_config_dump('lease_router.stream_directory', '');
GRANT SELECT ON lease_router.stream_directory TO PUBLIC;

-- The partition count the hash places streams, tenants and conversation
-- ids by, once partitions have been added (lease_router.add_partitions
-- records the count before it adds any): so adding partitions moves
-- nothing.  No row: the router's own count, as PL/Proxy applies it.
CREATE TABLE lease_router.default_placement (
    only_row   boolean NOT NULL DEFAULT true PRIMARY KEY,
    partitions integer NOT NULL,
    CONSTRAINT default_placement_only_row_check CHECK (only_row),
    CONSTRAINT default_placement_partitions_check
        CHECK (partitions >= 1 AND (partitions & (partitions - 1)) = 0)
);
SELECT pg_catalog.pg_extension_config_dump('lease_router.default_placement', '');
GRANT SELECT ON lease_router.default_placement TO PUBLIC;

-- PL/Proxy maps a routing value h to partition h & (partition count - 1).
-- The routing functions are PL/pgSQL so that their lookups are planned
-- once per backend (PL/Proxy calls one per call); a hash is masked by the
-- recorded count when there is one (a mask of -1 keeps every bit, for
-- PL/Proxy to mask).

-- A stream lives whole on one partition: the directory's (one primary-key
-- lookup), else the hash's.
CREATE FUNCTION lease_router.stream_partition(app_name text, stream_name text)
RETURNS integer
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN COALESCE((SELECT d.partition_index FROM lease_router.stream_directory AS d
                      WHERE d.app_name OPERATOR(pg_catalog.=) stream_partition.app_name
                        AND d.stream_name OPERATOR(pg_catalog.=) stream_partition.stream_name),
                    pg_catalog.hashtext(COALESCE(stream_partition.app_name, '') OPERATOR(pg_catalog.||) '/'
                                        OPERATOR(pg_catalog.||) COALESCE(stream_partition.stream_name, ''))
                    OPERATOR(pg_catalog.&) COALESCE((SELECT p.partitions OPERATOR(pg_catalog.-) 1
                                                       FROM lease_router.default_placement AS p), -1));
END
$$;

-- has_app_access: any partition answers the same (grant_app writes all).
CREATE FUNCTION lease_router.app_partition(app_name text)
RETURNS integer
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN pg_catalog.hashtext(COALESCE(app_partition.app_name, ''))
           OPERATOR(pg_catalog.&) COALESCE((SELECT p.partitions OPERATOR(pg_catalog.-) 1
                                              FROM lease_router.default_placement AS p), -1);
END
$$;

-- A tenant lives whole on one partition, so its quota stays exact.
CREATE FUNCTION lease_router.user_partition(user_id text)
RETURNS integer
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN pg_catalog.hashtext(COALESCE(user_partition.user_id, ''))
           OPERATOR(pg_catalog.&) COALESCE((SELECT p.partitions OPERATOR(pg_catalog.-) 1
                                              FROM lease_router.default_placement AS p), -1);
END
$$;

-- A conversation id names its partition: id % stride = partition number
-- (lease.conversation_id_partition), and the stride is the partition count,
-- so its low bits are the partition (the recorded count's bits, once
-- partitions were added: new partitions make no conversations).  NULL goes
-- to partition 0, which raises 22004 as pg_lease does.
CREATE FUNCTION lease_router.conversation_partition(conversation_id bigint)
RETURNS integer
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN CASE
           WHEN conversation_id IS NULL THEN 0
           WHEN conversation_id OPERATOR(pg_catalog.<)
                COALESCE((SELECT l.below FROM lease_router.legacy_conversations AS l), 0)
               THEN (SELECT l.partition_index FROM lease_router.legacy_conversations AS l)
           ELSE CAST(conversation_id OPERATOR(pg_catalog.&)
                     COALESCE((SELECT p.partitions OPERATOR(pg_catalog.-) 1
                                 FROM lease_router.default_placement AS p), 1073741823) AS integer)
       END;
