/* pg_lease_router--0.4.0--0.5.0.sql: from 0.4.0 to 0.5.0.  Never edit once released. */

\echo Use "ALTER EXTENSION pg_lease_router UPDATE TO '0.5.0'" to load this file. \quit

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
