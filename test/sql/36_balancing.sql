-- Weighted balancing in take_leases (docs/shard-leases.md, "Balancing"):
-- free leases go to the least loaded worker relative to its capacity,
-- moves are handoff requests that narrow the spread by more than the
-- tolerance, a lease heavier than a share stays alone, plan_rebalance shows
-- what the next rounds do and changes nothing, the bookkeeping
-- (worker_holdings.load, weighed) equals a recount after every change.
\ir test/lib/taker_state_check.sql
CREATE VIEW lease_test.loads AS
SELECT lease_owner, live_leases, round(load::numeric, 3) AS load, capacity,
       round(target::numeric, 3) AS target
  FROM lease.worker_loads WHERE app_name = 'bal' ORDER BY lease_owner;

-- six leases: one heavy (10), two medium (4, 3), three light (1 each)
SELECT lease.create_lease('bal', 's', s) FROM unnest(ARRAY['h', 'm1', 'm2', 'l1', 'l2', 'l3']) AS s;
SELECT lease.set_weight('bal', 's', 'h', 10), lease.set_weight('bal', 's', 'm1', 4),
       lease.set_weight('bal', 's', 'm2', 3), lease.set_weight('bal', 's', 'l1', 1),
       lease.set_weight('bal', 's', 'l2', 1), lease.set_weight('bal', 's', 'l3', 1);

-- the plan of a stream with one worker and nothing held: every free lease
-- to it, heaviest first; nothing changed
SELECT count(*) AS events_before FROM lease.lease_events WHERE app_name = 'bal' \gset
SELECT lease_test.digest() AS before \gset
SELECT * FROM lease.plan_rebalance('bal', 's');
SELECT lease_test.digest() = :'before' AS plan_changed_nothing;

-- w1 alone takes everything (a worker is the least loaded of one)
SELECT shard_id, action FROM lease.take_leases('bal', 's', 'w1', '1 hour');
SELECT * FROM taker_disagreements;
SELECT * FROM lease_test.loads;

-- w2 joins.  plan_rebalance without an owner knows only the workers that
-- hold leases: w1, nothing to do.  As w2's round sees it: the one move
-- that halves the spread is the heavy lease (10 of 20)
SELECT count(*) AS planned FROM lease.plan_rebalance('bal', 's');
SELECT shard_id, from_owner, to_owner, weight, round(imbalance_before::numeric, 3) AS before,
       round(imbalance_after::numeric, 3) AS after
  FROM lease.plan_rebalance('bal', 's', 'w2');
-- w2's round asks for the first of them (max_steal 1): a handoff request
-- with the reason recorded
SELECT shard_id, action, previous_owner FROM lease.take_leases('bal', 's', 'w2', '1 hour');
SELECT shard_id, event, from_owner, to_owner, reason FROM lease.lease_events
 WHERE app_name = 'bal' AND event = 'handoff_request' ORDER BY event_id;
-- the promised lease counts for w2 already: nothing more to plan
SELECT shard_id, from_owner, to_owner, weight FROM lease.plan_rebalance('bal', 's');
-- the holder hands it over (release_lease transfers it)
SELECT lease.release_lease('bal', 's', shard_id, 'w1')
  FROM lease.shard_leases WHERE app_name = 'bal' AND handoff_to = 'w2';
SELECT * FROM taker_disagreements;
SELECT count(*) AS planned FROM lease.plan_rebalance('bal', 's');
SELECT * FROM lease_test.loads;
SELECT * FROM taker_disagreements;

-- the steady state: rounds of both workers do nothing
SELECT count(*) AS w1_round FROM lease.take_leases('bal', 's', 'w1', '1 hour');
SELECT count(*) AS w2_round FROM lease.take_leases('bal', 's', 'w2', '1 hour');

-- a third worker joins: the heavy lease (10 of 20, a share is 6.67) stays
-- alone on its worker, whose target does not count; the other two share
-- the rest, 5 each: two moves, none back and forth
SELECT shard_id, from_owner, to_owner, weight FROM lease.plan_rebalance('bal', 's', 'w3');
SELECT shard_id, action, previous_owner FROM lease.take_leases('bal', 's', 'w3', '1 hour', max_steal => 5);
SELECT lease.release_lease('bal', 's', shard_id, lease_owner)
  FROM lease.shard_leases WHERE app_name = 'bal' AND handoff_to = 'w3';
SELECT count(*) AS planned FROM lease.plan_rebalance('bal', 's');
SELECT count(*) AS w1_round FROM lease.take_leases('bal', 's', 'w1', '1 hour');
SELECT count(*) AS w2_round FROM lease.take_leases('bal', 's', 'w2', '1 hour');
SELECT count(*) AS w3_round FROM lease.take_leases('bal', 's', 'w3', '1 hour');
SELECT * FROM lease_test.loads;
SELECT * FROM taker_disagreements;

-- no move that cannot narrow the spread: with l1 at 3, w3 (7) is above
-- its share (6) and w1 (5) below, but each lease w3 could give is as heavy
-- as the gap or more
SELECT lease.set_weight('bal', 's', 'l1', 3);
SELECT * FROM lease_test.loads;
SELECT count(*) AS planned FROM lease.plan_rebalance('bal', 's');
SELECT count(*) AS w1_round FROM lease.take_leases('bal', 's', 'w1', '1 hour');
SELECT * FROM taker_disagreements;

-- capacity: w3 declares 2 and so is the roomiest worker: the heavy lease h
-- (alone on w2, capacity 1) belongs there, and w3's round asks for it; the
-- plan then has w3 give its other leases to w2, which h leaves
SELECT shard_id, action, previous_owner FROM lease.take_leases('bal', 's', 'w3', '1 hour', capacity => 2);
SELECT * FROM lease_test.loads;
SELECT shard_id, from_owner, to_owner, weight FROM lease.plan_rebalance('bal', 's');

-- an unweighted lease in a weighted stream weighs the mean of the known
-- ones (21 / 5 = 4.2 once l3's weight is cleared): the new lease u goes to
-- the least loaded worker relative to its capacity
SELECT lease.create_lease('bal', 's', 'u');
SELECT lease.set_weight('bal', 's', 'l3', NULL);
SELECT * FROM lease.plan_rebalance('bal', 's') WHERE shard_id IN ('u', 'l3');
SELECT * FROM taker_disagreements;

-- a stream without weights and with capacity 1 everywhere is balanced by
-- count: no plan, and take_leases behaves as before (20_take_leases)
SELECT lease.create_lease('cnt', 's', 'c' || i) FROM generate_series(1, 4) AS i;
SELECT count(*) FROM lease.take_leases('cnt', 's', 'w1');
SELECT count(*) AS planned FROM lease.plan_rebalance('cnt', 's');
SELECT shard_id, action FROM lease.take_leases('cnt', 's', 'w2');

-- expired leases go by weight too: w1 stops renewing, its leases (and the
-- free u) go to the least loaded workers relative to capacity, each taken
-- in that worker's round
UPDATE lease.shard_leases SET lease_expires_at = clock_timestamp() - interval '1 s'
 WHERE app_name = 'bal' AND lease_owner = 'w1';
SELECT shard_id, from_owner, to_owner, weight FROM lease.plan_rebalance('bal', 's') WHERE from_owner = 'w1';
SELECT shard_id, action, previous_owner FROM lease.take_leases('bal', 's', 'w2', '1 hour');
SELECT * FROM taker_disagreements;

-- the tolerance: w1 holds 6 leases of weight 1, w2 holds 4; a share is
-- 5, so w1 is 20 % above it: within a tolerance of 0.25 nothing moves,
-- with the default 0.1 one lease does
SELECT lease.create_lease('tol', 's', 't' || i) FROM generate_series(1, 10) AS i;
SELECT lease.take_lease('tol', 's', 't' || i, CASE WHEN i <= 6 THEN 'w1' ELSE 'w2' END,
                       lease_duration => '1 hour')
  FROM generate_series(1, 10) AS i;
SELECT count(*) FROM (SELECT lease.set_weight('tol', 's', 't' || i, 1) FROM generate_series(1, 10) AS i) AS x;
SELECT lease.set_balance_tolerance('tol', 's', 0.25);
SELECT count(*) AS planned FROM lease.plan_rebalance('tol', 's');
SELECT count(*) AS w2_round FROM lease.take_leases('tol', 's', 'w2', '1 hour');
SELECT lease.set_balance_tolerance('tol', 's', NULL);
SELECT shard_id, from_owner, to_owner, weight FROM lease.plan_rebalance('tol', 's');
SELECT shard_id, action, previous_owner FROM lease.take_leases('tol', 's', 'w2', '1 hour');
SELECT * FROM taker_disagreements;

-- a measured checkpoint (600 records just after t10 was taken: a rate of
-- about 10 a second) moves its owner's load; deleting or closing a weighed lease
-- removes it: the bookkeeping stays equal to a recount
SELECT lease.update_checkpoint('tol', 's', 't10', 'w2', '5', 0, lease_epoch, 600)
  FROM lease.shard_leases WHERE app_name = 'tol' AND shard_id = 't10';
SELECT lease.set_weight('tol', 's', 't10', NULL);
SELECT worker, leases, weighed, round(load::numeric) AS load FROM lease.worker_holdings
 WHERE app_name = 'tol' ORDER BY worker;
SELECT lease.delete_lease('tol', 's', 't9');
SELECT lease.close_shard('tol', 's', 't8', 'w2');
SELECT * FROM taker_disagreements;

-- bad input: 22004 / 22023, nothing written
SELECT lease_test.digest() AS before \gset
SELECT lease_test.try($$SELECT * FROM lease.plan_rebalance(NULL, 's')$$);
SELECT lease_test.try($$SELECT * FROM lease.plan_rebalance('bal', '')$$);
SELECT lease_test.try($$SELECT * FROM lease.plan_rebalance('bal', 's', '')$$);
SELECT lease_test.digest() = :'before' AS nothing_written;
