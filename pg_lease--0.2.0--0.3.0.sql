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
