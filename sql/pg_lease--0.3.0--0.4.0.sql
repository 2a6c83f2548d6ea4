/* pg_lease--0.3.0--0.4.0.sql: upgrade from 0.3.0 to 0.4.0.  Each change here has its twin in the SQL parts (Makefile, SQL_PARTS), and test/upgrade/upgrade.sh proves the two agree. */

\echo Use "ALTER EXTENSION pg_lease UPDATE TO '0.4.0'" to load this file. \quit

-- The guard of src/common/schema.sql, for an installed extension: the
-- schema must be owned by the upgrading role or a superuser, no other role
-- may create objects in it, and every function, operator and collation in
-- it must be the extension's own.  A 0.3.0 or older install into a schema
-- prepared by another role may already have bound its DDL to that role's
-- objects (docs/security.md, "Installing into a schema you own"), so it is
-- refused rather than upgraded.  Everything here is schema-qualified.
DO $guard$
DECLARE
    schema_owner name;
    owner_is_superuser boolean;
    creators text;
    planted text;
BEGIN
    SELECT r.rolname, r.rolsuper INTO schema_owner, owner_is_superuser
      FROM pg_catalog.pg_namespace AS n
      JOIN pg_catalog.pg_roles AS r ON r.oid OPERATOR(pg_catalog.=) n.nspowner
     WHERE n.nspname OPERATOR(pg_catalog.=) 'lease';
    IF NOT (owner_is_superuser OR schema_owner OPERATOR(pg_catalog.=) CURRENT_USER) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'insufficient_privilege',
            MESSAGE = pg_catalog.format('schema "lease" is owned by role "%s", which is neither a superuser nor the installing role', schema_owner),
            DETAIL = 'The owner of a schema can create, replace and drop objects in it, so it could take over the extension and the roles that use it.',
            HINT = 'Inspect what the schema contains, then drop it, or make a superuser its owner (ALTER SCHEMA lease OWNER TO a superuser), and run ALTER EXTENSION pg_lease UPDATE again.';
    END IF;
    SELECT pg_catalog.string_agg(COALESCE(pg_catalog.quote_ident(g.rolname), 'PUBLIC'), ', ')
      INTO creators
      FROM pg_catalog.pg_namespace AS n,
           LATERAL pg_catalog.aclexplode(n.nspacl) AS a
      LEFT JOIN pg_catalog.pg_roles AS g ON g.oid OPERATOR(pg_catalog.=) a.grantee
     WHERE n.nspname OPERATOR(pg_catalog.=) 'lease'
       AND a.privilege_type OPERATOR(pg_catalog.=) 'CREATE'
       AND a.grantee OPERATOR(pg_catalog.<>) n.nspowner
       AND NOT COALESCE(g.rolsuper, false);
    IF creators IS NOT NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'insufficient_privilege',
            MESSAGE = 'roles other than the owner of schema "lease" may create objects in it',
            DETAIL = pg_catalog.format('CREATE on schema "lease" is granted to: %s.', creators),
            HINT = 'Inspect what the schema contains, then drop it, or REVOKE CREATE ON SCHEMA lease from those roles, and run ALTER EXTENSION pg_lease UPDATE again.';
    END IF;
    SELECT pg_catalog.string_agg(pg_catalog.concat_ws(' ', i.type, i.identity), ', '
                                 ORDER BY i.identity)
      INTO planted
      FROM (SELECT CAST('pg_catalog.pg_proc' AS pg_catalog.regclass) AS classid, p.oid AS objid
              FROM pg_catalog.pg_proc AS p, pg_catalog.pg_namespace AS n
             WHERE n.oid OPERATOR(pg_catalog.=) p.pronamespace
               AND n.nspname OPERATOR(pg_catalog.=) 'lease'
            UNION ALL
            SELECT CAST('pg_catalog.pg_operator' AS pg_catalog.regclass), p.oid
              FROM pg_catalog.pg_operator AS p, pg_catalog.pg_namespace AS n
             WHERE n.oid OPERATOR(pg_catalog.=) p.oprnamespace
               AND n.nspname OPERATOR(pg_catalog.=) 'lease'
            UNION ALL
            SELECT CAST('pg_catalog.pg_collation' AS pg_catalog.regclass), c.oid
              FROM pg_catalog.pg_collation AS c, pg_catalog.pg_namespace AS n
             WHERE n.oid OPERATOR(pg_catalog.=) c.collnamespace
               AND n.nspname OPERATOR(pg_catalog.=) 'lease') AS o,
           LATERAL pg_catalog.pg_identify_object(o.classid, o.objid, 0) AS i
     WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_depend AS d, pg_catalog.pg_extension AS e
                        WHERE d.classid OPERATOR(pg_catalog.=) o.classid
                          AND d.objid OPERATOR(pg_catalog.=) o.objid
                          AND d.refclassid OPERATOR(pg_catalog.=) CAST('pg_catalog.pg_extension' AS pg_catalog.regclass)
                          AND d.refobjid OPERATOR(pg_catalog.=) e.oid
                          AND e.extname OPERATOR(pg_catalog.=) 'pg_lease'
                          AND d.deptype OPERATOR(pg_catalog.=) 'e');
    IF planted IS NOT NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'insufficient_privilege',
            MESSAGE = 'schema "lease" holds functions or operators that are not part of pg_lease',
            DETAIL = pg_catalog.format('Objects that are not members of the extension: %s.  An earlier install may have bound its definitions to them.', planted),
            HINT = 'Inspect those objects and who created them.  Drop them, then drop and reinstall the extension (after saving its data with pg_dump), since its existing definitions may use them.';
    END IF;
END
$guard$;

-- Rows every function can go on with (src/leases/leases.sql,
-- src/bindings/bindings.sql): counters below 2^62 (attempts below 2^30),
-- finite times.  Validated: the update stops if a row breaks one of them
-- (CHANGELOG.md, "Upgrading from 0.3.0", says how to find and fix it).
ALTER TABLE lease.shard_leases
    ADD CONSTRAINT shard_leases_counters_check
        CHECK (lease_count OPERATOR(pg_catalog.<) 4611686018427387904
               AND lease_epoch OPERATOR(pg_catalog.<) 4611686018427387904
               AND owner_switches_since_checkpoint OPERATOR(pg_catalog.<) 4611686018427387904),
    ADD CONSTRAINT shard_leases_times_check
        CHECK (pg_catalog.isfinite(lease_expires_at) AND pg_catalog.isfinite(handoff_requested_at)
               AND pg_catalog.isfinite(handoff_deadline) AND pg_catalog.isfinite(created_at)
               AND pg_catalog.isfinite(updated_at) AND pg_catalog.isfinite(checkpointed_at));
ALTER TABLE lease.sandboxes
    ADD CONSTRAINT sandboxes_times_check
        CHECK (pg_catalog.isfinite(created_at) AND pg_catalog.isfinite(updated_at));
ALTER TABLE lease.conversations
    ADD CONSTRAINT conversations_times_check
        CHECK (pg_catalog.isfinite(created_at) AND pg_catalog.isfinite(updated_at));
ALTER TABLE lease.turns
    ADD CONSTRAINT turns_times_check CHECK (pg_catalog.isfinite(created_at));
ALTER TABLE lease.compensation_failures
    ADD CONSTRAINT compensation_failures_counters_check
        CHECK (attempts OPERATOR(pg_catalog.<) 1073741824),
    ADD CONSTRAINT compensation_failures_times_check
        CHECK (pg_catalog.isfinite(occurred_at) AND pg_catalog.isfinite(last_failed_at)
               AND pg_catalog.isfinite(resolved_at));

-- App grants record the grantee's name (src/leases/access.sql): a grant
-- matches only the role that still has the OID and the name it was granted
-- to, and a dump carries only those.  Grants of roles dropped since (which
-- matched nobody, but would match a role given the same OID later) are
-- removed.
ALTER TABLE lease.app_grants ADD COLUMN grantee_name name;
DELETE FROM lease.app_grants AS g
 WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_roles AS r WHERE r.oid OPERATOR(pg_catalog.=) g.grantee);
UPDATE lease.app_grants AS g SET grantee_name = pg_catalog.pg_get_userbyid(g.grantee);
ALTER TABLE lease.app_grants ALTER COLUMN grantee_name SET NOT NULL;

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

REVOKE ALL ON FUNCTION lease.app_grants_grantee_name() FROM PUBLIC;

-- The dump filter; out of the extension and back in first, so that the
-- table is marked last, as in a fresh install (src/common/finish.sql).
ALTER EXTENSION pg_lease DROP TABLE lease.app_grants;
ALTER EXTENSION pg_lease ADD TABLE lease.app_grants;
SELECT pg_catalog.pg_extension_config_dump('lease.app_grants',
    'WHERE pg_catalog.pg_get_userbyid(grantee) OPERATOR(pg_catalog.=) grantee_name');

-- Issue 27, item 2: admission serializes on the one row of
-- lease.admission_gate, which only the extension's owner can lock, instead
-- of advisory locks any role may take; start_conversation and
-- rotate_channel move to the C symbols that take it (CREATE OR REPLACE with
-- the same signature keeps their grants).
CREATE TABLE lease.admission_gate (
    only_row  boolean NOT NULL DEFAULT true PRIMARY KEY,
    CONSTRAINT admission_gate_only_row_check CHECK (only_row)
);

COMMENT ON TABLE lease.admission_gate IS
    'Exactly one row, locked by every admission (start_conversation, rotate_channel) until its transaction ends. Do not lock, delete or add rows.';

INSERT INTO lease.admission_gate DEFAULT VALUES;

REVOKE ALL ON lease.admission_gate FROM PUBLIC;

CREATE OR REPLACE FUNCTION lease.start_conversation(
    user_id text, agent_id text, vault_id text, environment_id text, channel_id text)
RETURNS TABLE (outcome text, conversation_id bigint, detail text)
AS 'MODULE_PATHNAME', 'lease_start_conversation_0_4'
LANGUAGE C VOLATILE SECURITY DEFINER ROWS 1
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION lease.rotate_channel(
    user_id text, agent_id text, vault_id text, environment_id text, channel_id text,
    rotate_from bigint)
RETURNS TABLE (outcome text, conversation_id bigint, previous_conversation_id bigint, detail text)
AS 'MODULE_PATHNAME', 'lease_rotate_channel_0_4'
LANGUAGE C VOLATILE SECURITY DEFINER ROWS 1
SET search_path = pg_catalog, pg_temp;

-- The ownership bookkeeping of inserted and deleted leases is written once
-- (src/leases/workers.c runs LEASE_SQL_RECORD_LOADS of src/leases/leases.h):
-- the statement triggers below take it over from shard_leases_inserted and
-- shard_leases_deleted.
CREATE OR REPLACE FUNCTION lease.shard_leases_inserted()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO lease.stream_takeable (app_name, stream_name)
    SELECT DISTINCT n.app_name, n.stream_name FROM new_rows AS n
    ON CONFLICT (app_name, stream_name) DO NOTHING;
    -- FOR SHARE: a round counting the stream holds the row FOR NO KEY
    -- UPDATE, so this change is either in its count or leaves its mark
    INSERT INTO lease.lineage_changes (app_name, stream_name)
    SELECT t.app_name, t.stream_name
      FROM (SELECT s.app_name, s.stream_name, s.takeable
              FROM lease.stream_takeable AS s
             WHERE EXISTS (SELECT 1 FROM new_rows AS n
                            WHERE n.app_name OPERATOR(pg_catalog.=) s.app_name
                              AND n.stream_name OPERATOR(pg_catalog.=) s.stream_name)
               FOR SHARE OF s) AS t
     WHERE t.takeable IS NOT NULL;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION lease.shard_leases_deleted()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO lease.lineage_changes (app_name, stream_name)
    SELECT t.app_name, t.stream_name
      FROM (SELECT s.app_name, s.stream_name, s.takeable
              FROM lease.stream_takeable AS s
             WHERE EXISTS (SELECT 1 FROM old_rows AS o
                            WHERE o.app_name OPERATOR(pg_catalog.=) s.app_name
                              AND o.stream_name OPERATOR(pg_catalog.=) s.stream_name
                              AND o.checkpoint OPERATOR(pg_catalog.<>) 'SHARD_END')
               FOR SHARE OF s) AS t
     WHERE t.takeable IS NOT NULL;
    RETURN NULL;
END
$$;

-- The owners of inserted and deleted leases (src/leases/workers.c): the
-- C runs the bookkeeping every ownership change runs (LEASE_SQL_RECORD_LOADS
-- in src/leases/leases.h) over the statement's rows, so the rule is written
-- once.
CREATE FUNCTION lease.shard_leases_owners_changed()
RETURNS trigger
AS 'MODULE_PATHNAME', 'lease_shard_leases_owners_changed'
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

REVOKE ALL ON FUNCTION lease.shard_leases_owners_changed() FROM PUBLIC;

CREATE TRIGGER shard_leases_owners_inserted
    AFTER INSERT ON lease.shard_leases
    REFERENCING NEW TABLE AS changed_rows
    FOR EACH STATEMENT
    EXECUTE FUNCTION lease.shard_leases_owners_changed();

CREATE TRIGGER shard_leases_owners_deleted
    AFTER DELETE ON lease.shard_leases
    REFERENCING OLD TABLE AS changed_rows
    FOR EACH STATEMENT
    EXECUTE FUNCTION lease.shard_leases_owners_changed();

-- Every function whose C depends on the schema version is bound to the
-- 0.4.0 entry point of its C (src/common/version.h): they read
-- lease.app_grants.grantee_name (the app check), and the lease functions
-- that change ownership keep lease.stream_workers.  CREATE OR REPLACE with
-- the same signature keeps each function's OID and grants.
CREATE OR REPLACE FUNCTION lease.has_app_access(app_name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_has_app_access_0_4'
LANGUAGE C STABLE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION lease.grant_app(app_name text, grantee regrole)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_grant_app_0_4'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION lease.revoke_app(app_name text, grantee regrole)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_revoke_app_0_4'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION lease.create_lease(
    app_name text, stream_name text, shard_id text,
    parent_shard_ids text[] DEFAULT '{}', checkpoint text DEFAULT 'TRIM_HORIZON')
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_create_lease_0_4'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION lease.take_lease(
    app_name text, stream_name text, shard_id text, new_owner text,
    lease_count bigint DEFAULT NULL, lease_duration interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lease_take_lease_0_4'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION lease.renew_lease(
    app_name text, stream_name text, shard_id text, owner text,
    lease_count bigint, lease_duration interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lease_renew_lease_0_4'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION lease.update_checkpoint(
    app_name text, stream_name text, shard_id text, owner text,
    checkpoint text, sub_sequence bigint DEFAULT 0)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_update_checkpoint_0_4'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION lease.release_lease(
    app_name text, stream_name text, shard_id text, owner text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_release_lease_0_4'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION lease.close_shard(
    app_name text, stream_name text, shard_id text, owner text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_close_shard_0_4'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION lease.update_checkpoint(
    app_name text, stream_name text, shard_id text, owner text,
    checkpoint text, sub_sequence bigint, fencing_token bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_update_checkpoint_fenced_0_4'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION lease.prepare_checkpoint(
    app_name text, stream_name text, shard_id text, owner text,
    pending_checkpoint text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_prepare_checkpoint_0_4'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION lease.cleanup_ended(app_name text, stream_name text)
RETURNS integer
AS 'MODULE_PATHNAME', 'lease_cleanup_ended_0_4'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION lease.delete_lease(app_name text, stream_name text, shard_id text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_delete_lease_0_4'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION lease.take_leases(
    app_name text, stream_name text, owner text,
    lease_duration interval DEFAULT NULL, max_leases integer DEFAULT NULL,
    max_steal integer DEFAULT 1)
RETURNS TABLE(shard_id text, lease_count bigint, action text,
              previous_owner text, lease_epoch bigint)
AS 'MODULE_PATHNAME', 'lease_take_leases_0_4'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION lease.renew_leases(
    app_name text, stream_name text, owner text,
    lease_duration interval DEFAULT NULL)
RETURNS TABLE(shard_id text, lease_count bigint, handoff_to text, lease_epoch bigint)
AS 'MODULE_PATHNAME', 'lease_renew_leases_0_4'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION lease.my_leases(app_name text, stream_name text, owner text)
RETURNS TABLE(shard_id text, lease_count bigint, lease_epoch bigint,
              checkpoint text, checkpoint_sub_sequence bigint,
              pending_checkpoint text, expires_in interval,
              handoff_to text, handoff_from text, waiting_on text[])
AS 'MODULE_PATHNAME', 'lease_my_leases_0_4'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION lease.request_handoff(
    app_name text, stream_name text, shard_id text, to_owner text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_request_handoff_0_4'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

-- Issue 20: the lifecycle of a rotation, quotas as functions, what the
-- application sees of a tenant (src/bindings/bindings.sql).  admit_turn
-- moves to the symbol whose first turn on a replacement ends what it
-- replaced (CREATE OR REPLACE with the same signature keeps its grants).
CREATE OR REPLACE FUNCTION lease.admit_turn(conversation_id bigint)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lease_admit_turn_0_4'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

-- Serves list_conversations: a tenant's live conversations.
CREATE INDEX conversations_live_user_idx
    ON lease.conversations (user_id, agent_id)
    WHERE status OPERATOR(pg_catalog.=) ANY (ARRAY['pending', 'running', 'idle']);

-- The lifecycle of a rotation (src/bindings/lifecycle.c): a replacement
-- starts with its first turn (admit_turn, bound from 0.4.0 to the symbol
-- that also ends what it replaced) or with confirm_rotation; either ends the
-- live, unbound conversations up its rotated_from chain, freeing their
-- sandbox slots.  list_conversations is what the application sees of a
-- tenant; the quota functions are the fleet operator's (docs/security.md).

CREATE FUNCTION lease.confirm_rotation(
    previous_conversation_id bigint, conversation_id bigint)
RETURNS text
AS 'MODULE_PATHNAME', 'lease_confirm_rotation'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.list_conversations(
    user_id text, agent_id text, vault_id text, environment_id text)
RETURNS TABLE (conversation_id bigint, agent_id text, vault_id text, environment_id text,
               channel_id text, status text, sandbox_id bigint, sandbox_status text,
               rotated_from bigint, created_at timestamptz, age interval)
AS 'MODULE_PATHNAME', 'lease_list_conversations'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.set_tenant_limit(user_id text, sandbox_limit integer)
RETURNS integer
AS 'MODULE_PATHNAME', 'lease_set_tenant_limit'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.clear_tenant_limit(user_id text)
RETURNS integer
AS 'MODULE_PATHNAME', 'lease_clear_tenant_limit'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.tenant_limit(user_id text)
RETURNS TABLE (sandbox_limit integer, own_limit boolean, active_sandboxes bigint)
AS 'MODULE_PATHNAME', 'lease_tenant_limit'
LANGUAGE C VOLATILE SECURITY DEFINER ROWS 1
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.list_tenant_limits()
RETURNS TABLE (user_id text, sandbox_limit integer, active_sandboxes bigint)
AS 'MODULE_PATHNAME', 'lease_list_tenant_limits'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

REVOKE ALL ON FUNCTION
    lease.confirm_rotation(bigint, bigint),
    lease.list_conversations(text, text, text, text),
    lease.set_tenant_limit(text, integer),
    lease.clear_tenant_limit(text),
    lease.tenant_limit(text),
    lease.list_tenant_limits()
    FROM PUBLIC;

-- The fenced-transaction contract (docs/exactly-once.md): inside the
-- caller's transaction, locks the lease row FOR SHARE until the transaction
-- ends and returns its checkpoint, or raises 55000 when owner does not hold
-- the lease at lease_epoch.  Every ownership change waits for the commit.
CREATE FUNCTION lease.hold_lease(
    app_name text, stream_name text, shard_id text, owner text,
    lease_epoch bigint)
RETURNS text
AS 'MODULE_PATHNAME', 'lease_hold_lease'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;
REVOKE ALL ON FUNCTION lease.hold_lease(text, text, text, text, bigint) FROM PUBLIC;

-- Switching from AWS KCL (issue 25): import an export of the KCL DynamoDB
-- lease table (src/leases/import.c).  New in 0.4.0, so no grant to keep.
-- The leases of an export of the AWS Kinesis Client Library's DynamoDB
-- lease table (src/leases/import.c): one row per item saying what became of
-- it.  SECURITY INVOKER like import_kcl_ex_rows: the caller needs SELECT and
-- INSERT on lease.shard_leases, and row-level security admits the rows of
-- its own apps only.  An operator function; worker roles are not granted it.
CREATE FUNCTION lease.import_kcl_dynamodb(app_name text, stream_name text, export text)
RETURNS TABLE (item bigint, lease_key text, shard_id text, action text, detail text)
AS 'MODULE_PATHNAME', 'lease_import_kcl_dynamodb'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;
REVOKE ALL ON FUNCTION lease.import_kcl_dynamodb(text, text, text) FROM PUBLIC;

-- Shard discovery (issue 24, src/leases/shard_sync.c): creates the missing
-- leases of the listed shards with their lineage ('created') and reports
-- the leases of the stream that are not listed and not ended ('unlisted');
-- ends nothing.
CREATE FUNCTION lease.sync_shards(
    app_name text, stream_name text, shard_ids text[], parent_ids text[] DEFAULT NULL)
RETURNS TABLE(shard_id text, action text)
AS 'MODULE_PATHNAME', 'lease_sync_shards'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;
REVOKE ALL ON FUNCTION lease.sync_shards(text, text, text[], text[]) FROM PUBLIC;

-- Issue 22, balancing by load (src/leases/leases.sql, src/leases/balancing.c,
-- src/leases/taker.c): a lease's weight and measured work rate, a worker's
-- declared capacity, a stream's tolerance, each worker's load in
-- stream_workers; update_checkpoint's work and take_leases' capacity,
-- set_weight, set_balance_tolerance and plan_rebalance.
ALTER TABLE lease.shard_leases
    ADD COLUMN weight double precision,
    ADD COLUMN work_rate double precision,
    ADD CONSTRAINT shard_leases_load_check
        CHECK (weight OPERATOR(pg_catalog.>=) 0 AND weight OPERATOR(pg_catalog.<) 'Infinity'
               AND work_rate OPERATOR(pg_catalog.>=) 0 AND work_rate OPERATOR(pg_catalog.<) 'Infinity');

CREATE TABLE lease.worker_capacities (
    app_name    text             NOT NULL,
    stream_name text             NOT NULL,
    worker      text             NOT NULL,
    capacity    double precision NOT NULL,
    PRIMARY KEY (app_name, stream_name, worker),
    CONSTRAINT worker_capacities_capacity_check
        CHECK (capacity OPERATOR(pg_catalog.>) 0 AND capacity OPERATOR(pg_catalog.<) 'Infinity')
);

COMMENT ON TABLE lease.worker_capacities IS
    'Per worker and stream: the capacity the worker declared in take_leases (1 when absent).';

CREATE TABLE lease.stream_balancing (
    app_name    text             NOT NULL,
    stream_name text             NOT NULL,
    tolerance   double precision NOT NULL,
    PRIMARY KEY (app_name, stream_name),
    CONSTRAINT stream_balancing_tolerance_check
        CHECK (tolerance OPERATOR(pg_catalog.>=) 0 AND tolerance OPERATOR(pg_catalog.<=) 1)
);

COMMENT ON TABLE lease.stream_balancing IS
    'Per stream: the balancing tolerance set by lease.set_balance_tolerance (0.1 when absent).';

SELECT pg_catalog.pg_extension_config_dump('lease.worker_capacities', '');
SELECT pg_catalog.pg_extension_config_dump('lease.stream_balancing', '');

REVOKE ALL ON lease.worker_capacities, lease.stream_balancing FROM PUBLIC;

-- A lease's known weight counts in its owner's stream_workers load (the
-- twin of src/leases/leases.sql).  No lease has a weight yet: every load
-- starts at 0.
ALTER TABLE lease.stream_workers
    ADD COLUMN load double precision NOT NULL DEFAULT 0,
    ADD COLUMN weighed bigint NOT NULL DEFAULT 0;

CREATE FUNCTION lease.shard_leases_load_changed()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO lease.stream_workers AS w
           (app_name, stream_name, worker, leases, load, weighed)
    SELECT d.app_name, d.stream_name, d.worker, 0,
           pg_catalog.sum(d.load), pg_catalog.sum(d.weighed)::pg_catalog.int8
      FROM (SELECT OLD.app_name, OLD.stream_name, OLD.lease_owner AS worker,
                   OPERATOR(pg_catalog.-) COALESCE(OLD.weight, OLD.work_rate) AS load,
                   -1 AS weighed
             WHERE TG_OP OPERATOR(pg_catalog.<>) 'INSERT' AND OLD.lease_owner IS NOT NULL
               AND COALESCE(OLD.weight, OLD.work_rate) IS NOT NULL
            UNION ALL
            SELECT NEW.app_name, NEW.stream_name, NEW.lease_owner,
                   COALESCE(NEW.weight, NEW.work_rate), 1
             WHERE TG_OP OPERATOR(pg_catalog.<>) 'DELETE' AND NEW.lease_owner IS NOT NULL
               AND COALESCE(NEW.weight, NEW.work_rate) IS NOT NULL) AS d
     GROUP BY d.app_name, d.stream_name, d.worker
     ORDER BY d.worker COLLATE pg_catalog."C"
    ON CONFLICT (app_name, stream_name, worker) DO UPDATE
       SET weighed = w.weighed OPERATOR(pg_catalog.+) excluded.weighed,
           -- exactly 0 when no weight is left, so rounding never lingers
           load = CASE WHEN w.weighed OPERATOR(pg_catalog.+) excluded.weighed
                            OPERATOR(pg_catalog.=) 0 THEN 0
                       ELSE w.load OPERATOR(pg_catalog.+) excluded.load END;
    RETURN NULL;
END
$$;

CREATE TRIGGER shard_leases_load_inserted
    AFTER INSERT ON lease.shard_leases
    FOR EACH ROW
    WHEN (NEW.lease_owner IS NOT NULL AND COALESCE(NEW.weight, NEW.work_rate) IS NOT NULL)
    EXECUTE FUNCTION lease.shard_leases_load_changed();

CREATE TRIGGER shard_leases_load_deleted
    AFTER DELETE ON lease.shard_leases
    FOR EACH ROW
    WHEN (OLD.lease_owner IS NOT NULL AND COALESCE(OLD.weight, OLD.work_rate) IS NOT NULL)
    EXECUTE FUNCTION lease.shard_leases_load_changed();

CREATE TRIGGER shard_leases_load_updated
    AFTER UPDATE OF lease_owner, weight, work_rate ON lease.shard_leases
    FOR EACH ROW
    WHEN ((OLD.lease_owner IS DISTINCT FROM NEW.lease_owner
           AND COALESCE(OLD.weight, OLD.work_rate, NEW.weight, NEW.work_rate) IS NOT NULL)
          OR COALESCE(OLD.weight, OLD.work_rate) IS DISTINCT FROM COALESCE(NEW.weight, NEW.work_rate))
    EXECUTE FUNCTION lease.shard_leases_load_changed();

REVOKE ALL ON FUNCTION lease.shard_leases_load_changed() FROM PUBLIC;

-- Issue 23, worker liveness (src/leases/leases.sql, src/leases/workers.c):
-- each worker's heartbeat and liveness record on its lease.stream_workers
-- row; renew_leases writes that one row instead of every lease.
ALTER TABLE lease.stream_workers
    ADD COLUMN renewed_until      timestamptz,
    ADD COLUMN renewed_at         timestamptz,
    ADD COLUMN renew_every        interval,
    ADD COLUMN session_pid        integer,
    ADD COLUMN session_start      timestamptz,
    ADD COLUMN server_incarnation text;

COMMENT ON TABLE lease.stream_workers IS
    'Per worker and stream: how many leases it holds, a lower bound of their expiry, the sum and number of their known weights, its heartbeat and liveness record (kept by the lease functions and triggers; what take_leases reads instead of the stream).';

-- A takeover because the holder's session ended is recorded as such.
ALTER TABLE lease.lease_events DROP CONSTRAINT lease_events_event_check;
ALTER TABLE lease.lease_events ADD
CONSTRAINT lease_events_event_check CHECK (event OPERATOR(pg_catalog.=) ANY (ARRAY[
        'take', 'expiry_takeover', 'steal', 'transfer', 'release', 'close',
        'handoff_request', 'session_ended']));

CREATE FUNCTION lease.liveness_cutoff(
    session_pid integer, session_start timestamptz, server_incarnation text,
    renewed_at timestamptz, renew_every interval, now timestamptz)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'lease_liveness_cutoff'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

REVOKE ALL ON FUNCTION lease.liveness_cutoff(integer, timestamptz, text, timestamptz, interval,
                                             timestamptz) FROM PUBLIC;

-- take_lease, take_leases and renew_leases gain arguments (renew_every,
-- issue 23; take_leases also capacity, issue 22) and the fenced
-- update_checkpoint gains work (issue 22), each last and with a default.
-- An argument list cannot be changed in place and a second overload would
-- make old calls ambiguous, so each is re-created, with the ACL of a fresh
-- install, as 0.2.0--0.3.0 did renew_leases: EXECUTE granted on them to
-- worker roles does not survive that (a grant made here would be recorded
-- as the extension's initial privilege, which pg_dump leaves out).  The
-- operator re-grants, as the warning says (CHANGELOG.md, "Upgrading from
-- 0.3.0").
DO $upgrade$
DECLARE
    grantees text;
BEGIN
    SELECT pg_catalog.string_agg(DISTINCT pg_catalog.quote_ident(r.rolname), ', ')
      INTO grantees
      FROM pg_catalog.pg_proc AS p,
           pg_catalog.aclexplode(p.proacl) AS a,
           pg_catalog.pg_roles AS r
     WHERE p.oid OPERATOR(pg_catalog.=) ANY (ARRAY[
               'lease.take_lease(text, text, text, text, bigint, interval)'::pg_catalog.regprocedure,
               'lease.take_leases(text, text, text, interval, integer, integer)'::pg_catalog.regprocedure,
               'lease.renew_leases(text, text, text, interval)'::pg_catalog.regprocedure,
               'lease.update_checkpoint(text, text, text, text, text, bigint, bigint)'::pg_catalog.regprocedure])
       AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
       AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
       AND r.oid OPERATOR(pg_catalog.=) a.grantee;
    IF grantees IS NOT NULL THEN
        RAISE WARNING 'lease.take_lease, lease.take_leases, lease.renew_leases and the fenced lease.update_checkpoint are re-created by this update; their EXECUTE grants are gone'
            USING DETAIL = pg_catalog.format('They were granted to %s.', grantees),
                  HINT = pg_catalog.format('Run GRANT EXECUTE ON FUNCTION lease.take_lease(text, text, text, text, bigint, interval, interval), lease.take_leases(text, text, text, interval, integer, integer, double precision, interval), lease.renew_leases(text, text, text, interval, interval), lease.update_checkpoint(text, text, text, text, text, bigint, bigint, bigint) TO %s;', grantees);
    END IF;
END
$upgrade$;

DROP FUNCTION lease.take_lease(text, text, text, text, bigint, interval);
DROP FUNCTION lease.take_leases(text, text, text, interval, integer, integer);
DROP FUNCTION lease.renew_leases(text, text, text, interval);
DROP FUNCTION lease.update_checkpoint(text, text, text, text, text, bigint, bigint);

CREATE FUNCTION lease.update_checkpoint(
    app_name text, stream_name text, shard_id text, owner text,
    checkpoint text, sub_sequence bigint, fencing_token bigint,
    work bigint DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_update_checkpoint_fenced_0_4'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.take_lease(
    app_name text, stream_name text, shard_id text, new_owner text,
    lease_count bigint DEFAULT NULL, lease_duration interval DEFAULT NULL,
    renew_every interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lease_take_lease_0_4'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.take_leases(
    app_name text, stream_name text, owner text,
    lease_duration interval DEFAULT NULL, max_leases integer DEFAULT NULL,
    max_steal integer DEFAULT 1, capacity double precision DEFAULT 1,
    renew_every interval DEFAULT NULL)
RETURNS TABLE(shard_id text, lease_count bigint, action text,
              previous_owner text, lease_epoch bigint)
AS 'MODULE_PATHNAME', 'lease_take_leases_0_4'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.renew_leases(
    app_name text, stream_name text, owner text,
    lease_duration interval DEFAULT NULL, renew_every interval DEFAULT NULL)
RETURNS TABLE(shard_id text, lease_count bigint, handoff_to text, lease_epoch bigint)
AS 'MODULE_PATHNAME', 'lease_renew_leases_0_4'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.set_weight(
    app_name text, stream_name text, shard_id text, weight double precision)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_set_weight'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.set_balance_tolerance(
    app_name text, stream_name text, tolerance double precision)
RETURNS double precision
AS 'MODULE_PATHNAME', 'lease_set_balance_tolerance'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

REVOKE ALL ON FUNCTION
    lease.update_checkpoint(text, text, text, text, text, bigint, bigint, bigint),
    lease.take_lease(text, text, text, text, bigint, interval, interval),
    lease.take_leases(text, text, text, interval, integer, integer, double precision, interval),
    lease.renew_leases(text, text, text, interval, interval),
    lease.set_weight(text, text, text, double precision),
    lease.set_balance_tolerance(text, text, double precision)
    FROM PUBLIC;

-- The views and the metrics read a lease's expiry as the later of its own
-- and its holder's heartbeat (renew_leases no longer writes the lease rows).
CREATE OR REPLACE VIEW lease.lease_status WITH (security_barrier = true) AS
SELECT l.app_name,
       l.stream_name,
       l.shard_id,
       l.lease_owner,
       CASE
           WHEN l.checkpoint = 'SHARD_END' THEN 'ended'
           WHEN EXISTS (SELECT 1 FROM lease.shard_leases AS p
                         WHERE p.app_name = l.app_name
                           AND p.stream_name = l.stream_name
                           AND p.shard_id = ANY (l.parent_shard_ids)
                           AND p.checkpoint <> 'SHARD_END') THEN 'blocked'
           WHEN l.lease_owner IS NULL THEN 'unowned'
           WHEN e.expires_at <= pg_catalog.clock_timestamp() THEN 'expired'
           WHEN h.pending THEN 'handoff_pending'
           ELSE 'owned'
       END AS state,
       e.expires_at - pg_catalog.clock_timestamp() AS time_to_expiry,
       l.checkpoint,
       l.checkpoint_sub_sequence,
       l.pending_checkpoint,
       l.lease_count,
       l.lease_epoch,
       CASE WHEN h.pending THEN l.handoff_to END AS handoff_to,
       CASE WHEN h.pending THEN l.handoff_deadline END AS handoff_deadline,
       l.owner_switches_since_checkpoint,
       l.parent_shard_ids,
       l.updated_at
  FROM lease.shard_leases AS l
       LEFT JOIN lease.stream_workers AS w
              ON w.app_name = l.app_name AND w.stream_name = l.stream_name
             AND w.worker = l.lease_owner,
       -- the effective expiry (LEASE_SQL_EXPIRY_W, src/leases/leases.h)
       LATERAL (SELECT GREATEST(l.lease_expires_at, w.renewed_until) AS expires_at) AS e,
       LATERAL (SELECT l.handoff_to IS NOT NULL
                       AND pg_catalog.clock_timestamp()
                           < l.handoff_deadline + l.handoff_lease_duration AS pending) AS h
 WHERE lease.has_app_access(l.app_name);

-- lease.worker_loads shows each owner's load, capacity and target after the
-- columns it had (CREATE OR REPLACE keeps its grants).
CREATE OR REPLACE VIEW lease.worker_loads WITH (security_barrier = true) AS
SELECT g.app_name, g.stream_name, g.lease_owner, g.live_leases,
       g.known OPERATOR(pg_catalog.+) ((g.live_leases OPERATOR(pg_catalog.-) g.weighed)
           OPERATOR(pg_catalog.*) COALESCE(pg_catalog.sum(g.known) OVER s
               OPERATOR(pg_catalog./) NULLIF(pg_catalog.sum(g.weighed) OVER s, 0), 1)) AS load,
       COALESCE(c.capacity, 1) AS capacity,
       (pg_catalog.sum(g.known) OVER s OPERATOR(pg_catalog.+)
        ((pg_catalog.sum(g.live_leases) OVER s OPERATOR(pg_catalog.-) pg_catalog.sum(g.weighed) OVER s)
           OPERATOR(pg_catalog.*) COALESCE(pg_catalog.sum(g.known) OVER s
               OPERATOR(pg_catalog./) NULLIF(pg_catalog.sum(g.weighed) OVER s, 0), 1)))
           OPERATOR(pg_catalog.*) COALESCE(c.capacity, 1)
           OPERATOR(pg_catalog./) pg_catalog.sum(COALESCE(c.capacity, 1)) OVER s AS target
  FROM (SELECT l.app_name, l.stream_name, l.lease_owner, pg_catalog.count(*) AS live_leases,
               COALESCE(pg_catalog.sum(COALESCE(l.weight, l.work_rate)), 0) AS known,
               pg_catalog.count(COALESCE(l.weight, l.work_rate)) AS weighed
          FROM lease.shard_leases AS l
          LEFT JOIN lease.stream_workers AS w
            ON w.app_name OPERATOR(pg_catalog.=) l.app_name
           AND w.stream_name OPERATOR(pg_catalog.=) l.stream_name
           AND w.worker OPERATOR(pg_catalog.=) l.lease_owner
         WHERE l.lease_owner IS NOT NULL
           AND lease.has_app_access(l.app_name)
           -- the effective expiry, as lease.lease_status (issue 23)
           AND GREATEST(l.lease_expires_at, w.renewed_until)
               OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
         GROUP BY l.app_name, l.stream_name, l.lease_owner) AS g
  LEFT JOIN lease.worker_capacities AS c
    ON c.app_name OPERATOR(pg_catalog.=) g.app_name
   AND c.stream_name OPERATOR(pg_catalog.=) g.stream_name
   AND c.worker OPERATOR(pg_catalog.=) g.lease_owner
WINDOW s AS (PARTITION BY g.app_name, g.stream_name);

COMMENT ON VIEW lease.worker_loads IS
    'Live (unexpired) leases per owner and stream, their load (the sum of their weights: the operator''s weight, else the measured work rate, else the mean of the stream''s known weights, else 1), the owner''s capacity and its target (the stream''s load shared in proportion to the capacities of the owners listed).';

-- Why a balancing round moved a lease, with its event (src/leases/taker.c).
ALTER TABLE lease.lease_events ADD COLUMN reason text;

CREATE FUNCTION lease.plan_rebalance(app_name text, stream_name text, owner text DEFAULT NULL)
RETURNS TABLE(shard_id text, action text, from_owner text, to_owner text, weight double precision,
              imbalance_before double precision, imbalance_after double precision)
AS 'MODULE_PATHNAME', 'lease_plan_rebalance'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

REVOKE ALL ON FUNCTION lease.plan_rebalance(text, text, text) FROM PUBLIC;

-- Load against target per owner (issue 22): lease.worker_loads' load,
-- capacity and target, for every app.
CREATE FUNCTION lease.monitoring_worker_loads()
RETURNS TABLE (app_name text, stream_name text, lease_owner text, load double precision,
               capacity double precision, target double precision)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
SELECT w.app_name, w.stream_name, w.lease_owner, w.load, w.capacity, w.target
  FROM lease.worker_loads AS w
 ORDER BY 1, 2, 3
$$;

COMMENT ON FUNCTION lease.monitoring_worker_loads() IS
    'Metrics: per app, stream and owner, the load of its live leases (their weights), its capacity and its target (lease.worker_loads, every app).';

REVOKE ALL ON FUNCTION lease.monitoring_worker_loads() FROM PUBLIC;

CREATE OR REPLACE FUNCTION lease.monitoring_leases()
RETURNS TABLE (app_name text, stream_name text, state text, leases bigint)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
WITH k AS (SELECT pg_catalog.clock_timestamp() AS now),
     c AS (SELECT l.app_name, l.stream_name,
                  CASE
                      WHEN l.checkpoint = 'SHARD_END' THEN 'ended'
                      WHEN l.parent_shard_ids <> '{}'
                           AND EXISTS (SELECT 1 FROM lease.shard_leases AS p
                                        WHERE p.app_name = l.app_name
                                          AND p.stream_name = l.stream_name
                                          AND p.shard_id = ANY (l.parent_shard_ids)
                                          AND p.checkpoint <> 'SHARD_END') THEN 'blocked'
                      WHEN l.lease_owner IS NULL THEN 'unowned'
                      WHEN GREATEST(l.lease_expires_at, w.renewed_until) <= k.now THEN 'expired'
                      WHEN l.handoff_to IS NOT NULL
                           AND k.now < l.handoff_deadline + l.handoff_lease_duration THEN 'handoff_pending'
                      ELSE 'owned'
                  END AS state,
                  pg_catalog.count(*) AS n
             FROM lease.shard_leases AS l
                  LEFT JOIN lease.stream_workers AS w
                         ON w.app_name = l.app_name AND w.stream_name = l.stream_name
                        AND w.worker = l.lease_owner,
                  k
            GROUP BY 1, 2, 3)
SELECT s.app_name, s.stream_name, x.state, COALESCE(c.n, 0)
  FROM (SELECT DISTINCT c.app_name, c.stream_name FROM c) AS s
 CROSS JOIN pg_catalog.unnest(ARRAY['owned', 'handoff_pending', 'expired', 'unowned',
                                    'blocked', 'ended']) AS x(state)
  LEFT JOIN c ON c.app_name = s.app_name AND c.stream_name = s.stream_name AND c.state = x.state
 ORDER BY 1, 2, 3
$$;

CREATE OR REPLACE FUNCTION lease.monitoring_streams()
RETURNS TABLE (app_name text, stream_name text, open_leases bigint, live_workers bigint,
               fair_share_leases bigint, handoffs_pending bigint,
               handoffs_past_deadline bigint, oldest_handoff_age_seconds double precision,
               oldest_expired_age_seconds double precision,
               oldest_checkpoint_age_seconds double precision,
               lease_duration_seconds double precision)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
WITH k AS (SELECT pg_catalog.clock_timestamp() AS now),
     l AS (SELECT l.app_name, l.stream_name, l.lease_owner, k.now,
                  -- the expiry by lease duration and heartbeat, as lease.lease_status
                  GREATEST(l.lease_expires_at, w.renewed_until) AS lease_expires_at,
                  l.handoff_requested_at, l.handoff_deadline,
                  l.checkpointed_at,
                  l.checkpoint = 'SHARD_END' AS ended,
                  l.checkpoint <> 'SHARD_END' AND l.parent_shard_ids <> '{}'
                  AND EXISTS (SELECT 1 FROM lease.shard_leases AS p
                               WHERE p.app_name = l.app_name
                                 AND p.stream_name = l.stream_name
                                 AND p.shard_id = ANY (l.parent_shard_ids)
                                 AND p.checkpoint <> 'SHARD_END') AS blocked,
                  l.lease_owner IS NOT NULL
                  AND GREATEST(l.lease_expires_at, w.renewed_until) > k.now AS live,
                  l.handoff_to IS NOT NULL
                  AND k.now < l.handoff_deadline + l.handoff_lease_duration AS handoff
             FROM lease.shard_leases AS l
                  LEFT JOIN lease.stream_workers AS w
                         ON w.app_name = l.app_name AND w.stream_name = l.stream_name
                        AND w.worker = l.lease_owner,
                  k),
     s AS (SELECT l.app_name, l.stream_name,
                  pg_catalog.count(*) FILTER (WHERE NOT l.ended AND NOT l.blocked) AS open_leases,
                  pg_catalog.count(DISTINCT l.lease_owner) FILTER (WHERE l.live) AS live_workers,
                  pg_catalog.count(*) FILTER (WHERE l.handoff) AS handoffs_pending,
                  pg_catalog.count(*) FILTER (WHERE l.handoff AND l.now > l.handoff_deadline)
                      AS handoffs_past_deadline,
                  pg_catalog.max(l.now - l.handoff_requested_at) FILTER (WHERE l.handoff)
                      AS handoff_age,
                  pg_catalog.max(l.now - l.lease_expires_at)
                      FILTER (WHERE NOT l.ended AND NOT l.blocked AND l.lease_owner IS NOT NULL
                              AND NOT l.live) AS expired_age,
                  pg_catalog.max(l.now - l.checkpointed_at)
                      FILTER (WHERE l.live AND NOT l.ended) AS checkpoint_age
             FROM l
            GROUP BY l.app_name, l.stream_name)
SELECT s.app_name, s.stream_name, s.open_leases, s.live_workers,
       CASE WHEN s.live_workers > 0
            THEN (s.open_leases + s.live_workers - 1) / s.live_workers
            ELSE s.open_leases END,
       s.handoffs_pending, s.handoffs_past_deadline,
       COALESCE(pg_catalog.date_part('epoch', s.handoff_age), 0),
       COALESCE(pg_catalog.date_part('epoch', s.expired_age), 0),
       COALESCE(pg_catalog.date_part('epoch', s.checkpoint_age), 0),
       -- the setting's default when the module is not loaded in this
       -- session and nothing set it (src/common/config.c); a placeholder
       -- whose value was removed from the configuration reads ''
       pg_catalog.date_part('epoch', CAST(COALESCE(
           NULLIF(pg_catalog.current_setting('lease.default_lease_duration', true), ''), '10s') AS interval))
  FROM s
 ORDER BY 1, 2
$$;

CREATE OR REPLACE FUNCTION lease.monitoring_workers()
RETURNS TABLE (app_name text, stream_name text, lease_owner text, leases bigint)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
SELECT l.app_name, l.stream_name, l.lease_owner, pg_catalog.count(*)
  FROM lease.shard_leases AS l
  LEFT JOIN lease.stream_workers AS w
         ON w.app_name = l.app_name AND w.stream_name = l.stream_name
        AND w.worker = l.lease_owner
 WHERE l.lease_owner IS NOT NULL
   AND GREATEST(l.lease_expires_at, w.renewed_until)
       > pg_catalog.clock_timestamp()
 GROUP BY 1, 2, 3
 ORDER BY 1, 2, 3
$$;

-- Takeovers because the holder's session ended are a kind of their own.
CREATE OR REPLACE FUNCTION lease.monitoring_ownership_changes()
RETURNS TABLE (app_name text, stream_name text, event text, changes bigint)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
WITH c AS (SELECT e.app_name, e.stream_name, e.event, pg_catalog.count(*) AS n
             FROM lease.lease_events AS e
            GROUP BY 1, 2, 3
           UNION ALL
           SELECT t.app_name, t.stream_name, t.event, t.pruned
             FROM lease.lease_event_totals AS t),
     s AS (SELECT DISTINCT c.app_name, c.stream_name FROM c)
SELECT s.app_name, s.stream_name, x.event, CAST(COALESCE(pg_catalog.sum(c.n), 0) AS bigint)
  FROM s
 CROSS JOIN pg_catalog.unnest(ARRAY['take', 'expiry_takeover', 'steal', 'transfer',
                                    'release', 'close', 'handoff_request',
                                    'session_ended']) AS x(event)
  LEFT JOIN c ON c.app_name = s.app_name AND c.stream_name = s.stream_name AND c.event = x.event
 GROUP BY 1, 2, 3
 ORDER BY 1, 2, 3
$$;

COMMENT ON FUNCTION lease.monitoring_ownership_changes() IS
    'Metrics: ownership changes (take, expiry_takeover, session_ended, steal, transfer, release, close) and handoff requests per app and stream, never decreasing across lease.prune_events.';

-- A renewal whose cost does not grow with the leases held: renew_leases'
-- one write, answered from the worker's row (src/leases/workers.c), and the
-- index its count of pending handoffs reads.
CREATE INDEX shard_leases_handoff_owner_idx
    ON lease.shard_leases (app_name, stream_name, lease_owner)
    WHERE handoff_to IS NOT NULL;

CREATE FUNCTION lease.heartbeat(
    app_name text, stream_name text, owner text,
    lease_duration interval DEFAULT NULL, renew_every interval DEFAULT NULL,
    OUT leases bigint, OUT leases_version bigint, OUT handoffs_pending bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'lease_heartbeat'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

REVOKE ALL ON FUNCTION lease.heartbeat(text, text, text, interval, interval) FROM PUBLIC;
