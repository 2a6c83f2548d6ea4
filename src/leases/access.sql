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
-- grantee holds a role OID and grantee_name the role's name when it was
-- granted (set by the trigger below): a grant matches only while the role
-- with that OID still has that name, so neither a dropped role's row nor a
-- new role that is given its OID later acts for the app, and a renamed role
-- must be granted again.  pg_dump writes regrole values by name, so a
-- restore maps a grant to the role of that name; the dump filter leaves out
-- grants that no longer match (a dropped role's OID would be written as a
-- number and name whichever role has it in the restored cluster).
-- granted_by is the name of the role that granted it (0.5.0: a regrole
-- before, which a dump wrote as a bare OID once that role was dropped): a
-- record of who granted, which no later role with the same OID takes over.
-- grant_app passes the granter as a regrole, stored by its name (an
-- assignment cast), so the module writes it the same way into either type.
CREATE TABLE lease.app_grants (
    app_name    text        NOT NULL,
    grantee     regrole     NOT NULL,
    granted_by  name        NOT NULL,
    granted_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    grantee_name name       NOT NULL,
    -- Serves the app check (the grantees of one app), grant_app's
    -- ON CONFLICT and revoke_app.
    PRIMARY KEY (app_name, grantee)
);

COMMENT ON TABLE lease.app_grants IS
    'Roles granted an app_name (lease.grant_app, lease.revoke_app); members of a grantee role act for the app too.';

-- Records the grantee's name on every new grant, and on a stale grant that
-- grant_app renews (grant_app does not name the column, so the module works
-- the same against 0.3.0's table).
CREATE FUNCTION lease.app_grants_grantee_name()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    NEW.grantee_name := pg_catalog.pg_get_userbyid(NEW.grantee);
    RETURN NEW;
END
$$;

CREATE TRIGGER app_grants_grantee_name
    BEFORE INSERT OR UPDATE OF granted_by ON lease.app_grants
    FOR EACH ROW
    EXECUTE FUNCTION lease.app_grants_grantee_name();

-- Marked for pg_dump in src/common/finish.sql, with a filter that keeps
-- only the grants that still match their role.

-- SECURITY INVOKER on purpose: the check needs the caller's identity
-- (GetUserId()), which SECURITY DEFINER would replace by the owner's.  The
-- C code reads lease.app_grants as the function's owner (src/leases/privileges.c),
-- so callers need no privilege on the table.  search_path is pinned all
-- the same: the C code runs only fixed, schema-qualified SQL.
CREATE FUNCTION lease.has_app_access(app_name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_has_app_access_0_4'
LANGUAGE C STABLE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

COMMENT ON FUNCTION lease.has_app_access(text) IS
    'True when the current role may act for the app: it has the extension owner''s privileges, or those of a role granted the app.';

-- SECURITY INVOKER for the same reason: only a role that may itself act for
-- the app may grant or revoke it; the write runs as the owner.
CREATE FUNCTION lease.grant_app(app_name text, grantee regrole)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_grant_app_0_4'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.revoke_app(app_name text, grantee regrole)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_revoke_app_0_4'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

-- An operator granted SELECT on app_grants sees the grants of its own apps.
ALTER TABLE lease.app_grants ENABLE ROW LEVEL SECURITY;
CREATE POLICY app_grants_app_read ON lease.app_grants
    FOR SELECT USING (lease.has_app_access(app_name));
