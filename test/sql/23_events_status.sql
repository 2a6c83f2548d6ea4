-- Ownership events (lease.lease_events), their GUCs, prune_events, and the
-- views lease_status and worker_loads.
SELECT lease.create_lease('ev', 's', 'a'), lease.create_lease('ev', 's', 'b'), lease.create_lease('ev', 's', 'c');
-- the defaults (the module is loaded by now)
SHOW lease.record_events;
SHOW lease.notify_channel;
SHOW lease.handoff_timeout;
SELECT lease.take_lease('ev', 's', 'a', 'w1');                          -- take
SELECT lease.take_lease('ev', 's', 'a', 'w2', 1);                       -- steal
SELECT lease_test.expire('ev', 's', 'a');
SELECT lease.take_lease('ev', 's', 'a', 'w1');                          -- expiry_takeover
SELECT lease.request_handoff('ev', 's', 'a', 'w3');                     -- handoff_request
SELECT lease.release_lease('ev', 's', 'a', 'w1');                       -- transfer
SELECT lease.release_lease('ev', 's', 'a', 'w3');                       -- release
SELECT count(*) FROM lease.take_leases('ev', 's', 'w4');                -- take x3
SELECT count(*) FROM lease.take_leases('ev', 's', 'w5');                -- handoff_request
SELECT lease.close_shard('ev', 's', 'c', 'w4');                         -- close
-- renewals and checkpoints are not ownership changes: not recorded
SELECT count(*) FROM lease.renew_leases('ev', 's', 'w4');
SELECT lease.update_checkpoint('ev', 's', 'b', 'w4', '1');
SELECT event, shard_id, from_owner, to_owner, lease_count, lease_epoch
  FROM lease.lease_events WHERE app_name = 'ev' ORDER BY event_id;

-- lease.record_events off: ownership still changes, nothing is recorded
SET lease.record_events = off;
SELECT lease.release_lease('ev', 's', 'b', 'w4');
RESET lease.record_events;
SELECT count(*) AS events_for_b FROM lease.lease_events WHERE app_name = 'ev' AND shard_id = 'b';
-- an empty channel disables notifications (the change itself still works)
SET lease.notify_channel = '';
SELECT lease.take_lease('ev', 's', 'b', 'w4');
RESET lease.notify_channel;
SELECT lease_test.try($$SET lease.notify_channel = '$$ || repeat('x', 64) || $$'$$);
SELECT lease_test.try($$SET lease.handoff_timeout = 0$$);
SELECT lease_test.try($$SET lease.handoff_timeout = '8d'$$);
-- lease.notify_queue_limit: a fraction of the NOTIFY queue; 0 skips every
-- notification (counted), the change still goes ahead
SHOW lease.notify_queue_limit;
SELECT lease_test.try($$SET lease.notify_queue_limit = -0.1$$);
SELECT lease_test.try($$SET lease.notify_queue_limit = 1.5$$);
SET lease.notify_queue_limit = 0;
SELECT skipped AS skipped_before FROM lease.monitoring_notifications() \gset
SELECT lease.release_lease('ev', 's', 'b', 'w4') AS released_unannounced;
SELECT skipped - :skipped_before AS skipped FROM lease.monitoring_notifications();
RESET lease.notify_queue_limit;
SELECT lease.take_lease('ev', 's', 'b', 'w4');
-- lease.record_events is superuser-only: a worker cannot switch its audit trail off
CREATE ROLE lease_test_ev_worker;
SET ROLE lease_test_ev_worker;
SELECT lease_test.try($$SET lease.record_events = off$$);
-- nor lower lease.notify_queue_limit (the skipped count is the fleet's)
SELECT lease_test.try($$SET lease.notify_queue_limit = 0$$);
-- nor shorten lease.handoff_timeout, which would skip the holders' graceful handoff
SELECT lease_test.try($$SET lease.handoff_timeout = '1ms'$$);
RESET ROLE;
DROP ROLE lease_test_ev_worker;

-- prune_events: everything older than the given age
SELECT lease.prune_events('1 hour') AS nothing_that_old;
UPDATE lease.lease_events SET occurred_at = occurred_at - interval '2 hours'
 WHERE app_name = 'ev' AND event IN ('take', 'steal');
SELECT lease.prune_events('1 hour') AS pruned;
SELECT count(*) AS left_over FROM lease.lease_events WHERE app_name = 'ev';

-- lease_status: one row per lease, every state
SELECT lease.create_lease('st', 's', 'owned'), lease.create_lease('st', 's', 'expired'),
       lease.create_lease('st', 's', 'unowned'), lease.create_lease('st', 's', 'ended'),
       lease.create_lease('st', 's', 'parent'), lease.create_lease('st', 's', 'blocked', '{parent}'),
       lease.create_lease('st', 's', 'promised');
SELECT lease.take_lease('st', 's', s, 'w1', NULL, '1 minute')
  FROM unnest('{owned,expired,ended,parent,promised}'::text[]) s;
SELECT lease_test.expire('st', 's', 'expired');
SELECT lease.close_shard('st', 's', 'ended', 'w1');
SELECT lease.request_handoff('st', 's', 'promised', 'w2');
SELECT shard_id, lease_owner, state, time_to_expiry > interval '0' AS live,
       checkpoint, lease_count, lease_epoch, handoff_to,
       handoff_deadline IS NOT NULL AS has_deadline, owner_switches_since_checkpoint
  FROM lease.lease_status WHERE app_name = 'st' ORDER BY shard_id;
-- worker_loads: live leases per owner
SELECT * FROM lease.worker_loads WHERE app_name IN ('st', 'ev') ORDER BY 1, 2, 3;

-- bad input: errors, and nothing written
SELECT lease_test.digest() AS before \gset
SELECT lease_test.try($$SELECT lease.prune_events(NULL)$$);
SELECT lease_test.try($$SELECT lease.prune_events('-1 s')$$);
-- older_than is judged by now() - value: months and days that cancel out
-- as interval comparison counts them, but not on the calendar, are a clean
-- 22023 (not 22008 from the timestamp arithmetic)
SELECT lease_test.try($$SELECT lease.prune_events('120000 mon -3240000 days')$$);
SELECT lease_test.try($$SELECT lease.prune_events('12000 mon -4380000 days 100000000 hours')$$);
SELECT lease_test.try($$SELECT lease.prune_events('1001 years')$$);
SELECT lease_test.try($$SELECT lease.prune_events('-1000000 days 24000001 hours')$$);
SELECT lease_test.digest() = :'before' AS nothing_written;
