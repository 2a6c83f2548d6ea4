-- src/leases/monitoring.sql: metrics for a monitoring role (docs/monitoring.md)
-- One part of pg_lease--<version>.sql (Makefile, SQL_PARTS); each change here
-- needs its twin in the upgrade script pg_lease--<previous>--<version>.sql.

----------------------------------------------------------------------------
-- Monitoring: the rows of docs/monitoring/pg_lease_queries.yaml
----------------------------------------------------------------------------

-- checkpointed_at follows the checkpoint.  From 0.5.0 on the checkpoint
-- statements (update_checkpoint, fenced or not, and update_checkpoints)
-- move it themselves (LEASE_SQL_SET_CHECKPOINTED, src/leases/lease_sql.h),
-- which spares them a PL/pgSQL call per row; this BEFORE UPDATE trigger
-- covers every other write of a new checkpoint (close_shard's SHARD_END),
-- and skips a row whose statement moved checkpointed_at already.  Up to
-- 0.4.0 the trigger did it for every write (one pg_lease.so serves every
-- installed version, and the older schemas keep their trigger).  Renewals
-- do not name these columns, so the trigger is not even considered for
-- them and they stay HOT; rewriting the same checkpoint is not progress
-- and does not move it.
CREATE FUNCTION lease.shard_leases_checkpointed()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    NEW.checkpointed_at := pg_catalog.now();
    RETURN NEW;
END
$$;

CREATE TRIGGER shard_leases_checkpointed
    BEFORE UPDATE OF checkpoint, checkpoint_sub_sequence ON lease.shard_leases
    FOR EACH ROW
    WHEN ((OLD.checkpoint IS DISTINCT FROM NEW.checkpoint
           OR OLD.checkpoint_sub_sequence IS DISTINCT FROM NEW.checkpoint_sub_sequence)
          AND OLD.checkpointed_at IS NOT DISTINCT FROM NEW.checkpointed_at)
    EXECUTE FUNCTION lease.shard_leases_checkpointed();

-- How many events of each kind were deleted from lease.lease_events
-- (lease.prune_events), per stream.  The ownership-change counters are these
-- totals plus the events still in lease.lease_events, so pruning never makes
-- a counter go down (Prometheus would read a drop as a reset and count what
-- is left again).  Written only by the trigger below, in the statement that
-- deletes the events; read only by lease.monitoring_ownership_changes.
CREATE TABLE lease.lease_event_totals (
    app_name    text   NOT NULL,
    stream_name text   NOT NULL,
    event       text   NOT NULL,
    pruned      bigint NOT NULL,
    -- Serves lease_events_deleted's ON CONFLICT.
    PRIMARY KEY (app_name, stream_name, event),
    CONSTRAINT lease_event_totals_pruned_check CHECK (pruned OPERATOR(pg_catalog.>=) 0)
);

COMMENT ON TABLE lease.lease_event_totals IS
    'Events deleted by lease.prune_events, per app, stream and kind: the base of the monitoring counters.';

SELECT pg_catalog.pg_extension_config_dump('lease.lease_event_totals', '');

-- Adds the deleted events to lease_event_totals, once per DELETE statement
-- (a transition table): prune_events pays for it, recording an event does
-- not.  TRUNCATE of lease.lease_events bypasses it (docs/monitoring.md).
CREATE FUNCTION lease.lease_events_deleted()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO lease.lease_event_totals AS t (app_name, stream_name, event, pruned)
    SELECT d.app_name, d.stream_name, d.event, pg_catalog.count(*)
      FROM deleted AS d
     GROUP BY d.app_name, d.stream_name, d.event
        ON CONFLICT (app_name, stream_name, event)
        DO UPDATE SET pruned = t.pruned OPERATOR(pg_catalog.+) excluded.pruned;
    RETURN NULL;
END
$$;

CREATE TRIGGER lease_events_deleted
    AFTER DELETE ON lease.lease_events
    REFERENCING OLD TABLE AS deleted
    FOR EACH STATEMENT
    EXECUTE FUNCTION lease.lease_events_deleted();

-- The monitoring functions.  Each returns exactly the rows of one query of
-- the exporter's queries file and nothing else: no lease keys, no owners
-- but in monitoring_workers, no checkpoints, no conversation contents.
-- SECURITY DEFINER (they read the tables as the extension owner, for every
-- app: a monitoring role is granted EXECUTE on them and nothing else, see
-- docs/monitoring.md), no arguments, fixed SQL, search_path pinned, JIT off
-- (at 100,000 leases the planner's estimate of the parent check crosses
-- jit_above_cost, and compiling would cost more than the query).  A lease's
-- state is lease.lease_status's CASE, written out here against the table
-- because the view filters every row through lease.has_app_access; pgTAP
-- (test/pgtap/40_monitoring.sql) checks that the two agree.

CREATE FUNCTION lease.monitoring_leases()
RETURNS TABLE (app_name text, stream_name text, state text, leases bigint)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
WITH k AS (SELECT pg_catalog.clock_timestamp() AS now),
     c AS (SELECT l.app_name, l.stream_name,
                  CASE
                      WHEN l.checkpoint = 'SHARD_END' THEN 'ended'
                      WHEN l.parent_shard_ids <> '{}'
                           AND EXISTS (SELECT 1 FROM lease.shard_leases AS p
                                        WHERE p.app_name = l.app_name
                                          AND p.stream_name = l.stream_name
                                          AND p.shard_id = ANY (l.parent_shard_ids)
                                          AND p.checkpoint <> 'SHARD_END') THEN 'blocked'
                      WHEN l.lease_owner IS NULL THEN 'unowned'
                      WHEN GREATEST(l.lease_expires_at, w.renewed_until) <= k.now THEN 'expired'
                      WHEN l.handoff_to IS NOT NULL
                           AND k.now < l.handoff_deadline + l.handoff_lease_duration THEN 'handoff_pending'
                      ELSE 'owned'
                  END AS state,
                  pg_catalog.count(*) AS n
             FROM lease.shard_leases AS l
                  LEFT JOIN lease.stream_workers AS w
                         ON w.app_name = l.app_name AND w.stream_name = l.stream_name
                        AND w.worker = l.lease_owner,
                  k
            GROUP BY 1, 2, 3)
SELECT s.app_name, s.stream_name, x.state, COALESCE(c.n, 0)
  FROM (SELECT DISTINCT c.app_name, c.stream_name FROM c) AS s
 CROSS JOIN pg_catalog.unnest(ARRAY['owned', 'handoff_pending', 'expired', 'unowned',
                                    'blocked', 'ended']) AS x(state)
  LEFT JOIN c ON c.app_name = s.app_name AND c.stream_name = s.stream_name AND c.state = x.state
 ORDER BY 1, 2, 3
$$;

COMMENT ON FUNCTION lease.monitoring_leases() IS
    'Metrics: leases per app, stream and state (lease.lease_status states), every state present, zeros included.';

-- Per stream: what the alerts need.  open_leases: not ended and not blocked
-- (what take_leases shares out); live_workers: owners with an unexpired
-- lease; fair_share_leases: take_leases' target, open leases over live
-- workers rounded up; handoffs pending and those past their deadline;
-- ages in seconds (0 when there is none) of the oldest pending handoff
-- (since it was requested), the longest-expired lease nobody took (since
-- it expired), and the oldest checkpoint among live owned leases (since
-- checkpointed_at); lease.default_lease_duration in seconds, as the
-- exporter's session sees it.
CREATE FUNCTION lease.monitoring_streams()
RETURNS TABLE (app_name text, stream_name text, open_leases bigint, live_workers bigint,
               fair_share_leases bigint, handoffs_pending bigint,
               handoffs_past_deadline bigint, oldest_handoff_age_seconds double precision,
               oldest_expired_age_seconds double precision,
               oldest_checkpoint_age_seconds double precision,
               lease_duration_seconds double precision)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
WITH k AS (SELECT pg_catalog.clock_timestamp() AS now),
     l AS (SELECT l.app_name, l.stream_name, l.lease_owner, k.now,
                  -- the expiry by lease duration and heartbeat, as lease.lease_status
                  GREATEST(l.lease_expires_at, w.renewed_until) AS lease_expires_at,
                  l.handoff_requested_at, l.handoff_deadline,
                  l.checkpointed_at,
                  l.checkpoint = 'SHARD_END' AS ended,
                  l.checkpoint <> 'SHARD_END' AND l.parent_shard_ids <> '{}'
                  AND EXISTS (SELECT 1 FROM lease.shard_leases AS p
                               WHERE p.app_name = l.app_name
                                 AND p.stream_name = l.stream_name
                                 AND p.shard_id = ANY (l.parent_shard_ids)
                                 AND p.checkpoint <> 'SHARD_END') AS blocked,
                  l.lease_owner IS NOT NULL
                  AND GREATEST(l.lease_expires_at, w.renewed_until) > k.now AS live,
                  l.handoff_to IS NOT NULL
                  AND k.now < l.handoff_deadline + l.handoff_lease_duration AS handoff
             FROM lease.shard_leases AS l
                  LEFT JOIN lease.stream_workers AS w
                         ON w.app_name = l.app_name AND w.stream_name = l.stream_name
                        AND w.worker = l.lease_owner,
                  k),
     s AS (SELECT l.app_name, l.stream_name,
                  pg_catalog.count(*) FILTER (WHERE NOT l.ended AND NOT l.blocked) AS open_leases,
                  pg_catalog.count(DISTINCT l.lease_owner) FILTER (WHERE l.live) AS live_workers,
                  pg_catalog.count(*) FILTER (WHERE l.handoff) AS handoffs_pending,
                  pg_catalog.count(*) FILTER (WHERE l.handoff AND l.now > l.handoff_deadline)
                      AS handoffs_past_deadline,
                  pg_catalog.max(l.now - l.handoff_requested_at) FILTER (WHERE l.handoff)
                      AS handoff_age,
                  pg_catalog.max(l.now - l.lease_expires_at)
                      FILTER (WHERE NOT l.ended AND NOT l.blocked AND l.lease_owner IS NOT NULL
                              AND NOT l.live) AS expired_age,
                  pg_catalog.max(l.now - l.checkpointed_at)
                      FILTER (WHERE l.live AND NOT l.ended) AS checkpoint_age
             FROM l
            GROUP BY l.app_name, l.stream_name)
SELECT s.app_name, s.stream_name, s.open_leases, s.live_workers,
       CASE WHEN s.live_workers > 0
            THEN (s.open_leases + s.live_workers - 1) / s.live_workers
            ELSE s.open_leases END,
       s.handoffs_pending, s.handoffs_past_deadline,
       COALESCE(pg_catalog.date_part('epoch', s.handoff_age), 0),
       COALESCE(pg_catalog.date_part('epoch', s.expired_age), 0),
       COALESCE(pg_catalog.date_part('epoch', s.checkpoint_age), 0),
       -- the setting's default when the module is not loaded in this
       -- session and nothing set it (src/common/config.c); a placeholder
       -- whose value was removed from the configuration reads ''
       pg_catalog.date_part('epoch', CAST(COALESCE(
           NULLIF(pg_catalog.current_setting('lease.default_lease_duration', true), ''), '10s') AS interval))
  FROM s
 ORDER BY 1, 2
$$;

COMMENT ON FUNCTION lease.monitoring_streams() IS
    'Metrics: per app and stream, open leases, live workers, fair share, pending handoffs and the oldest''s age, the longest-expired lease''s age, the oldest checkpoint''s age, the default lease duration.';

-- Live (unexpired) leases per owner: lease.worker_loads, for every app.
CREATE FUNCTION lease.monitoring_workers()
RETURNS TABLE (app_name text, stream_name text, lease_owner text, leases bigint)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
SELECT l.app_name, l.stream_name, l.lease_owner, pg_catalog.count(*)
  FROM lease.shard_leases AS l
  LEFT JOIN lease.stream_workers AS w
         ON w.app_name = l.app_name AND w.stream_name = l.stream_name
        AND w.worker = l.lease_owner
 WHERE l.lease_owner IS NOT NULL
   AND GREATEST(l.lease_expires_at, w.renewed_until)
       > pg_catalog.clock_timestamp()
 GROUP BY 1, 2, 3
 ORDER BY 1, 2, 3
$$;

COMMENT ON FUNCTION lease.monitoring_workers() IS
    'Metrics: live (unexpired) leases per app, stream and owner.';

-- Load against target per owner: lease.worker_loads' load,
-- capacity and target, for every app.
CREATE FUNCTION lease.monitoring_worker_loads()
RETURNS TABLE (app_name text, stream_name text, lease_owner text, load double precision,
               capacity double precision, target double precision)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
SELECT w.app_name, w.stream_name, w.lease_owner, w.load, w.capacity, w.target
  FROM lease.worker_loads AS w
 ORDER BY 1, 2, 3
$$;

COMMENT ON FUNCTION lease.monitoring_worker_loads() IS
    'Metrics: per app, stream and owner, the load of its live leases (their weights), its capacity and its target (lease.worker_loads, every app).';

-- Ownership changes and handoff requests since the stream's first event,
-- per kind (every kind present, zeros included): the events still in
-- lease.lease_events plus those prune_events deleted (lease_event_totals).
-- Monotonic: prune_events moves counts from one to the other in one
-- statement.  Counts only what was recorded (lease.record_events on).
CREATE FUNCTION lease.monitoring_ownership_changes()
RETURNS TABLE (app_name text, stream_name text, event text, changes bigint)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
WITH c AS (SELECT e.app_name, e.stream_name, e.event, pg_catalog.count(*) AS n
             FROM lease.lease_events AS e
            GROUP BY 1, 2, 3
           UNION ALL
           SELECT t.app_name, t.stream_name, t.event, t.pruned
             FROM lease.lease_event_totals AS t),
     s AS (SELECT DISTINCT c.app_name, c.stream_name FROM c)
SELECT s.app_name, s.stream_name, x.event, CAST(COALESCE(pg_catalog.sum(c.n), 0) AS bigint)
  FROM s
 CROSS JOIN pg_catalog.unnest(ARRAY['take', 'expiry_takeover', 'steal', 'transfer',
                                    'release', 'close', 'handoff_request',
                                    'session_ended']) AS x(event)
  LEFT JOIN c ON c.app_name = s.app_name AND c.stream_name = s.stream_name AND c.event = x.event
 GROUP BY 1, 2, 3
 ORDER BY 1, 2, 3
$$;

COMMENT ON FUNCTION lease.monitoring_ownership_changes() IS
    'Metrics: ownership changes (take, expiry_takeover, session_ended, steal, transfer, release, close) and handoff requests per app and stream, never decreasing across lease.prune_events.';

-- Notifications skipped because the NOTIFY queue was too full
-- (lease.notify_queue_limit, src/leases/events.h), never decreasing, and
-- the queue's fill now.
CREATE FUNCTION lease.monitoring_notifications()
RETURNS TABLE (skipped bigint, queue_usage double precision)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
SELECT CASE WHEN s.is_called THEN s.last_value ELSE 0 END,
       pg_catalog.pg_notification_queue_usage()
  FROM lease.notifications_skipped AS s
$$;

COMMENT ON FUNCTION lease.monitoring_notifications() IS
    'Metrics: ownership-change notifications skipped because the NOTIFY queue was at lease.notify_queue_limit or fuller (a counter), and the queue''s fill.';

-- Metrics: the server incarnations (src/leases/incarnation.c), newest
-- first: when each was first seen, what it follows and how long ago it
-- began (its grace runs for one lease duration of each take from then);
-- and, on every row, the leases any restart grace extended since the
-- install (a counter).
CREATE FUNCTION lease.monitoring_incarnations()
RETURNS TABLE(incarnation text, first_seen timestamptz, follows text,
              seconds_since_first_seen double precision, leases_extended_total bigint)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
SELECT i.incarnation, i.first_seen, i.follows,
       pg_catalog.date_part('epoch', pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) i.first_seen),
       (SELECT CASE WHEN s.is_called THEN s.last_value ELSE 0 END FROM lease.restart_grace_extended AS s)
  FROM lease.server_incarnations AS i
 ORDER BY i.first_seen DESC
$$;

COMMENT ON FUNCTION lease.monitoring_incarnations() IS
    'Metrics: the server incarnations pg_lease has seen, newest first, and the leases restart graces extended since the install (a counter).';

-- Metrics: this server's synchronous replication against what the
-- operator expects of it (lease.expected_sync_standbys, the formation's
-- number_sync_standbys): the synchronous standbys synchronous_standby_names
-- asks for now (ANY n (...), FIRST n (...) and n (...) ask for n, a plain
-- list or '*' for 1, '' for none), how many standbys are
-- streaming and how many of them count as synchronous (pg_stat_replication's
-- sync_state sync or quorum), and the shortfall: expected minus
-- synchronous, 0 on a standby.  A primary that pg_auto_failover moved to
-- wait_primary has synchronous_standby_names = '' and acknowledges commits
-- no standby has: its shortfall is the expected number.
CREATE FUNCTION lease.monitoring_replication()
RETURNS TABLE (sync_standbys_expected integer, sync_standbys_configured integer,
               standbys bigint, sync_standbys bigint, sync_standbys_missing bigint)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
WITH c AS (SELECT pg_catalog.current_setting('synchronous_standby_names') AS names,
                  COALESCE(CAST(NULLIF(pg_catalog.current_setting('lease.expected_sync_standbys', true), '')
                                AS integer), 0) AS expected,
                  pg_catalog.pg_is_in_recovery() AS standby),
     r AS (SELECT pg_catalog.count(*) AS standbys,
                  pg_catalog.count(*) FILTER (WHERE s.sync_state OPERATOR(pg_catalog.=) ANY (ARRAY['sync', 'quorum']))
                      AS sync
             FROM pg_catalog.pg_stat_replication AS s)
SELECT c.expected,
       CASE WHEN pg_catalog.btrim(c.names) OPERATOR(pg_catalog.=) '' THEN 0
            WHEN c.names OPERATOR(pg_catalog.~*) '^\s*((any|first)\s+)?[0-9]+\s*\('
            THEN CAST(pg_catalog.substring(c.names, '([0-9]+)') AS integer)
            ELSE 1 END,
       r.standbys, r.sync,
       CASE WHEN c.standby THEN 0 ELSE GREATEST(c.expected OPERATOR(pg_catalog.-) r.sync, 0) END
  FROM c, r
$$;

COMMENT ON FUNCTION lease.monitoring_replication() IS
    'Metrics: synchronous standbys expected (lease.expected_sync_standbys), asked for (synchronous_standby_names) and streaming, and the shortfall (0 on a standby).';
