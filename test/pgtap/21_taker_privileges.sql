-- pgTAP: the taker's privileges.  The views and the events table are not
-- PUBLIC; import_kcl_ex, import_kcl_ex_rows and import_kcl_dynamodb run with the
-- caller's privileges, and PUBLIC may not run the last.
BEGIN;
SELECT plan(17);

SELECT table_privs_are('lease', 'lease_events', 'public', ARRAY[]::text[], 'PUBLIC has no privileges on lease_events');
SELECT table_privs_are('lease', 'lease_status', 'public', ARRAY[]::text[], 'PUBLIC cannot read lease_status');
SELECT table_privs_are('lease', 'worker_loads', 'public', ARRAY[]::text[], 'PUBLIC cannot read worker_loads');
SELECT table_privs_are('lease', 'worker_holdings', 'public', ARRAY[]::text[], 'PUBLIC has no privileges on worker_holdings');
SELECT table_privs_are('lease', 'stream_workers', 'public', ARRAY[]::text[], 'PUBLIC has no privileges on stream_workers');
SELECT is((SELECT prosecdef FROM pg_proc WHERE oid = 'lease.import_kcl_ex(regclass)'::regprocedure), false,
          'import_kcl_ex is SECURITY INVOKER');
SELECT is((SELECT prosecdef FROM pg_proc WHERE oid = 'lease.import_kcl_ex_rows(text[],text[],text[],text[],text[],bigint[],boolean[])'::regprocedure), false,
          'import_kcl_ex_rows is SECURITY INVOKER');
SELECT is((SELECT prosecdef FROM pg_proc WHERE oid = 'lease.import_kcl_dynamodb(text,text,text)'::regprocedure), false,
          'import_kcl_dynamodb is SECURITY INVOKER');
SELECT function_privs_are('lease', 'import_kcl_dynamodb', ARRAY['text', 'text', 'text'], 'public', ARRAY[]::text[],
                          'PUBLIC cannot run import_kcl_dynamodb');

CREATE ROLE tap_taker_worker;
GRANT USAGE ON SCHEMA lease TO tap_taker_worker;
GRANT EXECUTE ON FUNCTION
    lease.create_lease(text, text, text, text[], text),
    lease.take_leases(text, text, text, interval, integer, integer, double precision, interval),
    lease.renew_leases(text, text, text, interval, interval),
    lease.my_leases(text, text, text),
    lease.release_lease(text, text, text, text),
    lease.update_checkpoint(text, text, text, text, text, bigint, bigint, bigint)
    TO tap_taker_worker;
CREATE ROLE tap_taker_monitor;
GRANT USAGE ON SCHEMA lease TO tap_taker_monitor;
GRANT SELECT ON lease.lease_status, lease.worker_loads TO tap_taker_monitor;
-- 0.2.0: roles act for, and see, only the apps they are granted; reading
-- the views runs their filter, lease.has_app_access, as the reader
GRANT EXECUTE ON FUNCTION lease.has_app_access(text) TO tap_taker_monitor;
SELECT lease.grant_app('taptk', 'tap_taker_worker');
SELECT lease.grant_app('taptk', 'tap_taker_monitor');

SET LOCAL ROLE tap_taker_worker;
SELECT lease.create_lease('taptk', 's', 'a');
SELECT is((SELECT count(*)::int FROM lease.take_leases('taptk', 's', 'w1')), 1, 'a worker takes its share');
SELECT is((SELECT count(*)::int FROM lease.renew_leases('taptk', 's', 'w1')), 1, 'a worker renews its leases');
SELECT is(lease.update_checkpoint('taptk', 's', 'a', 'w1', '5', 0, 1), true, 'a worker checkpoints with its token');
SELECT results_eq($$SELECT shard_id, lease_epoch, checkpoint FROM lease.my_leases('taptk', 's', 'w1')$$,
                  $$VALUES ('a'::text, 1::bigint, '5'::text)$$, 'a worker reads its own leases');
SELECT is((SELECT lease_epoch FROM lease.renew_leases('taptk', 's', 'w1')), 1::bigint,
          'renew_leases gives the worker its token');
SELECT throws_ok($$SELECT * FROM lease.lease_events$$, '42501', NULL, 'a worker cannot read the events');
RESET ROLE;

SET LOCAL ROLE tap_taker_monitor;
SELECT results_eq($$SELECT lease_owner, state FROM lease.lease_status WHERE app_name = 'taptk'$$,
                  $$VALUES ('w1'::text, 'owned'::text)$$, 'a monitor reads lease_status');
SELECT throws_ok($$SELECT * FROM lease.take_leases('taptk', 's', 'intruder')$$, '42501', NULL,
                 'a monitor cannot take leases');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
