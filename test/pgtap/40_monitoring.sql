-- pgTAP: the monitoring functions (src/leases/monitoring.sql for leases,
-- src/bindings/monitoring.sql for channel bindings) and the
-- monitoring role of docs/monitoring.md: the role, built with the runbook's
-- recipe verbatim, runs every query of docs/monitoring/pg_lease_queries.yaml
-- and can read nothing else.  The metrics count what lease.lease_status and
-- the tables say; checkpointed_at moves with checkpoints, not renewals; the
-- ownership counters survive prune_events.
BEGIN;
SELECT plan(54);

-- docs/monitoring.md, "Installing": the recipe (the docs-coverage suite
-- checks that the page shows these lines as they are here)
-- recipe: docs/monitoring.md
CREATE ROLE lease_monitor NOLOGIN;
GRANT USAGE ON SCHEMA lease TO lease_monitor;
GRANT EXECUTE ON FUNCTION
    lease.monitoring_leases(),
    lease.monitoring_streams(),
    lease.monitoring_workers(),
    lease.monitoring_worker_loads(),
    lease.monitoring_ownership_changes(),
    lease.monitoring_conversations(),
    lease.monitoring_sandboxes(),
    lease.monitoring_fleet(),
    lease.monitoring_compensation_failures(),
    lease.monitoring_notifications(),
    lease.monitoring_incarnations(),
    lease.monitoring_replication()
    TO lease_monitor;
-- end of recipe
CREATE ROLE tap_mon_exporter LOGIN IN ROLE lease_monitor;
CREATE ROLE tap_mon_nobody;
GRANT USAGE ON SCHEMA lease TO tap_mon_nobody;

-- 1. the functions: SECURITY DEFINER, search_path pinned, not for PUBLIC
SELECT is((SELECT count(*)::int FROM pg_proc
            WHERE pronamespace = 'lease'::regnamespace AND proname LIKE 'monitoring\_%'
              AND prosecdef AND pronargs = 0
              AND proconfig @> ARRAY['search_path=pg_catalog, pg_temp']),
          12, 'twelve monitoring functions, SECURITY DEFINER, no arguments, search_path pinned');
SELECT is_empty($$SELECT p.oid::regprocedure FROM pg_proc p
                   WHERE p.pronamespace = 'lease'::regnamespace
                     AND has_function_privilege('tap_mon_nobody', p.oid, 'EXECUTE')$$,
                'a role granted nothing can execute no lease function');

-- 2. a fixture: app mon-a, stream s
SELECT lease.create_lease('mon-a', 's', 'p1');
SELECT lease.create_lease('mon-a', 's', 'c1', ARRAY['p1']);          -- blocked by p1
SELECT lease.create_lease('mon-a', 's', 'p2');
SELECT lease.create_lease('mon-a', 's', 'c2', ARRAY['p2']);          -- p2 ends: c2 unowned
SELECT lease.create_lease('mon-a', 's', 'x1');
SELECT lease.create_lease('mon-a', 's', 'x2');
SELECT lease.create_lease('mon-a', 's', 'x3');
SELECT lease.take_lease('mon-a', 's', 'p2', 'w1', NULL, '1 hour');
SELECT lease.close_shard('mon-a', 's', 'p2', 'w1');                   -- ended
SELECT lease.take_lease('mon-a', 's', 'p1', 'w1', NULL, '1 hour');   -- owned
SELECT lease.take_lease('mon-a', 's', 'x1', 'w1', NULL, '1 hour');   -- handoff_pending
SELECT lease.take_lease('mon-a', 's', 'x2', 'w2', NULL, '1 hour');   -- expired (below)
SELECT lease.take_lease('mon-a', 's', 'x3', 'w1', NULL, '1 hour');   -- steal: w3 takes it
SELECT lease.take_lease('mon-a', 's', 'x3', 'w3',
    (SELECT lease_count FROM lease.shard_leases WHERE app_name = 'mon-a' AND shard_id = 'x3'), '1 hour');
SELECT lease.request_handoff('mon-a', 's', 'x1', 'w3');
UPDATE lease.shard_leases SET lease_expires_at = clock_timestamp() - interval '90 seconds'
 WHERE app_name = 'mon-a' AND shard_id = 'x2';

SELECT results_eq(
    $$SELECT state, leases FROM lease.monitoring_leases()
       WHERE app_name = 'mon-a' AND stream_name = 's' ORDER BY state$$,
    $$VALUES ('blocked', 1::bigint), ('ended', 1), ('expired', 1), ('handoff_pending', 1),
             ('owned', 2), ('unowned', 1)$$,
    'monitoring_leases: every state, counted');
SELECT results_eq(
    $$SELECT state, leases FROM lease.monitoring_leases()
       WHERE app_name = 'mon-a' AND leases > 0 ORDER BY state$$,
    $$SELECT state, count(*) FROM lease.lease_status WHERE app_name = 'mon-a'
       GROUP BY state ORDER BY state$$,
    'monitoring_leases agrees with lease.lease_status');
SELECT results_eq(
    $$SELECT open_leases, live_workers, fair_share_leases, handoffs_pending, handoffs_past_deadline
        FROM lease.monitoring_streams() WHERE app_name = 'mon-a' AND stream_name = 's'$$,
    $$VALUES (5::bigint, 2::bigint, 3::bigint, 1::bigint, 0::bigint)$$,
    'monitoring_streams: 5 open leases (not ended, not blocked), 2 live workers, fair share 3, 1 handoff');
SELECT ok((SELECT oldest_expired_age_seconds BETWEEN 89 AND 3600
             FROM lease.monitoring_streams() WHERE app_name = 'mon-a'),
          'monitoring_streams: the expired lease expired 90 s ago');
SELECT ok((SELECT oldest_handoff_age_seconds BETWEEN 0 AND 60 AND lease_duration_seconds = 10
             FROM lease.monitoring_streams() WHERE app_name = 'mon-a'),
          'monitoring_streams: a fresh handoff; the default lease duration, 10 s');
SET LOCAL lease.default_lease_duration = '2500ms';
SELECT is((SELECT lease_duration_seconds FROM lease.monitoring_streams() WHERE app_name = 'mon-a'),
          2.5::float8, 'monitoring_streams follows lease.default_lease_duration');
RESET lease.default_lease_duration;
UPDATE lease.shard_leases SET handoff_deadline = clock_timestamp() - interval '1 second'
 WHERE app_name = 'mon-a' AND shard_id = 'x1';
SELECT is((SELECT handoffs_past_deadline FROM lease.monitoring_streams() WHERE app_name = 'mon-a'),
          1::bigint, 'monitoring_streams: a handoff past its deadline');
SELECT results_eq(
    $$SELECT lease_owner, leases FROM lease.monitoring_workers() WHERE app_name = 'mon-a' ORDER BY 1$$,
    $$VALUES ('w1', 2::bigint), ('w3', 1::bigint)$$,
    'monitoring_workers: live leases per owner (w2''s lease expired)');
SELECT results_eq(
    $$SELECT lease_owner, leases FROM lease.monitoring_workers() WHERE app_name = 'mon-a' ORDER BY 1$$,
    $$SELECT lease_owner, live_leases FROM lease.worker_loads WHERE app_name = 'mon-a' ORDER BY 1$$,
    'monitoring_workers agrees with lease.worker_loads');
SELECT results_eq(
    $$SELECT lease_owner, load, capacity, target FROM lease.monitoring_worker_loads() WHERE app_name = 'mon-a' ORDER BY 1$$,
    $$SELECT lease_owner, load, capacity, target FROM lease.worker_loads WHERE app_name = 'mon-a' ORDER BY 1$$,
    'monitoring_worker_loads: load, capacity and target as lease.worker_loads shows them');

-- 3. checkpointed_at: a checkpoint moves it, a renewal does not
UPDATE lease.shard_leases SET checkpointed_at = now() - interval '2 hours'
 WHERE app_name = 'mon-a';
SELECT ok((SELECT oldest_checkpoint_age_seconds >= 7200 FROM lease.monitoring_streams()
            WHERE app_name = 'mon-a'), 'the oldest checkpoint among live leases is two hours old');
SELECT is((SELECT count(*)::int FROM lease.renew_leases('mon-a', 's', 'w1', '1 hour')), 2,
          'w1 renews its two leases');
SELECT ok((SELECT oldest_checkpoint_age_seconds >= 7200 FROM lease.monitoring_streams()
            WHERE app_name = 'mon-a'), 'a renewal does not count as a checkpoint');
SELECT ok(lease.update_checkpoint('mon-a', 's', 'p1', 'w1', '100')
          AND lease.update_checkpoint('mon-a', 's', 'x1', 'w1', '100', 0,
                (SELECT lease_epoch FROM lease.shard_leases WHERE app_name = 'mon-a' AND shard_id = 'x1'))
          AND lease.update_checkpoint('mon-a', 's', 'x3', 'w3', '100'),
          'every live lease checkpoints (plain and fenced)');
SELECT ok((SELECT oldest_checkpoint_age_seconds < 60 FROM lease.monitoring_streams()
            WHERE app_name = 'mon-a'), 'after the checkpoints the oldest is fresh');

-- 4. ownership counters: what lease_events says, every kind, and monotonic
SELECT results_eq(
    $$SELECT event, changes FROM lease.monitoring_ownership_changes()
       WHERE app_name = 'mon-a' ORDER BY event$$,
    $$VALUES ('close', 1::bigint), ('expiry_takeover', 0), ('handoff_request', 1),
             ('release', 0), ('session_ended', 0), ('steal', 1), ('take', 5), ('transfer', 0)$$,
    'monitoring_ownership_changes: the fixture''s events, every kind');
SELECT results_eq(
    $$SELECT event, changes FROM lease.monitoring_ownership_changes()
       WHERE app_name = 'mon-a' AND changes > 0 ORDER BY event$$,
    $$SELECT event, count(*) FROM lease.lease_events WHERE app_name = 'mon-a'
       GROUP BY event ORDER BY event$$,
    'monitoring_ownership_changes agrees with lease.lease_events');
SELECT ok(lease.prune_events('0') >= 8, 'prune_events deletes every event');
SELECT is((SELECT count(*)::int FROM lease.lease_events WHERE app_name = 'mon-a'), 0,
          'no event of mon-a is left');
SELECT results_eq(
    $$SELECT event, changes FROM lease.monitoring_ownership_changes()
       WHERE app_name = 'mon-a' ORDER BY event$$,
    $$VALUES ('close', 1::bigint), ('expiry_takeover', 0), ('handoff_request', 1),
             ('release', 0), ('session_ended', 0), ('steal', 1), ('take', 5), ('transfer', 0)$$,
    'after prune_events the counters have not gone down');
SELECT lease.release_lease('mon-a', 's', 'x3', 'w3');
SELECT lease.take_lease('mon-a', 's', 'x2', 'w1', NULL, '1 hour');   -- expiry takeover
SELECT is(lease.prune_events('0'), 2::bigint, 'a second prune deletes the two new events');
SELECT results_eq(
    $$SELECT event, changes FROM lease.monitoring_ownership_changes()
       WHERE app_name = 'mon-a' ORDER BY event$$,
    $$VALUES ('close', 1::bigint), ('expiry_takeover', 1), ('handoff_request', 1),
             ('release', 1), ('session_ended', 0), ('steal', 1), ('take', 5), ('transfer', 0)$$,
    'the counters add the new events across a second prune');

-- 5. channel bindings
INSERT INTO lease.sandboxes (user_id, status)
VALUES ('t1', 'ready'), ('t1', 'pending'), ('t2', 'starting'), ('t2', 'terminated'), ('t3', 'failed');
INSERT INTO lease.tenant_limits VALUES ('t1', 2), ('t2', 1);
INSERT INTO lease.conversations (user_id, agent_id, status)
VALUES ('t1', 'a', 'running'), ('t1', 'a', 'idle'), ('t2', 'a', 'terminated');
INSERT INTO lease.compensation_failures (previous_conversation_id, failed_conversation_id, reason,
                                         sqlstate, occurred_at, attempts)
VALUES (1, 2, 'lock', '55P03', now() - interval '10 minutes', 3),
       (3, 4, 'lock', '55P03', now() - interval '1 minute', 1);
INSERT INTO lease.compensation_failures (previous_conversation_id, failed_conversation_id, reason,
                                         sqlstate, occurred_at, resolved_at)
VALUES (5, 6, 'lock', '55P03', now() - interval '1 day', now());
SET LOCAL lease.fleet_capacity = 4;
SELECT results_eq(
    $$SELECT * FROM lease.monitoring_fleet()$$,
    $$VALUES (3::bigint, 4::bigint, 2::bigint, 2::bigint)$$,
    'monitoring_fleet: 3 active of capacity 4; t1 (2 of 2) and t2 (1 of 1) at their limits');
SELECT results_eq(
    $$SELECT * FROM lease.monitoring_sandboxes() WHERE sandboxes > 0 ORDER BY 1$$,
    $$VALUES ('failed', 1::bigint), ('pending', 1), ('ready', 1), ('starting', 1), ('terminated', 1)$$,
    'monitoring_sandboxes: per status');
SELECT is((SELECT count(*)::int FROM lease.monitoring_sandboxes()), 6, 'every sandbox status is a row');
SELECT results_eq(
    $$SELECT * FROM lease.monitoring_conversations() ORDER BY 1$$,
    $$VALUES ('failed', 0::bigint), ('idle', 1), ('pending', 0), ('running', 1), ('terminated', 1)$$,
    'monitoring_conversations: every status, zeros included');
SELECT ok((SELECT unresolved = 2 AND max_attempts = 3
                  AND oldest_unresolved_age_seconds BETWEEN 599 AND 3600
             FROM lease.monitoring_compensation_failures()),
          'monitoring_compensation_failures: 2 unresolved, the oldest 10 minutes old, 3 attempts');
SELECT is((SELECT skipped FROM lease.monitoring_notifications()), 0::bigint,
          'monitoring_notifications: no notification skipped');
SELECT is((SELECT count(*)::int FROM lease.monitoring_incarnations()
            WHERE seconds_since_first_seen >= 0 AND leases_extended_total = 0),
          (SELECT count(*)::int FROM lease.server_incarnations),
          'monitoring_incarnations: every incarnation recorded, no lease extended without a restart');
SELECT is((SELECT ARRAY[sync_standbys_expected, sync_standbys_configured, standbys, sync_standbys, sync_standbys_missing]::bigint[]
             FROM lease.monitoring_replication()),
          ARRAY[0, 0, 0, 0, 0]::bigint[],
          'monitoring_replication: a lone server that expects no synchronous standby misses none');
-- a full queue, as lease.notify_queue_limit 0 pretends: the take changes the
-- owner and skips its notification, counted
SELECT lease.create_lease('mon-n', 's', 'n1');
SET LOCAL lease.notify_queue_limit = 0;
SELECT is(lease.take_lease('mon-n', 's', 'n1', 'w4', NULL, '1 hour'), 1::bigint,
          'a take with the NOTIFY queue at lease.notify_queue_limit still takes the lease');
SELECT ok((SELECT skipped = 1 AND queue_usage >= 0 FROM lease.monitoring_notifications()),
          'monitoring_notifications: the skipped notification is counted');
RESET lease.notify_queue_limit;

-- 6. the monitoring role runs every query of the queries file ...
SET LOCAL ROLE tap_mon_exporter;
SELECT lives_ok($$SELECT app_name, stream_name, state, leases AS count FROM lease.monitoring_leases()$$,
                'the monitoring role runs the pg_lease_leases query');
SELECT lives_ok($$SELECT * FROM lease.monitoring_streams()$$, 'and pg_lease_stream');
SELECT lives_ok($$SELECT * FROM lease.monitoring_workers()$$, 'and pg_lease_worker');
SELECT lives_ok($$SELECT * FROM lease.monitoring_worker_loads()$$, 'and pg_lease_worker_load');
SELECT lives_ok($$SELECT * FROM lease.monitoring_ownership_changes()$$, 'and pg_lease_ownership_changes');
SELECT lives_ok($$SELECT * FROM lease.monitoring_conversations()$$, 'and pg_lease_conversations');
SELECT lives_ok($$SELECT * FROM lease.monitoring_sandboxes()$$, 'and pg_lease_sandboxes');
SELECT lives_ok($$SELECT * FROM lease.monitoring_fleet()$$, 'and pg_lease_fleet');
SELECT lives_ok($$SELECT * FROM lease.monitoring_compensation_failures()$$,
                'and pg_lease_compensation_failures');
SELECT lives_ok($$SELECT seconds_since_first_seen, leases_extended_total,
                        CASE WHEN follows IS NULL THEN 0 ELSE 1 END AS follows
                   FROM lease.monitoring_incarnations() LIMIT 1$$,
                'and pg_lease_server_incarnation');
SELECT lives_ok($$SELECT sync_standbys_expected, sync_standbys_configured, standbys, sync_standbys,
                        sync_standbys_missing FROM lease.monitoring_replication()$$,
                'and pg_lease_replication');
SELECT lives_ok($$SELECT skipped AS skipped_total, queue_usage FROM lease.monitoring_notifications()$$,
                'and pg_lease_notifications');
-- ... and sees every app, as the exporter must
SELECT is((SELECT sum(leases)::int FROM lease.monitoring_leases() WHERE app_name = 'mon-a'), 7,
          'the monitoring role counts the leases of an app it was never granted');

-- 7. ... and can read nothing else: no table, view or sequence, no other function
SELECT throws_ok('SELECT * FROM lease.shard_leases', '42501', NULL, 'it cannot read lease.shard_leases');
SELECT throws_ok('SELECT * FROM lease.lease_status', '42501', NULL, 'nor lease.lease_status');
SELECT throws_ok('SELECT * FROM lease.lease_events', '42501', NULL, 'nor lease.lease_events');
SELECT throws_ok('SELECT lease.prune_events(''0'')', '42501', NULL, 'it cannot call prune_events');
SELECT throws_ok('SELECT * FROM lease.take_leases(''mon-a'', ''s'', ''w9'')', '42501', NULL,
                 'nor take_leases');
RESET ROLE;
SELECT is_empty($$SELECT c.oid::regclass FROM pg_class c
                   WHERE c.relnamespace = 'lease'::regnamespace
                     AND (has_table_privilege('tap_mon_exporter', c.oid, 'SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER')
                          OR (c.relkind = 'S' AND has_sequence_privilege('tap_mon_exporter', c.oid, 'USAGE, SELECT, UPDATE')))$$,
                'the monitoring role has no privilege on any table, view or sequence in lease');
SELECT is_empty($$SELECT p.oid::regprocedure FROM pg_proc p
                   WHERE p.pronamespace = 'lease'::regnamespace
                     AND has_function_privilege('tap_mon_exporter', p.oid, 'EXECUTE')
                     AND p.proname NOT LIKE 'monitoring\_%'$$,
                'the monitoring role can execute no lease function but the monitoring ones');

SELECT * FROM finish();
ROLLBACK;
