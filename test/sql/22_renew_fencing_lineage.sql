-- lease.renew_leases, lease_epoch and the fenced update_checkpoint,
-- prepare_checkpoint, and shard lineage (cleanup_ended, delete_lease).
SELECT lease.create_lease('rf', 's', 'r' || i) FROM generate_series(1, 4) i;
SELECT lease.create_lease('rf', 'other', 'r1');
SELECT count(*) FROM lease.take_leases('rf', 's', 'w1');
SELECT lease.take_lease('rf', 'other', 'r1', 'w1');

-- renew_leases: every lease the owner holds in that stream, one heartbeat
-- (the worker's lease.stream_workers row); the lease rows are not written,
-- so their lease_count stays, and their effective expiry is the heartbeat's
SELECT * FROM lease.renew_leases('rf', 's', 'w1', '1 minute');
SELECT shard_id, time_to_expiry BETWEEN interval '59 s' AND interval '60 s' AS one_minute,
       lease_count
  FROM lease.lease_status WHERE app_name = 'rf' AND stream_name = 's' ORDER BY shard_id;
SELECT renewed_until - renewed_at = interval '1 minute' AS heartbeat, renew_every,
       session_pid = pg_backend_pid() AS this_session
  FROM lease.stream_workers WHERE app_name = 'rf' AND stream_name = 's' AND worker = 'w1';
-- a lease taken away is absent; an expired one nobody took is still renewed
SELECT lease_test.expire('rf', 's', 'r2');
SELECT lease.take_lease('rf', 's', 'r1', 'w2', 1) AS stolen;
SELECT lease_test.expire('rf', 's', 'r3');
SELECT * FROM lease.renew_leases('rf', 's', 'w1');
SELECT * FROM lease.renew_leases('rf', 's', 'nobody');
SELECT lease_count FROM lease.shard_leases WHERE app_name = 'rf' AND stream_name = 'other';

-- lease_epoch: moves on every ownership change, never on renew or checkpoint
SELECT lease_epoch AS e0 FROM lease.shard_leases WHERE app_name = 'rf' AND shard_id = 'r4' AND stream_name = 's' \gset
SELECT lease.renew_lease('rf', 's', 'r4', 'w1', lease_count), lease.update_checkpoint('rf', 's', 'r4', 'w1', '5')
  FROM lease.shard_leases WHERE app_name = 'rf' AND stream_name = 's' AND shard_id = 'r4';
SELECT * FROM lease.renew_leases('rf', 's', 'w1');
SELECT lease_epoch = :e0 AS unchanged FROM lease.shard_leases WHERE app_name = 'rf' AND stream_name = 's' AND shard_id = 'r4';

-- the fenced checkpoint: written only while the epoch matches
SELECT lease.update_checkpoint('rf', 's', 'r4', 'w1', '6', 0, :e0) AS current_token;
SELECT lease.update_checkpoint('rf', 's', 'r4', 'w1', '7', 1, :e0 - 1) AS stale_token;
-- a paused process under a reused owner name: w1 loses r4, gets it back,
-- and the old process's token no longer works while the new one's does
SELECT lease_test.expire('rf', 's', 'r4');
SELECT lease.take_lease('rf', 's', 'r4', 'w2');
SELECT lease_test.expire('rf', 's', 'r4');
SELECT lease.take_lease('rf', 's', 'r4', 'w1');
SELECT lease.update_checkpoint('rf', 's', 'r4', 'w1', '8', 0, :e0) AS paused_process,
       lease.update_checkpoint('rf', 's', 'r4', 'w1', '8', 0, :e0 + 2) AS new_process;
-- not the owner, or ended: false whatever the token
SELECT lease.update_checkpoint('rf', 's', 'r4', 'w2', '9', 0, :e0 + 2) AS not_owner;
SELECT checkpoint, checkpoint_sub_sequence, lease_epoch FROM lease.shard_leases
 WHERE app_name = 'rf' AND stream_name = 's' AND shard_id = 'r4';
-- the six-argument function is unchanged and unambiguous beside it
SELECT lease.update_checkpoint('rf', 's', 'r4', 'w1', '10'), lease.update_checkpoint('rf', 's', 'r4', 'w1', '11', 2);

-- prepare_checkpoint: records the intent (owner only); update_checkpoint clears it
SELECT lease.prepare_checkpoint('rf', 's', 'r4', 'w1', '20') AS prepared,
       lease.prepare_checkpoint('rf', 's', 'r4', 'w2', '21') AS not_owner,
       lease.prepare_checkpoint('rf', 's', 'nope', 'w1', '21') AS unknown;
SELECT checkpoint, pending_checkpoint FROM lease.lease_status
 WHERE app_name = 'rf' AND stream_name = 's' AND shard_id = 'r4';
-- a new owner sees the intent its predecessor did not complete
SELECT lease_test.expire('rf', 's', 'r4');
SELECT lease.take_lease('rf', 's', 'r4', 'w2');
SELECT lease_owner, checkpoint, pending_checkpoint FROM lease.lease_status
 WHERE app_name = 'rf' AND stream_name = 's' AND shard_id = 'r4';
SELECT lease.update_checkpoint('rf', 's', 'r4', 'w2', '20', 0, lease_epoch)
  FROM lease.shard_leases WHERE app_name = 'rf' AND stream_name = 's' AND shard_id = 'r4';
SELECT checkpoint, pending_checkpoint FROM lease.shard_leases
 WHERE app_name = 'rf' AND stream_name = 's' AND shard_id = 'r4';
SELECT lease.close_shard('rf', 's', 'r4', 'w2');
SELECT lease.update_checkpoint('rf', 's', 'r4', 'w2', '30', 0, lease_epoch) AS ended,
       lease.prepare_checkpoint('rf', 's', 'r4', 'w2', '30') AS prepare_ended
  FROM lease.shard_leases WHERE app_name = 'rf' AND stream_name = 's' AND shard_id = 'r4';

-- lineage: take_leases neither takes nor counts blocked children
SELECT lease.create_lease('rf', 'lin', 'm1'), lease.create_lease('rf', 'lin', 'm2');
SELECT lease.create_lease('rf', 'lin', 'm', '{m1,m2}');
SELECT lease.create_lease('rf', 'lin', 's1', '{m}'), lease.create_lease('rf', 'lin', 's2', '{m}');
SELECT * FROM lease.take_leases('rf', 'lin', 'w1');
SELECT lease.close_shard('rf', 'lin', 'm1', 'w1');
SELECT * FROM lease.take_leases('rf', 'lin', 'w1');
SELECT lease.close_shard('rf', 'lin', 'm2', 'w1');
SELECT * FROM lease.take_leases('rf', 'lin', 'w1');
-- cleanup_ended: an ended lease goes once every child has started
SELECT lease.cleanup_ended('rf', 'lin') AS child_not_started;
SELECT lease.update_checkpoint('rf', 'lin', 'm', 'w1', '100');
SELECT lease.cleanup_ended('rf', 'lin') AS parents_removed;
SELECT lease.close_shard('rf', 'lin', 'm', 'w1');
SELECT lease.cleanup_ended('rf', 'lin') AS children_unstarted;
SELECT * FROM lease.take_leases('rf', 'lin', 'w2');
SELECT lease.update_checkpoint('rf', 'lin', 's1', 'w2', 'LATEST');
SELECT lease.cleanup_ended('rf', 'lin') AS one_child_still_at_latest;
SELECT lease.update_checkpoint('rf', 'lin', 's2', 'w2', 'AT_TIMESTAMP');
SELECT lease.update_checkpoint('rf', 'lin', 's1', 'w2', '1');
SELECT lease.cleanup_ended('rf', 'lin') AS other_child_still_at_timestamp;
SELECT lease.close_shard('rf', 'lin', 's2', 'w2');
SELECT lease.cleanup_ended('rf', 'lin') AS merged_parent_and_ended_leaf;
SELECT shard_id, checkpoint FROM lease.shard_leases WHERE app_name = 'rf' AND stream_name = 'lin' ORDER BY shard_id;
SELECT lease.cleanup_ended('rf', 'lin') AS again;
-- delete_lease
SELECT lease.delete_lease('rf', 'lin', 's1') AS deleted, lease.delete_lease('rf', 'lin', 's1') AS gone;

-- bad input: errors, and nothing written
SELECT lease_test.digest() AS before \gset
SELECT lease_test.try($$SELECT lease.renew_leases(NULL, 's', 'w1')$$);
SELECT lease_test.try($$SELECT lease.renew_leases('rf', 's', NULL)$$);
SELECT lease_test.try($$SELECT lease.renew_leases('rf', 's', 'w1', '0')$$);
SELECT lease_test.try($$SELECT lease.update_checkpoint('rf', 's', 'r1', 'w2', '1', 0, NULL)$$);
SELECT lease_test.try($$SELECT lease.update_checkpoint('rf', 's', 'r1', 'w2', '1', 0, -1)$$);
SELECT lease_test.try($$SELECT lease.update_checkpoint('rf', 's', 'r1', 'w2', '1', NULL, 1)$$);
SELECT lease_test.try($$SELECT lease.update_checkpoint('rf', 's', 'r1', 'w2', 'SHARD_END', 0, 1)$$);
SELECT lease_test.try($$SELECT lease.update_checkpoint('rf', 's', 'r1', 'w2', '', 0, 1)$$);
SELECT lease_test.try($$SELECT lease.prepare_checkpoint('rf', 's', 'r1', 'w2', NULL)$$);
SELECT lease_test.try($$SELECT lease.prepare_checkpoint('rf', 's', 'r1', 'w2', repeat('9', 1025))$$);
SELECT lease_test.try($$SELECT lease.prepare_checkpoint('rf', 's', 'r1', 'w2', 'SHARD_END')$$);
SELECT lease_test.try($$SELECT lease.prepare_checkpoint('rf', 's', 'r1', NULL, '1')$$);
SELECT lease_test.try($$SELECT lease.cleanup_ended(NULL, 'lin')$$);
SELECT lease_test.try($$SELECT lease.cleanup_ended('rf', '')$$);
SELECT lease_test.try($$SELECT lease.delete_lease('rf', 'lin', NULL)$$);
SELECT lease_test.try($$SELECT lease.delete_lease('rf', repeat('s', 257), 'x')$$);
SELECT lease_test.digest() = :'before' AS nothing_written;
