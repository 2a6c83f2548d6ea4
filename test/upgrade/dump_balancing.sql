-- 0.4.0 and later: the balancing inputs (docs/shard-leases.md, "Balancing"):
-- a lease's weight and measured work rate, a worker's capacity and a
-- stream's tolerance survive the dump, and the restore rebuilds the owners'
-- loads in lease.worker_holdings (the recount of taker_state_check.sql, run by
-- test/upgrade/dump.sh on both sides).
\set ON_ERROR_STOP 1
SELECT lease.set_weight('dump', 's', 'c', 4.5);
SELECT lease.update_checkpoint('dump', 's', 'b', 'w1', '4712', 0, l.lease_epoch, 120)
  FROM lease.shard_leases AS l WHERE l.app_name = 'dump' AND l.shard_id = 'b';
-- a stream with no leases: the capacity is recorded, no lease moves
SELECT count(*) FROM lease.take_leases('dump', 'idle', 'w3', '1 hour', NULL, 0, 2);
SELECT lease.set_balance_tolerance('dump', 's', 0.25);
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM lease.worker_capacities)
       OR NOT EXISTS (SELECT 1 FROM lease.stream_balancing)
       OR NOT EXISTS (SELECT 1 FROM lease.shard_leases WHERE weight IS NOT NULL)
       OR NOT EXISTS (SELECT 1 FROM lease.shard_leases WHERE work_rate IS NOT NULL) THEN
        RAISE EXCEPTION 'dump_balancing: a kind of row is missing';
    END IF;
END $$;
