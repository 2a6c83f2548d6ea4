-- pgTAP: an app grant belongs to the role it was granted to, by OID and by
-- the name it had then (lease.app_grants.grantee_name): a
-- role given a dropped grantee's OID, or a grantee renamed since, does not
-- act for the app, and the dump filter leaves such grants out.
BEGIN;
SELECT plan(11);

CREATE ROLE gi_granted;
CREATE ROLE gi_other;
GRANT USAGE ON SCHEMA lease TO gi_granted, gi_other;
GRANT EXECUTE ON FUNCTION lease.has_app_access(text) TO gi_granted, gi_other;
SELECT lease.grant_app('gi', 'gi_granted');

SELECT is((SELECT grantee_name::text FROM lease.app_grants WHERE app_name = 'gi'), 'gi_granted',
          'grant_app records the grantee''s name');
SET LOCAL ROLE gi_granted;
SELECT is(lease.has_app_access('gi'), true, 'the grantee acts for the app');
RESET ROLE;

-- What a reused OID looks like: the row's OID now names another role.
UPDATE lease.app_grants SET grantee = 'gi_other' WHERE app_name = 'gi';
SET LOCAL ROLE gi_other;
SELECT is(lease.has_app_access('gi'), false, 'a role holding the grantee''s OID under another name does not');
SELECT throws_ok($$SELECT lease.grant_app('gi', 'gi_other')$$, '42501', NULL,
                 'nor may it grant the app');
RESET ROLE;
UPDATE lease.app_grants SET grantee = 'gi_granted' WHERE app_name = 'gi';

-- A renamed grantee is granted again.
ALTER ROLE gi_granted RENAME TO gi_renamed;
SET LOCAL ROLE gi_renamed;
SELECT is(lease.has_app_access('gi'), false, 'a renamed grantee no longer acts for the app');
RESET ROLE;

-- The dump filter keeps exactly the grants that match.
SELECT is((SELECT e.extcondition[pg_catalog.array_position(e.extconfig, 'lease.app_grants'::regclass::oid)]
             FROM pg_catalog.pg_extension AS e WHERE e.extname = 'pg_lease'),
          'WHERE pg_catalog.pg_get_userbyid(grantee) OPERATOR(pg_catalog.=) grantee_name',
          'app_grants is dumped with the filter');
SELECT is((SELECT count(*)::int FROM lease.app_grants
            WHERE app_name = 'gi' AND pg_catalog.pg_get_userbyid(grantee) = grantee_name), 0,
          'which leaves out the renamed grantee''s grant');
SELECT lease.grant_app('gi', 'gi_renamed');
SET LOCAL ROLE gi_renamed;
SELECT is(lease.has_app_access('gi'), true, 'granted again under its new name, it acts for the app');
RESET ROLE;

-- granted_by is the granter's name: a dropped granter stays named (a
-- regrole before 0.5.0, which pg_dump wrote as a bare OID)
SELECT col_type_is('lease', 'app_grants', 'granted_by', 'name', 'granted_by is a name');
CREATE ROLE gi_granter;
GRANT USAGE ON SCHEMA lease TO gi_granter;
GRANT EXECUTE ON FUNCTION lease.grant_app(text, regrole) TO gi_granter;
SELECT lease.grant_app('gi-by', 'gi_granter');
SET LOCAL ROLE gi_granter;
SELECT lease.grant_app('gi-by', 'gi_other');
RESET ROLE;
SELECT is((SELECT granted_by::text FROM lease.app_grants WHERE app_name = 'gi-by' AND grantee = 'gi_other'::regrole),
          'gi_granter', 'grant_app records the granter''s name');
SELECT lease.revoke_app('gi-by', 'gi_granter');
REVOKE ALL ON FUNCTION lease.grant_app(text, regrole) FROM gi_granter;
REVOKE ALL ON SCHEMA lease FROM gi_granter;
DROP ROLE gi_granter;
SELECT is((SELECT granted_by::text FROM lease.app_grants WHERE app_name = 'gi-by' AND grantee = 'gi_other'::regrole),
          'gi_granter', 'and keeps it once the granter is dropped');

SELECT * FROM finish();
ROLLBACK;
