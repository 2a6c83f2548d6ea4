-- Part of the dump/restore fixture (test/upgrade/dump_fixture.sql), on its
-- own because test/upgrade/dump.sh runs it again after upgrading a database
-- filled under an older version, which had less of what it fills (each part
-- runs once: again after the update only where the older version lacked it).
-- 0.2.0 and later: an app granted to a role (lease.app_grants; roles are
-- cluster-wide, so the restored copy in the same cluster maps it again).
DO $$
BEGIN
    IF pg_catalog.to_regprocedure('lease.grant_app(text, regrole)') IS NOT NULL THEN
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'lease_dump_worker') THEN
            CREATE ROLE lease_dump_worker NOLOGIN;
        END IF;
        PERFORM lease.grant_app('dump', 'lease_dump_worker');
        -- 0.4.0: a grant to a role dropped since is not dumped
        -- (test/upgrade/dump.sh checks the source still has it).
        IF pg_catalog.to_regprocedure('lease.app_grants_grantee_name()') IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM lease.app_grants WHERE app_name = 'dump-gone') THEN
            CREATE ROLE lease_dump_gone NOLOGIN;
            PERFORM lease.grant_app('dump-gone', 'lease_dump_gone');
            DROP ROLE lease_dump_gone;
        END IF;
        -- 0.5.0: a grant whose granter was dropped since is dumped with the
        -- granter's name (granted_by is a name), not a bare OID
        -- (test/upgrade/dump.sh reads the dump).
        IF (SELECT a.atttypid = 'pg_catalog.name'::pg_catalog.regtype FROM pg_attribute AS a
             WHERE a.attrelid = 'lease.app_grants'::regclass AND a.attname = 'granted_by')
           AND NOT EXISTS (SELECT 1 FROM lease.app_grants WHERE app_name = 'dump-granter') THEN
            CREATE ROLE lease_dump_granter NOLOGIN;
            GRANT USAGE ON SCHEMA lease TO lease_dump_granter;
            GRANT EXECUTE ON FUNCTION lease.grant_app(text, regrole) TO lease_dump_granter;
            PERFORM lease.grant_app('dump-granter', 'lease_dump_granter');
            SET LOCAL ROLE lease_dump_granter;
            PERFORM lease.grant_app('dump-granter', 'lease_dump_worker');
            RESET ROLE;
            PERFORM lease.revoke_app('dump-granter', 'lease_dump_granter');
            REVOKE ALL ON FUNCTION lease.grant_app(text, regrole) FROM lease_dump_granter;
            REVOKE ALL ON SCHEMA lease FROM lease_dump_granter;
            DROP ROLE lease_dump_granter;
        END IF;
    END IF;
END $$;
