-- lease.create_lease: created, already existed, lineage, custom checkpoint.
SELECT lease.create_lease('app', 'stream', 'shard-0');
-- idempotent: an existing lease is not an error and is not touched
SELECT lease.take_lease('app', 'stream', 'shard-0', 'w1') AS count;
SELECT lease.create_lease('app', 'stream', 'shard-0', '{}', 'LATEST');
SELECT lease_owner, lease_count, checkpoint FROM lease.shard_leases WHERE shard_id = 'shard-0';

-- a new lease is unowned, count 0, TRIM_HORIZON, no expiry
SELECT lease.create_lease('app', 'stream', 'shard-1');
SELECT lease_owner, lease_count, checkpoint, checkpoint_sub_sequence, parent_shard_ids,
       lease_expires_at, owner_switches_since_checkpoint
  FROM lease.shard_leases WHERE shard_id = 'shard-1';

-- children with parents, and a starting checkpoint
SELECT lease.create_lease('app', 'stream', 'shard-2', ARRAY['shard-1']);
SELECT lease.create_lease('app', 'stream', 'shard-3', ARRAY['shard-1', 'shard-0'], 'LATEST');
SELECT shard_id, parent_shard_ids, checkpoint FROM lease.shard_leases
 WHERE shard_id IN ('shard-2', 'shard-3') ORDER BY shard_id;

-- the same shard id in another stream or app is another lease
SELECT lease.create_lease('app', 'other-stream', 'shard-0'), lease.create_lease('other-app', 'stream', 'shard-0');
SELECT count(*) FROM lease.shard_leases WHERE shard_id = 'shard-0';

-- named arguments
SELECT lease.create_lease(app_name => 'app', stream_name => 'stream', shard_id => 'shard-4',
                          checkpoint => '49590338271490256608559692538361571095921575989136588898');
SELECT checkpoint FROM lease.shard_leases WHERE shard_id = 'shard-4';

-- bad input: errors, and nothing written
SELECT lease_test.digest() AS before \gset
SELECT lease_test.try($$SELECT lease.create_lease(NULL, 's', 'x')$$);
SELECT lease_test.try($$SELECT lease.create_lease('a', NULL, 'x')$$);
SELECT lease_test.try($$SELECT lease.create_lease('a', 's', NULL)$$);
SELECT lease_test.try($$SELECT lease.create_lease('a', 's', 'x', NULL)$$);
SELECT lease_test.try($$SELECT lease.create_lease('a', 's', 'x', '{}', NULL)$$);
SELECT lease_test.try($$SELECT lease.create_lease('', 's', 'x')$$);
SELECT lease_test.try($$SELECT lease.create_lease('a', '   ', 'x')$$);
SELECT lease_test.try($$SELECT lease.create_lease('a', 's', E'\t\n')$$);
SELECT lease_test.try($$SELECT lease.create_lease('a', 's', repeat('x', 257))$$);
SELECT lease_test.try($$SELECT lease.create_lease('a', 's', 'x', '{}', '')$$);
SELECT lease_test.try($$SELECT lease.create_lease('a', 's', 'x', '{}', repeat('9', 1025))$$);
SELECT lease_test.try($$SELECT lease.create_lease('a', 's', 'x', ARRAY[NULL]::text[])$$);
SELECT lease_test.try($$SELECT lease.create_lease('a', 's', 'x', ARRAY[''])$$);
SELECT lease_test.try($$SELECT lease.create_lease('a', 's', 'x', ARRAY[['p1'],['p2']])$$);
SELECT lease_test.try($$SELECT lease.create_lease('a', 's', 'x', ARRAY['x'])$$);
SELECT lease_test.try($$SELECT lease.create_lease('a', 's', 'x', array_fill('p'::text, ARRAY[33]))$$);
SELECT lease_test.digest() = :'before' AS nothing_written;

-- the limits themselves are accepted
SELECT lease.create_lease('a', 's', repeat('x', 256), '{}', repeat('9', 1024));
SELECT length(shard_id), length(checkpoint) FROM lease.shard_leases WHERE app_name = 'a';
