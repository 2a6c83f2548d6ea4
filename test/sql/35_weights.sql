-- Balancing inputs (docs/shard-leases.md, "Balancing"): a lease's weight
-- (lease.set_weight), its measured work rate (update_checkpoint's work argument),
-- a worker's capacity (take_leases' capacity) and a stream's
-- tolerance (lease.set_balance_tolerance).  Bad input writes nothing.
SELECT lease.create_lease('wt', 's', 'a');
SELECT lease.create_lease('wt', 's', 'b');
SELECT shard_id, weight, work_rate FROM lease.shard_leases WHERE app_name = 'wt' ORDER BY shard_id;

-- set_weight: true for an existing lease, false for none; null clears it
SELECT lease.set_weight('wt', 's', 'a', 5);
SELECT lease.set_weight('wt', 's', 'b', 0);
SELECT lease.set_weight('wt', 's', 'nope', 1);
SELECT shard_id, weight FROM lease.shard_leases WHERE app_name = 'wt' ORDER BY shard_id;
SELECT lease.set_weight('wt', 's', 'b', NULL);
SELECT shard_id, weight FROM lease.shard_leases WHERE app_name = 'wt' ORDER BY shard_id;

-- bad weights: 22023 / 22004, nothing written
SELECT lease_test.digest() AS before \gset
SELECT lease_test.try($$SELECT lease.set_weight('wt', 's', 'a', -1)$$);
SELECT lease_test.try($$SELECT lease.set_weight('wt', 's', 'a', 'NaN')$$);
SELECT lease_test.try($$SELECT lease.set_weight('wt', 's', 'a', 'Infinity')$$);
SELECT lease_test.try($$SELECT lease.set_weight('wt', 's', NULL, 1)$$);
-- weights are bounded (1e15): no sum of them can overflow
SELECT lease_test.try($$SELECT lease.set_weight('wt', 's', 'a', 1e308)$$);
SELECT lease_test.try($$SELECT lease.set_weight('wt', 's', 'a', 1.000001e15)$$);
SELECT lease_test.try($$SELECT lease.set_weight('wt', 's', '', 1)$$);
SELECT lease_test.digest() = :'before' AS nothing_written;

-- update_checkpoint without work (five, six or seven arguments) resolves as
-- before and leaves the work rate alone
SELECT lease.take_lease('wt', 's', 'a', 'w1');
SELECT lease.update_checkpoint('wt', 's', 'a', 'w1', '1');
SELECT lease.update_checkpoint('wt', 's', 'a', 'w1', '2', 0);
SELECT lease.update_checkpoint('wt', 's', 'a', 'w1', '3', 0, 1);
SELECT checkpoint, work_rate FROM lease.shard_leases WHERE app_name = 'wt' AND shard_id = 'a';

-- with work: 60 records reported 60 s after the previous checkpoint
-- move the rate (from 0) 1 - 1/e of the way to 1 record/s (the clock runs
-- between the statements: near, within 0.01, under valgrind too)
UPDATE lease.shard_leases SET checkpointed_at = pg_catalog.now() - interval '60 s'
 WHERE app_name = 'wt' AND shard_id = 'a';
SELECT lease.update_checkpoint('wt', 's', 'a', 'w1', '4', 0, 1, 60);
SELECT checkpoint, round(work_rate::numeric, 2) AS work_rate,
       abs(work_rate - (1 - exp(-1.0))) < 0.01 AS near_expected
  FROM lease.shard_leases WHERE app_name = 'wt' AND shard_id = 'a';
-- again, 120 s later with 240 records: a step toward 2 records/s
UPDATE lease.shard_leases SET checkpointed_at = pg_catalog.now() - interval '120 s'
 WHERE app_name = 'wt' AND shard_id = 'a';
SELECT lease.update_checkpoint('wt', 's', 'a', 'w1', '5', 0, 1, 240);
SELECT checkpoint, round(work_rate::numeric, 2) AS work_rate,
       abs(work_rate - (1 - exp(-1.0) + (1 - exp(-2.0)) * (2 - (1 - exp(-1.0))))) < 0.01 AS near_expected
  FROM lease.shard_leases WHERE app_name = 'wt' AND shard_id = 'a';
-- back-to-back checkpoints (no time between them) move it by about records / 60
SELECT work_rate AS rate_before FROM lease.shard_leases WHERE app_name = 'wt' AND shard_id = 'a' \gset
BEGIN;
SELECT lease.update_checkpoint('wt', 's', 'a', 'w1', '6', 0, 1, 6);
SELECT lease.update_checkpoint('wt', 's', 'a', 'w1', '7', 0, 1, 6);
SELECT round((work_rate - :rate_before)::numeric, 2) AS step FROM lease.shard_leases WHERE app_name = 'wt' AND shard_id = 'a';
ROLLBACK;
-- a stale token or another owner: false, the checkpoint stays
SELECT lease.update_checkpoint('wt', 's', 'a', 'w1', '8', 0, 7, 10);
SELECT lease.update_checkpoint('wt', 's', 'a', 'w2', '8', 0, 1, 10);
SELECT checkpoint FROM lease.shard_leases WHERE app_name = 'wt' AND shard_id = 'a';
-- bad work or token: nothing written (a null work is no report: a plain
-- fenced checkpoint)
SELECT lease_test.digest() AS before \gset
SELECT lease_test.try($$SELECT lease.update_checkpoint('wt', 's', 'a', 'w1', '9', 0, 1, -1)$$);
SELECT lease_test.try($$SELECT lease.update_checkpoint('wt', 's', 'a', 'w1', '9', 0, NULL, 1)$$);
SELECT lease_test.try($$SELECT lease.update_checkpoint('wt', 's', 'a', 'w1', '9', 0, -1, 1)$$);
SELECT lease_test.try($$SELECT lease.update_checkpoint('wt', 's', 'a', 'w1', 'SHARD_END', 0, 1, 1)$$);
SELECT lease_test.digest() = :'before' AS nothing_written;

-- capacity: take_leases records it, and only a change writes.  The stream
-- has weights, so it is balanced by load (36_balancing): w2, roomier than
-- w1, asks for the lease heavier than w1's share
SELECT shard_id, action FROM lease.take_leases('wt', 's', 'w2', NULL, NULL, 1, 2);
SELECT worker, capacity FROM lease.worker_capacities WHERE app_name = 'wt' ORDER BY worker;
SELECT xmin AS capacity_xmin FROM lease.worker_capacities WHERE app_name = 'wt' AND worker = 'w2' \gset
SELECT count(*) FROM lease.take_leases('wt', 's', 'w2', NULL, NULL, 1, 2);
SELECT xmin = :'capacity_xmin' AS unchanged FROM lease.worker_capacities WHERE app_name = 'wt' AND worker = 'w2';
SELECT count(*) FROM lease.take_leases('wt', 's', 'w2', NULL, NULL, 1, 0.5);
SELECT worker, capacity FROM lease.worker_capacities WHERE app_name = 'wt' ORDER BY worker;
-- capacity 1 is the default: stored as no row, so declaring it writes nothing
-- for a new worker and removes a declared one; a call without it declares 1
SELECT count(*) FROM lease.take_leases('wt', 's', 'w3', NULL, NULL, 1, 1);
SELECT count(*) FROM lease.take_leases('wt', 's', 'w4');
SELECT count(*) FROM lease.take_leases('wt', 's', 'w5', NULL, NULL, 1, 3);
SELECT worker, capacity FROM lease.worker_capacities WHERE app_name = 'wt' ORDER BY worker;
SELECT count(*) FROM lease.take_leases('wt', 's', 'w5', NULL, NULL, 1, 1);
SELECT worker, capacity FROM lease.worker_capacities WHERE app_name = 'wt' ORDER BY worker;
-- bad capacities: nothing written
SELECT lease_test.digest() AS before \gset
SELECT lease_test.try($$SELECT lease.take_leases('wt', 's', 'w2', NULL, NULL, 1, 0)$$);
SELECT lease_test.try($$SELECT lease.take_leases('wt', 's', 'w2', NULL, NULL, 1, -2)$$);
SELECT lease_test.try($$SELECT lease.take_leases('wt', 's', 'w2', NULL, NULL, 1, 'NaN')$$);
SELECT lease_test.try($$SELECT lease.take_leases('wt', 's', 'w2', NULL, NULL, 1, 'Infinity')$$);
SELECT lease_test.try($$SELECT lease.take_leases('wt', 's', 'w2', NULL, NULL, 1, NULL)$$);
-- capacities are bounded (1e-6 to 1e6): capacity 1e308 made the fleet-wide
-- lease.monitoring_worker_loads() fail (22003) for every app
SELECT lease_test.try($$SELECT lease.take_leases('wt', 's', 'w2', NULL, NULL, 1, 1e308)$$);
SELECT lease_test.try($$SELECT lease.take_leases('wt', 's', 'w2', NULL, NULL, 1, 1000001)$$);
SELECT lease_test.try($$SELECT lease.take_leases('wt', 's', 'w2', NULL, NULL, 1, 1e-300)$$);
SELECT lease_test.digest() = :'before' AS nothing_written;

-- tolerance: set, replaced, reset to the default by null
SELECT lease.set_balance_tolerance('wt', 's', 0.2);
SELECT lease.set_balance_tolerance('wt', 's', 0.05);
SELECT app_name, stream_name, tolerance FROM lease.stream_balancing;
SELECT lease.set_balance_tolerance('wt', 's', NULL);
SELECT count(*) FROM lease.stream_balancing;
SELECT lease.set_balance_tolerance('wt', 's', 0);
SELECT lease.set_balance_tolerance('wt', 's', 1);
SELECT lease_test.digest() AS before \gset
SELECT lease_test.try($$SELECT lease.set_balance_tolerance('wt', 's', -0.1)$$);
SELECT lease_test.try($$SELECT lease.set_balance_tolerance('wt', 's', 1.5)$$);
SELECT lease_test.try($$SELECT lease.set_balance_tolerance('wt', 's', 'NaN')$$);
SELECT lease_test.try($$SELECT lease.set_balance_tolerance('wt', NULL, 0.1)$$);
SELECT lease_test.digest() = :'before' AS nothing_written;
SELECT lease.set_balance_tolerance('wt', 's', NULL);

-- worker_loads: load (weight, else measured rate, else the mean of the
-- stream's known weights, else 1), capacity, target
-- (the stream's load in proportion to the listed owners' capacities)
SELECT lease_owner, live_leases, load, capacity, target
  FROM lease.worker_loads WHERE app_name = 'wt' ORDER BY lease_owner;
SELECT lease.set_weight('wt', 's', 'a', NULL);
SELECT lease_owner, live_leases, round(load::numeric, 2) AS load, capacity, round(target::numeric, 2) AS target
  FROM lease.worker_loads WHERE app_name = 'wt' ORDER BY lease_owner;

-- one app's extreme inputs, at the bounds, leave the fleet-wide views working
-- for every app: two workers at the largest capacity, two leases at the
-- largest weight, next to an ordinary app
SELECT lease.create_lease('wt-max', 's', shard) FROM unnest(ARRAY['a', 'b', 'c']) AS shard;
SELECT lease.set_weight('wt-max', 's', shard, 1e15) FROM unnest(ARRAY['a', 'b']) AS shard;
SELECT count(*) FROM lease.take_leases('wt-max', 's', 'big1', '1 hour', NULL, 1, 1e6);
SELECT count(*) FROM lease.take_leases('wt-max', 's', 'big2', '1 hour', NULL, 1, 1e6);
SELECT count(*) FROM lease.take_leases('wt-max', 's', 'small', '1 hour', NULL, 1, 1e-6);
SELECT app_name, count(*) AS owners, bool_and(target >= 0 AND target < 'Infinity') AS finite
  FROM lease.monitoring_worker_loads() WHERE app_name IN ('wt', 'wt-max') GROUP BY app_name ORDER BY app_name;
SELECT app_name, count(*) > 0 AS streams FROM lease.monitoring_streams()
 WHERE app_name IN ('wt', 'wt-max') GROUP BY app_name ORDER BY app_name;
-- the bounds hold against a direct write too (the CHECK constraints)
SELECT lease_test.try($$UPDATE lease.worker_capacities SET capacity = 1e308 WHERE app_name = 'wt-max'$$);
SELECT lease_test.try($$UPDATE lease.shard_leases SET weight = 1e308 WHERE app_name = 'wt-max'$$);
