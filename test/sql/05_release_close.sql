-- lease.release_lease and lease.close_shard: guarded on ownership.
SELECT lease.create_lease('rel', 's', 'a');
SELECT lease.take_lease('rel', 's', 'a', 'w1');
SELECT lease.update_checkpoint('rel', 's', 'a', 'w1', '42');

-- release: only the owner; owner and expiry cleared, count bumped, checkpoint kept
SELECT lease.release_lease('rel', 's', 'a', 'w2') AS not_owner;
SELECT lease.release_lease('rel', 's', 'a', 'w1') AS released;
SELECT lease_owner, lease_expires_at, lease_count, checkpoint FROM lease.shard_leases WHERE app_name = 'rel';
SELECT lease.release_lease('rel', 's', 'a', 'w1') AS already_released,
       lease.release_lease('rel', 's', 'nope', 'w1') AS unknown;
-- a released lease is takeable at once
SELECT lease.take_lease('rel', 's', 'a', 'w2');

-- close: only the owner; checkpoint SHARD_END, lease given up
SELECT lease.close_shard('rel', 's', 'a', 'w1') AS not_owner;
SELECT lease.close_shard('rel', 's', 'a', 'w2') AS closed;
SELECT lease_owner, lease_expires_at, lease_count, checkpoint, checkpoint_sub_sequence
  FROM lease.shard_leases WHERE app_name = 'rel';
SELECT lease.close_shard('rel', 's', 'a', 'w2') AS already_ended,
       lease.close_shard('rel', 's', 'nope', 'w2') AS unknown,
       lease.release_lease('rel', 's', 'a', 'w2') AS release_ended;
-- an unowned shard cannot be closed (there is no owner to guard on)
SELECT lease.create_lease('rel', 's', 'b');
SELECT lease.close_shard('rel', 's', 'b', 'w1') AS unowned;

-- bad input: errors, and nothing written
SELECT lease_test.digest() AS before \gset
SELECT lease_test.try($$SELECT lease.release_lease(NULL, 's', 'a', 'w1')$$);
SELECT lease_test.try($$SELECT lease.release_lease('rel', NULL, 'a', 'w1')$$);
SELECT lease_test.try($$SELECT lease.release_lease('rel', 's', NULL, 'w1')$$);
SELECT lease_test.try($$SELECT lease.release_lease('rel', 's', 'a', NULL)$$);
SELECT lease_test.try($$SELECT lease.release_lease('rel', 's', 'a', '')$$);
SELECT lease_test.try($$SELECT lease.close_shard(NULL, 's', 'a', 'w1')$$);
SELECT lease_test.try($$SELECT lease.close_shard('rel', NULL, 'a', 'w1')$$);
SELECT lease_test.try($$SELECT lease.close_shard('rel', 's', NULL, 'w1')$$);
SELECT lease_test.try($$SELECT lease.close_shard('rel', 's', 'a', NULL)$$);
SELECT lease_test.try($$SELECT lease.close_shard('rel', 's', repeat('a', 257), 'w1')$$);
SELECT lease_test.digest() = :'before' AS nothing_written;
