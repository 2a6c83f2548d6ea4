-- lease.renew_lease: renewed, lost (other owner / stale count / released / unknown).
SELECT lease.create_lease('renew', 's', 'a');
SELECT lease.take_lease('renew', 's', 'a', 'w1');

-- renewed: count bumped, expiry extended from the database clock
SELECT lease.renew_lease('renew', 's', 'a', 'w1', 1);
SELECT lease.renew_lease('renew', 's', 'a', 'w1', 2, '2 minutes');
SELECT lease_owner, lease_count,
       lease_expires_at - clock_timestamp() BETWEEN interval '119 s' AND interval '120 s' AS two_minutes
  FROM lease.shard_leases WHERE app_name = 'renew';

-- an expired lease nobody took yet can still be renewed by its owner
SELECT lease_test.expire('renew', 's', 'a');
SELECT lease.renew_lease('renew', 's', 'a', 'w1', 3);

-- lost: stale count, wrong owner, unknown lease
SELECT lease.renew_lease('renew', 's', 'a', 'w1', 3) IS NULL AS stale_count,
       lease.renew_lease('renew', 's', 'a', 'w2', 4) IS NULL AS not_owner,
       lease.renew_lease('renew', 's', 'nope', 'w1', 4) IS NULL AS unknown;
-- renewal does not change owner switches or the checkpoint
SELECT lease_owner, lease_count, checkpoint, owner_switches_since_checkpoint
  FROM lease.shard_leases WHERE app_name = 'renew';

-- after a steal the old owner's renewal returns NULL
SELECT lease.take_lease('renew', 's', 'a', 'w2', 4);
SELECT lease.renew_lease('renew', 's', 'a', 'w1', 4) IS NULL AS lost_after_steal,
       lease.renew_lease('renew', 's', 'a', 'w1', 5) IS NULL AS lost_even_with_new_count;
-- after a release nobody can renew
SELECT lease.release_lease('renew', 's', 'a', 'w2');
SELECT lease.renew_lease('renew', 's', 'a', 'w2', 6) IS NULL AS released;
SELECT lease_owner, lease_count, lease_expires_at FROM lease.shard_leases WHERE app_name = 'renew';

-- bad input: errors, and nothing written
SELECT lease.take_lease('renew', 's', 'a', 'w1');
SELECT lease_test.digest() AS before \gset
SELECT lease_test.try($$SELECT lease.renew_lease(NULL, 's', 'a', 'w1', 7)$$);
SELECT lease_test.try($$SELECT lease.renew_lease('renew', NULL, 'a', 'w1', 7)$$);
SELECT lease_test.try($$SELECT lease.renew_lease('renew', 's', NULL, 'w1', 7)$$);
SELECT lease_test.try($$SELECT lease.renew_lease('renew', 's', 'a', NULL, 7)$$);
SELECT lease_test.try($$SELECT lease.renew_lease('renew', 's', 'a', 'w1', NULL)$$);
SELECT lease_test.try($$SELECT lease.renew_lease('renew', 's', 'a', 'w1', -7)$$);
SELECT lease_test.try($$SELECT lease.renew_lease('renew', 's', 'a', '', 7)$$);
SELECT lease_test.try($$SELECT lease.renew_lease('renew', 's', 'a', 'w1', 7, '0 s')$$);
SELECT lease_test.try($$SELECT lease.renew_lease('renew', 's', 'a', 'w1', 7, '-1 s')$$);
SELECT lease_test.try($$SELECT lease.renew_lease('renew', 's', 'a', 'w1', 7, '100 years')$$);
SELECT lease_test.digest() = :'before' AS nothing_written;
