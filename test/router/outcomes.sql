-- One outcome per function of pg_lease, called through the router
-- (test/router/router_test.sh; partitions lease_router_p0 and _p1, conversation
-- ids with stride 2).  Apps here are 'ro-*'.
\set VERBOSITY terse
SET client_min_messages = warning;

-- shard leases: each call reaches the stream's partition
SELECT lease.create_lease('ro-app', 'ro-s', 'a') AS created,
       lease.create_lease('ro-app', 'ro-s', 'b', '{a}') AS child_created;
SELECT lease.take_lease('ro-app', 'ro-s', 'a', 'w1', NULL, '1 minute') AS taken_count;
SELECT lease.renew_lease('ro-app', 'ro-s', 'a', 'w1', 1) AS renewed_count;
SELECT lease.update_checkpoint('ro-app', 'ro-s', 'a', 'w1', '100') AS checkpointed;
SELECT lease.update_checkpoint('ro-app', 'ro-s', 'a', 'w1', '101', 0,
       (SELECT lease_epoch FROM lease.lease_status WHERE app_name = 'ro-app' AND shard_id = 'a')) AS fenced;
SELECT lease.update_checkpoint('ro-app', 'ro-s', 'a', 'w1', '102', 0, 999) AS stale_fence;
-- the batch: one call to the stream's partition, one row per shard
SELECT * FROM lease.update_checkpoints('ro-app', 'ro-s', 'w1', ARRAY['b', 'a'], ARRAY['110', '111'],
       ARRAY[0, 0]::bigint[], ARRAY[1, 1]::bigint[]);
SELECT lease.prepare_checkpoint('ro-app', 'ro-s', 'a', 'w1', '200') AS prepared;
SELECT shard_id, action, lease_epoch FROM lease.take_leases('ro-app', 'ro-s', 'w2', '1 minute') ORDER BY 1;
SELECT shard_id, lease_count FROM lease.renew_leases('ro-app', 'ro-s', 'w1') ORDER BY 1;
SELECT lease.request_handoff('ro-app', 'ro-s', 'a', 'w2') AS handoff;
SELECT shard_id, state, lease_owner, handoff_to FROM lease.lease_status WHERE app_name = 'ro-app' ORDER BY 1;
SELECT lease_owner, live_leases FROM lease.worker_loads WHERE app_name = 'ro-app' ORDER BY 1;
SELECT lease.release_lease('ro-app', 'ro-s', 'a', 'w1') AS released;
SELECT lease.take_lease('ro-app', 'ro-s', 'a', 'w2') > 0 AS taken_by_handoff_target;
SELECT lease.close_shard('ro-app', 'ro-s', 'a', 'w2') AS closed;
SELECT lease.take_lease('ro-app', 'ro-s', 'b', 'w1') > 0 AS child_taken;
SELECT lease.release_lease('ro-app', 'ro-s', 'b', 'w1') AS released_child;
SELECT lease.delete_lease('ro-app', 'ro-s', 'b') AS deleted_child;
SELECT lease.cleanup_ended('ro-app', 'ro-s') AS cleaned;
-- shard discovery: a merge's 2-D parents pass through PL/Proxy; the
-- child is blocked until both parents end; a second sync reports only
SELECT * FROM lease.sync_shards('ro-app', 'ro-sync', ARRAY['p', 'q', 'm'],
                                ARRAY[[NULL, NULL], [NULL, NULL], ['p', 'q']]);
SELECT * FROM lease.sync_shards('ro-app', 'ro-sync', ARRAY['m'], ARRAY[['q', 'p']]);
SELECT shard_id, state FROM lease.lease_status WHERE app_name = 'ro-app' AND stream_name = 'ro-sync' ORDER BY 1;

-- cluster-wide: grants reach every partition, so any stream's partition agrees
SELECT lease.grant_app('ro-app', 'lease_router_worker') AS granted;
SELECT lease.grant_app('ro-app', 'lease_router_worker') AS granted_again;
SET ROLE lease_router_worker;
SELECT lease.has_app_access('ro-app') AS worker_access,
       bool_and(lease.create_lease('ro-app', 'ro-grant-' || i, 'x')) AS creates_on_every_partition
  FROM generate_series(1, 8) AS i;
RESET ROLE;
SELECT lease.revoke_app('ro-app', 'lease_router_worker') AS revoked;
SELECT lease.prune_events('100 years') AS pruned_nothing;
SELECT lease.prune_events('0 seconds') > 0 AS pruned_events;

-- the views show every partition
SELECT count(*) AS leases, count(DISTINCT lease_router.stream_partition(app_name, stream_name) & 1) AS partitions
  FROM lease.lease_status WHERE app_name = 'ro-app';

-- channel bindings: a tenant's calls reach its partition; ids route back
SELECT outcome, conversation_id AS conv FROM lease.start_conversation('ro-u1', 'agent', NULL, NULL, 'c1') \gset
SELECT :'outcome' AS outcome, lease.find_channel_conversation('ro-u1', 'agent', NULL, NULL, 'c1') = :conv AS found;
SELECT outcome FROM lease.start_conversation('ro-u1', 'agent', NULL, NULL, 'c1');
SELECT lease.admit_turn(:conv) > 0 AS turn;
SELECT outcome, previous_conversation_id = :conv AS from_conv, conversation_id AS rotated
  FROM lease.rotate_channel('ro-u1', 'agent', NULL, NULL, 'c1', :conv) \gset
SELECT :'outcome' AS outcome, :'from_conv' AS from_conv, :rotated % 2 = :conv % 2 AS same_partition;
SELECT lease.restore_rotated_channel(:conv, :rotated) AS restore;
SELECT lease.find_channel_conversation('ro-u1', 'agent', NULL, NULL, 'c1') = :conv AS restored_binding;
-- the lifecycle: a rotation confirmed through the router ends
-- the previous conversation on its partition; the tenant's list and quota
SELECT outcome, conversation_id AS rotated
  FROM lease.rotate_channel('ro-u1', 'agent', NULL, NULL, 'c1', :conv) \gset
SELECT :'outcome' AS outcome, lease.confirm_rotation(:conv, :rotated) AS confirm;
SELECT conversation_id = :rotated AS is_rotated, channel_id, status, sandbox_status
  FROM lease.list_conversations('ro-u1', NULL, NULL, NULL);
-- the platform's own statuses, on the conversation's partition
SELECT lease.set_sandbox_status(:rotated, 'ready') AS sandbox_ready,
       lease.set_conversation_status(:rotated, 'idle') AS idle;
SELECT status, sandbox_status FROM lease.list_conversations('ro-u1', NULL, NULL, NULL);
SELECT lease.set_tenant_limit('ro-u1', 3) AS previous_limit;
SELECT * FROM lease.tenant_limit('ro-u1');
SELECT lease.set_tenant_limit('ro-u2', 4) AS previous_limit;
SELECT * FROM lease.list_tenant_limits() ORDER BY user_id;
SELECT lease.clear_tenant_limit('ro-u1') AS cleared, lease.clear_tenant_limit('ro-u2') AS cleared_too;
SELECT lease.end_conversation(:rotated) AS ended;
SELECT count(*) AS queued_failures FROM lease.retry_failed_compensations();
-- tenants on both partitions; every id reaches the partition that made it
SELECT count(DISTINCT s.conversation_id % 2) AS id_partitions,
       bool_and(lease.admit_turn(s.conversation_id) > 0) AS every_turn_routed,
       bool_and(lease.end_conversation(s.conversation_id)) AS every_end_routed
  FROM generate_series(1, 16) AS i,
       LATERAL lease.start_conversation('ro-many-' || i, 'agent', NULL, NULL, NULL) AS s;

-- import_kcl_ex: the router reads the table, each row goes to the
-- partition of its stream (router_test.sh checks each partition's rows)
CREATE TABLE router_test.kcl (shard_id text, app_name text, stream_name text, checkpoint text,
                       lease_owner text, lease_count int, completed boolean);
INSERT INTO router_test.kcl SELECT 'sh', 'ro-import', 'st-' || i, '5', 'old-worker', 3, i = 1
  FROM generate_series(1, 8) AS i;
SELECT lease.import_kcl_ex('router_test.kcl') AS imported;
SELECT lease.import_kcl_ex('router_test.kcl') AS imported_again;
SELECT count(*) AS leases, count(*) FILTER (WHERE state = 'ended') AS ended,
       count(DISTINCT lease_router.stream_partition(app_name, stream_name) & 1) AS partitions
  FROM lease.lease_status WHERE app_name = 'ro-import';
-- import_kcl_ex_rows: the same, from arrays
SELECT lease.import_kcl_ex_rows(array_agg('ro-import'::text), array_agg('rows-' || i), array_agg('sh'::text),
                                array_agg(NULL::text), array_agg(NULL::text), array_agg(0::bigint),
                                array_agg(false)) AS imported_rows
  FROM generate_series(1, 8) AS i;
SELECT lease.import_kcl_ex_rows('{}', '{}', '{}', '{}', '{}', '{}', '{}') AS imported_none;
-- a bad row: refused before any partition writes
INSERT INTO router_test.kcl VALUES ('sh', 'ro-import', 'st-bad', NULL, NULL, -1, false),
                       ('sh', 'ro-import', 'st-new', NULL, NULL, 0, false);
SELECT router_test.try($$SELECT lease.import_kcl_ex('router_test.kcl')$$) AS bad_row;
SELECT count(*) AS leases FROM lease.lease_status WHERE app_name = 'ro-import';
DROP TABLE router_test.kcl;

-- import_kcl_dynamodb: one call per stream of a KCL multi-stream table's
-- export; each runs on the partition of its stream, which gets that
-- stream's lease only (router_test.sh checks each partition's rows)
SELECT string_agg(format('{"Item":{"leaseKey":{"S":"123:st-%s:1:shardId-0"},"leaseCounter":{"N":"%s"},'
                         '"leaseOwner":{"S":"kcl-worker"},"checkpoint":{"S":"49%s"}}}', i, i, i), E'\n') AS export
  FROM generate_series(1, 8) AS i \gset
SELECT i.action, count(*)
  FROM generate_series(1, 8) AS s,
       LATERAL lease.import_kcl_dynamodb('ro-ddb', 'st-' || s, :'export') AS i
 GROUP BY i.action ORDER BY i.action;
SELECT count(*) AS leases, count(*) FILTER (WHERE checkpoint = '49' || substr(stream_name, 4)) AS own_checkpoint,
       count(DISTINCT lease_router.stream_partition(app_name, stream_name) & 1) AS partitions
  FROM lease.lease_status WHERE app_name = 'ro-ddb';
SELECT action, count(*) FROM lease.import_kcl_dynamodb('ro-ddb', 'st-1', :'export') GROUP BY action ORDER BY action;
-- a bad item: the partition refuses the whole export
SELECT router_test.try($$SELECT lease.import_kcl_dynamodb('ro-ddb', 'st-9', '{"leaseKey":{"S":"a"},"leaseCounter":{"N":"-1"},"checkpoint":{"S":"1"}}')$$) AS bad_item;
