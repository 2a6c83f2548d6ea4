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
