-- lease.take_leases: one balancing round for one worker.
-- Takeable = not ended and not blocked by an unfinished parent.
SELECT lease.create_lease('tk', 's', 'a' || i) FROM generate_series(1, 6) i;
SELECT lease.create_lease('tk', 's', 'p'), lease.create_lease('tk', 's', 'c', '{p}');
SELECT lease.create_lease('tk', 's', 'e');
SELECT lease.take_lease('tk', 's', 'e', 'w0'), lease.close_shard('tk', 's', 'e', 'w0');

-- a lone worker's fair share is everything takeable, capped by max_leases;
-- unowned leases in key order
SELECT * FROM lease.take_leases('tk', 's', 'w1', max_leases => 3);
SELECT * FROM lease.take_leases('tk', 's', 'w1');
-- only rows changed by this call: a further round returns nothing
SELECT * FROM lease.take_leases('tk', 's', 'w1');
SELECT shard_id, lease_owner, lease_count, lease_epoch FROM lease.shard_leases
 WHERE app_name = 'tk' ORDER BY shard_id;

-- a second worker: nothing is free, w1 holds 7 >= 0 + 2, so it asks for a
-- handoff (max_steal, default 1), and takes nothing abruptly
SELECT * FROM lease.take_leases('tk', 's', 'w2');
-- promised leases count as the caller's: with max_steal 3 it asks for at
-- most (7 - 1) / 2 = 3 more, capped by max_steal and its target 4 - 1 = 3
SELECT * FROM lease.take_leases('tk', 's', 'w2', max_steal => 3);
-- now 4 (promised) against w1's 3 (effective): balanced, nothing changes
SELECT * FROM lease.take_leases('tk', 's', 'w2', max_steal => 3);
SELECT * FROM lease.take_leases('tk', 's', 'w1');
SELECT shard_id, lease_owner, handoff_to FROM lease.shard_leases
 WHERE app_name = 'tk' AND handoff_to IS NOT NULL ORDER BY shard_id;
-- the holder is still the owner: the lease count did not move
SELECT shard_id, lease_owner, lease_count FROM lease.shard_leases
 WHERE app_name = 'tk' AND shard_id IN ('a1', 'a2', 'a3', 'a4') ORDER BY shard_id;
-- max_steal 0: never asks
SELECT * FROM lease.take_leases('tk', 's', 'w3', max_steal => 0);

-- order: unowned first, then the longest-expired
SELECT lease.create_lease('tk', 'order', 'x' || i) FROM generate_series(1, 4) i;
SELECT count(*) FROM lease.take_leases('tk', 'order', 'w1');
UPDATE lease.shard_leases SET lease_expires_at = clock_timestamp() - interval '10 s'
 WHERE app_name = 'tk' AND stream_name = 'order' AND shard_id = 'x3';
UPDATE lease.shard_leases SET lease_expires_at = clock_timestamp() - interval '5 s'
 WHERE app_name = 'tk' AND stream_name = 'order' AND shard_id = 'x1';
SELECT lease.create_lease('tk', 'order', 'x5');
-- workers w1 (2 live) and w2; 5 takeable; target min(3, max_leases 2) = 2
SELECT * FROM lease.take_leases('tk', 'order', 'w2', max_leases => 2);
-- w1 re-takes its own expired x1: not an owner switch, but a new epoch
SELECT * FROM lease.take_leases('tk', 'order', 'w1');
SELECT shard_id, lease_owner, lease_count, lease_epoch, owner_switches_since_checkpoint
  FROM lease.shard_leases WHERE app_name = 'tk' AND stream_name = 'order' ORDER BY shard_id;

-- the lease duration: given, or lease.default_lease_duration
SELECT lease.create_lease('tk', 'dur', 'd1'), lease.create_lease('tk', 'dur', 'd2');
SELECT count(*) FROM lease.take_leases('tk', 'dur', 'w1', '1 minute', 1);
SET lease.default_lease_duration = '45s';
SELECT count(*) FROM lease.take_leases('tk', 'dur', 'w1');
RESET lease.default_lease_duration;
SELECT shard_id, lease_expires_at - clock_timestamp() BETWEEN interval '59 s' AND interval '60 s' AS one_minute,
       lease_expires_at - clock_timestamp() BETWEEN interval '44 s' AND interval '45 s' AS guc
  FROM lease.shard_leases WHERE app_name = 'tk' AND stream_name = 'dur' ORDER BY shard_id;

-- an empty or unknown stream: nothing, not an error
SELECT * FROM lease.take_leases('tk', 'nope', 'w1');

-- bad input: errors, and nothing written
SELECT lease_test.digest() AS before \gset
SELECT lease_test.try($$SELECT lease.take_leases(NULL, 's', 'w9')$$);
SELECT lease_test.try($$SELECT lease.take_leases('tk', NULL, 'w9')$$);
SELECT lease_test.try($$SELECT lease.take_leases('tk', 's', NULL)$$);
SELECT lease_test.try($$SELECT lease.take_leases('tk', 's', '')$$);
SELECT lease_test.try($$SELECT lease.take_leases('tk', ' ', 'w9')$$);
SELECT lease_test.try($$SELECT lease.take_leases('tk', 's', repeat('w', 257))$$);
SELECT lease_test.try($$SELECT lease.take_leases('tk', 's', 'w9', '0')$$);
SELECT lease_test.try($$SELECT lease.take_leases('tk', 's', 'w9', '-1 s')$$);
SELECT lease_test.try($$SELECT lease.take_leases('tk', 's', 'w9', '8 days')$$);
SELECT lease_test.try($$SELECT lease.take_leases('tk', 's', 'w9', NULL, 0)$$);
SELECT lease_test.try($$SELECT lease.take_leases('tk', 's', 'w9', NULL, -1)$$);
SELECT lease_test.try($$SELECT lease.take_leases('tk', 's', 'w9', NULL, NULL, -1)$$);
SELECT lease_test.try($$SELECT lease.take_leases('tk', 's', 'w9', NULL, NULL, NULL)$$);
SELECT lease_test.digest() = :'before' AS nothing_written;
