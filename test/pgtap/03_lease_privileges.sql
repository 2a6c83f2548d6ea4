-- pgTAP: privileges.  Nothing is granted to PUBLIC; a role with the grants
-- docs/security.md lists can use the protocol and nothing else.
BEGIN;
SELECT plan(15);

SELECT schema_privs_are('lease', 'public', ARRAY[]::text[], 'PUBLIC has no privileges on schema lease');
SELECT table_privs_are('lease', 'shard_leases', 'public', ARRAY[]::text[], 'PUBLIC has no privileges on shard_leases');
SELECT is(count(*)::int, 0, 'PUBLIC may execute no lease function')
  FROM pg_proc p, LATERAL aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
 WHERE p.pronamespace = 'lease'::regnamespace AND a.grantee = 0;

CREATE ROLE tap_lease_worker;
GRANT USAGE ON SCHEMA lease TO tap_lease_worker;
GRANT EXECUTE ON FUNCTION
    lease.create_lease(text, text, text, text[], text),
    lease.take_lease(text, text, text, text, bigint, interval, interval),
    lease.renew_lease(text, text, text, text, bigint, interval),
    lease.update_checkpoint(text, text, text, text, text, bigint),
    lease.release_lease(text, text, text, text),
    lease.close_shard(text, text, text, text)
    TO tap_lease_worker;
CREATE ROLE tap_lease_stranger;
-- 0.2.0: a worker acts only for the apps it is granted
SELECT lease.grant_app('tap', 'tap_lease_worker');

SELECT table_privs_are('lease', 'shard_leases', 'tap_lease_worker', ARRAY[]::text[],
                       'a worker holds no table privileges');

SET LOCAL ROLE tap_lease_worker;
SELECT is(lease.create_lease('tap', 's', 'a'), true, 'a worker creates a lease');
SELECT is(lease.take_lease('tap', 's', 'a', 'w1'), 1::bigint, 'a worker takes a lease');
SELECT is(lease.update_checkpoint('tap', 's', 'a', 'w1', '7'), true, 'a worker checkpoints');
SELECT throws_ok($$UPDATE lease.shard_leases SET checkpoint = '0'$$, '42501',
                 NULL, 'a worker cannot write the table directly');
SELECT throws_ok($$DELETE FROM lease.shard_leases$$, '42501', NULL, 'a worker cannot delete leases');
RESET ROLE;

SET LOCAL ROLE tap_lease_stranger;
SELECT throws_ok($$SELECT lease.take_lease('tap', 's', 'a', 'intruder', 1)$$, '42501',
                 NULL, 'a role without grants cannot take a lease');
SELECT throws_ok($$SELECT lease.release_lease('tap', 's', 'a', 'w1')$$, '42501',
                 NULL, 'a role without grants cannot release a lease');
SELECT throws_ok($$UPDATE lease.shard_leases SET lease_owner = 'intruder'$$, '42501',
                 NULL, 'a role without grants cannot write the table');
RESET ROLE;

-- USAGE on the schema alone is not enough: EXECUTE is not granted to PUBLIC
GRANT USAGE ON SCHEMA lease TO tap_lease_stranger;
SET LOCAL ROLE tap_lease_stranger;
SELECT throws_ok($$SELECT lease.take_lease('tap', 's', 'a', 'intruder', 1)$$, '42501',
                 NULL, 'schema USAGE alone does not allow a take');
SELECT throws_ok($$SELECT * FROM lease.shard_leases$$, '42501',
                 NULL, 'schema USAGE alone does not allow reading the table');
RESET ROLE;

SELECT results_eq($$SELECT lease_owner, checkpoint FROM lease.shard_leases WHERE app_name = 'tap'$$,
                  $$VALUES ('w1'::text, '7'::text)$$, 'the stranger changed nothing');

SELECT * FROM finish();
ROLLBACK;
