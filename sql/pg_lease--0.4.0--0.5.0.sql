/* pg_lease--0.4.0--0.5.0.sql: upgrade from 0.4.0 to 0.5.0.  Each change here has its twin in the SQL parts (Makefile, SQL_PARTS), and test/upgrade/upgrade.sh proves the two agree. */

\echo Use "ALTER EXTENSION pg_lease UPDATE TO '0.5.0'" to load this file. \quit

----------------------------------------------------------------------------
-- Security and robustness (docs/security.md, "What the 0.4.0 review found"):
-- notifications that cannot fail a lease operation, bounded capacities and
-- weights, granted_by by name, no lineage cycle, the platform's statuses.
-- Admission at every isolation level, the imports and the cheap refusals
-- are in the module alone.  Each part's twin in the SQL parts is named in
-- its comment.
----------------------------------------------------------------------------

-- Notifications skipped when PostgreSQL's NOTIFY queue is at
-- lease.notify_queue_limit or fuller (src/leases/leases.sql,
-- src/leases/monitoring.sql, src/common/finish.sql).
CREATE SEQUENCE lease.notifications_skipped;

COMMENT ON SEQUENCE lease.notifications_skipped IS
    'Ownership-change notifications skipped because the NOTIFY queue was at lease.notify_queue_limit or fuller (lease.monitoring_notifications).';

CREATE FUNCTION lease.monitoring_notifications()
RETURNS TABLE (skipped bigint, queue_usage double precision)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
SELECT CASE WHEN s.is_called THEN s.last_value ELSE 0 END,
       pg_catalog.pg_notification_queue_usage()
  FROM lease.notifications_skipped AS s
$$;

COMMENT ON FUNCTION lease.monitoring_notifications() IS
    'Metrics: ownership-change notifications skipped because the NOTIFY queue was at lease.notify_queue_limit or fuller (a counter), and the queue''s fill.';

REVOKE ALL ON FUNCTION lease.monitoring_notifications() FROM PUBLIC;

SELECT pg_catalog.pg_extension_config_dump('lease.notifications_skipped', '');

-- Capacities and weights bounded (src/leases/leases.sql: the constraints
-- worker_capacities_capacity_check and shard_leases_load_check), so that
-- no sum or product of the balancing arithmetic can overflow and one app's
-- row cannot make lease.monitoring_worker_loads() fail for every app.
-- Rows above the bounds (0.4.0 accepted any finite value) are brought down
-- to them first.
UPDATE lease.worker_capacities
   SET capacity = GREATEST(LEAST(capacity, '1e6'), '1e-6')
 WHERE capacity OPERATOR(pg_catalog.>) '1e6' OR capacity OPERATOR(pg_catalog.<) '1e-6';
ALTER TABLE lease.worker_capacities
    DROP CONSTRAINT worker_capacities_capacity_check,
    ADD CONSTRAINT worker_capacities_capacity_check
        CHECK (capacity OPERATOR(pg_catalog.>=) '1e-6' AND capacity OPERATOR(pg_catalog.<=) '1e6');
UPDATE lease.shard_leases SET weight = '1e15' WHERE weight OPERATOR(pg_catalog.>) '1e15';
ALTER TABLE lease.shard_leases
    DROP CONSTRAINT shard_leases_load_check,
    ADD CONSTRAINT shard_leases_load_check
        CHECK (weight OPERATOR(pg_catalog.>=) 0 AND weight OPERATOR(pg_catalog.<=) '1e15'
               AND work_rate OPERATOR(pg_catalog.>=) 0 AND work_rate OPERATOR(pg_catalog.<) 'Infinity');

-- app_grants.granted_by holds the granter's name (src/leases/access.sql),
-- so pg_dump writes it by name even once that role is dropped.  A granter
-- dropped before the update is kept as PostgreSQL names an unknown role,
-- "unknown (OID=n)".  The trigger reads the column's name, so it is
-- dropped and made again around the change of type.
DROP TRIGGER app_grants_grantee_name ON lease.app_grants;
ALTER TABLE lease.app_grants
    ALTER COLUMN granted_by TYPE name USING pg_catalog.pg_get_userbyid(granted_by);
CREATE TRIGGER app_grants_grantee_name
    BEFORE INSERT OR UPDATE OF granted_by ON lease.app_grants
    FOR EACH ROW
    EXECUTE FUNCTION lease.app_grants_grantee_name();

-- No write makes a lineage cycle (src/leases/leases.sql: the table
-- stream_lineage and the trigger shard_leases_lineage_checked;
-- src/common/finish.sql marks the table).
-- The lock of a stream's lineage writes (src/leases/lineage.c, 0.5.0):
-- every statement that adds leases with parents to the stream upserts its
-- row (writes counts those statements) and holds it to the end of its
-- transaction, so that they take turns and each checks for a lineage cycle
-- against everything committed before it (the trigger
-- shard_leases_lineage_checked below).  Nothing else reads it.
CREATE TABLE lease.stream_lineage (
    app_name    text        NOT NULL,
    stream_name text        NOT NULL,
    writes      bigint      NOT NULL,
    PRIMARY KEY (app_name, stream_name)
);

COMMENT ON TABLE lease.stream_lineage IS
    'Per stream: how many statements added leases with parents (each one locks the row, so lineage writes of a stream take turns and none makes a cycle).';

REVOKE ALL ON lease.stream_lineage FROM PUBLIC;

-- Rows added (0.5.0): no lease may have more than 32 parents, and no
-- lineage may be a cycle, checked against every lease committed before,
-- with the stream's lease.stream_lineage row locked (src/leases/lineage.c).
-- C, so that the check is linear in the lineage it reads.
CREATE FUNCTION lease.shard_leases_lineage_checked()
RETURNS trigger
AS 'MODULE_PATHNAME', 'lease_shard_leases_lineage_checked'
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE TRIGGER shard_leases_lineage_checked
    AFTER INSERT ON lease.shard_leases
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT
    EXECUTE FUNCTION lease.shard_leases_lineage_checked();

REVOKE ALL ON FUNCTION lease.shard_leases_lineage_checked() FROM PUBLIC;

SELECT pg_catalog.pg_extension_config_dump('lease.stream_lineage', 'WHERE false');

-- The platform's own statuses (src/bindings/lifecycle.c, 0.5.0): a
-- sandbox's starting, ready and suspended, a conversation's idle, along
-- their lifecycle only, under the conversation's lock.
CREATE FUNCTION lease.set_sandbox_status(conversation_id bigint, status text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_set_sandbox_status'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.set_conversation_status(conversation_id bigint, status text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_set_conversation_status'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

REVOKE ALL ON FUNCTION lease.set_sandbox_status(bigint, text), lease.set_conversation_status(bigint, text)
    FROM PUBLIC;
