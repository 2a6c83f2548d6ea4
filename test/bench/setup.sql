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

-- Section 8 (balancing by load): a stream of `n` Zipf-weighted shards
-- (exponent 1.1, shuffled by a fixed seed), the weights kept beside it in
-- bench.zipf; `weighted` sets them as the leases' weights, else the stream
-- is balanced by count (the weights are then only what is measured).
CREATE TABLE bench.zipf (stream text, shard_id text, weight float8, PRIMARY KEY (stream, shard_id));

CREATE FUNCTION bench.make_zipf(p_stream text, n int, weighted boolean) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM lease.shard_leases WHERE app_name = 'bench' AND stream_name = p_stream;
    DELETE FROM bench.zipf WHERE stream = p_stream;
    PERFORM setseed(0.22);
    INSERT INTO bench.zipf
    SELECT p_stream, 's' || lpad((row_number() OVER (ORDER BY random()) - 1)::text, 3, '0'),
           round((1000 / k ^ 1.1)::numeric, 3)
      FROM generate_series(1, n) AS k;
    PERFORM lease.create_lease('bench', p_stream, z.shard_id) FROM bench.zipf AS z WHERE z.stream = p_stream;
    IF weighted THEN
        PERFORM lease.set_weight('bench', p_stream, z.shard_id, z.weight)
           FROM bench.zipf AS z WHERE z.stream = p_stream;
    END IF;
END $$;

-- Rounds of a fleet until a step changes nothing (at most max_steps): in a
-- step every worker of `caps` (worker => capacity) runs take_leases, then
-- each renews and hands over what it was asked for.  Returns the steps,
-- the ownership changes, and the spread of load by the bench.zipf weights:
-- max(load / target) (target: the total times the worker's share of the
-- capacity) and max(load) / mean(load).
CREATE FUNCTION bench.converge(p_stream text, workers text[], caps float8[], weighted boolean,
                               max_steps int DEFAULT 80,
                               OUT steps int, OUT moves bigint, OUT max_over_target float8,
                               OUT max_over_mean float8)
LANGUAGE plpgsql AS $$
DECLARE
    before bigint;
    changed bigint;
    i int;
    r record;
BEGIN
    SELECT count(*) INTO before FROM lease.lease_events
     WHERE app_name = 'bench' AND stream_name = p_stream AND event <> 'handoff_request';
    steps := 0;
    LOOP
        steps := steps + 1;
        changed := 0;
        FOR i IN 1 .. array_length(workers, 1) LOOP
            SELECT changed + count(*) INTO changed
              FROM lease.take_leases('bench', p_stream, workers[i], '1 hour', NULL, 1,
                                     CASE WHEN weighted THEN caps[i] ELSE 1 END);
        END LOOP;
        FOR i IN 1 .. array_length(workers, 1) LOOP
            FOR r IN SELECT * FROM lease.renew_leases('bench', p_stream, workers[i], '1 hour')
                      WHERE handoff_to IS NOT NULL LOOP
                PERFORM lease.release_lease('bench', p_stream, r.shard_id, workers[i]);
                changed := changed + 1;
            END LOOP;
        END LOOP;
        EXIT WHEN changed = 0 OR steps >= max_steps;
    END LOOP;
    SELECT count(*) - before INTO moves FROM lease.lease_events
     WHERE app_name = 'bench' AND stream_name = p_stream AND event <> 'handoff_request';
    SELECT max(w.load / (t.total * w.cap / t.cap)), max(w.load) / avg(w.load)
      INTO max_over_target, max_over_mean
      FROM (SELECT u.worker, u.cap, coalesce(sum(z.weight), 0) AS load
              FROM unnest(workers, caps) AS u(worker, cap)
              LEFT JOIN lease.shard_leases AS l
                ON l.app_name = 'bench' AND l.stream_name = p_stream AND l.lease_owner = u.worker
              LEFT JOIN bench.zipf AS z ON z.stream = p_stream AND z.shard_id = l.shard_id
             GROUP BY u.worker, u.cap) AS w,
           (SELECT (SELECT sum(weight) FROM bench.zipf WHERE stream = p_stream) AS total,
                   (SELECT sum(c) FROM unnest(caps) AS c) AS cap) AS t;
END $$;

-- n leases in one stream, owned round-robin by `workers` owners, each with
-- a weight of 1 to 7 (so the owners' loads are within a few percent of
-- each other: a weighted stream at rest).
CREATE FUNCTION bench.make_weighted_stream(p_stream text, n int, workers int) RETURNS void
LANGUAGE sql AS $$
    DELETE FROM lease.shard_leases WHERE app_name = 'bench' AND stream_name = p_stream;
    INSERT INTO lease.shard_leases (app_name, stream_name, shard_id, lease_owner, lease_count,
                                    lease_expires_at, weight)
    SELECT 'bench', p_stream, 'shard-' || i, 'worker-' || (i % workers + 1),
           1, clock_timestamp() + interval '7 days', 1 + (i / workers) % 7
      FROM generate_series(0, n - 1) AS i;
$$;
