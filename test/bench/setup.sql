-- Benchmark fixtures (make bench).  Runs as superuser in a throwaway database.
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pg_lease;
DROP SCHEMA IF EXISTS bench CASCADE;
CREATE SCHEMA bench;

-- The same checkpoint logic as lease.update_checkpoint, written in PL/pgSQL.
CREATE FUNCTION bench.update_checkpoint_plpgsql(p_app text, p_stream text, p_shard text,
                                                p_owner text, p_checkpoint text, p_sub bigint)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    UPDATE lease.shard_leases
       SET checkpoint = p_checkpoint, checkpoint_sub_sequence = p_sub,
           owner_switches_since_checkpoint = 0, updated_at = now()
     WHERE app_name = p_app AND stream_name = p_stream AND shard_id = p_shard
       AND lease_owner = p_owner AND checkpoint <> 'SHARD_END';
    RETURN FOUND;
END $$;

-- n leases in one stream, owned round-robin by `workers` owners, live for a week.
CREATE FUNCTION bench.make_stream(p_stream text, n int, workers int) RETURNS void
LANGUAGE sql AS $$
    DELETE FROM lease.shard_leases WHERE app_name = 'bench' AND stream_name = p_stream;
    INSERT INTO lease.shard_leases (app_name, stream_name, shard_id, lease_owner, lease_count,
                                    lease_expires_at)
    SELECT 'bench', p_stream, 'shard-' || i,
           CASE WHEN workers = 1 THEN 'bench-owner' ELSE 'worker-' || (i % workers + 1) END,
           1, clock_timestamp() + interval '7 days'
      FROM generate_series(0, n - 1) AS i;
$$;

-- The workers' output in section 7 (exactly once): one row per record, no
-- unique constraint, as in docs/exactly-once.md.
CREATE TABLE bench.output (shard_id text NOT NULL, record bigint NOT NULL);
