-- pgTAP: the role model (docs/security.md).  The four group roles are
-- built with the recipes of docs/security.md verbatim (each copy is a file of
-- test/pgtap/recipes/, between a "-- recipe: PAGE" and an "-- end of recipe"
-- line, and the docs-coverage suite fails unless the lines between appear as
-- they are in PAGE); login
-- roles are members of one and are granted apps.  Each can do exactly its
-- documented set, for its own apps only, through every function and view.
BEGIN;
SELECT plan(128);

\ir recipes/security_group_roles.sql
\ir recipes/security_fleet_operator.sql

-- the recipes are safe to run again (a second database of the cluster, or
-- the same one): the same files once more, without an error
\ir recipes/security_group_roles.sql
\ir recipes/security_fleet_operator.sql

CREATE ROLE tap_rm_w1 IN ROLE lease_worker;      -- app rm-a
CREATE ROLE tap_rm_w2 IN ROLE lease_worker;      -- app rm-b
CREATE ROLE tap_rm_op IN ROLE lease_operator;    -- app rm-a
CREATE ROLE tap_rm_chat IN ROLE lease_app;
CREATE ROLE tap_rm_fleet IN ROLE lease_fleet_operator;
CREATE ROLE tap_rm_nobody;
GRANT USAGE ON SCHEMA lease TO tap_rm_nobody;
SELECT lease.grant_app('rm-a', 'tap_rm_w1'), lease.grant_app('rm-b', 'tap_rm_w2'),
       lease.grant_app('rm-a', 'tap_rm_op');

-- Exactly the documented sets, read from the catalog (so a new function
-- granted to a role by mistake shows up here).
SELECT is(array_agg(p.oid::regprocedure::text ORDER BY p.oid::regprocedure::text COLLATE "C"),
          ARRAY['lease.close_shard(text,text,text,text)',
                'lease.create_lease(text,text,text,text[],text)',
                'lease.heartbeat(text,text,text,interval,interval)',
                'lease.hold_lease(text,text,text,text,bigint)',
                'lease.my_leases(text,text,text)',
                'lease.prepare_checkpoint(text,text,text,text,text)',
                'lease.release_lease(text,text,text,text)',
                'lease.renew_lease(text,text,text,text,bigint,interval)',
                'lease.renew_leases(text,text,text,interval,interval)',
                'lease.sync_shards(text,text,text[],text[])',
                'lease.take_lease(text,text,text,text,bigint,interval,interval)',
                'lease.take_leases(text,text,text,interval,integer,integer,double precision,interval)',
                'lease.update_checkpoint(text,text,text,text,text,bigint)',
                'lease.update_checkpoint(text,text,text,text,text,bigint,bigint,bigint)',
                'lease.update_checkpoints(text,text,text,text[],text[],bigint[],bigint[],bigint[])'],
          'the worker role executes exactly the lease functions')
  FROM pg_proc p WHERE p.pronamespace = 'lease'::regnamespace
   AND has_function_privilege('tap_rm_w1', p.oid, 'EXECUTE');
SELECT is(array_agg(p.oid::regprocedure::text ORDER BY p.oid::regprocedure::text COLLATE "C"),
          ARRAY['lease.admit_turn(bigint)',
                'lease.confirm_rotation(bigint,bigint)',
                'lease.end_conversation(bigint)',
                'lease.find_channel_conversation(text,text,text,text,text)',
                'lease.list_conversations(text,text,text,text)',
                'lease.restore_rotated_channel(bigint,bigint)',
                'lease.rotate_channel(text,text,text,text,text,bigint)',
                'lease.set_conversation_status(bigint,text)',
                'lease.set_sandbox_status(bigint,text)',
                'lease.start_conversation(text,text,text,text,text)'],
          'the application role executes exactly the channel functions')
  FROM pg_proc p WHERE p.pronamespace = 'lease'::regnamespace
   AND has_function_privilege('tap_rm_chat', p.oid, 'EXECUTE');
SELECT is(array_agg(p.oid::regprocedure::text ORDER BY p.oid::regprocedure::text COLLATE "C"),
          ARRAY['lease.cleanup_ended(text,text)',
                'lease.delete_lease(text,text,text)',
                'lease.grant_app(text,regrole)',
                'lease.has_app_access(text)',
                'lease.import_kcl_dynamodb(text,text,text)',
                'lease.import_kcl_ex(regclass)',
                'lease.import_kcl_ex_rows(text[],text[],text[],text[],text[],bigint[],boolean[])',
                'lease.plan_rebalance(text,text,text)',
                'lease.request_handoff(text,text,text,text)',
                'lease.revoke_app(text,regrole)',
                'lease.set_balance_tolerance(text,text,double precision)',
                'lease.set_weight(text,text,text,double precision)'],
          'the operator role executes exactly the admin functions of an app')
  FROM pg_proc p WHERE p.pronamespace = 'lease'::regnamespace
   AND has_function_privilege('tap_rm_op', p.oid, 'EXECUTE');
SELECT is(array_agg(p.oid::regprocedure::text ORDER BY p.oid::regprocedure::text COLLATE "C"),
          ARRAY['lease.clear_tenant_limit(text)',
                'lease.list_tenant_limits()',
                'lease.monitoring_compensation_failures()',
                'lease.monitoring_conversations()',
                'lease.monitoring_fleet()',
                'lease.monitoring_sandboxes()',
                'lease.prune_events(interval)',
                'lease.retry_failed_compensations()',
                'lease.set_tenant_limit(text,integer)',
                'lease.tenant_limit(text)'],
          'the fleet operator role executes exactly the functions that act on every app or tenant, and its runbook''s monitoring')
  FROM pg_proc p WHERE p.pronamespace = 'lease'::regnamespace
   AND has_function_privilege('tap_rm_fleet', p.oid, 'EXECUTE');
SELECT is(count(*)::int, 0, 'a role with no grants executes no function')
  FROM pg_proc p WHERE p.pronamespace = 'lease'::regnamespace
   AND has_function_privilege('tap_rm_nobody', p.oid, 'EXECUTE');
SELECT is(array_agg(format($f$%s:%s$f$, c.relname, priv) ORDER BY c.relname COLLATE "C", priv),
          ARRAY['app_grants:SELECT', 'lease_events:SELECT', 'lease_status:SELECT',
                'shard_leases:INSERT', 'shard_leases:SELECT', 'worker_loads:SELECT'],
          'the operator reads the views, the events and the grants, and may import')
  FROM pg_class c, unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE']) priv
 WHERE c.relnamespace = 'lease'::regnamespace AND c.relkind IN ('r', 'v')
   AND has_table_privilege('tap_rm_op', c.oid, priv);
SELECT is(array_agg(format($f$%s:%s$f$, c.relname, priv) ORDER BY c.relname COLLATE "C", priv),
          ARRAY['compensation_failures:SELECT'],
          'the fleet operator reads the failure queue, and no other table or view')
  FROM pg_class c, unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE']) priv
 WHERE c.relnamespace = 'lease'::regnamespace AND c.relkind IN ('r', 'v')
   AND has_table_privilege('tap_rm_fleet', c.oid, priv);
SELECT is(count(*)::int, 0, 'worker and application roles hold no table or view privilege')
  FROM pg_class c, unnest(ARRAY['tap_rm_w1', 'tap_rm_chat']) r,
       unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE']) priv
 WHERE c.relnamespace = 'lease'::regnamespace AND c.relkind IN ('r', 'v')
   AND has_table_privilege(r, c.oid, priv);

-- data of both apps
SELECT lease.create_lease('rm-a', 's', '0'), lease.create_lease('rm-b', 's', '0'),
       lease.take_lease('rm-b', 's', '0', 'w2');
-- and a queued compensation (a rotation whose restore is recorded as failed)
CREATE TEMP TABLE rm_rotation AS
SELECT conversation_id AS previous_id FROM lease.start_conversation('rm-u2', 'agent', NULL, NULL, 'c2');
ALTER TABLE rm_rotation ADD COLUMN failed_id bigint;
UPDATE rm_rotation SET failed_id = r.conversation_id
  FROM lease.rotate_channel('rm-u2', 'agent', NULL, NULL, 'c2', (SELECT previous_id FROM rm_rotation)) r;
INSERT INTO lease.compensation_failures (previous_conversation_id, failed_conversation_id, reason, sqlstate)
SELECT previous_id, failed_id, 'pgTAP: queued by hand', '55P03' FROM rm_rotation;
CREATE TEMP TABLE rm_b_events AS SELECT * FROM lease.lease_events WHERE app_name = 'rm-b';

-- the worker: its own app
SET LOCAL ROLE tap_rm_w1;
SELECT is(lease.create_lease('rm-a', 's', '1'), true, 'worker creates a lease of its app');
SELECT is(lease.take_lease('rm-a', 's', '0', 'w1'), 1::bigint, 'worker takes a lease of its app');
SELECT is(lease.renew_lease('rm-a', 's', '0', 'w1', 1), 2::bigint, 'worker renews');
SELECT is(lease.prepare_checkpoint('rm-a', 's', '0', 'w1', '5'), true, 'worker prepares a checkpoint');
SELECT is(lease.update_checkpoint('rm-a', 's', '0', 'w1', '5'), true, 'worker checkpoints');
SELECT is(lease.update_checkpoint('rm-a', 's', '0', 'w1', '6', 0, 1), true, 'worker checkpoints with its token');
SELECT results_eq($$SELECT shard_id, ok, reason FROM lease.update_checkpoints('rm-a', 's', 'w1', ARRAY['0'], ARRAY['6'],
                                                                          ARRAY[0]::bigint[], ARRAY[1]::bigint[])$$,
                  $$VALUES ('0'::text, true, NULL::text)$$, 'worker checkpoints a batch with its tokens');
SELECT is((SELECT count(*)::int FROM lease.take_leases('rm-a', 's', 'w1')), 1, 'worker balances its app');
SELECT is((SELECT count(*)::int FROM lease.renew_leases('rm-a', 's', 'w1')), 2, 'worker renews its leases');
SELECT is(lease.release_lease('rm-a', 's', '1', 'w1'), true, 'worker releases');
SELECT is((SELECT array_agg(shard_id || ':' || lease_epoch) FROM lease.my_leases('rm-a', 's', 'w1')),
          ARRAY['0:1'], 'worker reads its own leases and their tokens');
-- the transactional mode (docs/exactly-once.md) as the recipe's worker,
-- which up to 0.4.0 got "permission denied for function hold_lease": the
-- batch's output, hold_lease, the fenced checkpoint, one commit (the
-- savepoint stands for the worker's transaction)
RESET ROLE;
CREATE TABLE rm_orders_out (shard_id text, record bigint);
GRANT INSERT, SELECT ON rm_orders_out TO tap_rm_w1;
SET LOCAL ROLE tap_rm_w1;
SAVEPOINT batch;
INSERT INTO rm_orders_out SELECT '0', r FROM generate_series(7, 9) AS r;
SELECT is(lease.hold_lease('rm-a', 's', '0', 'w1', 1), '6',
          'worker holds its lease for a batch (hold_lease): the checkpoint the batch starts from');
SELECT is(lease.update_checkpoint('rm-a', 's', '0', 'w1', '9', 0, 1), true,
          'and checkpoints the batch with its token in the same transaction');
RELEASE SAVEPOINT batch;
SELECT is((SELECT count(*)::int FROM rm_orders_out), 3, 'the batch''s output is there with its checkpoint');
SELECT throws_ok($$SELECT lease.hold_lease('rm-a', 's', '0', 'w1', 0)$$, '55000', NULL,
                 'hold_lease at an old epoch raises: a worker that lost the lease commits nothing');
-- ... and nothing of another app, through any function
SELECT throws_ok(stmt, '42501', 'permission denied for app "rm-b"', 'worker, other app: ' || stmt)
  FROM unnest(ARRAY[
    $$SELECT lease.create_lease('rm-b', 's', '9')$$,
    $$SELECT lease.take_lease('rm-b', 's', '0', 'w1', 1)$$,
    $$SELECT lease.renew_lease('rm-b', 's', '0', 'w2', 1)$$,
    $$SELECT lease.update_checkpoint('rm-b', 's', '0', 'w2', '1')$$,
    $$SELECT lease.update_checkpoint('rm-b', 's', '0', 'w2', '1', 0, 1)$$,
    $$SELECT * FROM lease.update_checkpoints('rm-b', 's', 'w2', ARRAY['0'], ARRAY['1'], ARRAY[0]::bigint[], ARRAY[1]::bigint[])$$,
    $$SELECT lease.prepare_checkpoint('rm-b', 's', '0', 'w2', '1')$$,
    $$SELECT lease.release_lease('rm-b', 's', '0', 'w2')$$,
    $$SELECT lease.close_shard('rm-b', 's', '0', 'w2')$$,
    $$SELECT * FROM lease.take_leases('rm-b', 's', 'w1')$$,
    $$SELECT * FROM lease.renew_leases('rm-b', 's', 'w2')$$,
    $$SELECT * FROM lease.my_leases('rm-b', 's', 'w2')$$]) AS stmt;
-- ... nor the admin functions, the channel functions or the views
SELECT throws_ok(stmt, '42501', NULL, 'worker: ' || stmt)
  FROM unnest(ARRAY[
    $$SELECT lease.request_handoff('rm-a', 's', '0', 'w9')$$,
    $$SELECT lease.delete_lease('rm-a', 's', '0')$$,
    $$SELECT lease.grant_app('rm-b', 'tap_rm_w1')$$,
    $$SELECT lease.has_app_access('rm-a')$$,
    $$SELECT * FROM lease.start_conversation('u', 'a', NULL, NULL, 'c')$$,
    $$SELECT * FROM lease.lease_status$$,
    $$SELECT * FROM lease.lease_events$$,
    $$UPDATE lease.shard_leases SET lease_owner = 'w1'$$]) AS stmt;
RESET ROLE;

-- an error raised while a function runs its SQL as the owner (here the
-- renewal's UPDATE taking lease_count past shard_leases_counters_check),
-- caught by the caller's own subtransaction (throws_ok's EXCEPTION block):
-- the caller is the current user again, with no more privileges than before
SELECT lease.create_lease('rm-a', 'max', '0'), lease.take_lease('rm-a', 'max', '0', 'w1');
UPDATE lease.shard_leases SET lease_count = 4611686018427387903 WHERE app_name = 'rm-a' AND stream_name = 'max';
SET LOCAL ROLE tap_rm_w1;
SELECT throws_ok($$SELECT lease.renew_lease('rm-a', 'max', '0', 'w1', 4611686018427387903)$$, '23514', NULL,
                 'an error inside the owner section');
SELECT is(current_user::text, 'tap_rm_w1', 'after it the caller is the current user again');
SELECT throws_ok($$DELETE FROM lease.shard_leases$$, '42501', NULL, 'and has none of the owner''s privileges');
RESET ROLE;
SELECT lease.delete_lease('rm-a', 'max', '0');

-- the application role: the channel functions, nothing of the leases
SET LOCAL ROLE tap_rm_chat;
SELECT is((SELECT outcome FROM lease.start_conversation('rm-u', 'agent', NULL, NULL, 'c')),
          'started', 'application role starts a conversation');
SELECT ok(lease.admit_turn(lease.find_channel_conversation('rm-u', 'agent', NULL, NULL, 'c')) > 0,
          'application role admits a turn');
SELECT throws_ok($$SELECT lease.take_lease('rm-a', 's', '0', 'w1')$$, '42501', NULL,
                 'application role cannot take a lease');
SELECT throws_ok($$SELECT * FROM lease.retry_failed_compensations()$$, '42501', NULL,
                 'application role cannot drain the compensation queue');
-- it lists a tenant's conversations, confirms a rotation, and ends what a
-- refusal names; it sets no quota and reads no table
SELECT is((SELECT array_agg(channel_id || ':' || status || ':' || sandbox_status)
             FROM lease.list_conversations('rm-u', 'agent', NULL, NULL)),
          ARRAY['c:running:pending'], 'application role lists a tenant''s conversations');
SELECT is((SELECT r.outcome || ':' || lease.confirm_rotation(r.previous_conversation_id, r.conversation_id)
             FROM lease.rotate_channel('rm-u', 'agent', NULL, NULL, 'c',
                                       lease.find_channel_conversation('rm-u', 'agent', NULL, NULL, 'c')) r),
          'rotated:confirmed', 'application role rotates and confirms the rotation');
SELECT is((SELECT array_agg(status ORDER BY conversation_id) FROM lease.list_conversations('rm-u', NULL, NULL, NULL)),
          ARRAY['running'], 'the confirmed rotation ended the previous conversation');
-- the statuses docs/channel-bindings.md gives the platform (up to 0.4.0 no
-- recipe let it set them: "permission denied for table sandboxes")
SELECT is(lease.set_sandbox_status(lease.find_channel_conversation('rm-u', 'agent', NULL, NULL, 'c'), 'starting')
          AND lease.set_sandbox_status(lease.find_channel_conversation('rm-u', 'agent', NULL, NULL, 'c'), 'ready')
          AND lease.set_conversation_status(lease.find_channel_conversation('rm-u', 'agent', NULL, NULL, 'c'), 'idle'),
          true, 'application role moves a sandbox to starting and ready, a conversation to idle');
SELECT is((SELECT array_agg(status || ':' || sandbox_status) FROM lease.list_conversations('rm-u', NULL, NULL, NULL)),
          ARRAY['idle:ready'], 'as list_conversations shows');
SELECT throws_ok(stmt, '42501', NULL, 'application role: ' || stmt)
  FROM unnest(ARRAY[
    $$SELECT lease.set_tenant_limit('rm-u', 100)$$,
    $$SELECT lease.clear_tenant_limit('rm-u')$$,
    $$SELECT * FROM lease.tenant_limit('rm-u')$$,
    $$SELECT * FROM lease.list_tenant_limits()$$,
    $$SELECT * FROM lease.monitoring_compensation_failures()$$,
    $$SELECT * FROM lease.conversations$$,
    $$SELECT * FROM lease.compensation_failures$$]) AS stmt;
RESET ROLE;

-- the operator of rm-a: views, events and grants of rm-a only
SET LOCAL ROLE tap_rm_op;
SELECT is(array_agg(DISTINCT app_name), ARRAY['rm-a'], 'operator sees only its app in lease_status')
  FROM lease.lease_status;
SELECT is(array_agg(DISTINCT app_name), ARRAY['rm-a'], 'operator sees only its app in worker_loads')
  FROM lease.worker_loads;
SELECT is(array_agg(DISTINCT app_name), ARRAY['rm-a'], 'operator sees only its app''s events')
  FROM lease.lease_events;
SELECT is(array_agg(DISTINCT app_name), ARRAY['rm-a'], 'operator sees only its app''s grants')
  FROM lease.app_grants;
SELECT is(array_agg(DISTINCT app_name), ARRAY['rm-a'], 'operator sees only its app''s rows of the table')
  FROM lease.shard_leases;
SELECT is(lease.has_app_access('rm-a'), true, 'has_app_access: own app');
SELECT is(lease.has_app_access('rm-b'), false, 'has_app_access: other app');
-- a leaky function of the caller's in the WHERE clause sees no other app's row
CREATE TEMP TABLE seen (app text);
CREATE FUNCTION pg_temp.peek(app text) RETURNS boolean LANGUAGE plpgsql COST 0.0000001
    AS $$BEGIN INSERT INTO seen VALUES (app); RETURN true; END$$;
SELECT count(*) FROM lease.lease_status WHERE pg_temp.peek(app_name);
SELECT count(*) FROM lease.worker_loads WHERE pg_temp.peek(app_name);
SELECT is((SELECT count(*)::int FROM seen WHERE app <> 'rm-a'), 0,
          'security_barrier: the caller''s function never sees another app''s row');
SELECT is(lease.request_handoff('rm-a', 's', '0', 'w9'), true, 'operator requests a handoff in its app');
SELECT is(lease.delete_lease('rm-a', 's', '1'), true, 'operator deletes a lease of its app');
SELECT is(lease.cleanup_ended('rm-a', 's'), 0, 'operator cleans up its app');
SELECT is(lease.grant_app('rm-a', 'tap_rm_w2'), true, 'operator grants its app to another role');
SELECT is(lease.revoke_app('rm-a', 'tap_rm_w2'), true, 'operator revokes it');
-- it balances its app: weights, tolerance, the dry run (not another app's)
SELECT is(lease.set_weight('rm-a', 's', '0', 3), true, 'operator sets a lease''s weight in its app');
SELECT is(lease.set_balance_tolerance('rm-a', 's', 0.2), 0.2::float8, 'operator sets its stream''s tolerance');
SELECT lives_ok($$SELECT * FROM lease.plan_rebalance('rm-a', 's')$$, 'operator plans a rebalance of its stream');
SELECT throws_ok($$SELECT lease.set_weight('rm-b', 's', '0', 3)$$, '42501', NULL,
                 'but sets no weight in another app');
-- prune_events and retry_failed_compensations act on every app: not for
-- the operator of one
SELECT throws_ok($$SELECT lease.prune_events('0')$$, '42501', 'permission denied for function prune_events',
                 'operator of one app cannot prune events (every app''s)');
SELECT throws_ok($$SELECT * FROM lease.retry_failed_compensations()$$, '42501',
                 'permission denied for function retry_failed_compensations',
                 'operator of one app cannot drain the compensation queue (every tenant''s)');
SELECT throws_ok($$DELETE FROM lease.lease_events$$, '42501', NULL,
                 'operator cannot delete events directly');
-- nor the quotas (every tenant's), the failure queue or the channel functions
SELECT throws_ok(stmt, '42501', NULL, 'operator of one app: ' || stmt)
  FROM unnest(ARRAY[
    $$SELECT lease.set_tenant_limit('rm-u', 100)$$,
    $$SELECT lease.clear_tenant_limit('rm-u')$$,
    $$SELECT * FROM lease.tenant_limit('rm-u')$$,
    $$SELECT * FROM lease.list_tenant_limits()$$,
    $$SELECT * FROM lease.compensation_failures$$,
    $$SELECT * FROM lease.list_conversations('rm-u', NULL, NULL, NULL)$$]) AS stmt;
SELECT throws_ok(stmt, '42501', 'permission denied for app "rm-b"', 'operator, other app: ' || stmt)
  FROM unnest(ARRAY[
    $$SELECT lease.request_handoff('rm-b', 's', '0', 'w9')$$,
    $$SELECT lease.delete_lease('rm-b', 's', '0')$$,
    $$SELECT lease.cleanup_ended('rm-b', 's')$$,
    $$SELECT lease.grant_app('rm-b', 'tap_rm_op')$$,
    $$SELECT lease.revoke_app('rm-b', 'tap_rm_w2')$$]) AS stmt;
SELECT throws_ok($$SELECT lease.take_lease('rm-a', 's', '0', 'op')$$, '42501', NULL,
                 'operator cannot take leases');
SELECT throws_ok($$UPDATE lease.shard_leases SET lease_owner = 'op'$$, '42501', NULL,
                 'operator cannot write leases directly');
-- import: the operator's own table, its own app only (row-level security)
CREATE TEMP TABLE kcl (shard_id text, app_name text, stream_name text, checkpoint text,
                       lease_owner text, lease_count int, completed boolean);
INSERT INTO kcl VALUES ('i0', 'rm-a', 's', '1', NULL, 0, false);
SELECT is(lease.import_kcl_ex('pg_temp.kcl'), 1::bigint, 'operator imports leases of its app');
INSERT INTO kcl VALUES ('i1', 'rm-b', 's', '1', NULL, 0, false);
SELECT throws_ok($$SELECT lease.import_kcl_ex('pg_temp.kcl')$$, '42501', NULL,
                 'operator cannot import leases of another app');
RESET ROLE;

-- membership, revocation, dropped roles
SELECT is(lease.revoke_app('rm-a', 'tap_rm_w1'), true, 'revoke_app');
SET LOCAL ROLE tap_rm_w1;
SELECT throws_ok($$SELECT lease.renew_lease('rm-a', 's', '0', 'w1', 3)$$, '42501', NULL,
                 'a revoked worker is refused at once');
RESET ROLE;
SELECT is(lease.grant_app('rm-a', 'lease_worker'), true, 'grant an app to a group role');
SET LOCAL ROLE tap_rm_w2;
SELECT is(lease.create_lease('rm-a', 's', 'via-group'), true,
          'a member of a granted group role acts for the app');
RESET ROLE;
CREATE ROLE tap_rm_gone;
SELECT lease.grant_app('rm-c', 'tap_rm_gone');
DROP ROLE tap_rm_gone;
SET LOCAL ROLE tap_rm_w1;
SELECT throws_ok($$SELECT lease.create_lease('rm-c', 's', '0')$$, '42501', NULL,
                 'a dropped grantee''s row matches nobody (and is no error)');
RESET ROLE;
SELECT is(lease.revoke_app('rm-c', grantee), true, 'a dropped role''s grant is revoked by OID')
  FROM lease.app_grants WHERE app_name = 'rm-c';
SELECT throws_ok($$SELECT lease.grant_app('rm-c', 4294967295::oid::regrole)$$, '42704', NULL,
                 'grant_app to a role that does not exist');

SELECT results_eq($$SELECT lease_owner, lease_count FROM lease.shard_leases WHERE app_name = 'rm-b'$$,
                  $$VALUES ('w2'::text, 1::bigint)$$, 'nobody changed the other app''s lease');
SELECT ok((SELECT count(*) FROM rm_b_events) > 0, 'the other app has events');
SELECT set_eq($$SELECT * FROM lease.lease_events WHERE app_name = 'rm-b'$$, $$SELECT * FROM rm_b_events$$,
              'the other app''s events survived the operator''s attempt to prune');
SELECT is((SELECT count(*)::int FROM lease.compensation_failures c JOIN rm_rotation r
            ON c.previous_conversation_id = r.previous_id AND c.failed_conversation_id = r.failed_id
           WHERE c.resolved_at IS NULL AND c.attempts = 1), 1,
          'the queued compensation is untouched by the operator''s attempt');

-- the fleet operator: its functions, for every app and tenant, and nothing of one app
SET LOCAL ROLE tap_rm_fleet;
SELECT is((SELECT unresolved FROM lease.monitoring_compensation_failures()), 1::bigint,
          'fleet operator counts the failure queue (monitoring)');
SELECT is((SELECT array_agg(f.reason) FROM lease.compensation_failures f WHERE f.resolved_at IS NULL),
          ARRAY['pgTAP: queued by hand'], 'fleet operator reads the failure queue');
SELECT ok((SELECT capacity_sandboxes > 0 FROM lease.monitoring_fleet()), 'fleet operator reads the fleet metrics');
SELECT ok((SELECT sum(conversations) > 0 FROM lease.monitoring_conversations())
          AND (SELECT sum(sandboxes) > 0 FROM lease.monitoring_sandboxes()),
          'and the conversations'' and sandboxes'' metrics');
SELECT is(array_agg(outcome), ARRAY['restored'], 'fleet operator drains the compensation queue')
  FROM lease.retry_failed_compensations();
SELECT is(lease.set_tenant_limit('rm-u', 1), NULL::integer, 'fleet operator sets a tenant''s limit');
SELECT is((SELECT sandbox_limit || ':' || own_limit || ':' || active_sandboxes FROM lease.tenant_limit('rm-u')),
          '1:true:1', 'fleet operator reads a tenant''s limit and use');
SELECT is((SELECT array_agg(user_id || ':' || sandbox_limit) FROM lease.list_tenant_limits()),
          ARRAY['rm-u:1'], 'fleet operator lists the tenants'' limits');
SELECT is(lease.clear_tenant_limit('rm-u'), 1, 'fleet operator clears a tenant''s limit');
SELECT ok(lease.prune_events('0') > 0, 'fleet operator prunes events');
SELECT throws_ok(stmt, '42501', NULL, 'fleet operator: ' || stmt)
  FROM unnest(ARRAY[
    $$SELECT lease.create_lease('rm-a', 's', '9')$$,
    $$SELECT lease.delete_lease('rm-b', 's', '0')$$,
    $$SELECT lease.grant_app('rm-b', 'tap_rm_fleet')$$,
    $$SELECT * FROM lease.lease_events$$,
    $$SELECT * FROM lease.conversations$$,
    $$SELECT * FROM lease.list_conversations('rm-u', NULL, NULL, NULL)$$,
    $$SELECT * FROM lease.start_conversation('rm-u', 'agent', NULL, NULL, 'c9')$$,
    $$UPDATE lease.compensation_failures SET attempts = 2$$]) AS stmt;
RESET ROLE;
SELECT is((SELECT count(*)::int FROM lease.lease_events), 0, 'no event is left, of any app');
SELECT is((SELECT count(*)::int FROM lease.compensation_failures WHERE resolved_at IS NULL), 0,
          'no compensation is left queued');

SELECT * FROM finish();
ROLLBACK;
