-- pgTAP: the taker's schema and signatures: indexes, the events table, the
-- views, and every new function's arguments and return type.
BEGIN;
SELECT plan(37);

SELECT has_index('lease', 'shard_leases', 'shard_leases_handoff_idx',
                 ARRAY['app_name', 'stream_name', 'handoff_to'], 'the handoff index exists');
SELECT is((SELECT pg_get_expr(indpred, indrelid) FROM pg_index
            WHERE indexrelid = 'lease.shard_leases_handoff_idx'::regclass),
          '(handoff_to IS NOT NULL)', 'the handoff index is partial on requested handoffs');
-- renewals and checkpoints stay HOT: no index covers a column they write
SELECT is((SELECT count(*)::int FROM pg_index i, unnest(i.indkey) k
                JOIN pg_attribute a ON a.attrelid = 'lease.shard_leases'::regclass AND a.attnum = k
           WHERE i.indrelid = 'lease.shard_leases'::regclass
             AND a.attname IN ('lease_count', 'lease_expires_at', 'checkpoint', 'checkpoint_sub_sequence',
                               'pending_checkpoint', 'owner_switches_since_checkpoint', 'updated_at',
                               'checkpointed_at')),
          0, 'no index on a column renewals or checkpoints change');
SELECT has_check('lease', 'shard_leases', 'shard_leases has its handoff CHECK');

-- the bookkeeping and the heartbeat rows (0.5.0): apart, so a transfer to
-- a worker does not hold the row its heartbeat writes
SELECT columns_are('lease', 'worker_holdings', ARRAY['app_name', 'stream_name', 'worker', 'leases',
                                                      'expires_min', 'version', 'load', 'weighed'],
                   'worker_holdings columns: the bookkeeping');
SELECT columns_are('lease', 'stream_workers', ARRAY['app_name', 'stream_name', 'worker', 'renewed_until',
                                                     'renewed_at', 'renew_every', 'session_pid',
                                                     'session_start', 'server_incarnation'],
                   'stream_workers columns: the heartbeat and liveness record only');
SELECT col_is_pk('lease', 'worker_holdings', ARRAY['app_name', 'stream_name', 'worker'],
                 'worker_holdings is keyed by worker and stream');
SELECT has_index('lease', 'worker_holdings', 'worker_holdings_holding_idx', ARRAY['app_name', 'stream_name'],
                 'the workers holding leases are an index scan');
SELECT has_trigger('lease', 'worker_holdings', 'worker_holdings_added',
                   'a worker''s first holdings row brings its heartbeat row');
-- a heartbeat is a HOT update: no index but the key on stream_workers
SELECT is((SELECT count(*)::int FROM pg_index WHERE indrelid = 'lease.stream_workers'::regclass AND NOT indisprimary),
          0, 'stream_workers has no index but its key');
SELECT is((SELECT array_agg(c.relid::regclass::text || ' ' || c.cond ORDER BY 1)
             FROM pg_extension AS e, unnest(e.extconfig, e.extcondition) AS c(relid, cond)
            WHERE e.extname = 'pg_lease' AND c.relid IN ('lease.stream_workers'::regclass, 'lease.worker_holdings'::regclass)),
          ARRAY['lease.stream_workers WHERE false', 'lease.worker_holdings WHERE false'],
          'the bookkeeping and the heartbeat rows are rebuilt after a restore, not dumped');

SELECT has_table('lease', 'lease_events', 'lease.lease_events exists');
SELECT col_is_pk('lease', 'lease_events', 'event_id', 'lease_events is keyed by event_id');
SELECT has_index('lease', 'lease_events', 'lease_events_occurred_at_idx', ARRAY['occurred_at'],
                 'events are indexed by time, for prune_events');
SELECT ok((SELECT 'lease.lease_events'::regclass::oid = ANY (extconfig)
                  AND 'lease.lease_events_event_id_seq'::regclass::oid = ANY (extconfig)
             FROM pg_extension WHERE extname = 'pg_lease'), 'lease_events and its sequence are dumped');

SELECT has_view('lease', 'lease_status', 'lease.lease_status exists');
SELECT has_view('lease', 'worker_loads', 'lease.worker_loads exists');
SELECT columns_are('lease', 'worker_loads', ARRAY['app_name', 'stream_name', 'lease_owner', 'live_leases',
                                                   'load', 'capacity', 'target'],
                   'worker_loads columns');

SELECT function_returns('lease', 'take_leases', ARRAY['text', 'text', 'text', 'interval', 'integer', 'integer', 'double precision', 'interval'], 'setof record');
SELECT is((SELECT pg_get_function_arguments('lease.take_leases(text,text,text,interval,integer,integer,double precision,interval)'::regprocedure)),
          'app_name text, stream_name text, owner text, lease_duration interval DEFAULT NULL::interval, max_leases integer DEFAULT NULL::integer, max_steal integer DEFAULT 1, capacity double precision DEFAULT 1, renew_every interval DEFAULT NULL::interval',
          'take_leases arguments');
SELECT is((SELECT pg_get_function_result('lease.take_leases(text,text,text,interval,integer,integer,double precision,interval)'::regprocedure)),
          'TABLE(shard_id text, lease_count bigint, action text, previous_owner text, lease_epoch bigint)',
          'take_leases result');
SELECT is((SELECT pg_get_function_arguments('lease.renew_leases(text,text,text,interval,interval)'::regprocedure)),
          'app_name text, stream_name text, owner text, lease_duration interval DEFAULT NULL::interval, renew_every interval DEFAULT NULL::interval',
          'renew_leases arguments');
SELECT is((SELECT pg_get_function_result('lease.renew_leases(text,text,text,interval,interval)'::regprocedure)),
          'TABLE(shard_id text, lease_count bigint, handoff_to text, lease_epoch bigint)',
          'renew_leases result: the fencing token last');
SELECT function_returns('lease', 'my_leases', ARRAY['text', 'text', 'text'], 'setof record');
SELECT is((SELECT pg_get_function_arguments('lease.my_leases(text,text,text)'::regprocedure)),
          'app_name text, stream_name text, owner text', 'my_leases arguments, no defaults');
SELECT is((SELECT pg_get_function_result('lease.my_leases(text,text,text)'::regprocedure)),
          'TABLE(shard_id text, lease_count bigint, lease_epoch bigint, checkpoint text, checkpoint_sub_sequence bigint, pending_checkpoint text, expires_in interval, handoff_to text, handoff_from text, waiting_on text[])',
          'my_leases result');
SELECT function_returns('lease', 'request_handoff', ARRAY['text', 'text', 'text', 'text'], 'boolean');
-- fencing_token has no default, so a 5- or 6-argument call is never ambiguous
SELECT is((SELECT pg_get_function_arguments('lease.update_checkpoint(text,text,text,text,text,bigint,bigint,bigint)'::regprocedure)),
          'app_name text, stream_name text, shard_id text, owner text, checkpoint text, sub_sequence bigint, fencing_token bigint, work bigint DEFAULT NULL::bigint',
          'fenced update_checkpoint arguments, fencing_token without a default');
SELECT function_returns('lease', 'update_checkpoint', ARRAY['text', 'text', 'text', 'text', 'text', 'bigint', 'bigint', 'bigint'], 'boolean');
SELECT function_returns('lease', 'prepare_checkpoint', ARRAY['text', 'text', 'text', 'text', 'text'], 'boolean');
SELECT function_returns('lease', 'cleanup_ended', ARRAY['text', 'text'], 'integer');
SELECT function_returns('lease', 'delete_lease', ARRAY['text', 'text', 'text'], 'boolean');
SELECT function_returns('lease', 'prune_events', ARRAY['interval'], 'bigint');
SELECT function_returns('lease', 'import_kcl_ex', ARRAY['regclass'], 'bigint');
SELECT function_returns('lease', 'import_kcl_ex_rows', ARRAY['text[]', 'text[]', 'text[]', 'text[]', 'text[]', 'bigint[]', 'boolean[]'], 'bigint');
SELECT function_returns('lease', 'import_kcl_dynamodb', ARRAY['text', 'text', 'text'], 'setof record');
SELECT is((SELECT pg_get_function_result('lease.import_kcl_dynamodb(text,text,text)'::regprocedure)),
          'TABLE(item bigint, lease_key text, shard_id text, action text, detail text)',
          'import_kcl_dynamodb result columns');

SELECT * FROM finish();
ROLLBACK;
