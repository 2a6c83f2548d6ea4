/* pg_lease--0.3.0.sql: the fresh install of release 0.3.0, frozen (generated from the SQL parts as they were at 0.3.0).  Never edited: changes go in pg_lease--0.3.0--0.4.0.sql. */

\echo Use "CREATE EXTENSION pg_lease" to load this file. \quit

-- src/common/schema.sql: the schema
-- One part of pg_lease--<version>.sql (Makefile, SQL_PARTS); each change here
-- needs its twin in the upgrade script pg_lease--<previous>--<version>.sql.

-- The schema `lease` is created by CREATE EXTENSION (pg_lease.control names it).
-- Nothing in it is granted to PUBLIC: see docs/security.md.
REVOKE ALL ON SCHEMA lease FROM PUBLIC;

-- src/leases/access.sql: per-application access (lease.app_grants and its functions)
-- One part of pg_lease--<version>.sql (Makefile, SQL_PARTS); each change here
-- needs its twin in the upgrade script pg_lease--<previous>--<version>.sql.

----------------------------------------------------------------------------
-- Per-application access (src/leases/privileges.c; docs/security.md)
----------------------------------------------------------------------------

-- Which roles may act for which app_name.  A role may act for an app when
-- it has the privileges of the extension owner (a superuser has every
-- role's) or of a role granted the app here; every lease function, view and
-- policy applies that one check (lease.has_app_access).  Roles are
-- cluster-wide, so the extension creates none: an operator creates them and
-- grants apps with lease.grant_app() (docs/security.md has the recipes).
-- grantee holds a role OID: a dropped role's row matches nobody, and
-- pg_dump writes regrole values by name, so a restore maps them again.
CREATE TABLE lease.app_grants (
    app_name    text        NOT NULL,
    grantee     regrole     NOT NULL,
    granted_by  regrole     NOT NULL,
    granted_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    -- Serves the app check (the grantees of one app), grant_app's
    -- ON CONFLICT and revoke_app.
    PRIMARY KEY (app_name, grantee)
);

COMMENT ON TABLE lease.app_grants IS
    'Roles granted an app_name (lease.grant_app, lease.revoke_app); members of a grantee role act for the app too.';

SELECT pg_catalog.pg_extension_config_dump('lease.app_grants', '');

-- SECURITY INVOKER on purpose: the check needs the caller's identity
-- (GetUserId()), which SECURITY DEFINER would replace by the owner's.  The
-- C code reads lease.app_grants as the function's owner (src/leases/privileges.c),
-- so callers need no privilege on the table.  search_path is pinned all
-- the same: the C code runs only fixed, schema-qualified SQL.
CREATE FUNCTION lease.has_app_access(app_name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_has_app_access'
LANGUAGE C STABLE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION lease.has_app_access(text) IS
    'True when the current role may act for the app: it has the extension owner''s privileges, or those of a role granted the app.';

-- SECURITY INVOKER for the same reason: only a role that may itself act for
-- the app may grant or revoke it; the write runs as the owner.
CREATE FUNCTION lease.grant_app(app_name text, grantee regrole)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_grant_app'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.revoke_app(app_name text, grantee regrole)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_revoke_app'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

-- An operator granted SELECT on app_grants sees the grants of its own apps.
ALTER TABLE lease.app_grants ENABLE ROW LEVEL SECURITY;
CREATE POLICY app_grants_app_read ON lease.app_grants
    FOR SELECT USING (lease.has_app_access(app_name));

-- src/leases/leases.sql: shard leases: the lease table, its functions, the taker, events, views, import
-- One part of pg_lease--<version>.sql (Makefile, SQL_PARTS); each change here
-- needs its twin in the upgrade script pg_lease--<previous>--<version>.sql.

----------------------------------------------------------------------------
-- Shard leases
----------------------------------------------------------------------------

CREATE TABLE lease.shard_leases (
    app_name                        text        NOT NULL,
    stream_name                     text        NOT NULL,
    shard_id                        text        NOT NULL,
    lease_owner                     text,
    lease_count                     bigint      NOT NULL DEFAULT 0,
    checkpoint                      text        NOT NULL DEFAULT 'TRIM_HORIZON',
    checkpoint_sub_sequence         bigint      NOT NULL DEFAULT 0,
    parent_shard_ids                text[]      NOT NULL DEFAULT '{}',
    lease_expires_at                timestamptz,
    owner_switches_since_checkpoint bigint      NOT NULL DEFAULT 0,
    -- fencing token: bumped by every ownership change (take, transfer,
    -- release, close), never by a renewal or a checkpoint
    lease_epoch                     bigint      NOT NULL DEFAULT 0,
    -- a graceful handoff: whom the lease is promised to, since when, until
    -- when the holder may finish (lease.handoff_timeout), and the lease
    -- duration the requester asked for (the transferred lease gets it, and
    -- the request lapses that long after the deadline)
    handoff_to                      text,
    handoff_requested_at            timestamptz,
    handoff_deadline                timestamptz,
    handoff_lease_duration          interval,
    -- two-phase checkpoint: what the owner intends to checkpoint next
    pending_checkpoint              text,
    created_at                      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_at                      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    -- when the checkpoint last changed (set by the trigger
    -- shard_leases_checkpointed, src/leases/monitoring.sql): updated_at moves
    -- with every renewal, so it cannot tell a worker that renews but no
    -- longer checkpoints (docs/monitoring.md).  Last, so a fresh table
    -- equals one upgraded from 0.2.0 (ALTER TABLE ... ADD COLUMN).
    checkpointed_at                 timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (app_name, stream_name, shard_id),
    CONSTRAINT shard_leases_lease_count_check CHECK (lease_count >= 0),
    CONSTRAINT shard_leases_owner_expiry_check
        CHECK ((lease_owner IS NULL) = (lease_expires_at IS NULL)),
    CONSTRAINT shard_leases_handoff_check
        CHECK (num_nulls(handoff_to, handoff_requested_at, handoff_deadline,
                         handoff_lease_duration) IN (0, 4))
)
-- Renewals and checkpoints touch no indexed column: leave room on each page
-- so they stay HOT updates.
WITH (fillfactor = 70);

COMMENT ON TABLE lease.shard_leases IS
    'One row per shard lease (the model is the Kinesis Client Library lease table). Change it only through the lease.* functions.';

-- Serves renew_leases (one owner's leases), take_leases (the leases of a
-- worker whose expiry bound has passed; the most-loaded worker's leases it
-- asks to hand over, first by shard_id, so a request reads as many leases as
-- it asks for) and the view worker_loads.  Renewals and checkpoints change
-- neither lease_owner nor shard_id, so they remain HOT.
CREATE INDEX shard_leases_owner_idx
    ON lease.shard_leases (app_name, stream_name, lease_owner, shard_id COLLATE "C")
    WHERE lease_owner IS NOT NULL;

-- Serves take_leases claiming the leases promised to the caller whose
-- handoff deadline has passed.  handoff_to changes only when a handoff is
-- requested or completed, never on a renewal or a checkpoint, so those stay
-- HOT.  (lease_expires_at is deliberately not indexed: every renewal changes
-- it, and indexing it would make every renewal a non-HOT update.)
CREATE INDEX shard_leases_handoff_idx
    ON lease.shard_leases (app_name, stream_name, handoff_to)
    WHERE handoff_to IS NOT NULL;

SELECT pg_catalog.pg_extension_config_dump('lease.shard_leases', '');

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

-- The functions that take an app_name are SECURITY INVOKER, with search_path
-- pinned: the per-app check needs the caller's identity, which SECURITY
-- DEFINER would replace by the owner's.  Each checks its arguments, then
-- that the caller may act for the app (lease.has_app_access: 42501 if not),
-- and only then runs its fixed, schema-qualified SQL as the function's
-- owner, exactly as SECURITY DEFINER would (src/leases/privileges.c).  A worker
-- role is granted EXECUTE on them and an app (lease.grant_app), never
-- access to the table, so the only way to change a lease is through the
-- protocol, and only for its apps.  They are not STRICT: a NULL where a
-- value is required is an error (22004) naming the argument.

CREATE FUNCTION lease.create_lease(
    app_name text, stream_name text, shard_id text,
    parent_shard_ids text[] DEFAULT '{}', checkpoint text DEFAULT 'TRIM_HORIZON')
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_create_lease'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.take_lease(
    app_name text, stream_name text, shard_id text, new_owner text,
    lease_count bigint DEFAULT NULL, lease_duration interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lease_take_lease'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.renew_lease(
    app_name text, stream_name text, shard_id text, owner text,
    lease_count bigint, lease_duration interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lease_renew_lease'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.update_checkpoint(
    app_name text, stream_name text, shard_id text, owner text,
    checkpoint text, sub_sequence bigint DEFAULT 0)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_update_checkpoint'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.release_lease(
    app_name text, stream_name text, shard_id text, owner text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_release_lease'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.close_shard(
    app_name text, stream_name text, shard_id text, owner text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_close_shard'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

----------------------------------------------------------------------------
-- Fencing, two-phase checkpoints, lineage maintenance (src/leases/leases.c,
-- src/leases/lineage.c)
----------------------------------------------------------------------------

-- The fenced checkpoint: written only while lease_epoch still equals
-- fencing_token.  No defaults, so a call is never ambiguous with the
-- six-argument function above.
CREATE FUNCTION lease.update_checkpoint(
    app_name text, stream_name text, shard_id text, owner text,
    checkpoint text, sub_sequence bigint, fencing_token bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_update_checkpoint_fenced'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.prepare_checkpoint(
    app_name text, stream_name text, shard_id text, owner text,
    pending_checkpoint text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_prepare_checkpoint'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.cleanup_ended(app_name text, stream_name text)
RETURNS integer
AS 'MODULE_PATHNAME', 'lease_cleanup_ended'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.delete_lease(app_name text, stream_name text, shard_id text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_delete_lease'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

----------------------------------------------------------------------------
-- The taker: balanced take_leases, batch renewal, graceful handoff
-- (src/leases/taker.c)
----------------------------------------------------------------------------

CREATE FUNCTION lease.take_leases(
    app_name text, stream_name text, owner text,
    lease_duration interval DEFAULT NULL, max_leases integer DEFAULT NULL,
    max_steal integer DEFAULT 1)
RETURNS TABLE(shard_id text, lease_count bigint, action text,
              previous_owner text, lease_epoch bigint)
AS 'MODULE_PATHNAME', 'lease_take_leases'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.renew_leases(
    app_name text, stream_name text, owner text,
    lease_duration interval DEFAULT NULL)
RETURNS TABLE(shard_id text, lease_count bigint, handoff_to text, lease_epoch bigint)
AS 'MODULE_PATHNAME', 'lease_renew_leases'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

-- What a worker may read about its own leases (src/leases/my_leases.c): the
-- leases the owner holds (expired ones too, until someone takes them) and
-- those a pending handoff promises to it, with the fencing token, the
-- checkpoint, the time left by the database clock, the handoff in either
-- direction and the unfinished parents.  Changes nothing.
CREATE FUNCTION lease.my_leases(app_name text, stream_name text, owner text)
RETURNS TABLE(shard_id text, lease_count bigint, lease_epoch bigint,
              checkpoint text, checkpoint_sub_sequence bigint,
              pending_checkpoint text, expires_in interval,
              handoff_to text, handoff_from text, waiting_on text[])
AS 'MODULE_PATHNAME', 'lease_my_leases'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.request_handoff(
    app_name text, stream_name text, shard_id text, to_owner text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_request_handoff'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

----------------------------------------------------------------------------
-- Ownership events (src/leases/events.c)
----------------------------------------------------------------------------

CREATE TABLE lease.lease_events (
    event_id    bigserial   PRIMARY KEY,
    occurred_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    app_name    text        NOT NULL,
    stream_name text        NOT NULL,
    shard_id    text        NOT NULL,
    event       text        NOT NULL,
    from_owner  text,
    to_owner    text,
    lease_count bigint      NOT NULL,
    lease_epoch bigint      NOT NULL,
    CONSTRAINT lease_events_event_check CHECK (event IN
        ('take', 'expiry_takeover', 'steal', 'transfer', 'release', 'close',
         'handoff_request'))
);

COMMENT ON TABLE lease.lease_events IS
    'Every change of a lease''s ownership and every handoff request (lease.record_events); prune with lease.prune_events().';

-- Serves prune_events (delete everything older than a point in time).
CREATE INDEX lease_events_occurred_at_idx ON lease.lease_events (occurred_at);

SELECT pg_catalog.pg_extension_config_dump('lease.lease_events', '');
SELECT pg_catalog.pg_extension_config_dump('lease.lease_events_event_id_seq', '');

CREATE FUNCTION lease.prune_events(older_than interval)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lease_prune_events'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

----------------------------------------------------------------------------
-- Observability views.  Not granted to PUBLIC: grant SELECT to a
-- monitoring role (docs/security.md).
----------------------------------------------------------------------------

-- security_barrier views filtered by lease.has_app_access: a role granted
-- SELECT sees the leases of its own apps only (the owner and superusers see
-- every app), and the barrier keeps a caller's own (leaky) functions in a
-- WHERE clause from seeing the other rows first.  The view reads the table
-- as its owner; the filter runs as the caller.

CREATE VIEW lease.lease_status WITH (security_barrier = true) AS
SELECT l.app_name,
       l.stream_name,
       l.shard_id,
       l.lease_owner,
       CASE
           WHEN l.checkpoint = 'SHARD_END' THEN 'ended'
           WHEN EXISTS (SELECT 1 FROM lease.shard_leases AS p
                         WHERE p.app_name = l.app_name
                           AND p.stream_name = l.stream_name
                           AND p.shard_id = ANY (l.parent_shard_ids)
                           AND p.checkpoint <> 'SHARD_END') THEN 'blocked'
           WHEN l.lease_owner IS NULL THEN 'unowned'
           WHEN l.lease_expires_at <= pg_catalog.clock_timestamp() THEN 'expired'
           WHEN h.pending THEN 'handoff_pending'
           ELSE 'owned'
       END AS state,
       l.lease_expires_at - pg_catalog.clock_timestamp() AS time_to_expiry,
       l.checkpoint,
       l.checkpoint_sub_sequence,
       l.pending_checkpoint,
       l.lease_count,
       l.lease_epoch,
       CASE WHEN h.pending THEN l.handoff_to END AS handoff_to,
       CASE WHEN h.pending THEN l.handoff_deadline END AS handoff_deadline,
       l.owner_switches_since_checkpoint,
       l.parent_shard_ids,
       l.updated_at
  FROM lease.shard_leases AS l,
       LATERAL (SELECT l.handoff_to IS NOT NULL
                       AND pg_catalog.clock_timestamp()
                           < l.handoff_deadline + l.handoff_lease_duration AS pending) AS h
 WHERE lease.has_app_access(l.app_name);

COMMENT ON VIEW lease.lease_status IS
    'One row per lease: state (owned, expired, unowned, ended, blocked, handoff_pending), time to expiry, checkpoint, fencing epoch, pending handoff.';

CREATE VIEW lease.worker_loads WITH (security_barrier = true) AS
SELECT app_name, stream_name, lease_owner, pg_catalog.count(*) AS live_leases
  FROM lease.shard_leases
 WHERE lease_owner IS NOT NULL
   AND lease.has_app_access(app_name)
   AND lease_expires_at > pg_catalog.clock_timestamp()
 GROUP BY app_name, stream_name, lease_owner;

COMMENT ON VIEW lease.worker_loads IS
    'Live (unexpired) leases per owner and stream.';

----------------------------------------------------------------------------
-- Switching over from the Elixir kcl_ex Ecto adapter (src/leases/import.c)
----------------------------------------------------------------------------

-- SECURITY INVOKER on purpose, unlike every other function here: it reads a
-- table the caller names, so it must run with the caller's own privileges
-- (SELECT on the source, INSERT on lease.shard_leases).  It is an operator
-- function; worker roles are not granted it.
CREATE FUNCTION lease.import_kcl_ex(source regclass)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lease_import_kcl_ex'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

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

----------------------------------------------------------------------------
-- Per-app visibility of the tables and views (docs/security.md)
----------------------------------------------------------------------------

-- Row-level security on the tables that hold app rows, for a role granted
-- SELECT (lease_events, app_grants: operators) or INSERT (shard_leases: an
-- import_kcl_ex caller that is not the owner): it sees and adds rows of its
-- own apps only.  There is no UPDATE or DELETE policy, so no role but the
-- owner can change rows even if granted the privilege.  The owner (and so
-- every SECURITY DEFINER function and every function running its SQL as the
-- owner) is not subject to it.
ALTER TABLE lease.shard_leases ENABLE ROW LEVEL SECURITY;
CREATE POLICY shard_leases_app_read ON lease.shard_leases
    FOR SELECT USING (lease.has_app_access(app_name));
CREATE POLICY shard_leases_app_insert ON lease.shard_leases
    FOR INSERT WITH CHECK (lease.has_app_access(app_name));

ALTER TABLE lease.lease_events ENABLE ROW LEVEL SECURITY;
CREATE POLICY lease_events_app_read ON lease.lease_events
    FOR SELECT USING (lease.has_app_access(app_name));

-- src/bindings/bindings.sql: channel bindings: sandboxes, conversations, turns, quotas, rotation
-- One part of pg_lease--<version>.sql (Makefile, SQL_PARTS); each change here
-- needs its twin in the upgrade script pg_lease--<previous>--<version>.sql.

----------------------------------------------------------------------------
-- Channel bindings: sandboxes, conversations, turns, quotas, rotation
----------------------------------------------------------------------------

-- A sandbox is the compute a conversation's worker runs in.  Active
-- (pending, starting, ready) sandboxes count against the fleet capacity and
-- the tenant's limit; admission (src/bindings/conversations.c) inserts them `pending`,
-- the worker infrastructure moves them on, end_conversation and
-- restore_rotated_channel end them.
CREATE TABLE lease.sandboxes (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id     text        NOT NULL,
    status      text        NOT NULL DEFAULT 'pending',
    created_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT sandboxes_status_check
        CHECK (status IN ('pending', 'starting', 'ready', 'suspended', 'terminated', 'failed'))
);

COMMENT ON TABLE lease.sandboxes IS
    'One row per sandbox; pending, starting and ready ones count against lease.fleet_capacity and the tenant''s limit.';

-- Serves admission's quota counts (start_conversation, rotate_channel): the
-- tenant's active sandboxes are an index range on user_id, the fleet's are
-- the whole (small) index.  Its predicate is exactly the "active" status list
-- the counting statement uses, so the planner can prove it applies.
CREATE INDEX sandboxes_active_user_idx
    ON lease.sandboxes (user_id)
    WHERE status IN ('pending', 'starting', 'ready');

CREATE TABLE lease.conversations (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id         text        NOT NULL,
    agent_id        text        NOT NULL,
    vault_id        text,
    environment_id  text,
    channel_id      text,
    sandbox_id      bigint      REFERENCES lease.sandboxes,
    status          text        NOT NULL DEFAULT 'pending',
    rotated_from    bigint      REFERENCES lease.conversations,
    created_at      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_at      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT conversations_status_check
        CHECK (status IN ('pending', 'running', 'idle', 'failed', 'terminated')),
    -- The invariant every function keeps, enforced by the table itself: a
    -- channel is only ever bound to a live conversation.
    CONSTRAINT conversations_binding_live_check
        CHECK (channel_id IS NULL OR status IN ('pending', 'running', 'idle')),
    CONSTRAINT conversations_not_rotated_from_itself_check
        CHECK (rotated_from IS DISTINCT FROM id)
);

COMMENT ON TABLE lease.conversations IS
    'One row per agent conversation; channel_id is the channel binding. Change it only through the lease.* functions.';
COMMENT ON COLUMN lease.conversations.channel_id IS
    'The channel bound to this conversation, NULL when unbound. At most one conversation per (user_id, agent_id, vault_id, environment_id) scope holds a channel.';
COMMENT ON COLUMN lease.conversations.rotated_from IS
    'The conversation this one replaced by rotate_channel, NULL for one started by start_conversation.';

-- Binding uniqueness: at most one conversation holds a channel within one
-- scope (user_id, agent_id, vault_id, environment_id), NULL vault/environment
-- compared as equal (NULLS NOT DISTINCT).
--
-- It is a PARTIAL unique index on purpose, not a UNIQUE constraint.
-- heap_update() takes FOR UPDATE on a row whose update changes a "key"
-- column, and the key columns are those of unique indexes that are
-- non-partial and have no expressions (RelationGetIndexAttrBitmap,
-- INDEX_ATTR_BITMAP_KEY): the columns a foreign key can reference.  With a
-- UNIQUE constraint on these columns, binding and unbinding a channel would
-- take FOR UPDATE, which conflicts with the FOR KEY SHARE that every insert
-- of a row referencing the conversation (lease.turns) takes, so a rotation
-- would wait behind any open transaction that inserted a turn.  A partial
-- index is not a key, so binding updates stay at FOR NO KEY UPDATE, which
-- does not conflict with KEY SHARE (test/specs/rotation_fk_key_share.spec).
--
-- Serves find_channel_conversation, start_conversation's already_bound check
-- and restore's binding writes (uniqueness).
CREATE UNIQUE INDEX conversations_channel_binding_key
    ON lease.conversations (user_id, agent_id, vault_id, environment_id, channel_id)
    NULLS NOT DISTINCT
    WHERE channel_id IS NOT NULL;

COMMENT ON INDEX lease.conversations_channel_binding_key IS
    'At most one conversation holds a channel per (user_id, agent_id, vault_id, environment_id), NULLs equal. Partial on purpose, not a UNIQUE constraint: columns of a partial unique index are not key columns, so binding updates take FOR NO KEY UPDATE, which does not conflict with the FOR KEY SHARE of foreign-key inserts (lease.turns).';

-- Serves the foreign key from conversations.rotated_from (the rotation chain:
-- which conversation replaced this one) and the RI checks on it.
CREATE INDEX conversations_rotated_from_idx
    ON lease.conversations (rotated_from)
    WHERE rotated_from IS NOT NULL;

-- Serves the foreign key conversations.sandbox_id (status changes of a
-- sandbox find its conversation; RI checks on sandbox deletion).
CREATE INDEX conversations_sandbox_idx
    ON lease.conversations (sandbox_id);

-- A turn: one unit of work admitted on a conversation (admit_turn).  Its
-- insert takes FOR KEY SHARE on the conversation (the foreign key).
CREATE TABLE lease.turns (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    conversation_id bigint      NOT NULL REFERENCES lease.conversations,
    created_at      timestamptz NOT NULL DEFAULT pg_catalog.now()
);

-- Serves the foreign key turns.conversation_id (a conversation's turns).
CREATE INDEX turns_conversation_idx
    ON lease.turns (conversation_id);

-- Per-tenant sandbox limits; a tenant without a row gets
-- lease.default_sandbox_limit.
CREATE TABLE lease.tenant_limits (
    user_id       text NOT NULL PRIMARY KEY,
    sandbox_limit int  NOT NULL,
    CONSTRAINT tenant_limits_sandbox_limit_check CHECK (sandbox_limit >= 0)
);

-- The queue of post-commit compensations that failed: restore_rotated_channel
-- writes a row when its restore raised an error (after rolling the restore
-- back), retry_failed_compensations drains it.
--
-- At most one unresolved row per (previous, failed) pair: a restore of the
-- same pair that fails again updates that row (reason, sqlstate,
-- last_failed_at, attempts) instead of adding another.  occurred_at is the
-- first failure, so the queue is drained oldest first.
--
-- No foreign keys to lease.conversations, on purpose: the row is written
-- exactly when a conversation row is locked by someone else (a lock timeout),
-- and a foreign-key check would then wait for FOR KEY SHARE on it behind a
-- FOR UPDATE holder.  The ids are checked by restore_rotated_channel before
-- anything is written.
CREATE TABLE lease.compensation_failures (
    id                        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    previous_conversation_id  bigint      NOT NULL,
    failed_conversation_id    bigint      NOT NULL,
    channel_id                text,
    reason                    text        NOT NULL,
    sqlstate                  text        NOT NULL,
    occurred_at               timestamptz NOT NULL DEFAULT pg_catalog.now(),
    last_failed_at            timestamptz NOT NULL DEFAULT pg_catalog.now(),
    attempts                  int         NOT NULL DEFAULT 1,
    resolved_at               timestamptz,
    CONSTRAINT compensation_failures_sqlstate_check CHECK (sqlstate ~ '^[0-9A-Z]{5}$'),
    CONSTRAINT compensation_failures_attempts_check CHECK (attempts >= 1)
);

COMMENT ON COLUMN lease.compensation_failures.channel_id IS
    'The channel the failed replacement held when the restore was attempted; NULL when it held none any more.';

-- One unresolved failure per pair; serves restore_rotated_channel's
-- record-or-update (ON CONFLICT) and its "mark resolved" update.
CREATE UNIQUE INDEX compensation_failures_unresolved_key
    ON lease.compensation_failures (previous_conversation_id, failed_conversation_id)
    WHERE resolved_at IS NULL;

-- Serves retry_failed_compensations: unresolved failures, oldest first.
CREATE INDEX compensation_failures_queue_idx
    ON lease.compensation_failures (occurred_at, id)
    WHERE resolved_at IS NULL;

SELECT pg_catalog.pg_extension_config_dump('lease.sandboxes', '');
SELECT pg_catalog.pg_extension_config_dump('lease.sandboxes_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('lease.conversations', '');
SELECT pg_catalog.pg_extension_config_dump('lease.conversations_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('lease.turns', '');
SELECT pg_catalog.pg_extension_config_dump('lease.turns_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('lease.tenant_limits', '');
SELECT pg_catalog.pg_extension_config_dump('lease.compensation_failures', '');
SELECT pg_catalog.pg_extension_config_dump('lease.compensation_failures_id_seq', '');

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

-- The channel functions are C, not STRICT (a NULL where a value is required
-- is 22004 naming the argument), SECURITY DEFINER with search_path pinned,
-- and run fixed schema-qualified SQL with parameters (src/bindings/).  They
-- take no app_name, so no per-app check applies: a role granted EXECUTE on
-- them acts for every tenant (docs/security.md).  The admission lock they take is
-- transaction-scoped: call each in its own short transaction (autocommit).

CREATE FUNCTION lease.start_conversation(
    user_id text, agent_id text, vault_id text, environment_id text, channel_id text)
RETURNS TABLE (outcome text, conversation_id bigint, detail text)
AS 'MODULE_PATHNAME', 'lease_start_conversation'
LANGUAGE C VOLATILE SECURITY DEFINER ROWS 1
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.find_channel_conversation(
    user_id text, agent_id text, vault_id text, environment_id text, channel_id text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lease_find_channel_conversation'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.rotate_channel(
    user_id text, agent_id text, vault_id text, environment_id text, channel_id text,
    rotate_from bigint)
RETURNS TABLE (outcome text, conversation_id bigint, previous_conversation_id bigint, detail text)
AS 'MODULE_PATHNAME', 'lease_rotate_channel'
LANGUAGE C VOLATILE SECURITY DEFINER ROWS 1
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.restore_rotated_channel(
    previous_conversation_id bigint, failed_conversation_id bigint)
RETURNS text
AS 'MODULE_PATHNAME', 'lease_restore_rotated_channel'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.retry_failed_compensations()
RETURNS TABLE (previous_conversation_id bigint, failed_conversation_id bigint, outcome text)
AS 'MODULE_PATHNAME', 'lease_retry_failed_compensations'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.admit_turn(conversation_id bigint)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lease_admit_turn'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.end_conversation(conversation_id bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_end_conversation'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

-- src/leases/monitoring.sql: metrics for a monitoring role (docs/monitoring.md)
-- One part of pg_lease--<version>.sql (Makefile, SQL_PARTS); each change here
-- needs its twin in the upgrade script pg_lease--<previous>--<version>.sql.

----------------------------------------------------------------------------
-- Monitoring: the rows of docs/monitoring/pg_lease_queries.yaml
----------------------------------------------------------------------------

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

-- src/common/finish.sql: last: nothing the parts created is granted to PUBLIC
-- One part of pg_lease--<version>.sql (Makefile, SQL_PARTS); each change here
-- needs its twin in the upgrade script pg_lease--<previous>--<version>.sql.

-- The taker's bookkeeping tables (src/leases/leases.sql) are derived from
-- the leases: marked for pg_dump with a filter that keeps no row, so a
-- restore rebuilds them.  Marked last, after every other table, so that a
-- database upgraded from 0.2.0 (whose upgrade script adds them at its end)
-- lists the marked tables in the same order as a fresh install.
SELECT pg_catalog.pg_extension_config_dump('lease.stream_workers', 'WHERE false');
SELECT pg_catalog.pg_extension_config_dump('lease.stream_takeable', 'WHERE false');
SELECT pg_catalog.pg_extension_config_dump('lease.lineage_changes', 'WHERE false');

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA lease FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA lease FROM PUBLIC;
