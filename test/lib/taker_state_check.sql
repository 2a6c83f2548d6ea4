-- test/lib/taker_state_check.sql: every disagreement between the taker's
-- bookkeeping (lease.worker_holdings, lease.stream_takeable) and a recount
-- from lease.shard_leases, one row each; no row when they agree.  The same
-- rules as the torture checker (test/torture/pg_lease_torture.c):
--   * worker_holdings.leases equals the number of rows the worker owns
--     (expired or not), for every worker (a row with 0 is the same as none);
--   * expires_min is no later than the earliest lease_expires_at of them;
--   * weighed equals how many of them have a known weight
--     (COALESCE(weight, work_rate)) and load their sum (to 1e-9 of it:
--     the sum is kept by adding and subtracting);
--   * every stream with a lease has its stream_takeable row;
--   * a cached takeable count with no lineage_changes row for the stream
--     equals the number of leases neither ended nor blocked.
-- Defines the temporary view taker_disagreements, then lists it.
CREATE OR REPLACE TEMPORARY VIEW taker_disagreements AS
SELECT 'worker ' || coalesce(r.app_name, w.app_name) || '/' || coalesce(r.stream_name, w.stream_name)
       || '/' || coalesce(r.worker, w.worker) || ': holds ' || coalesce(r.leases, 0)
       || ', counted ' || coalesce(w.leases, 0)
       || ', earliest expiry ' || coalesce(r.expires_min::text, '-')
       || ', bound ' || coalesce(w.expires_min::text, '-')
       || ', weighed ' || coalesce(r.weighed, 0) || ' counted ' || coalesce(w.weighed, 0)
       || ', load ' || coalesce(r.load, 0) || ' counted ' || coalesce(w.load, 0) AS disagreement
  FROM (SELECT app_name, stream_name, lease_owner AS worker, count(*) AS leases,
               min(lease_expires_at) AS expires_min,
               count(coalesce(weight, work_rate)) AS weighed,
               coalesce(sum(coalesce(weight, work_rate)), 0) AS load
          FROM lease.shard_leases WHERE lease_owner IS NOT NULL
         GROUP BY 1, 2, 3) AS r
  FULL JOIN (SELECT * FROM lease.worker_holdings WHERE leases <> 0 OR weighed <> 0 OR load <> 0) AS w
       USING (app_name, stream_name, worker)
 WHERE r.leases IS DISTINCT FROM w.leases
    OR w.expires_min IS NULL OR w.expires_min > r.expires_min
    OR coalesce(r.weighed, 0) <> coalesce(w.weighed, 0)
    OR abs(coalesce(r.load, 0) - coalesce(w.load, 0)) > 1e-9 * greatest(1, abs(coalesce(r.load, 0)))
UNION ALL
SELECT 'stream ' || l.app_name || '/' || l.stream_name || ': no stream_takeable row'
  FROM (SELECT DISTINCT app_name, stream_name FROM lease.shard_leases) AS l
 WHERE NOT EXISTS (SELECT 1 FROM lease.stream_takeable AS t
                    WHERE t.app_name = l.app_name AND t.stream_name = l.stream_name)
UNION ALL
SELECT 'stream ' || t.app_name || '/' || t.stream_name || ': takeable cached ' || t.takeable
       || ', counted ' || n.n
  FROM lease.stream_takeable AS t,
       LATERAL (SELECT count(*) AS n FROM lease.shard_leases AS l
                 WHERE l.app_name = t.app_name AND l.stream_name = t.stream_name
                   AND l.checkpoint <> 'SHARD_END'
                   AND NOT EXISTS (SELECT 1 FROM lease.shard_leases AS p
                                    WHERE p.app_name = l.app_name AND p.stream_name = l.stream_name
                                      AND p.shard_id = ANY (l.parent_shard_ids)
                                      AND p.checkpoint <> 'SHARD_END')) AS n
 WHERE t.takeable IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM lease.lineage_changes AS g
                    WHERE g.app_name = t.app_name AND g.stream_name = t.stream_name)
   AND t.takeable <> n.n;
SELECT disagreement FROM taker_disagreements ORDER BY 1;
