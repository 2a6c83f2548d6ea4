/* pg_lease--0.2.0--0.3.0.sql: from 0.2.0 to 0.3.0.  Never edit once released. */

\echo Use "ALTER EXTENSION pg_lease UPDATE TO '0.3.0'" to load this file. \quit

-- renew_leases returns each lease's fencing token (lease_epoch, last
-- column).  A return type cannot be changed in place, so the function is
-- re-created, with the ACL of a fresh install.  EXECUTE granted on it to
-- worker roles does not survive that: a grant made here would be recorded as
-- the extension's initial privilege, which pg_dump then leaves out, so a
-- restore would lose it.  The operator re-grants instead, as the warning says.
DO $upgrade$
DECLARE
    grantees text;
BEGIN
    SELECT pg_catalog.string_agg(pg_catalog.quote_ident(r.rolname), ', ' ORDER BY r.rolname)
      INTO grantees
      FROM pg_catalog.pg_proc AS p,
           pg_catalog.aclexplode(p.proacl) AS a,
           pg_catalog.pg_roles AS r
     WHERE p.oid = 'lease.renew_leases(text, text, text, interval)'::pg_catalog.regprocedure
       AND a.privilege_type = 'EXECUTE'
       AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
       AND r.oid = a.grantee;
    IF grantees IS NOT NULL THEN
        RAISE WARNING 'lease.renew_leases is re-created by this update; its EXECUTE grants are gone'
            USING DETAIL = pg_catalog.format('It was granted to %s.', grantees),
                  HINT = pg_catalog.format('Run GRANT EXECUTE ON FUNCTION lease.renew_leases(text, text, text, interval), lease.my_leases(text, text, text) TO %s;', grantees);
    END IF;
END
$upgrade$;

DROP FUNCTION lease.renew_leases(text, text, text, interval);

CREATE FUNCTION lease.renew_leases(
    app_name text, stream_name text, owner text,
    lease_duration interval DEFAULT NULL)
RETURNS TABLE(shard_id text, lease_count bigint, handoff_to text, lease_epoch bigint)
AS 'MODULE_PATHNAME', 'lease_renew_leases'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

REVOKE ALL ON FUNCTION lease.renew_leases(text, text, text, interval) FROM PUBLIC;

-- What a worker may read about its own leases (src/leases/my_leases.c).
CREATE FUNCTION lease.my_leases(app_name text, stream_name text, owner text)
RETURNS TABLE(shard_id text, lease_count bigint, lease_epoch bigint,
              checkpoint text, checkpoint_sub_sequence bigint,
              pending_checkpoint text, expires_in interval,
              handoff_to text, handoff_from text, waiting_on text[])
AS 'MODULE_PATHNAME', 'lease_my_leases'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

REVOKE ALL ON FUNCTION lease.my_leases(text, text, text) FROM PUBLIC;

----------------------------------------------------------------------------
-- Monitoring (issue 15): the twin of src/leases/monitoring.sql, plus the
-- column it needs on lease.shard_leases (docs/monitoring.md)
----------------------------------------------------------------------------

-- When the checkpoint last changed (src/leases/leases.sql).  Leases that
-- exist at the upgrade start from the upgrade's time: 0.2.0 kept no such
-- time, and updated_at moves with every renewal.
ALTER TABLE lease.shard_leases
    ADD COLUMN checkpointed_at timestamptz NOT NULL DEFAULT pg_catalog.now();

-- checkpointed_at follows the checkpoint: a BEFORE UPDATE trigger, not the
-- C statements, so the module keeps working against databases still at
-- 0.1.0 or 0.2.0 (one pg_lease.so serves every installed version), and any
-- write of a new checkpoint counts (update_checkpoint, fenced or not,
-- close_shard's SHARD_END).  Renewals do not name these columns, so the
-- trigger is not even considered for them and they stay HOT; rewriting the
-- same checkpoint is not progress and does not move it.
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
    WHEN (OLD.checkpoint IS DISTINCT FROM NEW.checkpoint
          OR OLD.checkpoint_sub_sequence IS DISTINCT FROM NEW.checkpoint_sub_sequence)
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
    CONSTRAINT lease_event_totals_pruned_check CHECK (pruned >= 0)
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
                      WHEN l.lease_expires_at <= k.now THEN 'expired'
                      WHEN l.handoff_to IS NOT NULL
                           AND k.now < l.handoff_deadline + l.handoff_lease_duration THEN 'handoff_pending'
                      ELSE 'owned'
                  END AS state,
                  pg_catalog.count(*) AS n
             FROM lease.shard_leases AS l, k
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
                  l.lease_expires_at, l.handoff_requested_at, l.handoff_deadline,
                  l.checkpointed_at,
                  l.checkpoint = 'SHARD_END' AS ended,
                  l.checkpoint <> 'SHARD_END' AND l.parent_shard_ids <> '{}'
                  AND EXISTS (SELECT 1 FROM lease.shard_leases AS p
                               WHERE p.app_name = l.app_name
                                 AND p.stream_name = l.stream_name
                                 AND p.shard_id = ANY (l.parent_shard_ids)
                                 AND p.checkpoint <> 'SHARD_END') AS blocked,
                  l.lease_owner IS NOT NULL AND l.lease_expires_at > k.now AS live,
                  l.handoff_to IS NOT NULL
                  AND k.now < l.handoff_deadline + l.handoff_lease_duration AS handoff
             FROM lease.shard_leases AS l, k),
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
 WHERE l.lease_owner IS NOT NULL
   AND l.lease_expires_at > pg_catalog.clock_timestamp()
 GROUP BY 1, 2, 3
 ORDER BY 1, 2, 3
$$;

COMMENT ON FUNCTION lease.monitoring_workers() IS
    'Metrics: live (unexpired) leases per app, stream and owner.';

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
                                    'release', 'close', 'handoff_request']) AS x(event)
  LEFT JOIN c ON c.app_name = s.app_name AND c.stream_name = s.stream_name AND c.event = x.event
 GROUP BY 1, 2, 3
 ORDER BY 1, 2, 3
$$;

COMMENT ON FUNCTION lease.monitoring_ownership_changes() IS
    'Metrics: ownership changes (take, expiry_takeover, steal, transfer, release, close) and handoff requests per app and stream, never decreasing across lease.prune_events.';

-- Conversations per status, every status present.
CREATE FUNCTION lease.monitoring_conversations()
RETURNS TABLE (status text, conversations bigint)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
SELECT x.status, pg_catalog.count(c.status)
  FROM pg_catalog.unnest(ARRAY['pending', 'running', 'idle', 'failed', 'terminated']) AS x(status)
  LEFT JOIN lease.conversations AS c ON c.status = x.status
 GROUP BY 1
 ORDER BY 1
$$;

COMMENT ON FUNCTION lease.monitoring_conversations() IS
    'Metrics: conversations per status.';

-- Sandboxes per status, every status present.
CREATE FUNCTION lease.monitoring_sandboxes()
RETURNS TABLE (status text, sandboxes bigint)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
SELECT x.status, pg_catalog.count(s.status)
  FROM pg_catalog.unnest(ARRAY['pending', 'starting', 'ready', 'suspended', 'terminated',
                               'failed']) AS x(status)
  LEFT JOIN lease.sandboxes AS s ON s.status = x.status
 GROUP BY 1
 ORDER BY 1
$$;

COMMENT ON FUNCTION lease.monitoring_sandboxes() IS
    'Metrics: sandboxes per status.';

-- Admission's view of the fleet, one row: active sandboxes (pending,
-- starting, ready: what admission counts) against lease.fleet_capacity, and
-- how many tenants are at or within 80 % of their limit (lease.tenant_limits,
-- else lease.default_sandbox_limit).  The settings as the exporter's session
-- sees them: set them in postgresql.conf or ALTER DATABASE, not per role.
CREATE FUNCTION lease.monitoring_fleet()
RETURNS TABLE (active_sandboxes bigint, capacity_sandboxes bigint,
               tenants_at_limit bigint, tenants_near_limit bigint)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
WITH t AS (SELECT s.user_id, pg_catalog.count(*) AS active
             FROM lease.sandboxes AS s
            WHERE s.status IN ('pending', 'starting', 'ready')
            GROUP BY s.user_id),
     u AS (SELECT t.active,
                  COALESCE(tl.sandbox_limit,
                           CAST(COALESCE(NULLIF(pg_catalog.current_setting('lease.default_sandbox_limit', true), ''),
                                         '20') AS integer)) AS sandbox_limit
             FROM t LEFT JOIN lease.tenant_limits AS tl ON tl.user_id = t.user_id)
SELECT CAST(COALESCE((SELECT pg_catalog.sum(u.active) FROM u), 0) AS bigint),
       -- the setting's default when the module is not loaded in this
       -- session and nothing set it (src/common/config.c); a placeholder
       -- whose value was removed from the configuration reads ''
       CAST(COALESCE(NULLIF(pg_catalog.current_setting('lease.fleet_capacity', true), ''), '1000') AS bigint),
       (SELECT pg_catalog.count(*) FROM u WHERE u.active >= u.sandbox_limit),
       (SELECT pg_catalog.count(*) FROM u WHERE u.active >= 0.8 * u.sandbox_limit)
$$;

COMMENT ON FUNCTION lease.monitoring_fleet() IS
    'Metrics: active sandboxes, lease.fleet_capacity, tenants at and within 80 % of their sandbox limit.';

-- Unresolved compensation failures (restore_rotated_channel's queue): how
-- many, the oldest's age in seconds since its first failure (0 when none),
-- the most attempts any of them has had.
CREATE FUNCTION lease.monitoring_compensation_failures()
RETURNS TABLE (unresolved bigint, oldest_unresolved_age_seconds double precision,
               max_attempts bigint)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
SELECT pg_catalog.count(*),
       COALESCE(pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()
                                              - pg_catalog.min(f.occurred_at)), 0),
       COALESCE(pg_catalog.max(f.attempts), 0)
  FROM lease.compensation_failures AS f
 WHERE f.resolved_at IS NULL
$$;

COMMENT ON FUNCTION lease.monitoring_compensation_failures() IS
    'Metrics: unresolved compensation failures, the oldest''s age, the most attempts.';

-- src/common/finish.sql's REVOKEs, for the objects above.
REVOKE ALL ON TABLE lease.lease_event_totals FROM PUBLIC;
REVOKE ALL ON FUNCTION lease.shard_leases_checkpointed(), lease.lease_events_deleted(),
    lease.monitoring_leases(), lease.monitoring_streams(),
    lease.monitoring_workers(), lease.monitoring_ownership_changes(),
    lease.monitoring_conversations(), lease.monitoring_sandboxes(),
    lease.monitoring_fleet(), lease.monitoring_compensation_failures() FROM PUBLIC;

----------------------------------------------------------------------------
-- Routable conversation ids for pg_lease_router (issue 12; twin of the
-- table in src/bindings/bindings.sql)
----------------------------------------------------------------------------

-- Routable conversation ids (docs/scale-out.md).  Behind the pg_lease_router
-- router, the functions that take only a conversation id (admit_turn,
-- end_conversation, restore_rotated_channel) must reach the partition that
-- made the id.  With a row here, start_conversation and rotate_channel make
-- ids n * id_stride + id_offset (n from lease.conversations_id_seq): every
-- partition gets the same stride (the partition count, a power of two) and
-- its own offset (its partition number), so an id is unique across
-- partitions and id % id_stride names its partition.  New ids are always
-- above the ones made before the row existed, which keep working unchanged.
-- Set it once per partition before its first conversation; pg_dump keeps it.
CREATE TABLE lease.conversation_id_partition (
    only_row   boolean NOT NULL DEFAULT true PRIMARY KEY,
    id_stride  integer NOT NULL,
    id_offset  integer NOT NULL,
    CONSTRAINT conversation_id_partition_only_row_check CHECK (only_row),
    CONSTRAINT conversation_id_partition_stride_check
        CHECK (id_stride >= 1 AND id_stride & (id_stride - 1) = 0),
    CONSTRAINT conversation_id_partition_offset_check
        CHECK (id_offset >= 0 AND id_offset < id_stride)
);

COMMENT ON TABLE lease.conversation_id_partition IS
    'At most one row: new conversation ids are n * id_stride + id_offset, so they are unique across partitions and route to this one (pg_lease_router).';

SELECT pg_catalog.pg_extension_config_dump('lease.conversation_id_partition', '');
-- (src/common/finish.sql revokes PUBLIC on a fresh install)
REVOKE ALL ON lease.conversation_id_partition FROM PUBLIC;

----------------------------------------------------------------------------
-- What the taker reads instead of the whole stream (src/leases/taker.c;
-- docs/taker-internals.md).  Kept in the same statements that change the
-- leases, so every snapshot sees them agree with the rows.
----------------------------------------------------------------------------

-- Index of the rare rows a balancing round takes first: unowned leases
-- that have not ended (new leases, released ones, children waiting for
-- their parents).  Ownership changes are non-HOT updates already.
CREATE INDEX shard_leases_unowned_idx
    ON lease.shard_leases (app_name, stream_name)
    WHERE lease_owner IS NULL AND checkpoint <> 'SHARD_END';

-- One row per worker holding leases in a stream:
--   leases       exactly the number of rows of lease.shard_leases with
--                that lease_owner (expired or not);
--   expires_min  a lower bound of their lease_expires_at: no lease of the
--                worker expires before it (renew_leases sets it to the
--                exact expiry; meaningless when leases = 0);
--   version      bumped by every change of the worker's leases, so that
--                renew_leases raises expires_min only when no ownership
--                change raced it.
-- A worker whose expires_min is still ahead holds live leases only, so a
-- round counts it without reading its leases.
CREATE TABLE lease.stream_workers (
    app_name    text        NOT NULL,
    stream_name text        NOT NULL,
    worker      text        NOT NULL,
    leases      bigint      NOT NULL,
    expires_min timestamptz,
    version     bigint      NOT NULL DEFAULT 1,
    PRIMARY KEY (app_name, stream_name, worker)
);

COMMENT ON TABLE lease.stream_workers IS
    'Per worker and stream: how many leases it holds and a lower bound of their expiry (kept by the lease functions; what take_leases reads instead of the stream).';

-- Serves the round's read of a stream's workers; a worker left with no
-- lease stays out of it.
CREATE INDEX stream_workers_holding_idx
    ON lease.stream_workers (app_name, stream_name)
    WHERE leases > 0;


-- The number of takeable leases of a stream (not ended, not blocked by an
-- unfinished parent), as counted by a balancing round; NULL until a round
-- has counted it.  A change that can alter it (a lease created, imported,
-- deleted or ended) adds a row to lease.lineage_changes while a count is
-- cached; a round that finds such a row counts again.  Every stream with
-- leases has its row (create_lease and import_kcl_ex add it), so a change
-- always finds the row to lock.
CREATE TABLE lease.stream_takeable (
    app_name    text        NOT NULL,
    stream_name text        NOT NULL,
    takeable    bigint,
    PRIMARY KEY (app_name, stream_name)
);

COMMENT ON TABLE lease.stream_takeable IS
    'Per stream: the takeable leases counted by the last balancing round, valid while lease.lineage_changes has no row for the stream.';


CREATE TABLE lease.lineage_changes (
    app_name    text        NOT NULL,
    stream_name text        NOT NULL
);

COMMENT ON TABLE lease.lineage_changes IS
    'Streams whose cached takeable count (lease.stream_takeable) a lease creation, import, deletion or close has made stale.';

-- Serves the round's check and its delete.
CREATE INDEX lineage_changes_stream_idx ON lease.lineage_changes (app_name, stream_name);


-- These three tables are derived from lease.shard_leases: marked for pg_dump
-- with a filter that keeps no row (src/common/finish.sql), since a restore
-- COPYs the leases back and the statement triggers below rebuild them from
-- those rows.

-- Rows added (create_lease, import_kcl_ex, a restore): every new stream gets
-- its lease.stream_takeable row, a cached count becomes stale, and the
-- owners of the new rows are counted (upserted in key order, like
-- LEASE_SQL_RECORD_LOADS in src/leases/leases.h).
CREATE FUNCTION lease.shard_leases_inserted()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO lease.stream_takeable (app_name, stream_name)
    SELECT DISTINCT n.app_name, n.stream_name FROM new_rows AS n
    ON CONFLICT (app_name, stream_name) DO NOTHING;
    -- FOR SHARE: a round counting the stream holds the row FOR NO KEY
    -- UPDATE, so this change is either in its count or leaves its mark
    INSERT INTO lease.lineage_changes (app_name, stream_name)
    SELECT t.app_name, t.stream_name
      FROM (SELECT s.app_name, s.stream_name, s.takeable
              FROM lease.stream_takeable AS s
             WHERE EXISTS (SELECT 1 FROM new_rows AS n
                            WHERE n.app_name OPERATOR(pg_catalog.=) s.app_name
                              AND n.stream_name OPERATOR(pg_catalog.=) s.stream_name)
               FOR SHARE OF s) AS t
     WHERE t.takeable IS NOT NULL;
    INSERT INTO lease.stream_workers AS w (app_name, stream_name, worker, leases, expires_min)
    SELECT n.app_name, n.stream_name, n.lease_owner, pg_catalog.count(*),
           pg_catalog.min(n.lease_expires_at)
      FROM new_rows AS n
     WHERE n.lease_owner IS NOT NULL
     GROUP BY n.app_name, n.stream_name, n.lease_owner
     ORDER BY n.app_name COLLATE "C", n.stream_name COLLATE "C", n.lease_owner COLLATE "C"
    ON CONFLICT (app_name, stream_name, worker) DO UPDATE
       SET leases = w.leases OPERATOR(pg_catalog.+) excluded.leases,
           expires_min = CASE WHEN w.leases OPERATOR(pg_catalog.=) 0 THEN excluded.expires_min
                              ELSE LEAST(w.expires_min, excluded.expires_min) END,
           version = w.version OPERATOR(pg_catalog.+) 1;
    RETURN NULL;
END
$$;

CREATE TRIGGER shard_leases_inserted
    AFTER INSERT ON lease.shard_leases
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT
    EXECUTE FUNCTION lease.shard_leases_inserted();

-- Rows deleted (delete_lease, cleanup_ended): their owners lose them; a
-- lease that had not ended may have counted as takeable or blocked a child.
CREATE FUNCTION lease.shard_leases_deleted()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO lease.lineage_changes (app_name, stream_name)
    SELECT t.app_name, t.stream_name
      FROM (SELECT s.app_name, s.stream_name, s.takeable
              FROM lease.stream_takeable AS s
             WHERE EXISTS (SELECT 1 FROM old_rows AS o
                            WHERE o.app_name OPERATOR(pg_catalog.=) s.app_name
                              AND o.stream_name OPERATOR(pg_catalog.=) s.stream_name
                              AND o.checkpoint OPERATOR(pg_catalog.<>) 'SHARD_END')
               FOR SHARE OF s) AS t
     WHERE t.takeable IS NOT NULL;
    INSERT INTO lease.stream_workers AS w (app_name, stream_name, worker, leases)
    SELECT o.app_name, o.stream_name, o.lease_owner, -pg_catalog.count(*)
      FROM old_rows AS o
     WHERE o.lease_owner IS NOT NULL
     GROUP BY o.app_name, o.stream_name, o.lease_owner
     ORDER BY o.app_name COLLATE "C", o.stream_name COLLATE "C", o.lease_owner COLLATE "C"
    ON CONFLICT (app_name, stream_name, worker) DO UPDATE
       SET leases = w.leases OPERATOR(pg_catalog.+) excluded.leases,
           version = w.version OPERATOR(pg_catalog.+) 1;
    RETURN NULL;
END
$$;

CREATE TRIGGER shard_leases_deleted
    AFTER DELETE ON lease.shard_leases
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT
    EXECUTE FUNCTION lease.shard_leases_deleted();

-- A lease ended (close_shard): it no longer counts as takeable, and its
-- children may no longer be blocked.  The WHEN clause keeps checkpoints off
-- this path.
CREATE FUNCTION lease.shard_leases_ended()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO lease.lineage_changes (app_name, stream_name)
    SELECT t.app_name, t.stream_name
      FROM (SELECT s.app_name, s.stream_name, s.takeable
              FROM lease.stream_takeable AS s
             WHERE s.app_name OPERATOR(pg_catalog.=) NEW.app_name
               AND s.stream_name OPERATOR(pg_catalog.=) NEW.stream_name
               FOR SHARE OF s) AS t
     WHERE t.takeable IS NOT NULL;
    RETURN NULL;
END
$$;

CREATE TRIGGER shard_leases_ended
    AFTER UPDATE OF checkpoint ON lease.shard_leases
    FOR EACH ROW
    WHEN ((OLD.checkpoint = 'SHARD_END') IS DISTINCT FROM (NEW.checkpoint = 'SHARD_END'))
    EXECUTE FUNCTION lease.shard_leases_ended();

-- A renewal (or a take by the same owner) that moves a lease's expiry
-- earlier than it was must lower the worker's expires_min bound.  Renewals
-- normally move it later, so the WHEN clause keeps this off their path; it
-- fires for UPDATE ... SET lease_expires_at only.
CREATE FUNCTION lease.shard_leases_expiry_lowered()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE lease.stream_workers AS w
       SET expires_min = NEW.lease_expires_at,
           version = w.version OPERATOR(pg_catalog.+) 1
     WHERE w.app_name OPERATOR(pg_catalog.=) NEW.app_name
       AND w.stream_name OPERATOR(pg_catalog.=) NEW.stream_name
       AND w.worker OPERATOR(pg_catalog.=) NEW.lease_owner
       AND (w.expires_min IS NULL
            OR w.expires_min OPERATOR(pg_catalog.>) NEW.lease_expires_at);
    RETURN NULL;
END
$$;

CREATE TRIGGER shard_leases_expiry_lowered
    AFTER UPDATE OF lease_expires_at ON lease.shard_leases
    FOR EACH ROW
    WHEN (NEW.lease_owner IS NOT NULL
          AND NEW.lease_owner IS NOT DISTINCT FROM OLD.lease_owner
          AND NEW.lease_expires_at < OLD.lease_expires_at)
    EXECUTE FUNCTION lease.shard_leases_expiry_lowered();

-- The owner index also orders each worker's leases by shard_id (the order
-- in which take_leases asks for them to be handed over).
DROP INDEX lease.shard_leases_owner_idx;
CREATE INDEX shard_leases_owner_idx
    ON lease.shard_leases (app_name, stream_name, lease_owner, shard_id COLLATE "C")
    WHERE lease_owner IS NOT NULL;

-- Built from the existing rows: every worker's leases and the earliest
-- expiry among them (exact, hence a valid bound), a row (no count yet) for
-- every stream, nothing stale.
INSERT INTO lease.stream_workers (app_name, stream_name, worker, leases, expires_min)
SELECT l.app_name, l.stream_name, l.lease_owner, pg_catalog.count(*), pg_catalog.min(l.lease_expires_at)
  FROM lease.shard_leases AS l
 WHERE l.lease_owner IS NOT NULL
 GROUP BY l.app_name, l.stream_name, l.lease_owner;

INSERT INTO lease.stream_takeable (app_name, stream_name)
SELECT DISTINCT l.app_name, l.stream_name FROM lease.shard_leases AS l;

REVOKE ALL ON FUNCTION lease.shard_leases_expiry_lowered(), lease.shard_leases_inserted(),
    lease.shard_leases_deleted(), lease.shard_leases_ended() FROM PUBLIC;
REVOKE ALL ON TABLE lease.stream_workers, lease.stream_takeable, lease.lineage_changes FROM PUBLIC;

SELECT pg_catalog.pg_extension_config_dump('lease.stream_workers', 'WHERE false');
SELECT pg_catalog.pg_extension_config_dump('lease.stream_takeable', 'WHERE false');
SELECT pg_catalog.pg_extension_config_dump('lease.lineage_changes', 'WHERE false');

----------------------------------------------------------------------------
-- import_kcl_ex through pg_lease_router (issue 12; twin of the function in
-- src/leases/leases.sql)
----------------------------------------------------------------------------

-- import_kcl_ex of rows passed as arrays, one element per lease (element i
-- of each array is a column of lease i): what pg_lease_router sends each
-- partition, the rows of its streams.  Same checks and semantics, same
-- privileges (INSERT on lease.shard_leases, row-level security per app).
CREATE FUNCTION lease.import_kcl_ex_rows(app_names text[], stream_names text[],
                                         shard_ids text[], checkpoints text[],
                                         lease_owners text[], lease_counts bigint[],
                                         completed boolean[])
RETURNS bigint
AS 'MODULE_PATHNAME', 'lease_import_kcl_ex_rows'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;
-- (src/common/finish.sql revokes PUBLIC on a fresh install)
REVOKE ALL ON FUNCTION lease.import_kcl_ex_rows(text[], text[], text[], text[], text[], bigint[], boolean[]) FROM PUBLIC;
