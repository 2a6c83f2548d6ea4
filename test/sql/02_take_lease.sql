-- lease.take_lease: every way a take succeeds and every reason it does not.
SELECT lease.create_lease('take', 's', 'a');

-- unowned: taken, count 0 -> 1, expiry = database clock + default (10s)
SELECT lease.take_lease('take', 's', 'a', 'w1');
SELECT lease_owner, lease_count, owner_switches_since_checkpoint,
       lease_expires_at - clock_timestamp() BETWEEN interval '9 s' AND interval '10 s' AS default_duration
  FROM lease.shard_leases WHERE app_name = 'take' AND shard_id = 'a';

-- live and owned: not taken without a count (NULL), nothing changes
SELECT lease.take_lease('take', 's', 'a', 'w2') IS NULL AS not_taken;
SELECT lease_owner, lease_count FROM lease.shard_leases WHERE app_name = 'take' AND shard_id = 'a';

-- optimistic steal: taken when the count matches, with the given duration
SELECT lease.take_lease('take', 's', 'a', 'w2', 1, '1 minute');
SELECT lease_owner, lease_count, owner_switches_since_checkpoint,
       lease_expires_at - clock_timestamp() BETWEEN interval '59 s' AND interval '60 s' AS one_minute
  FROM lease.shard_leases WHERE app_name = 'take' AND shard_id = 'a';
-- stale count: not taken
SELECT lease.take_lease('take', 's', 'a', 'w1', 1) IS NULL AS stale_not_taken;
-- matching count but already the owner: not taken (nothing to steal)
SELECT lease.take_lease('take', 's', 'a', 'w2', 2) IS NULL AS own_not_taken;
SELECT lease_owner, lease_count FROM lease.shard_leases WHERE app_name = 'take' AND shard_id = 'a';

-- expired: taken without a count by anyone
SELECT lease_test.expire('take', 's', 'a');
SELECT lease.take_lease('take', 's', 'a', 'w3');
SELECT lease_owner, lease_count, owner_switches_since_checkpoint FROM lease.shard_leases
 WHERE app_name = 'take' AND shard_id = 'a';
-- the owner re-taking its own expired lease is not an owner switch
SELECT lease_test.expire('take', 's', 'a');
SELECT lease.take_lease('take', 's', 'a', 'w3');
SELECT lease_owner, lease_count, owner_switches_since_checkpoint FROM lease.shard_leases
 WHERE app_name = 'take' AND shard_id = 'a';

-- lease.default_lease_duration is used when lease_duration is NULL
SET lease.default_lease_duration = '45s';
SELECT lease.take_lease('take', 's', 'a', 'w4', 4, NULL);
SELECT lease_expires_at - clock_timestamp() BETWEEN interval '44 s' AND interval '45 s' AS guc_duration
  FROM lease.shard_leases WHERE app_name = 'take' AND shard_id = 'a';
RESET lease.default_lease_duration;

-- unknown lease: NULL, not an error
SELECT lease.take_lease('take', 's', 'nope', 'w1') IS NULL AS unknown,
       lease.take_lease('take', 's', 'nope', 'w1', 0) IS NULL AS unknown_with_count;

-- ended shard: never taken, in either mode
SELECT lease.close_shard('take', 's', 'a', 'w4');
SELECT lease.take_lease('take', 's', 'a', 'w1') IS NULL AS ended_not_taken,
       lease.take_lease('take', 's', 'a', 'w1', 7) IS NULL AS ended_not_stolen;
SELECT lease_owner, lease_count, checkpoint FROM lease.shard_leases WHERE app_name = 'take' AND shard_id = 'a';

-- lineage: a split (p -> c1, c2) and a merge (m1 + m2 -> m)
SELECT lease.create_lease('take', 's', 'p');
SELECT lease.create_lease('take', 's', 'c1', '{p}'), lease.create_lease('take', 's', 'c2', '{p}');
SELECT lease.create_lease('take', 's', 'm1'), lease.create_lease('take', 's', 'm2');
SELECT lease.create_lease('take', 's', 'm', '{m1,m2}');
SELECT lease.take_lease('take', 's', 'c1', 'w1') IS NULL AS child_blocked,
       lease.take_lease('take', 's', 'c1', 'w1', 0) IS NULL AS child_blocked_with_count;
SELECT lease.take_lease('take', 's', 'p', 'w1');
SELECT lease.close_shard('take', 's', 'p', 'w1');
SELECT lease.take_lease('take', 's', 'c1', 'w1'), lease.take_lease('take', 's', 'c2', 'w2');
-- merge: blocked until both parents have ended
SELECT lease.take_lease('take', 's', 'm1', 'w1'), lease.take_lease('take', 's', 'm2', 'w2');
SELECT lease.close_shard('take', 's', 'm1', 'w1');
SELECT lease.take_lease('take', 's', 'm', 'w3') IS NULL AS one_parent_open;
SELECT lease.close_shard('take', 's', 'm2', 'w2');
SELECT lease.take_lease('take', 's', 'm', 'w3') AS both_parents_ended;
-- a parent that no longer exists in the table does not block
SELECT lease.create_lease('take', 's', 'orphan', '{gone}');
SELECT lease.take_lease('take', 's', 'orphan', 'w1');
-- a parent in another stream is not this lease's parent
SELECT lease.create_lease('take', 'other', 'q');
SELECT lease.create_lease('take', 's', 'q-child', '{q}');
SELECT lease.take_lease('take', 's', 'q-child', 'w1');

SELECT shard_id, lease_owner, lease_count, checkpoint FROM lease.shard_leases
 WHERE app_name = 'take' ORDER BY stream_name, shard_id;

-- bad input: errors, and nothing written
SELECT lease_test.digest() AS before \gset
SELECT lease_test.try($$SELECT lease.take_lease(NULL, 's', 'c1', 'w')$$);
SELECT lease_test.try($$SELECT lease.take_lease('take', NULL, 'c1', 'w')$$);
SELECT lease_test.try($$SELECT lease.take_lease('take', 's', NULL, 'w')$$);
SELECT lease_test.try($$SELECT lease.take_lease('take', 's', 'c1', NULL)$$);
SELECT lease_test.try($$SELECT lease.take_lease('take', 's', 'c1', '')$$);
SELECT lease_test.try($$SELECT lease.take_lease('take', 's', 'c1', ' ')$$);
SELECT lease_test.try($$SELECT lease.take_lease('take', 's', 'c1', repeat('w', 257))$$);
SELECT lease_test.try($$SELECT lease.take_lease('take', 's', 'c1', 'w', -1)$$);
SELECT lease_test.try($$SELECT lease.take_lease('take', 's', 'c1', 'w', NULL, '0')$$);
SELECT lease_test.try($$SELECT lease.take_lease('take', 's', 'c1', 'w', NULL, '-5 seconds')$$);
SELECT lease_test.try($$SELECT lease.take_lease('take', 's', 'c1', 'w', NULL, '1 day -24 hours')$$);
SELECT lease_test.try($$SELECT lease.take_lease('take', 's', 'c1', 'w', NULL, '7 days 1 second')$$);
SELECT lease_test.try($$SELECT lease.take_lease('take', 's', 'c1', 'w', NULL, '1 month')$$);
-- months and days that cancel out as interval comparison counts them (a
-- month = 30 days) are judged by now() + value: a month part has no fixed
-- length and is refused, and so is a part that alone is too long, in every
-- function that takes a lease_duration
SELECT lease_test.try($$SELECT lease.take_lease('take', 's', 'c1', 'w', NULL, '1000 mon -29993 days')$$);
SELECT lease_test.try($$SELECT lease.take_lease('take', 's', 'c1', 'w', NULL, '1 mon -25 days')$$);
SELECT lease_test.try($$SELECT lease.take_lease('take', 's', 'c1', 'w', NULL, '1000000 days -23999999 hours')$$);
SELECT lease_test.try($$SELECT lease.renew_lease('take', 's', 'c1', 'w', 1, '1000 mon -29993 days')$$);
SELECT lease_test.try($$SELECT lease.take_leases('take', 's', 'w', '1000 mon -29993 days')$$);
SELECT lease_test.try($$SELECT lease.renew_leases('take', 's', 'w', '1000 mon -29993 days')$$);
SELECT lease_test.digest() = :'before' AS nothing_written;

-- the limit itself is accepted, in days or in hours, and days and time
-- that add up to less are too
SELECT lease.create_lease('take-week', 's', 'a');
SELECT lease.take_lease('take-week', 's', 'a', 'w1', NULL, '7 days') AS seven_days;
SELECT lease.renew_lease('take-week', 's', 'a', 'w1', 1, '168 hours') AS hours_168;
SELECT lease.renew_lease('take-week', 's', 'a', 'w1', 2, '8 days -25 hours') AS mixed;
SELECT lease_expires_at - now() BETWEEN interval '6 days 22 hours' AND interval '6 days 24 hours' AS expires_in_mixed
  FROM lease.shard_leases WHERE app_name = 'take-week';
SELECT lease.delete_lease('take-week', 's', 'a');
