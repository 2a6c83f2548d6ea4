-- pgTAP: the lease core's function signatures, return types and attributes.
BEGIN;
SELECT plan(31);

SELECT has_function('lease', 'create_lease', ARRAY['text', 'text', 'text', 'text[]', 'text']);
SELECT function_returns('lease', 'create_lease', ARRAY['text', 'text', 'text', 'text[]', 'text'], 'boolean');
SELECT has_function('lease', 'take_lease', ARRAY['text', 'text', 'text', 'text', 'bigint', 'interval', 'interval']);
SELECT function_returns('lease', 'take_lease', ARRAY['text', 'text', 'text', 'text', 'bigint', 'interval', 'interval'], 'bigint');
SELECT has_function('lease', 'renew_lease', ARRAY['text', 'text', 'text', 'text', 'bigint', 'interval']);
SELECT function_returns('lease', 'renew_lease', ARRAY['text', 'text', 'text', 'text', 'bigint', 'interval'], 'bigint');
SELECT has_function('lease', 'update_checkpoint', ARRAY['text', 'text', 'text', 'text', 'text', 'bigint']);
SELECT function_returns('lease', 'update_checkpoint', ARRAY['text', 'text', 'text', 'text', 'text', 'bigint'], 'boolean');
SELECT has_function('lease', 'release_lease', ARRAY['text', 'text', 'text', 'text']);
SELECT function_returns('lease', 'release_lease', ARRAY['text', 'text', 'text', 'text'], 'boolean');
SELECT has_function('lease', 'close_shard', ARRAY['text', 'text', 'text', 'text']);
SELECT function_returns('lease', 'close_shard', ARRAY['text', 'text', 'text', 'text'], 'boolean');

-- argument names and defaults, as pinned by the API
SELECT is((SELECT pg_get_function_arguments('lease.create_lease(text,text,text,text[],text)'::regprocedure)),
          'app_name text, stream_name text, shard_id text, parent_shard_ids text[] DEFAULT ''{}''::text[], checkpoint text DEFAULT ''TRIM_HORIZON''::text',
          'create_lease arguments');
SELECT is((SELECT pg_get_function_arguments('lease.take_lease(text,text,text,text,bigint,interval,interval)'::regprocedure)),
          'app_name text, stream_name text, shard_id text, new_owner text, lease_count bigint DEFAULT NULL::bigint, lease_duration interval DEFAULT NULL::interval, renew_every interval DEFAULT NULL::interval',
          'take_lease arguments');
SELECT is((SELECT pg_get_function_arguments('lease.renew_lease(text,text,text,text,bigint,interval)'::regprocedure)),
          'app_name text, stream_name text, shard_id text, owner text, lease_count bigint, lease_duration interval DEFAULT NULL::interval',
          'renew_lease arguments');
SELECT is((SELECT pg_get_function_arguments('lease.update_checkpoint(text,text,text,text,text,bigint)'::regprocedure)),
          'app_name text, stream_name text, shard_id text, owner text, checkpoint text, sub_sequence bigint DEFAULT 0',
          'update_checkpoint arguments');
SELECT is((SELECT pg_get_function_arguments('lease.update_checkpoints(text,text,text,text[],text[],bigint[],bigint[],bigint[])'::regprocedure)),
          'app_name text, stream_name text, owner text, shard_ids text[], checkpoints text[], sub_sequences bigint[], fencing_tokens bigint[], work bigint[] DEFAULT NULL::bigint[]',
          'update_checkpoints arguments, as pinned');
SELECT is((SELECT pg_get_function_result('lease.update_checkpoints(text,text,text,text[],text[],bigint[],bigint[],bigint[])'::regprocedure)),
          'TABLE(shard_id text, ok boolean, reason text)',
          'update_checkpoints result');
SELECT throws_ok($$SELECT * FROM lease.update_checkpoints('a', 's', 'w', ARRAY['x'], '{}', '{}', '{}')$$, '22023',
                 'the arrays of update_checkpoints must have the same length', 'unequal lengths are 22023');
SELECT is((SELECT pg_get_function_arguments('lease.sync_shards(text,text,text[],text[])'::regprocedure)),
          'app_name text, stream_name text, shard_ids text[], parent_ids text[] DEFAULT NULL::text[]',
          'sync_shards arguments');
SELECT is((SELECT pg_get_function_result('lease.sync_shards(text,text,text[],text[])'::regprocedure)),
          'TABLE(shard_id text, action text)',
          'sync_shards result');

-- every lease function: C, not STRICT (NULL is an error, not a silent NULL),
-- a pinned search_path; SECURITY DEFINER except exactly the functions that
-- check the caller's app (they need the caller's identity and run their SQL
-- as the owner themselves, src/leases/privileges.c) and the imports,
-- import_kcl_ex, import_kcl_ex_rows and import_kcl_dynamodb (they insert with the
-- caller's privileges; import_kcl_ex reads a table the caller names with them)
SELECT is(count(*)::int, 0, 'no lease function is STRICT')
  FROM pg_proc WHERE pronamespace = 'lease'::regnamespace AND proisstrict;
SELECT is(array_agg(oid::regprocedure::text ORDER BY oid::regprocedure::text),
          ARRAY[-- trigger function (src/leases/access.sql): it runs in
                -- grant_app's INSERT, which already runs as the owner
                'lease.app_grants_grantee_name()',
                'lease.cleanup_ended(text,text)',
                'lease.close_shard(text,text,text,text)',
                'lease.create_lease(text,text,text,text[],text)',
                'lease.delete_lease(text,text,text)',
                'lease.grant_app(text,regrole)',
                'lease.has_app_access(text)',
                'lease.heartbeat(text,text,text,interval,interval)',
                'lease.hold_lease(text,text,text,text,bigint)',
                'lease.import_kcl_dynamodb(text,text,text)',
                'lease.import_kcl_ex(regclass)',
                'lease.import_kcl_ex_rows(text[],text[],text[],text[],text[],bigint[],boolean[])',
                -- trigger functions (src/leases/monitoring.sql): they run in
                -- statements that already run as the owner
                'lease.lease_events_deleted()',
                -- the steps of a stream move (src/leases/placement.sql)
                'lease.move_stream_complete(text,text,bigint)',
                'lease.move_stream_export(text,text,bigint)',
                'lease.move_stream_freeze(text,text,integer,integer)',
                'lease.move_stream_import(text,text,integer,integer,bigint,jsonb)',
                'lease.move_stream_state(text,text)',
                'lease.move_stream_undo(text,text,bigint)',
                'lease.my_leases(text,text,text)',
                'lease.plan_rebalance(text,text,text)',
                'lease.prepare_checkpoint(text,text,text,text,text)',
                'lease.release_lease(text,text,text,text)',
                'lease.renew_lease(text,text,text,text,bigint,interval)',
                'lease.renew_leases(text,text,text,interval,interval)',
                'lease.request_handoff(text,text,text,text)',
                'lease.revoke_app(text,regrole)',
                'lease.set_balance_tolerance(text,text,double precision)',
                'lease.set_weight(text,text,text,double precision)',
                'lease.shard_leases_checkpointed()',
                'lease.sync_shards(text,text,text[],text[])',
                'lease.take_lease(text,text,text,text,bigint,interval,interval)',
                'lease.take_leases(text,text,text,interval,integer,integer,double precision,interval)',
                'lease.update_checkpoint(text,text,text,text,text,bigint)',
                'lease.update_checkpoint(text,text,text,text,text,bigint,bigint,bigint)',
                'lease.update_checkpoints(text,text,text,text[],text[],bigint[],bigint[],bigint[])'],
          'exactly the app-checking functions and the imports are SECURITY INVOKER')
  FROM pg_proc WHERE pronamespace = 'lease'::regnamespace AND NOT prosecdef;
SELECT is(count(*)::int, 0, 'every lease function pins search_path')
  FROM pg_proc WHERE pronamespace = 'lease'::regnamespace
   AND NOT coalesce('search_path=pg_catalog, pg_temp' = ANY (proconfig), false);
SELECT is(count(*)::int, 0, 'every lease function but has_app_access is VOLATILE (it is STABLE)')
  FROM pg_proc WHERE pronamespace = 'lease'::regnamespace
   AND provolatile <> CASE WHEN proname = 'has_app_access' THEN 's' ELSE 'v' END;
SELECT function_lang_is('lease', 'take_lease', ARRAY['text', 'text', 'text', 'text', 'bigint', 'interval', 'interval'], 'c');
SELECT function_lang_is('lease', 'update_checkpoint', ARRAY['text', 'text', 'text', 'text', 'text', 'bigint'], 'c');

-- NULL where a value is required is 22004, not a NULL result
SELECT throws_ok($$SELECT lease.update_checkpoint('a', 's', 'x', NULL, '1')$$, '22004');
SELECT throws_ok($$SELECT lease.take_lease('a', 's', 'x', 'w', NULL, '0 s')$$, '22023');
SELECT lives_ok($$SELECT lease.take_lease('a', 's', 'no-such-shard', 'w')$$, 'an unknown lease is not an error');

-- every function whose C depends on the schema version is bound to the
-- entry point of the newest schema that changed it (src/common/version.h):
-- 0.4.0's, or 0.5.0's for the stream functions (the placement check) and
-- the owners trigger (the bookkeeping in lease.worker_holdings); the
-- plain and older symbols serve the released schemas only
SELECT is(array_agg(p.oid::regprocedure::text || ' ' || p.prosrc ORDER BY p.oid::regprocedure::text),
          ARRAY['lease.admit_turn(bigint) lease_admit_turn_0_4',
                'lease.cleanup_ended(text,text) lease_cleanup_ended_0_5',
                'lease.close_shard(text,text,text,text) lease_close_shard_0_5',
                'lease.create_lease(text,text,text,text[],text) lease_create_lease_0_5',
                'lease.delete_lease(text,text,text) lease_delete_lease_0_5',
                'lease.grant_app(text,regrole) lease_grant_app_0_4',
                'lease.has_app_access(text) lease_has_app_access_0_4',
                'lease.heartbeat(text,text,text,interval,interval) lease_heartbeat_0_5',
                'lease.hold_lease(text,text,text,text,bigint) lease_hold_lease_0_5',
                'lease.my_leases(text,text,text) lease_my_leases_0_5',
                'lease.plan_rebalance(text,text,text) lease_plan_rebalance_0_5',
                'lease.prepare_checkpoint(text,text,text,text,text) lease_prepare_checkpoint_0_5',
                'lease.release_lease(text,text,text,text) lease_release_lease_0_5',
                'lease.renew_lease(text,text,text,text,bigint,interval) lease_renew_lease_0_5',
                'lease.renew_leases(text,text,text,interval,interval) lease_renew_leases_0_5',
                'lease.request_handoff(text,text,text,text) lease_request_handoff_0_5',
                'lease.revoke_app(text,regrole) lease_revoke_app_0_4',
                'lease.rotate_channel(text,text,text,text,text,bigint) lease_rotate_channel_0_4',
                'lease.set_balance_tolerance(text,text,double precision) lease_set_balance_tolerance_0_5',
                'lease.set_weight(text,text,text,double precision) lease_set_weight_0_5',
                'lease.shard_leases_owners_changed() lease_shard_leases_owners_changed_0_5',
                'lease.start_conversation(text,text,text,text,text) lease_start_conversation_0_4',
                'lease.sync_shards(text,text,text[],text[]) lease_sync_shards_0_5',
                'lease.take_lease(text,text,text,text,bigint,interval,interval) lease_take_lease_0_5',
                'lease.take_leases(text,text,text,interval,integer,integer,double precision,interval) lease_take_leases_0_5',
                'lease.update_checkpoint(text,text,text,text,text,bigint) lease_update_checkpoint_0_5',
                'lease.update_checkpoint(text,text,text,text,text,bigint,bigint,bigint) lease_update_checkpoint_fenced_0_5'],
          'the schema-dependent functions are bound to their newest C entry points')
  FROM pg_proc AS p
 WHERE p.pronamespace = 'lease'::regnamespace AND (p.prosrc LIKE '%\_0\_4' OR p.prosrc LIKE '%\_0\_5');

SELECT * FROM finish();
ROLLBACK;
