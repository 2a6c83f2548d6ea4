-- pgTAP: the support window (docs/operations.md, "Upgrades").  The module
-- serves the 0.5.0 and 0.4.0 schemas; on an older one (here 0.3.0, built
-- from the frozen scripts) a call raises 55000 with the hint to update,
-- and ALTER EXTENSION pg_lease UPDATE makes the same calls work.
BEGIN;
SELECT plan(10);

-- The hint of the error `sql` raises (NULL when it raises none).
CREATE FUNCTION pg_temp.hint_of(sql text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    hint text;
BEGIN
    EXECUTE sql;
    RETURN NULL;
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS hint = PG_EXCEPTION_HINT;
    RETURN hint;
END
$$;

DROP EXTENSION pg_lease;
CREATE EXTENSION pg_lease VERSION '0.3.0';

SELECT throws_ok($$SELECT lease.create_lease('window', 's', 'a')$$, '55000',
                 'pg_lease schema version 0.3.0 is too old for this module',
                 'create_lease on a 0.3.0 schema: too old');
SELECT throws_ok($$SELECT lease.take_lease('window', 's', 'a', 'w1')$$, '55000',
                 'pg_lease schema version 0.3.0 is too old for this module',
                 'take_lease on a 0.3.0 schema: too old');
SELECT throws_ok($$SELECT * FROM lease.take_leases('window', 's', 'w1', '10 s')$$, '55000',
                 'pg_lease schema version 0.3.0 is too old for this module',
                 'take_leases on a 0.3.0 schema: too old');
SELECT throws_ok($$SELECT * FROM lease.renew_leases('window', 's', 'w1', '10 s')$$, '55000',
                 'pg_lease schema version 0.3.0 is too old for this module',
                 'renew_leases on a 0.3.0 schema: too old');
SELECT throws_ok($$SELECT * FROM lease.start_conversation('window-u', 'agent', NULL, NULL, 'c1')$$, '55000',
                 'pg_lease schema version 0.3.0 is too old for this module',
                 'start_conversation on a 0.3.0 schema: too old');
SELECT is(pg_temp.hint_of($$SELECT lease.create_lease('window', 's', 'a')$$),
          'Update the extension with ALTER EXTENSION pg_lease UPDATE.',
          'the error hints at the update');
SELECT is((SELECT count(*)::int FROM lease.shard_leases), 0, 'nothing was written');

ALTER EXTENSION pg_lease UPDATE;
SELECT is(lease.create_lease('window', 's', 'a'), true, 'after the update create_lease works');
SELECT is(lease.take_lease('window', 's', 'a', 'w1'), 1::bigint, 'after the update take_lease works');

-- the previous release's schema is served as it is
DROP EXTENSION pg_lease;
CREATE EXTENSION pg_lease VERSION '0.4.0';
SELECT is(lease.create_lease('window', 's', 'a'), true, 'create_lease on a 0.4.0 schema works');

SELECT * FROM finish();
ROLLBACK;
