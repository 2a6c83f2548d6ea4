-- Worker liveness (docs/worker-guide.md, "Fast failover"): renew_leases
-- writes one heartbeat row per worker and stream; a worker that declared
-- renew_every loses its leases before their expiry only when its recorded
-- session has ended in this server incarnation and it missed a renewal by
-- more than lease.liveness_grace.  A session that ended is simulated by
-- recording a process id no backend has.
\ir test/lib/taker_state_check.sql
SET lease.liveness_grace = '1 s';
SELECT count(*) FROM (SELECT lease.create_lease('lv', 's', 'l' || i) FROM generate_series(1, 4) i) AS c;
SELECT shard_id, action, lease_epoch FROM lease.take_leases('lv', 's', 'w1', '1 hour', renew_every => '1 s');

-- the take recorded w1's session and renew_every; no heartbeat yet
SELECT renew_every, session_pid = pg_backend_pid() AS this_session,
       session_start = (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()) AS started,
       server_incarnation IS NOT NULL AS incarnation, renewed_until, renewed_at IS NOT NULL AS renewed_at
  FROM lease.stream_workers WHERE app_name = 'lv' AND worker = 'w1';

-- one heartbeat renews all four: one row written, the leases untouched
SELECT lease_test.digest() AS before \gset
SELECT md5(string_agg(l::text, '|' ORDER BY shard_id)) AS leases_before FROM lease.shard_leases AS l
 WHERE app_name = 'lv' \gset
SELECT shard_id, lease_count, lease_epoch FROM lease.renew_leases('lv', 's', 'w1', '1 hour', '1 s');
SELECT md5(string_agg(l::text, '|' ORDER BY shard_id)) = :'leases_before' AS leases_unwritten
  FROM lease.shard_leases AS l WHERE app_name = 'lv';
SELECT renewed_until - renewed_at = interval '1 hour' AS heartbeat, renew_every
  FROM lease.stream_workers WHERE app_name = 'lv' AND worker = 'w1';

-- the session is alive: a missed renewal alone takes nothing early
UPDATE lease.stream_workers SET renewed_at = renewed_at - interval '1 minute'
 WHERE app_name = 'lv' AND worker = 'w1';
SELECT * FROM lease.take_leases('lv', 's', 'w2');
SELECT shard_id, state FROM lease.lease_status WHERE app_name = 'lv' ORDER BY shard_id;

-- the session ended (no backend has the pid): taken at once, fenced, with
-- the cause; the new owner's epoch moves on
-- (my_leases shows the cut-short expiry; lease_status, read with the
-- reader's privileges, the expiry by lease duration and heartbeat)
UPDATE lease.stream_workers SET session_pid = 0 WHERE app_name = 'lv' AND worker = 'w1';
SELECT shard_id, expires_in <= interval '0' AS expired FROM lease.my_leases('lv', 's', 'w1');
SELECT shard_id, state FROM lease.lease_status WHERE app_name = 'lv' ORDER BY shard_id;
SELECT shard_id, action, previous_owner, lease_epoch FROM lease.take_leases('lv', 's', 'w2', '1 hour');
SELECT shard_id, event, from_owner, to_owner, lease_epoch FROM lease.lease_events
 WHERE app_name = 'lv' AND event = 'session_ended' ORDER BY shard_id;
SELECT shard_id, lease_owner, lease_epoch FROM lease.shard_leases WHERE app_name = 'lv' ORDER BY shard_id;
-- w1's renewal no longer lists them, and its fenced checkpoint fails
SELECT * FROM lease.renew_leases('lv', 's', 'w1', '1 hour', '1 s');
SELECT lease.update_checkpoint('lv', 's', 'l1', 'w1', '9', 0, 1) AS stale_checkpoint;
SELECT * FROM taker_disagreements;

-- Each condition is needed.  w2 now holds all four (in the mode); its
-- session is made to look ended, one condition at a time undone.
SELECT count(*) FROM lease.renew_leases('lv', 's', 'w2', '1 hour', '1 s');
UPDATE lease.stream_workers SET session_pid = 0, renewed_at = renewed_at - interval '1 minute'
 WHERE app_name = 'lv' AND worker = 'w2';
-- a missed renewal within renew_every + grace: not yet
SET lease.liveness_grace = '1h';
SELECT count(*) AS taken_within_grace FROM lease.take_leases('lv', 's', 'w3', max_steal => 0);
RESET lease.liveness_grace;
SET lease.liveness_grace = '1 s';
-- the session lived in another server incarnation (a restart, a failover):
-- the lease duration rules
UPDATE lease.stream_workers SET server_incarnation = '0/1' WHERE app_name = 'lv' AND worker = 'w2';
SELECT count(*) AS taken_after_restart FROM lease.take_leases('lv', 's', 'w3', max_steal => 0);
SELECT lease.take_lease('lv', 's', 'l1', 'w3') AS taken_one_after_restart;
-- not in the mode (renew_every NULL): the lease duration rules
UPDATE lease.stream_workers AS w SET server_incarnation = x.server_incarnation, renew_every = NULL
  FROM lease.stream_workers AS x
 WHERE w.app_name = 'lv' AND w.worker = 'w2' AND x.app_name = 'lv' AND x.worker = 'w1';
SELECT count(*) AS taken_out_of_mode FROM lease.take_leases('lv', 's', 'w3', max_steal => 0);
-- all conditions again: take_lease takes one with the cause
UPDATE lease.stream_workers SET renew_every = '1 s' WHERE app_name = 'lv' AND worker = 'w2';
SELECT lease.take_lease('lv', 's', 'l1', 'w3', renew_every => '2 s') AS taken_one;
SELECT event, from_owner, to_owner FROM lease.lease_events
 WHERE app_name = 'lv' AND shard_id = 'l1' ORDER BY event_id DESC LIMIT 1;
SELECT renew_every, session_pid = pg_backend_pid() AS this_session
  FROM lease.stream_workers WHERE app_name = 'lv' AND worker = 'w3';
SELECT * FROM taker_disagreements;

-- A heartbeat keeps every lease of the worker live past its own expiry;
-- a worker that stops renewing loses them all when the heartbeat passes.
SELECT lease.create_lease('lv', 'hb', 'h' || i) FROM generate_series(1, 2) i;
SELECT count(*) FROM lease.take_leases('lv', 'hb', 'w1', '1 hour');
SELECT count(*) FROM lease.renew_leases('lv', 'hb', 'w1', '1 hour');
UPDATE lease.shard_leases SET lease_expires_at = clock_timestamp() - interval '1 s'
 WHERE app_name = 'lv' AND stream_name = 'hb';
SELECT shard_id, state FROM lease.lease_status WHERE app_name = 'lv' AND stream_name = 'hb' ORDER BY 1;
SELECT count(*) AS taken_while_heartbeat FROM lease.take_leases('lv', 'hb', 'w2', max_steal => 0);
UPDATE lease.stream_workers SET renewed_until = clock_timestamp() - interval '1 s'
 WHERE app_name = 'lv' AND stream_name = 'hb' AND worker = 'w1';
SELECT shard_id, action, previous_owner FROM lease.take_leases('lv', 'hb', 'w2');
SELECT event FROM lease.lease_events WHERE app_name = 'lv' AND stream_name = 'hb' ORDER BY event_id;

-- bad input writes nothing: renew_every as a lease duration, capacity
-- positive and finite
SELECT lease_test.digest() AS before \gset
\set VERBOSITY terse
SELECT * FROM lease.renew_leases('lv', 's', 'w3', renew_every => '0 s');
SELECT * FROM lease.renew_leases('lv', 's', 'w3', renew_every => '-1 s');
SELECT * FROM lease.take_leases('lv', 's', 'w3', renew_every => '1 mon');
SELECT lease.take_lease('lv', 's', 'l2', 'w3', renew_every => '0 s');
SELECT * FROM lease.take_leases('lv', 's', 'w3', capacity => 0);
SELECT * FROM lease.take_leases('lv', 's', 'w3', capacity => -1);
SELECT * FROM lease.take_leases('lv', 's', 'w3', capacity => 'NaN');
SELECT * FROM lease.take_leases('lv', 's', 'w3', capacity => 'Infinity');
\set VERBOSITY default
SELECT lease_test.digest() = :'before' AS nothing_written;
SELECT count(*) AS capacity_ignored FROM lease.take_leases('lv', 's', 'w3', capacity => 2.5);
RESET lease.liveness_grace;
