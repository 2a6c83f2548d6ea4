-- lease.update_checkpoint: guarded on ownership only, never on lease_count.
SELECT lease.create_lease('ckpt', 's', 'a');
SELECT lease.take_lease('ckpt', 's', 'a', 'w1');

-- written by the owner; sub_sequence defaults to 0
SELECT lease.update_checkpoint('ckpt', 's', 'a', 'w1', '100');
SELECT lease.update_checkpoint('ckpt', 's', 'a', 'w1', '200', 7);
SELECT checkpoint, checkpoint_sub_sequence, lease_count FROM lease.shard_leases WHERE app_name = 'ckpt';

-- renewals bump lease_count; a checkpoint does not care (no count argument at all)
SELECT lease.renew_lease('ckpt', 's', 'a', 'w1', 1), lease.renew_lease('ckpt', 's', 'a', 'w1', 2);
SELECT lease.update_checkpoint('ckpt', 's', 'a', 'w1', '300');
SELECT checkpoint, checkpoint_sub_sequence, lease_count FROM lease.shard_leases WHERE app_name = 'ckpt';

-- an expired lease nobody took yet: its owner may still checkpoint
SELECT lease_test.expire('ckpt', 's', 'a');
SELECT lease.update_checkpoint('ckpt', 's', 'a', 'w1', '350');

-- another worker takes it: the old owner's checkpoint is refused, nothing written
SELECT lease.take_lease('ckpt', 's', 'a', 'w2');
SELECT owner_switches_since_checkpoint FROM lease.shard_leases WHERE app_name = 'ckpt';
SELECT lease.update_checkpoint('ckpt', 's', 'a', 'w1', '999') AS old_owner;
SELECT checkpoint, lease_owner FROM lease.shard_leases WHERE app_name = 'ckpt';
-- the new owner continues from the stored checkpoint; its checkpoint resets the switch counter
SELECT lease.update_checkpoint('ckpt', 's', 'a', 'w2', '400', 1);
SELECT checkpoint, checkpoint_sub_sequence, owner_switches_since_checkpoint
  FROM lease.shard_leases WHERE app_name = 'ckpt';
-- sentinels may be written (rewinding to TRIM_HORIZON or LATEST)
SELECT lease.update_checkpoint('ckpt', 's', 'a', 'w2', 'LATEST');

-- unowned, unknown, ended: false
SELECT lease.create_lease('ckpt', 's', 'b');
SELECT lease.update_checkpoint('ckpt', 's', 'b', 'w1', '1') AS unowned,
       lease.update_checkpoint('ckpt', 's', 'nope', 'w1', '1') AS unknown;
SELECT lease.close_shard('ckpt', 's', 'a', 'w2');
SELECT lease.update_checkpoint('ckpt', 's', 'a', 'w2', '500') AS ended;
SELECT shard_id, checkpoint, lease_owner FROM lease.shard_leases WHERE app_name = 'ckpt' ORDER BY shard_id;

-- bad input: errors, and nothing written
SELECT lease.take_lease('ckpt', 's', 'b', 'w1');
SELECT lease_test.digest() AS before \gset
SELECT lease_test.try($$SELECT lease.update_checkpoint(NULL, 's', 'b', 'w1', '1')$$);
SELECT lease_test.try($$SELECT lease.update_checkpoint('ckpt', NULL, 'b', 'w1', '1')$$);
SELECT lease_test.try($$SELECT lease.update_checkpoint('ckpt', 's', NULL, 'w1', '1')$$);
SELECT lease_test.try($$SELECT lease.update_checkpoint('ckpt', 's', 'b', NULL, '1')$$);
SELECT lease_test.try($$SELECT lease.update_checkpoint('ckpt', 's', 'b', 'w1', NULL)$$);
SELECT lease_test.try($$SELECT lease.update_checkpoint('ckpt', 's', 'b', 'w1', '1', NULL)$$);
SELECT lease_test.try($$SELECT lease.update_checkpoint('ckpt', 's', 'b', 'w1', '')$$);
SELECT lease_test.try($$SELECT lease.update_checkpoint('ckpt', 's', 'b', 'w1', '  ')$$);
SELECT lease_test.try($$SELECT lease.update_checkpoint('ckpt', 's', 'b', 'w1', repeat('1', 1025))$$);
SELECT lease_test.try($$SELECT lease.update_checkpoint('ckpt', 's', 'b', 'w1', '1', -1)$$);
SELECT lease_test.try($$SELECT lease.update_checkpoint('ckpt', 's', 'b', 'w1', 'SHARD_END')$$);
SELECT lease_test.try($$SELECT lease.update_checkpoint('ckpt', 's', 'b', repeat('w', 300), '1')$$);
SELECT lease_test.digest() = :'before' AS nothing_written;
