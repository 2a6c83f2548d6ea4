-- lease.import_kcl_ex: switching over from the Elixir kcl_ex Ecto adapter.
CREATE TABLE lease_test.shard_lease (
    shard_id varchar(255) PRIMARY KEY, app_name varchar(255), stream_name varchar(255),
    checkpoint varchar(255), lease_owner varchar(255), lease_count integer, completed boolean);
INSERT INTO lease_test.shard_lease VALUES
    ('shardId-000', 'kx', 'orders', '4959033827149025660855969253', 'node-a', 17, false),
    ('shardId-001', 'kx', 'orders', NULL, NULL, NULL, NULL),
    ('shardId-002', 'kx', 'orders', '4959033827149025660855969999', 'node-b', 3, true),
    ('shardId-003', 'kx', 'orders', 'LATEST', '', 0, false);

SELECT lease.import_kcl_ex('lease_test.shard_lease') AS imported;
SELECT shard_id, lease_owner, lease_count, checkpoint, lease_epoch,
       lease_expires_at <= clock_timestamp() AS expired_at_once
  FROM lease.shard_leases WHERE app_name = 'kx' ORDER BY shard_id;
SELECT shard_id, state FROM lease.lease_status WHERE app_name = 'kx' ORDER BY shard_id;
-- idempotent: a second run changes nothing
SELECT lease_test.digest() AS before \gset
SELECT lease.import_kcl_ex('lease_test.shard_lease') AS imported_again;
SELECT lease_test.digest() = :'before' AS nothing_changed;
-- the old owner re-taking its lease under the same name is not an owner switch
SELECT lease.take_lease('kx', 'orders', 'shardId-000', 'node-a');
SELECT owner_switches_since_checkpoint FROM lease.shard_leases WHERE app_name = 'kx' AND shard_id = 'shardId-000';
-- existing leases are never overwritten by an import
UPDATE lease_test.shard_lease SET checkpoint = '1' WHERE shard_id = 'shardId-000';
SELECT lease.import_kcl_ex('lease_test.shard_lease') AS imported_after_change;
SELECT checkpoint FROM lease.shard_leases WHERE app_name = 'kx' AND shard_id = 'shardId-000';

-- an adapter table without app_name / stream_name: import from a view
CREATE TABLE lease_test.old_shard_lease (shard_id varchar(255) PRIMARY KEY, checkpoint varchar(255),
    lease_owner varchar(255), lease_count integer, completed boolean);
INSERT INTO lease_test.old_shard_lease VALUES ('s-1', '12', 'n1', 2, false);
SELECT lease_test.try($$SELECT lease.import_kcl_ex('lease_test.old_shard_lease')$$);
CREATE VIEW lease_test.old_shard_lease_v AS
    SELECT shard_id, 'kx' AS app_name, 'old' AS stream_name, checkpoint, lease_owner, lease_count, completed
      FROM lease_test.old_shard_lease;
SELECT lease.import_kcl_ex('lease_test.old_shard_lease_v') AS from_view;
SELECT stream_name, shard_id, checkpoint FROM lease.shard_leases WHERE app_name = 'kx' AND stream_name = 'old';

-- bad input: errors, and nothing written
SELECT lease_test.digest() AS before \gset
SELECT lease_test.try($$SELECT lease.import_kcl_ex(NULL)$$);
SELECT lease_test.try($$SELECT lease.import_kcl_ex('lease_test.no_such_table')$$);
SELECT lease_test.try($$SELECT lease.import_kcl_ex(12345678::regclass)$$);
SELECT lease_test.try($$SELECT lease.import_kcl_ex('lease.shard_leases_owner_idx')$$);
-- a column of the wrong type
CREATE TABLE lease_test.bad_types (shard_id text, app_name text, stream_name text,
    checkpoint text, lease_owner text, lease_count text, completed boolean);
SELECT lease_test.try($$SELECT lease.import_kcl_ex('lease_test.bad_types')$$);
-- rows that cannot become leases: nothing of the table is imported
CREATE TABLE lease_test.bad_rows (LIKE lease_test.shard_lease);
INSERT INTO lease_test.bad_rows VALUES ('ok', 'kx', 'bad', NULL, NULL, 0, false),
    (' ', 'kx', 'bad', NULL, NULL, 0, false), ('neg', 'kx', 'bad', NULL, NULL, -1, false),
    ('x', NULL, 'bad', NULL, NULL, 0, false);
SELECT lease_test.try($$SELECT lease.import_kcl_ex('lease_test.bad_rows')$$);
-- a table name that needs quoting reaches the SQL only as a quoted identifier
CREATE TABLE lease_test."shard lease; DROP TABLE x" (LIKE lease_test.shard_lease);
SELECT lease.import_kcl_ex('lease_test."shard lease; DROP TABLE x"') AS quoted_name;
SELECT lease_test.digest() = :'before' AS nothing_written;

-- SECURITY INVOKER: a role that cannot read the source cannot import it,
-- even when it may execute the function
CREATE ROLE lease_test_importer;
GRANT USAGE ON SCHEMA lease TO lease_test_importer;
GRANT EXECUTE ON FUNCTION lease.import_kcl_ex(regclass) TO lease_test_importer;
SET ROLE lease_test_importer;
SELECT lease_test.try($$SELECT lease.import_kcl_ex('lease_test.shard_lease')$$);
RESET ROLE;
GRANT SELECT ON lease_test.shard_lease TO lease_test_importer;
SET ROLE lease_test_importer;
-- it may read the source now, but it may not write lease.shard_leases
SELECT lease_test.try($$SELECT lease.import_kcl_ex('lease_test.shard_lease')$$);
-- the errors in full: what to grant, and no SQL of pg_lease's as CONTEXT
\set VERBOSITY default
SELECT lease.import_kcl_ex('lease_test.shard_lease');
RESET ROLE;
REVOKE ALL ON lease_test.shard_lease FROM lease_test_importer;
SET ROLE lease_test_importer;
SELECT lease.import_kcl_ex('lease_test.shard_lease');
RESET ROLE;
-- an error the caller causes inside a lease function's own SQL (here a
-- read-only transaction) names the statement, not its SQL text
BEGIN READ ONLY;
SELECT lease.take_lease('kx', 'orders', 'shardId-001', 'node-c');
ROLLBACK;
\set VERBOSITY terse
REVOKE ALL ON lease_test.shard_lease FROM lease_test_importer;
REVOKE ALL ON SCHEMA lease FROM lease_test_importer;
REVOKE ALL ON FUNCTION lease.import_kcl_ex(regclass) FROM lease_test_importer;
DROP ROLE lease_test_importer;
SELECT lease_test.digest() = :'before' AS nothing_written;

-- lease.import_kcl_ex_rows: the same import from seven arrays, one element
-- per lease (what pg_lease_router sends each partition)
SELECT lease.import_kcl_ex_rows(
    ARRAY['kr', 'kr', 'kr', 'kr'], ARRAY['orders', 'orders', 'orders', 'audit'],
    ARRAY['shardId-000', 'shardId-001', 'shardId-002', 'shardId-000'],
    ARRAY['4959', NULL, '5000', ' '], ARRAY['node-a', NULL, 'node-b', ''],
    ARRAY[17, NULL, 3, 0]::bigint[], ARRAY[false, NULL, true, false]) AS imported_rows;
SELECT stream_name, shard_id, lease_owner, lease_count, checkpoint, lease_epoch,
       lease_expires_at <= clock_timestamp() AS expired_at_once
  FROM lease.shard_leases WHERE app_name = 'kr' ORDER BY stream_name, shard_id;
-- idempotent, and an existing lease is never overwritten
SELECT lease_test.digest() AS before \gset
SELECT lease.import_kcl_ex_rows('{kr}', '{orders}', '{shardId-000}', '{1}', '{node-z}', '{99}', '{true}')
    AS imported_again;
-- no rows: nothing to do
SELECT lease.import_kcl_ex_rows('{}', '{}', '{}', '{}', '{}', '{}', '{}') AS imported_none;
SELECT lease_test.digest() = :'before' AS nothing_changed;

-- bad input: errors, and nothing written
SELECT lease_test.try($$SELECT lease.import_kcl_ex_rows(NULL, '{s}', '{x}', '{1}', '{w}', '{0}', '{f}')$$);
SELECT lease_test.try($$SELECT lease.import_kcl_ex_rows('{kr}', '{s}', '{x}', '{1}', '{w}', '{0}', NULL)$$);
-- arrays of different lengths
SELECT lease_test.try($$SELECT lease.import_kcl_ex_rows('{kr}', '{s,t}', '{x}', '{1}', '{w}', '{0}', '{f}')$$);
SELECT lease_test.try($$SELECT lease.import_kcl_ex_rows('{kr}', '{s}', '{x}', '{1}', '{w}', '{0}', '{}')$$);
-- a two-dimensional array
SELECT lease_test.try($$SELECT lease.import_kcl_ex_rows('{{kr}}', '{s}', '{x}', '{1}', '{w}', '{0}', '{f}')$$);
-- rows that cannot become leases: none of the rows is imported
SELECT lease_test.try($$SELECT lease.import_kcl_ex_rows('{kr,kr,kr,kr,NULL}', '{bad,bad,bad,bad,bad}',
    '{ok," ",neg,long,x}', ARRAY[NULL, NULL, NULL, repeat('9', 1025), NULL], '{}'::text[] || ARRAY[NULL, NULL, NULL, NULL, NULL],
    '{0,0,-1,0,0}', '{f,f,f,f,f}')$$);
SELECT lease_test.try($$SELECT lease.import_kcl_ex_rows('{kr}', '{bad}', ARRAY[repeat('s', 257)], '{1}', '{w}', '{0}', '{f}')$$);
SELECT lease_test.digest() = :'before' AS nothing_written;

-- the caller's privileges: INSERT on lease.shard_leases, and row-level
-- security admits the rows of the caller's own apps only
CREATE ROLE lease_test_importer;
GRANT USAGE ON SCHEMA lease TO lease_test_importer;
GRANT EXECUTE ON FUNCTION lease.import_kcl_ex_rows(text[], text[], text[], text[], text[], bigint[], boolean[])
    TO lease_test_importer;
SET ROLE lease_test_importer;
SELECT lease_test.try($$SELECT lease.import_kcl_ex_rows('{kr}', '{mine}', '{x}', '{1}', '{w}', '{0}', '{f}')$$);
RESET ROLE;
-- the operator recipe (docs/security.md): has_app_access is what the
-- row-level security policy calls
GRANT SELECT, INSERT ON lease.shard_leases TO lease_test_importer;
GRANT EXECUTE ON FUNCTION lease.has_app_access(text) TO lease_test_importer;
SELECT lease.grant_app('kr', 'lease_test_importer');
SELECT lease_test.digest() AS before \gset
SET ROLE lease_test_importer;
-- a row of an app it is not granted: the whole call fails
SELECT lease_test.try($$SELECT lease.import_kcl_ex_rows('{kr,kx}', '{mine,theirs}', '{x,x}', '{1,1}', '{w,w}', '{0,0}', '{f,f}')$$);
RESET ROLE;
SELECT lease_test.digest() = :'before' AS nothing_written_by_the_importer;
SET ROLE lease_test_importer;
SELECT lease.import_kcl_ex_rows('{kr}', '{mine}', '{x}', '{1}', '{w}', '{0}', '{f}') AS imported_own_app;
RESET ROLE;
SELECT stream_name, shard_id, checkpoint FROM lease.shard_leases WHERE app_name = 'kr' AND stream_name = 'mine';
SELECT lease.revoke_app('kr', 'lease_test_importer');
REVOKE ALL ON lease.shard_leases FROM lease_test_importer;
REVOKE ALL ON SCHEMA lease FROM lease_test_importer;
REVOKE ALL ON FUNCTION lease.has_app_access(text) FROM lease_test_importer;
REVOKE ALL ON FUNCTION lease.import_kcl_ex_rows(text[], text[], text[], text[], text[], bigint[], boolean[])
    FROM lease_test_importer;
DROP ROLE lease_test_importer;
