-- lease.heartbeat (docs/shard-leases.md): renew_leases' one write (the
-- worker's lease.stream_workers row), answered from its lease.worker_holdings
-- row (how many leases it holds, the row's version, how many of them have a
-- pending handoff) instead of a list of its leases, so its cost does not
-- grow with them.
\ir test/lib/taker_state_check.sql
SELECT count(*) FROM (SELECT lease.create_lease('hb', 's', 'l' || i) FROM generate_series(1, 4) i) AS c;

-- a worker that holds nothing and never did: no row, nothing written
SELECT lease_test.digest() AS before \gset
SELECT * FROM lease.heartbeat('hb', 's', 'w1');
SELECT lease_test.digest() = :'before' AS nothing_written;

SELECT count(*) FROM lease.take_leases('hb', 's', 'w1', '1 hour', max_leases => 3);
SELECT count(*) FROM lease.take_leases('hb', 's', 'w2', '1 hour', max_steal => 0);

-- one row written, the leases untouched; every lease of w1 is live until
-- now + lease_duration, as after renew_leases
SELECT md5(string_agg(l::text, '|' ORDER BY shard_id)) AS leases_before FROM lease.shard_leases AS l
 WHERE app_name = 'hb' \gset
SELECT leases, leases_version AS v1, handoffs_pending FROM lease.heartbeat('hb', 's', 'w1', '2 hours') \gset
SELECT :leases AS leases, :handoffs_pending AS handoffs_pending;
SELECT md5(string_agg(l::text, '|' ORDER BY shard_id)) = :'leases_before' AS leases_unwritten
  FROM lease.shard_leases AS l WHERE app_name = 'hb';
SELECT renewed_until - renewed_at = interval '2 hours' AS heartbeat, renew_every, version = :v1 AS version
  FROM lease.stream_workers JOIN lease.worker_holdings USING (app_name, stream_name, worker)
 WHERE app_name = 'hb' AND worker = 'w1';
SELECT shard_id, expires_in > interval '1 hour 59 minutes' AS renewed FROM lease.my_leases('hb', 's', 'w1');

-- the version stays through what does not change w1's leases: another
-- heartbeat, a renewal, a checkpoint, another worker's round
SELECT lease.update_checkpoint('hb', 's', shard_id, 'w1', '7', 0, lease_epoch) AS checkpointed
  FROM lease.renew_leases('hb', 's', 'w1', '1 hour') ORDER BY shard_id LIMIT 1;
SELECT count(*) FROM lease.take_leases('hb', 's', 'w2', '1 hour', max_steal => 0);
SELECT leases, leases_version = :v1 AS same_version FROM lease.heartbeat('hb', 's', 'w1');

-- renew_every puts the worker in the fast-failover mode, NULL takes it out
SELECT leases FROM lease.heartbeat('hb', 's', 'w1', '1 hour', '1 s');
SELECT renew_every, session_pid = pg_backend_pid() AS this_session
  FROM lease.stream_workers WHERE app_name = 'hb' AND worker = 'w1';
SELECT leases FROM lease.heartbeat('hb', 's', 'w1', '1 hour');
SELECT renew_every FROM lease.stream_workers WHERE app_name = 'hb' AND worker = 'w1';

-- a handoff request on one of w1's leases is pending until its deadline
-- plus its lease duration; the version does not move (nothing changed hands)
SELECT lease.request_handoff('hb', 's', 'l1', 'w2') AS requested;
SELECT leases, leases_version = :v1 AS same_version, handoffs_pending FROM lease.heartbeat('hb', 's', 'w1');
SELECT leases, handoffs_pending FROM lease.heartbeat('hb', 's', 'w2');
UPDATE lease.shard_leases SET handoff_deadline = clock_timestamp() - interval '2 hours'
 WHERE app_name = 'hb' AND shard_id = 'l1';
SELECT handoffs_pending FROM lease.heartbeat('hb', 's', 'w1');
UPDATE lease.shard_leases SET handoff_deadline = clock_timestamp() + interval '1 minute'
 WHERE app_name = 'hb' AND shard_id = 'l1';

-- every change of w1's leases moves the version: the handoff completed
-- (release_lease to w2), an expiry takeover, a lease arriving
SELECT lease.release_lease('hb', 's', 'l1', 'w1') AS released;
SELECT leases, leases_version > :v1 AS moved, handoffs_pending FROM lease.heartbeat('hb', 's', 'w1');
UPDATE lease.shard_leases SET lease_expires_at = clock_timestamp() - interval '1 s'
 WHERE app_name = 'hb' AND lease_owner = 'w1';
UPDATE lease.stream_workers SET renewed_until = clock_timestamp() - interval '1 s'
 WHERE app_name = 'hb' AND worker = 'w1';
SELECT version AS v2 FROM lease.worker_holdings WHERE app_name = 'hb' AND worker = 'w1' \gset
SELECT lease.take_lease('hb', 's', 'l2', 'w3') IS NOT NULL AS taken_over;
SELECT leases, leases_version > :v2 AS moved FROM lease.heartbeat('hb', 's', 'w1');
SELECT leases, leases_version AS v3 FROM lease.heartbeat('hb', 's', 'w1') \gset
SELECT lease.create_lease('hb', 's', 'l5') AS created;
SELECT count(*) FROM lease.take_leases('hb', 's', 'w1', '1 hour', max_steal => 0);
SELECT leases, leases_version > :v3 AS moved FROM lease.heartbeat('hb', 's', 'w1');
SELECT * FROM taker_disagreements;

-- bad input: errors, and nothing written
SELECT lease_test.digest() AS before \gset
SELECT lease_test.try($$SELECT lease.heartbeat(NULL, 's', 'w1')$$);
SELECT lease_test.try($$SELECT lease.heartbeat('hb', NULL, 'w1')$$);
SELECT lease_test.try($$SELECT lease.heartbeat('hb', 's', NULL)$$);
SELECT lease_test.try($$SELECT lease.heartbeat('hb', 's', '')$$);
SELECT lease_test.try($$SELECT lease.heartbeat('hb', 's', 'w1', '0')$$);
SELECT lease_test.try($$SELECT lease.heartbeat('hb', 's', 'w1', '-1 s')$$);
SELECT lease_test.try($$SELECT lease.heartbeat('hb', 's', 'w1', '1 hour', '0')$$);
-- a role not granted the app
CREATE ROLE lease_test_hb_stranger;
GRANT EXECUTE ON FUNCTION lease.heartbeat(text, text, text, interval, interval) TO lease_test_hb_stranger;
GRANT USAGE ON SCHEMA lease TO lease_test_hb_stranger;
SET ROLE lease_test_hb_stranger;
SELECT lease_test.try($$SELECT lease.heartbeat('hb', 's', 'w1')$$);
RESET ROLE;
SELECT lease_test.digest() = :'before' AS nothing_written;
REVOKE ALL ON FUNCTION lease.heartbeat(text, text, text, interval, interval) FROM lease_test_hb_stranger;
REVOKE ALL ON SCHEMA lease FROM lease_test_hb_stranger;
DROP ROLE lease_test_hb_stranger;
