/* pg_lease--0.1.0.sql: first release.  Never edit a released script; add pg_lease--0.1.0--<next>.sql. */

\echo Use "CREATE EXTENSION pg_lease" to load this file. \quit

-- The schema `lease` is created by CREATE EXTENSION (pg_lease.control names it).
-- Nothing in it is granted to PUBLIC: see README.md, "Privileges".
REVOKE ALL ON SCHEMA lease FROM PUBLIC;

----------------------------------------------------------------------------
-- Shard leases
----------------------------------------------------------------------------

CREATE TABLE lease.shard_leases (
    app_name                        text        NOT NULL,
    stream_name                     text        NOT NULL,
    shard_id                        text        NOT NULL,
    lease_owner                     text,
    lease_count                     bigint      NOT NULL DEFAULT 0,
    checkpoint                      text        NOT NULL DEFAULT 'TRIM_HORIZON',
    checkpoint_sub_sequence         bigint      NOT NULL DEFAULT 0,
    parent_shard_ids                text[]      NOT NULL DEFAULT '{}',
    lease_expires_at                timestamptz,
    owner_switches_since_checkpoint bigint      NOT NULL DEFAULT 0,
    created_at                      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_at                      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (app_name, stream_name, shard_id),
    CONSTRAINT shard_leases_lease_count_check CHECK (lease_count >= 0),
    CONSTRAINT shard_leases_owner_expiry_check
        CHECK ((lease_owner IS NULL) = (lease_expires_at IS NULL))
)
-- Renewals and checkpoints touch no indexed column: leave room on each page
-- so they stay HOT updates.
WITH (fillfactor = 70);

COMMENT ON TABLE lease.shard_leases IS
    'One row per shard lease (the model is the Kinesis Client Library lease table). Change it only through the lease.* functions.';

-- Serves "all leases of one owner in one stream" (a worker's renewals and
-- load counts).  Renewals and checkpoints do not change lease_owner, so they
-- remain HOT.
CREATE INDEX shard_leases_owner_idx
    ON lease.shard_leases (app_name, stream_name, lease_owner)
    WHERE lease_owner IS NOT NULL;

SELECT pg_catalog.pg_extension_config_dump('lease.shard_leases', '');

-- Every function below is SECURITY DEFINER with search_path pinned: a worker
-- role is granted EXECUTE on the functions, never write access to the table,
-- so the only way to change a lease is through the protocol these functions
-- implement.  All SQL they run is fixed text with parameters and
-- schema-qualified names (src/leases.c).  They are not STRICT: a NULL where a
-- value is required is an error (22004) naming the argument.

CREATE FUNCTION lease.create_lease(
    app_name text, stream_name text, shard_id text,
    parent_shard_ids text[] DEFAULT '{}', checkpoint text DEFAULT 'TRIM_HORIZON')
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_create_lease'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.take_lease(
    app_name text, stream_name text, shard_id text, new_owner text,
    lease_count bigint DEFAULT NULL, lease_duration interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lease_take_lease'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.renew_lease(
    app_name text, stream_name text, shard_id text, owner text,
    lease_count bigint, lease_duration interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lease_renew_lease'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.update_checkpoint(
    app_name text, stream_name text, shard_id text, owner text,
    checkpoint text, sub_sequence bigint DEFAULT 0)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_update_checkpoint'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.release_lease(
    app_name text, stream_name text, shard_id text, owner text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_release_lease'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.close_shard(
    app_name text, stream_name text, shard_id text, owner text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_close_shard'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA lease FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA lease FROM PUBLIC;
