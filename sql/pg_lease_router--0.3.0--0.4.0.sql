/* pg_lease_router--0.3.0--0.4.0.sql: from 0.3.0 to 0.4.0.  Never edit once released. */

\echo Use "ALTER EXTENSION pg_lease_router UPDATE TO '0.4.0'" to load this file. \quit

-- pg_lease 0.4.0 adds functions (issue 20: the lifecycle of a rotation,
-- quotas as functions, list_conversations; issue 21: hold_lease); the
-- router gets them exactly as a fresh 0.4.0 router has them
-- (src/router/generate.sql writes those; test/router/router_test.sh checks
-- that an updated router equals a fresh one).  The others keep their
-- signatures.  Through the router each call commits on its own partition
-- connection, so hold_lease there checks ownership but holds nothing past
-- the call: the exactly-once contract needs a direct connection to the
-- stream's partition (docs/exactly-once.md, "Through the router").

CREATE FUNCTION lease.clear_tenant_limit(user_id text)
RETURNS integer
LANGUAGE plproxy AS $$
    CLUSTER 'pg_lease';
    RUN ON lease_router.user_partition(user_id);
$$;

CREATE FUNCTION lease.confirm_rotation(previous_conversation_id bigint, conversation_id bigint)
RETURNS text
LANGUAGE plproxy AS $$
    CLUSTER 'pg_lease';
    RUN ON lease_router.conversation_partition(previous_conversation_id);
$$;

CREATE FUNCTION lease.hold_lease(app_name text, stream_name text, shard_id text, owner text, lease_epoch bigint)
RETURNS text
LANGUAGE plproxy AS $$
    CLUSTER 'pg_lease';
    RUN ON lease_router.stream_partition(app_name, stream_name);
$$;

CREATE FUNCTION lease.list_conversations(user_id text, agent_id text, vault_id text, environment_id text)
RETURNS TABLE(conversation_id bigint, agent_id text, vault_id text, environment_id text, channel_id text, status text, sandbox_id bigint, sandbox_status text, rotated_from bigint, created_at timestamp with time zone, age interval)
LANGUAGE plproxy AS $$
    CLUSTER 'pg_lease';
    RUN ON lease_router.user_partition(user_id);
$$;

CREATE FUNCTION lease.list_tenant_limits()
RETURNS TABLE(user_id text, sandbox_limit integer, active_sandboxes bigint)
LANGUAGE plproxy AS $$
    CLUSTER 'pg_lease';
    RUN ON ALL;
$$;

CREATE FUNCTION lease.set_tenant_limit(user_id text, sandbox_limit integer)
RETURNS integer
LANGUAGE plproxy AS $$
    CLUSTER 'pg_lease';
    RUN ON lease_router.user_partition(user_id);
$$;

CREATE FUNCTION lease.tenant_limit(user_id text)
RETURNS TABLE(sandbox_limit integer, own_limit boolean, active_sandboxes bigint)
LANGUAGE plproxy AS $$
    CLUSTER 'pg_lease';
    RUN ON lease_router.user_partition(user_id);
$$;

-- issue 25: import_kcl_dynamodb runs whole on the partition of its stream
-- (generate.sql's stream rule: every lease it imports is of that stream).
CREATE FUNCTION lease.import_kcl_dynamodb(app_name text, stream_name text, export text)
RETURNS TABLE(item bigint, lease_key text, shard_id text, action text, detail text)
LANGUAGE plproxy AS $$
    CLUSTER 'pg_lease';
    RUN ON lease_router.stream_partition(app_name, stream_name);
$$;

REVOKE ALL ON FUNCTION
    lease.clear_tenant_limit(text),
    lease.import_kcl_dynamodb(text, text, text),
    lease.confirm_rotation(bigint, bigint),
    lease.hold_lease(text, text, text, text, bigint),
    lease.list_conversations(text, text, text, text),
    lease.list_tenant_limits(),
    lease.set_tenant_limit(text, integer),
    lease.tenant_limit(text)
    FROM PUBLIC;

-- Shard discovery (issue 24): the stream's partition creates the missing
-- leases and reports the unlisted ones.
CREATE FUNCTION lease.sync_shards(app_name text, stream_name text, shard_ids text[], parent_ids text[] DEFAULT NULL::text[])
RETURNS TABLE(shard_id text, action text)
LANGUAGE plproxy AS $$
    CLUSTER 'pg_lease';
    RUN ON lease_router.stream_partition(app_name, stream_name);
$$;
REVOKE ALL ON FUNCTION lease.sync_shards(text, text, text[], text[]) FROM PUBLIC;

-- Issue 22, balancing by load: set_weight, set_balance_tolerance and
-- plan_rebalance, each run on the stream's partition, and
-- monitoring_worker_loads on every partition.
CREATE FUNCTION lease.plan_rebalance(app_name text, stream_name text, owner text DEFAULT NULL::text)
RETURNS TABLE(shard_id text, action text, from_owner text, to_owner text, weight double precision, imbalance_before double precision, imbalance_after double precision)
LANGUAGE plproxy AS $$
    CLUSTER 'pg_lease';
    RUN ON lease_router.stream_partition(app_name, stream_name);
$$;

CREATE FUNCTION lease.set_balance_tolerance(app_name text, stream_name text, tolerance double precision)
RETURNS double precision
LANGUAGE plproxy AS $$
    CLUSTER 'pg_lease';
    RUN ON lease_router.stream_partition(app_name, stream_name);
$$;

CREATE FUNCTION lease.set_weight(app_name text, stream_name text, shard_id text, weight double precision)
RETURNS boolean
LANGUAGE plproxy AS $$
    CLUSTER 'pg_lease';
    RUN ON lease_router.stream_partition(app_name, stream_name);
$$;

CREATE FUNCTION lease.monitoring_worker_loads()
RETURNS TABLE(app_name text, stream_name text, lease_owner text, load double precision, capacity double precision, target double precision)
LANGUAGE plproxy AS $$
    CLUSTER 'pg_lease';
    RUN ON ALL;
$$;

-- Issue 23: take_lease, take_leases and renew_leases gain renew_every;
-- issue 22: take_leases gains capacity and the fenced update_checkpoint
-- work.  An argument list cannot change in place, so each is re-created
-- as a fresh 0.4.0 router has it, with the ACL of a fresh install: EXECUTE
-- granted on them is gone, and the operator re-grants, as the warning says
-- (CHANGELOG.md, "Upgrading from 0.3.0").
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

CREATE FUNCTION lease.take_lease(app_name text, stream_name text, shard_id text, new_owner text, lease_count bigint DEFAULT NULL::bigint, lease_duration interval DEFAULT NULL::interval, renew_every interval DEFAULT NULL::interval)
RETURNS bigint
LANGUAGE plproxy AS $$
    CLUSTER 'pg_lease';
    RUN ON lease_router.stream_partition(app_name, stream_name);
$$;

CREATE FUNCTION lease.take_leases(app_name text, stream_name text, owner text, lease_duration interval DEFAULT NULL::interval, max_leases integer DEFAULT NULL::integer, max_steal integer DEFAULT 1, capacity double precision DEFAULT 1, renew_every interval DEFAULT NULL::interval)
RETURNS TABLE(shard_id text, lease_count bigint, action text, previous_owner text, lease_epoch bigint)
LANGUAGE plproxy AS $$
    CLUSTER 'pg_lease';
    RUN ON lease_router.stream_partition(app_name, stream_name);
$$;

CREATE FUNCTION lease.renew_leases(app_name text, stream_name text, owner text, lease_duration interval DEFAULT NULL::interval, renew_every interval DEFAULT NULL::interval)
RETURNS TABLE(shard_id text, lease_count bigint, handoff_to text, lease_epoch bigint)
LANGUAGE plproxy AS $$
    CLUSTER 'pg_lease';
    RUN ON lease_router.stream_partition(app_name, stream_name);
$$;

CREATE FUNCTION lease.update_checkpoint(app_name text, stream_name text, shard_id text, owner text, checkpoint text, sub_sequence bigint, fencing_token bigint, work bigint DEFAULT NULL::bigint)
RETURNS boolean
LANGUAGE plproxy AS $$
    CLUSTER 'pg_lease';
    RUN ON lease_router.stream_partition(app_name, stream_name);
$$;

REVOKE ALL ON FUNCTION
    lease.monitoring_worker_loads(),
    lease.plan_rebalance(text, text, text),
    lease.set_balance_tolerance(text, text, double precision),
    lease.set_weight(text, text, text, double precision),
    lease.take_lease(text, text, text, text, bigint, interval, interval),
    lease.take_leases(text, text, text, interval, integer, integer, double precision, interval),
    lease.renew_leases(text, text, text, interval, interval),
    lease.update_checkpoint(text, text, text, text, text, bigint, bigint, bigint)
    FROM PUBLIC;

-- lease.worker_loads gains load, capacity and target after its columns: the
-- view and the function it reads are made again as a fresh router has them
-- (a grant of SELECT on the view must be given again).
DROP VIEW lease.worker_loads;
DROP FUNCTION lease_router.worker_loads_on_all();

CREATE FUNCTION lease_router.worker_loads_on_all()
RETURNS TABLE (app_name text, stream_name text, lease_owner text, live_leases bigint, load double precision, capacity double precision, target double precision)
LANGUAGE plproxy AS $$
    CLUSTER 'pg_lease';
    RUN ON ALL;
    SELECT v.app_name, v.stream_name, v.lease_owner, v.live_leases, v.load, v.capacity, v.target FROM lease.worker_loads AS v;
$$;

CREATE VIEW lease.worker_loads AS SELECT * FROM lease_router.worker_loads_on_all();

REVOKE ALL ON lease.worker_loads FROM PUBLIC;

-- lease.heartbeat: renew_leases' one write without the list of leases.
CREATE FUNCTION lease.heartbeat(app_name text, stream_name text, owner text, lease_duration interval DEFAULT NULL::interval, renew_every interval DEFAULT NULL::interval, OUT leases bigint, OUT leases_version bigint, OUT handoffs_pending bigint)
RETURNS record
LANGUAGE plproxy AS $$
    CLUSTER 'pg_lease';
    RUN ON lease_router.stream_partition(app_name, stream_name);
$$;

REVOKE ALL ON FUNCTION lease.heartbeat(text, text, text, interval, interval) FROM PUBLIC;
