/* pg_lease_router--0.3.0--0.4.0.sql: from 0.3.0 to 0.4.0.  Never edit once released. */

\echo Use "ALTER EXTENSION pg_lease_router UPDATE TO '0.4.0'" to load this file. \quit

-- pg_lease 0.4.0 routes the functions of 0.3.0 with the same signatures
-- (the router test compares a fresh router with pg_lease's catalog), plus
-- lease.hold_lease, by stream as src/router/generate.sql writes it.  Through
-- the router each call commits on its own partition connection, so
-- hold_lease there checks ownership but holds nothing past the call: the
-- exactly-once contract needs a direct connection to the stream's
-- partition (docs/exactly-once.md, "Through the router").
CREATE FUNCTION lease.hold_lease(app_name text, stream_name text, shard_id text, owner text, lease_epoch bigint)
RETURNS text
LANGUAGE plproxy AS $$
    CLUSTER 'pg_lease';
    RUN ON lease_router.stream_partition(app_name, stream_name);
$$;
REVOKE ALL ON FUNCTION lease.hold_lease(text, text, text, text, bigint) FROM PUBLIC;
