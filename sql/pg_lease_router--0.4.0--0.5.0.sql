/* pg_lease_router--0.4.0--0.5.0.sql: from 0.4.0 to 0.5.0.  Never edit once released. */

\echo Use "ALTER EXTENSION pg_lease_router UPDATE TO '0.5.0'" to load this file. \quit

----------------------------------------------------------------------------
-- Moving streams between partitions, adding partitions
-- (src/router/head.sql, src/router/placement.sql): the stream directory,
-- the count the hash places by, the routing functions that read them
-- (PL/pgSQL now: their lookups planned once per backend), and move_stream
-- with its helpers.
----------------------------------------------------------------------------

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
CREATE OR REPLACE FUNCTION lease_router.stream_partition(app_name text, stream_name text)
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
CREATE OR REPLACE FUNCTION lease_router.app_partition(app_name text)
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
CREATE OR REPLACE FUNCTION lease_router.user_partition(user_id text)
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
CREATE OR REPLACE FUNCTION lease_router.conversation_partition(conversation_id bigint)
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


-- The partitions of the foreign server pg_lease (its options p0, p1, ...).
CREATE FUNCTION lease_router.partition_count()
RETURNS integer
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN (SELECT CAST(pg_catalog.count(*) AS integer)
          FROM pg_catalog.pg_foreign_server AS s, pg_catalog.unnest(s.srvoptions) AS o(option)
         WHERE s.srvname OPERATOR(pg_catalog.=) 'pg_lease'
           AND o.option OPERATOR(pg_catalog.~) '^p[0-9]+=');

-- The partitions' steps, each on the partition named by its first
-- argument (src/leases/placement.sql has what each does).
CREATE FUNCTION lease_router.move_stream_state_on(on_partition integer, app_name text, stream_name text)
RETURNS TABLE (state text, partition_index integer, peer_partition integer, generation bigint)
LANGUAGE plproxy AS $$
    CLUSTER 'pg_lease';
    RUN ON on_partition;
    SELECT * FROM lease.move_stream_state(app_name, stream_name);
$$;

CREATE FUNCTION lease_router.move_stream_freeze_on(on_partition integer, app_name text, stream_name text,
                                                   to_partition integer)
RETURNS bigint
LANGUAGE plproxy AS $$
    CLUSTER 'pg_lease';
    RUN ON on_partition;
    SELECT lease.move_stream_freeze(app_name, stream_name, on_partition, to_partition);
$$;

CREATE FUNCTION lease_router.move_stream_export_on(on_partition integer, app_name text, stream_name text,
                                                   generation bigint)
RETURNS jsonb
LANGUAGE plproxy AS $$
    CLUSTER 'pg_lease';
    RUN ON on_partition;
    SELECT lease.move_stream_export(app_name, stream_name, generation);
$$;

CREATE FUNCTION lease_router.move_stream_import_on(on_partition integer, app_name text, stream_name text,
                                                   from_partition integer, generation bigint, stream jsonb)
RETURNS bigint
LANGUAGE plproxy AS $$
    CLUSTER 'pg_lease';
    RUN ON on_partition;
    SELECT lease.move_stream_import(app_name, stream_name, on_partition, from_partition, generation, stream);
$$;

CREATE FUNCTION lease_router.move_stream_complete_on(on_partition integer, app_name text, stream_name text,
                                                     generation bigint)
RETURNS text
LANGUAGE plproxy AS $$
    CLUSTER 'pg_lease';
    RUN ON on_partition;
    SELECT lease.move_stream_complete(app_name, stream_name, generation);
$$;

CREATE FUNCTION lease_router.move_stream_undo_on(on_partition integer, app_name text, stream_name text,
                                                 generation bigint)
RETURNS text
LANGUAGE plproxy AS $$
    CLUSTER 'pg_lease';
    RUN ON on_partition;
    SELECT lease.move_stream_undo(app_name, stream_name, generation);
$$;

CREATE FUNCTION lease_router.move_stream_placements_on_all()
RETURNS TABLE (app_name text, stream_name text, state text, partition_index integer,
               peer_partition integer, generation bigint)
LANGUAGE plproxy AS $$
    CLUSTER 'pg_lease';
    RUN ON ALL;
    SELECT * FROM lease.move_stream_placements();
$$;

-- Where stream (app_name, stream_name) really is, by the partitions'
-- records: from the router's partition for it, each moved_out record
-- names the next one.  The partition, and its record (NULLs: none).
CREATE FUNCTION lease_router.locate_stream(app_name text, stream_name text,
                                           OUT partition_index integer, OUT state text,
                                           OUT peer_partition integer, OUT generation bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n integer := lease_router.partition_count();
    hops integer := 0;
BEGIN
    partition_index := lease_router.stream_partition(app_name, stream_name) OPERATOR(pg_catalog.&) (n OPERATOR(pg_catalog.-) 1);
    LOOP
        state := NULL; peer_partition := NULL; generation := NULL;
        SELECT s.state, s.peer_partition, s.generation INTO state, peer_partition, generation
          FROM lease_router.move_stream_state_on(partition_index, app_name, stream_name) AS s;
        EXIT WHEN state IS DISTINCT FROM 'moved_out';
        hops := hops OPERATOR(pg_catalog.+) 1;
        IF hops OPERATOR(pg_catalog.>) n OR peer_partition OPERATOR(pg_catalog.>=) n THEN
            RAISE EXCEPTION 'the partitions'' records of stream "%/%" lead nowhere', app_name, stream_name
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      DETAIL = pg_catalog.format('Partition %s says the stream moved to partition %s.', partition_index, peer_partition),
                      HINT = 'Every router must list the same partitions in the same order.';
        END IF;
        partition_index := peer_partition;
    END LOOP;
END
$$;

-- Records in this router's directory that the stream is on `partition`
-- as of move `generation` (an older generation never overwrites a newer).
CREATE FUNCTION lease_router.record_placement(app_name text, stream_name text, on_partition integer,
                                              generation bigint)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    INSERT INTO lease_router.stream_directory AS d (app_name, stream_name, partition_index, generation)
    VALUES (app_name, stream_name, on_partition, generation)
    ON CONFLICT (app_name, stream_name) DO UPDATE
       SET partition_index = excluded.partition_index, generation = excluded.generation,
           changed_at = pg_catalog.now()
     WHERE d.generation OPERATOR(pg_catalog.<=) excluded.generation
$$;

-- Moves a stream, whole, to partition to_partition, online: its calls are
-- refused (40L01) for the move's short window, never served by two
-- partitions; a move that failed half way is finished by calling it
-- again, or undone by lease_router.undo_move.  frozen_for: how long the
-- stream was served by no partition.
CREATE FUNCTION lease_router.move_stream(app_name text, stream_name text, to_partition integer,
                                         OUT from_partition integer, OUT generation bigint,
                                         OUT leases bigint, OUT frozen_for interval)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n integer := lease_router.partition_count();
    here record;
    before record;
    stream jsonb;
    frozen timestamptz;
BEGIN
    IF app_name IS NULL OR stream_name IS NULL OR to_partition IS NULL THEN
        RAISE EXCEPTION '% must not be null',
              CASE WHEN app_name IS NULL THEN 'app_name' WHEN stream_name IS NULL THEN 'stream_name' ELSE 'to_partition' END
            USING ERRCODE = 'null_value_not_allowed', HINT = 'Name the stream and the partition to move it to.';
    END IF;
    IF to_partition OPERATOR(pg_catalog.<) 0 OR to_partition OPERATOR(pg_catalog.>=) n THEN
        RAISE EXCEPTION 'partition % does not exist', to_partition USING ERRCODE = 'invalid_parameter_value',
            DETAIL = pg_catalog.format('The router''s server pg_lease has partitions 0 to %s.', n OPERATOR(pg_catalog.-) 1),
            HINT = 'Add partitions with lease_router.add_partitions first.';
    END IF;
    here := lease_router.locate_stream(app_name, stream_name);
    -- an earlier move into this partition, not finished: finish it first
    IF here.state OPERATOR(pg_catalog.=) 'arriving' THEN
        SELECT s.state, s.generation INTO before
          FROM lease_router.move_stream_state_on(here.peer_partition, app_name, stream_name) AS s;
        IF before.generation IS DISTINCT FROM here.generation
           OR before.state NOT IN ('moving_out', 'moved_out') THEN
            RAISE EXCEPTION 'stream "%/%" is arriving on partition % from partition %, which has no such move',
                  app_name, stream_name, here.partition_index, here.peer_partition
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      HINT = 'Undo that move with lease_router.undo_move.';
        END IF;
        PERFORM lease_router.move_stream_complete_on(here.peer_partition, app_name, stream_name, here.generation);
        PERFORM lease_router.move_stream_complete_on(here.partition_index, app_name, stream_name, here.generation);
        here.state := 'here';
    END IF;
    from_partition := here.partition_index;
    IF from_partition OPERATOR(pg_catalog.=) to_partition THEN
        generation := COALESCE(here.generation, 0);
        PERFORM lease_router.record_placement(app_name, stream_name, from_partition, generation);
        RETURN;
    END IF;
    frozen := pg_catalog.clock_timestamp();
    -- 1. the source refuses the stream's calls (again: the same generation)
    generation := lease_router.move_stream_freeze_on(from_partition, app_name, stream_name, to_partition);
    -- 2. its rows, 3. copied to the target, inert
    stream := lease_router.move_stream_export_on(from_partition, app_name, stream_name, generation);
    PERFORM lease_router.move_stream_import_on(to_partition, app_name, stream_name, from_partition,
                                               generation, stream);
    -- 4. the commit point: the source lets go, keeps the tombstone
    PERFORM lease_router.move_stream_complete_on(from_partition, app_name, stream_name, generation);
    -- 5. the target serves the stream; 6. this router sends its calls there
    PERFORM lease_router.move_stream_complete_on(to_partition, app_name, stream_name, generation);
    PERFORM lease_router.record_placement(app_name, stream_name, to_partition, generation);
    leases := pg_catalog.jsonb_array_length(stream OPERATOR(pg_catalog.->) 'leases');
    frozen_for := pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) frozen;
END
$$;

-- Undoes a move that stopped before its commit point: the source serves
-- the stream again, the target's copy goes.
CREATE FUNCTION lease_router.undo_move(app_name text, stream_name text,
                                       OUT from_partition integer, OUT to_partition integer,
                                       OUT generation bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    here record;
    target record;
BEGIN
    IF app_name IS NULL OR stream_name IS NULL THEN
        RAISE EXCEPTION '% must not be null', CASE WHEN app_name IS NULL THEN 'app_name' ELSE 'stream_name' END
            USING ERRCODE = 'null_value_not_allowed', HINT = 'Name the stream whose move to undo.';
    END IF;
    here := lease_router.locate_stream(app_name, stream_name);
    IF here.state OPERATOR(pg_catalog.=) 'arriving' THEN
        -- the router's partition is the target: the source is its peer
        to_partition := here.partition_index;
        from_partition := here.peer_partition;
    ELSIF here.state OPERATOR(pg_catalog.=) 'moving_out' THEN
        from_partition := here.partition_index;
        to_partition := here.peer_partition;
    ELSE
        RAISE EXCEPTION 'stream "%/%" has no unfinished move', app_name, stream_name
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = pg_catalog.format('Partition %s serves it.', here.partition_index),
                  HINT = 'Move it back with lease_router.move_stream.';
    END IF;
    generation := here.generation;
    SELECT s.state INTO here FROM lease_router.move_stream_state_on(from_partition, app_name, stream_name) AS s
     WHERE s.generation OPERATOR(pg_catalog.=) undo_move.generation;
    IF here.state OPERATOR(pg_catalog.=) 'moved_out' THEN
        RAISE EXCEPTION 'the move of stream "%/%" to partition % is past its commit point', app_name, stream_name, to_partition
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = pg_catalog.format('Finish it with lease_router.move_stream(%L, %L, %s).', app_name, stream_name, to_partition);
    END IF;
    -- the source first: once it serves the stream again, no step can finish the move
    PERFORM lease_router.move_stream_undo_on(from_partition, app_name, stream_name, generation);
    SELECT s.state, s.generation INTO target
      FROM lease_router.move_stream_state_on(to_partition, app_name, stream_name) AS s;
    IF target.state OPERATOR(pg_catalog.=) 'arriving' AND target.generation OPERATOR(pg_catalog.=) undo_move.generation THEN
        PERFORM lease_router.move_stream_undo_on(to_partition, app_name, stream_name, generation);
    END IF;
    PERFORM lease_router.record_placement(app_name, stream_name, from_partition, generation);
END
$$;

-- Rebuilds this router's directory from the partitions' records (after a
-- move made through another router, or a move this router's transaction
-- did not commit).  Returns the rows it changed.
CREATE FUNCTION lease_router.sync_directory()
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    changed bigint;
    removed bigint;
    late record;
BEGIN
    CREATE TEMPORARY TABLE IF NOT EXISTS pg_lease_router_placements
        (app_name text, stream_name text, state text, partition_index integer,
         peer_partition integer, generation bigint) ON COMMIT DROP;
    INSERT INTO pg_temp.pg_lease_router_placements SELECT * FROM lease_router.move_stream_placements_on_all();
    -- a record naming a partition this router has not: PL/Proxy would mask
    -- it to another partition, which may serve the stream as new
    SELECT p.app_name, p.stream_name, GREATEST(p.partition_index, p.peer_partition) AS beyond INTO late
      FROM pg_temp.pg_lease_router_placements AS p
     WHERE GREATEST(p.partition_index, p.peer_partition) OPERATOR(pg_catalog.>=) lease_router.partition_count()
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'stream "%/%" was moved to or from partition %, which this router does not have',
              late.app_name, late.stream_name, late.beyond
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Add the partitions to this router first (lease_router.add_partitions, the same strings in the same order as on the others).';
    END IF;
    -- per stream, its latest move: past its commit point (a moved_out
    -- record), the target; before it, or undone, the source
    WITH latest AS (
        SELECT DISTINCT ON (p.app_name, p.stream_name) p.app_name, p.stream_name, p.generation
          FROM pg_temp.pg_lease_router_placements AS p
         ORDER BY p.app_name, p.stream_name, p.generation DESC),
    located AS (
        SELECT l.app_name, l.stream_name, l.generation,
               COALESCE((SELECT p.peer_partition FROM pg_temp.pg_lease_router_placements AS p
                          WHERE p.app_name OPERATOR(pg_catalog.=) l.app_name
                            AND p.stream_name OPERATOR(pg_catalog.=) l.stream_name
                            AND p.generation OPERATOR(pg_catalog.=) l.generation AND p.state OPERATOR(pg_catalog.=) 'moved_out'
                          LIMIT 1),
                        (SELECT p.partition_index FROM pg_temp.pg_lease_router_placements AS p
                          WHERE p.app_name OPERATOR(pg_catalog.=) l.app_name
                            AND p.stream_name OPERATOR(pg_catalog.=) l.stream_name
                            AND p.generation OPERATOR(pg_catalog.=) l.generation
                            AND p.state OPERATOR(pg_catalog.=) ANY (ARRAY['here', 'moving_out'])
                          LIMIT 1),
                        (SELECT p.peer_partition FROM pg_temp.pg_lease_router_placements AS p
                          WHERE p.app_name OPERATOR(pg_catalog.=) l.app_name
                            AND p.stream_name OPERATOR(pg_catalog.=) l.stream_name
                            AND p.generation OPERATOR(pg_catalog.=) l.generation
                          LIMIT 1)) AS partition_index
          FROM latest AS l),
    upserted AS (
        INSERT INTO lease_router.stream_directory AS d (app_name, stream_name, partition_index, generation)
        SELECT x.app_name, x.stream_name, x.partition_index, x.generation FROM located AS x
        ON CONFLICT (app_name, stream_name) DO UPDATE
           SET partition_index = excluded.partition_index, generation = excluded.generation,
               changed_at = pg_catalog.now()
         WHERE (d.partition_index, d.generation) IS DISTINCT FROM (excluded.partition_index, excluded.generation)
        RETURNING 1)
    SELECT pg_catalog.count(*) INTO changed FROM upserted;
    DELETE FROM lease_router.stream_directory AS d
     WHERE NOT EXISTS (SELECT 1 FROM pg_temp.pg_lease_router_placements AS p
                        WHERE p.app_name OPERATOR(pg_catalog.=) d.app_name
                          AND p.stream_name OPERATOR(pg_catalog.=) d.stream_name);
    GET DIAGNOSTICS removed = ROW_COUNT;
    DROP TABLE pg_temp.pg_lease_router_placements;
    RETURN changed OPERATOR(pg_catalog.+) removed;
END
$$;

-- Adds partitions to the server pg_lease (their count and the ones there
-- add up to a power of two, as PL/Proxy requires), after recording the
-- count streams, tenants and conversations were placed by, so that nothing
-- moves: the new partitions get streams only by move_stream.  Run it on
-- every router, with the same strings in the same order.  Returns the new
-- count.
CREATE FUNCTION lease_router.add_partitions(VARIADIC connection_strings text[])
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n integer := lease_router.partition_count();
    k integer := COALESCE(pg_catalog.cardinality(connection_strings), 0);
    options text;
BEGIN
    IF k OPERATOR(pg_catalog.=) 0 OR pg_catalog.array_position(connection_strings, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'connection_strings must name at least one partition, and no null'
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Pass one key=value connection string per new partition.';
    END IF;
    IF ((n OPERATOR(pg_catalog.+) k) OPERATOR(pg_catalog.&) (n OPERATOR(pg_catalog.+) k OPERATOR(pg_catalog.-) 1)) OPERATOR(pg_catalog.<>) 0 THEN
        RAISE EXCEPTION 'the router would have % partitions', n OPERATOR(pg_catalog.+) k
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = pg_catalog.format('It has %s; PL/Proxy needs a power of two.', n),
                  HINT = pg_catalog.format('Add %s partitions.', n);
    END IF;
    INSERT INTO lease_router.default_placement (partitions) VALUES (n) ON CONFLICT (only_row) DO NOTHING;
    SELECT pg_catalog.string_agg(pg_catalog.format('ADD %I %L', 'p' OPERATOR(pg_catalog.||) (n OPERATOR(pg_catalog.+) c.i OPERATOR(pg_catalog.-) 1), c.conn), ', ' ORDER BY c.i)
      INTO options
      FROM pg_catalog.unnest(connection_strings) WITH ORDINALITY AS c(conn, i);
    EXECUTE pg_catalog.format('ALTER SERVER pg_lease OPTIONS (%s)', options);
    RETURN n OPERATOR(pg_catalog.+) k;
END
$$;

-- Moves streams, one at a time, from the partition holding the most
-- leases to the one holding the fewest, while a move narrows the gap
-- between them; at most max_moves moves.  The moves made.
CREATE FUNCTION lease_router.rebalance_streams(max_moves integer DEFAULT 1)
RETURNS TABLE (app_name text, stream_name text, from_partition integer, to_partition integer,
               leases bigint, frozen_for interval)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n integer := lease_router.partition_count();
    most integer;
    fewest integer;
    gap bigint;
    pick record;
    moved record;
BEGIN
    IF max_moves IS NULL OR max_moves OPERATOR(pg_catalog.<) 1 THEN
        RAISE EXCEPTION 'max_moves must be positive' USING ERRCODE = 'invalid_parameter_value',
            HINT = 'Pass how many streams at most to move, e.g. 1.';
    END IF;
    CREATE TEMPORARY TABLE IF NOT EXISTS pg_lease_router_loads
        (app_name text, stream_name text, partition_index integer, leases bigint) ON COMMIT DROP;
    DELETE FROM pg_temp.pg_lease_router_loads;
    INSERT INTO pg_temp.pg_lease_router_loads
    SELECT m.app_name, m.stream_name,
           lease_router.stream_partition(m.app_name, m.stream_name) OPERATOR(pg_catalog.&) (n OPERATOR(pg_catalog.-) 1),
           CAST(pg_catalog.sum(m.leases) AS bigint)
      FROM lease.monitoring_leases() AS m
     WHERE m.state OPERATOR(pg_catalog.<>) 'ended'
     GROUP BY m.app_name, m.stream_name;
    FOR step IN 1 .. max_moves LOOP
        WITH per AS (
            SELECT k.k AS partition_index, COALESCE(pg_catalog.sum(l.leases), 0) AS total
              FROM pg_catalog.generate_series(0, n OPERATOR(pg_catalog.-) 1) AS k(k)
              LEFT JOIN pg_temp.pg_lease_router_loads AS l ON l.partition_index OPERATOR(pg_catalog.=) k.k
             GROUP BY k.k)
        SELECT (SELECT p.partition_index FROM per AS p ORDER BY p.total DESC, p.partition_index LIMIT 1),
               (SELECT p.partition_index FROM per AS p ORDER BY p.total, p.partition_index LIMIT 1),
               (SELECT pg_catalog.max(p.total) OPERATOR(pg_catalog.-) pg_catalog.min(p.total) FROM per AS p)
          INTO most, fewest, gap;
        -- the largest stream whose move narrows the gap
        SELECT l.app_name, l.stream_name, l.leases INTO pick
          FROM pg_temp.pg_lease_router_loads AS l
         WHERE l.partition_index OPERATOR(pg_catalog.=) most
           AND l.leases OPERATOR(pg_catalog.>) 0 AND l.leases OPERATOR(pg_catalog.<) gap
         ORDER BY l.leases DESC, l.app_name, l.stream_name LIMIT 1;
        EXIT WHEN NOT FOUND;
        moved := lease_router.move_stream(pick.app_name, pick.stream_name, fewest);
        UPDATE pg_temp.pg_lease_router_loads AS l SET partition_index = fewest
         WHERE l.app_name OPERATOR(pg_catalog.=) pick.app_name AND l.stream_name OPERATOR(pg_catalog.=) pick.stream_name;
        app_name := pick.app_name; stream_name := pick.stream_name;
        from_partition := moved.from_partition; to_partition := fewest;
        leases := moved.leases; frozen_for := moved.frozen_for;
        RETURN NEXT;
    END LOOP;
    DROP TABLE pg_temp.pg_lease_router_loads;
END
$$;

-- Which partition a client opens a transaction on for a stream (the
-- transactional mode of docs/exactly-once.md), as a libpq connection
-- string: the router's own string for that partition, keeping only the
-- keys that say where and how to connect (hosts, ports, database, target
-- session attributes, timeouts, TLS verification), never credentials or
-- key files.  The client adds its own user and password.
CREATE FUNCTION lease_router.stream_conninfo(app_name text, stream_name text,
                                             OUT partition_index integer, OUT conninfo text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT k.k,
           (SELECT pg_catalog.string_agg(m.kv[1] OPERATOR(pg_catalog.||) '=' OPERATOR(pg_catalog.||) m.kv[2], ' ' ORDER BY m.n)
              FROM pg_catalog.regexp_matches(o.conn, '([A-Za-z_]+)\s*=\s*(''(?:[^''\\]|\\.)*''|[^\s'']+)', 'g')
                   WITH ORDINALITY AS m(kv, n)
             WHERE pg_catalog.lower(m.kv[1]) OPERATOR(pg_catalog.=) ANY (ARRAY[
                   'host', 'hostaddr', 'port', 'dbname', 'target_session_attrs', 'connect_timeout',
                   'sslmode', 'sslrootcert', 'sslcrl', 'sslcrldir', 'sslsni', 'gssencmode',
                   'keepalives', 'keepalives_idle', 'keepalives_interval', 'keepalives_count',
                   'tcp_user_timeout', 'load_balance_hosts']))
      FROM (SELECT lease_router.stream_partition(stream_conninfo.app_name, stream_conninfo.stream_name)
                   OPERATOR(pg_catalog.&) (lease_router.partition_count() OPERATOR(pg_catalog.-) 1) AS k) AS k
      JOIN (SELECT CAST(pg_catalog.substring(x.option, '^p([0-9]+)=') AS integer) AS k,
                   pg_catalog.substring(x.option, '^p[0-9]+=(.*)$') AS conn
              FROM pg_catalog.pg_foreign_server AS s, pg_catalog.unnest(s.srvoptions) AS x(option)
             WHERE s.srvname OPERATOR(pg_catalog.=) 'pg_lease') AS o ON o.k OPERATOR(pg_catalog.=) k.k
$$;

-- Security and robustness: the monitoring function of the notifications
-- skipped while the NOTIFY queue is full, one row per partition, as
-- src/router/generate.sql writes it.
CREATE FUNCTION lease.monitoring_notifications()
RETURNS TABLE(skipped bigint, queue_usage double precision)
LANGUAGE plproxy AS $$
    CLUSTER 'pg_lease';
    RUN ON ALL;
$$;

REVOKE ALL ON FUNCTION lease.monitoring_notifications() FROM PUBLIC;

-- The platform's own statuses, routed to the partition that made the
-- conversation, as src/router/generate.sql writes them.
CREATE FUNCTION lease.set_conversation_status(conversation_id bigint, status text)
RETURNS boolean
LANGUAGE plproxy AS $$
    CLUSTER 'pg_lease';
    RUN ON lease_router.conversation_partition(conversation_id);
$$;

CREATE FUNCTION lease.set_sandbox_status(conversation_id bigint, status text)
RETURNS boolean
LANGUAGE plproxy AS $$
    CLUSTER 'pg_lease';
    RUN ON lease_router.conversation_partition(conversation_id);
$$;

REVOKE ALL ON FUNCTION lease.set_conversation_status(bigint, text), lease.set_sandbox_status(bigint, text)
    FROM PUBLIC;

----------------------------------------------------------------------------
-- Batched checkpoints: lease.update_checkpoints goes whole to the stream's
-- partition, one call (generated into pg_lease_router--0.5.0.sql by make
-- router-sql; the same function here)
----------------------------------------------------------------------------

CREATE FUNCTION lease.update_checkpoints(app_name text, stream_name text, owner text, shard_ids text[], checkpoints text[], sub_sequences bigint[], fencing_tokens bigint[], work bigint[] DEFAULT NULL::bigint[])
RETURNS TABLE(shard_id text, ok boolean, reason text)
LANGUAGE plproxy AS $$
    CLUSTER 'pg_lease';
    RUN ON lease_router.stream_partition(app_name, stream_name);
$$;
REVOKE ALL ON FUNCTION lease.update_checkpoints(text, text, text, text[], text[], bigint[], bigint[], bigint[]) FROM PUBLIC;

-- The restart grace's monitoring function (the server incarnations of
-- every partition), as src/router/generate.sql writes it.
CREATE FUNCTION lease.monitoring_incarnations()
RETURNS TABLE(incarnation text, first_seen timestamp with time zone, follows text, seconds_since_first_seen double precision, leases_extended_total bigint)
LANGUAGE plproxy AS $$
    CLUSTER 'pg_lease';
    RUN ON ALL;
$$;

REVOKE ALL ON FUNCTION lease.monitoring_incarnations() FROM PUBLIC;

-- Synchronous replication per partition (PgLeaseSyncStandbysMissing), as
-- src/router/generate.sql writes it.
CREATE FUNCTION lease.monitoring_replication()
RETURNS TABLE(sync_standbys_expected integer, sync_standbys_configured integer, standbys bigint, sync_standbys bigint, sync_standbys_missing bigint)
LANGUAGE plproxy AS $$
    CLUSTER 'pg_lease';
    RUN ON ALL;
$$;

REVOKE ALL ON FUNCTION lease.monitoring_replication() FROM PUBLIC;
