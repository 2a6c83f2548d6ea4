/* pg_lease--0.4.0--0.5.0.sql: upgrade from 0.4.0 to 0.5.0.  Each change here has its twin in the SQL parts (Makefile, SQL_PARTS), and test/upgrade/upgrade.sh proves the two agree. */

\echo Use "ALTER EXTENSION pg_lease UPDATE TO '0.5.0'" to load this file. \quit

----------------------------------------------------------------------------
-- Batched checkpoints: lease.update_checkpoints (src/leases/checkpoints.c)
----------------------------------------------------------------------------

-- The fenced checkpoints of many shards of one stream and owner in one
-- statement and one commit (src/leases/checkpoints.c): element i of each
-- array is shard i's; each shard is judged as the fenced update_checkpoint
-- above judges it, and refused shards come back with the reason
-- ('not_owner', 'stale_token', 'ended', 'unknown'), one row per shard in
-- the caller's order.  work, when given, has one element per shard (NULL
-- for a shard that reports none).
CREATE FUNCTION lease.update_checkpoints(
    app_name text, stream_name text, owner text, shard_ids text[],
    checkpoints text[], sub_sequences bigint[], fencing_tokens bigint[],
    work bigint[] DEFAULT NULL)
RETURNS TABLE(shard_id text, ok boolean, reason text)
AS 'MODULE_PATHNAME', 'lease_update_checkpoints'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;
REVOKE ALL ON FUNCTION lease.update_checkpoints(text, text, text, text[], text[], bigint[], bigint[], bigint[]) FROM PUBLIC;

----------------------------------------------------------------------------
-- Checkpoints are HOT updates: the index of unowned leases no longer names
-- checkpoint in its predicate (src/leases/leases.sql)
----------------------------------------------------------------------------

DROP INDEX lease.shard_leases_unowned_idx;
CREATE INDEX shard_leases_unowned_idx
    ON lease.shard_leases (app_name, stream_name)
    WHERE lease_owner IS NULL;

----------------------------------------------------------------------------
-- The checkpoint statements move checkpointed_at themselves; the trigger
-- shard_leases_checkpointed skips the rows they wrote (src/leases/leases.c,
-- src/leases/monitoring.sql)
----------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION lease.update_checkpoint(
    app_name text, stream_name text, shard_id text, owner text,
    checkpoint text, sub_sequence bigint DEFAULT 0)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_update_checkpoint_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION lease.update_checkpoint(
    app_name text, stream_name text, shard_id text, owner text,
    checkpoint text, sub_sequence bigint, fencing_token bigint,
    work bigint DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_update_checkpoint_fenced_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE TRIGGER shard_leases_checkpointed
    BEFORE UPDATE OF checkpoint, checkpoint_sub_sequence ON lease.shard_leases
    FOR EACH ROW
    WHEN ((OLD.checkpoint IS DISTINCT FROM NEW.checkpoint
           OR OLD.checkpoint_sub_sequence IS DISTINCT FROM NEW.checkpoint_sub_sequence)
          AND OLD.checkpointed_at IS NOT DISTINCT FROM NEW.checkpointed_at)
    EXECUTE FUNCTION lease.shard_leases_checkpointed();
