/* pg_lease--0.1.0--0.2.0.sql: per-application access and the role model.  Never edit once released. */

\echo Use "ALTER EXTENSION pg_lease UPDATE TO '0.2.0'" to load this file. \quit

----------------------------------------------------------------------------
-- Per-application access (src/privileges.c; README "Privileges")
----------------------------------------------------------------------------

-- Which roles may act for which app_name.  A role may act for an app when
-- it has the privileges of the extension owner (a superuser has every
-- role's) or of a role granted the app here; every lease function, view and
-- policy applies that one check (lease.has_app_access).  Roles are
-- cluster-wide, so the extension creates none: an operator creates them and
-- grants apps with lease.grant_app() (README "Privileges" has the recipes).
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
-- C code reads lease.app_grants as the function's owner (src/privileges.c),
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

-- The functions that take an app_name are SECURITY INVOKER, with search_path
-- pinned: the per-app check needs the caller's identity, which SECURITY
-- DEFINER would replace by the owner's.  Each checks its arguments, then
-- that the caller may act for the app (lease.has_app_access: 42501 if not),
-- and only then runs its fixed, schema-qualified SQL as the function's
-- owner, exactly as SECURITY DEFINER would (src/privileges.c).  A worker
-- role is granted EXECUTE on them and an app (lease.grant_app), never
-- access to the table, so the only way to change a lease is through the
-- protocol, and only for its apps.  They are not STRICT: a NULL where a
-- value is required is an error (22004) naming the argument.
ALTER FUNCTION lease.create_lease(text, text, text, text[], text) SECURITY INVOKER;
ALTER FUNCTION lease.take_lease(text, text, text, text, bigint, interval) SECURITY INVOKER;
ALTER FUNCTION lease.renew_lease(text, text, text, text, bigint, interval) SECURITY INVOKER;
ALTER FUNCTION lease.update_checkpoint(text, text, text, text, text, bigint) SECURITY INVOKER;
ALTER FUNCTION lease.update_checkpoint(text, text, text, text, text, bigint, bigint) SECURITY INVOKER;
ALTER FUNCTION lease.prepare_checkpoint(text, text, text, text, text) SECURITY INVOKER;
ALTER FUNCTION lease.release_lease(text, text, text, text) SECURITY INVOKER;
ALTER FUNCTION lease.close_shard(text, text, text, text) SECURITY INVOKER;
ALTER FUNCTION lease.cleanup_ended(text, text) SECURITY INVOKER;
ALTER FUNCTION lease.delete_lease(text, text, text) SECURITY INVOKER;
ALTER FUNCTION lease.take_leases(text, text, text, interval, integer, integer) SECURITY INVOKER;
ALTER FUNCTION lease.renew_leases(text, text, text, interval) SECURITY INVOKER;
ALTER FUNCTION lease.request_handoff(text, text, text, text) SECURITY INVOKER;

-- security_barrier views filtered by lease.has_app_access: a role granted
-- SELECT sees the leases of its own apps only (the owner and superusers see
-- every app), and the barrier keeps a caller's own (leaky) functions in a
-- WHERE clause from seeing the other rows first.  The view reads the table
-- as its owner; the filter runs as the caller.
CREATE OR REPLACE VIEW lease.lease_status WITH (security_barrier = true) AS
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

CREATE OR REPLACE VIEW lease.worker_loads WITH (security_barrier = true) AS
SELECT app_name, stream_name, lease_owner, pg_catalog.count(*) AS live_leases
  FROM lease.shard_leases
 WHERE lease_owner IS NOT NULL
   AND lease.has_app_access(app_name)
   AND lease_expires_at > pg_catalog.clock_timestamp()
 GROUP BY app_name, stream_name, lease_owner;

----------------------------------------------------------------------------
-- Per-app visibility of the tables and views (README "Privileges")
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

-- An operator granted SELECT on app_grants sees the grants of its own apps.
ALTER TABLE lease.app_grants ENABLE ROW LEVEL SECURITY;
CREATE POLICY app_grants_app_read ON lease.app_grants
    FOR SELECT USING (lease.has_app_access(app_name));

REVOKE ALL ON FUNCTION lease.has_app_access(text), lease.grant_app(text, regrole),
    lease.revoke_app(text, regrole) FROM PUBLIC;
REVOKE ALL ON TABLE lease.app_grants FROM PUBLIC;
