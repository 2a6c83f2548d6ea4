-- pgTAP: the lease core's schema: table, columns, types, keys, indexes.
BEGIN;
SELECT plan(18);

SELECT has_schema('lease', 'schema lease exists');
SELECT has_table('lease', 'shard_leases', 'lease.shard_leases exists');
SELECT col_is_pk('lease', 'shard_leases', ARRAY['app_name', 'stream_name', 'shard_id'],
                 'the key is (app_name, stream_name, shard_id)');
SELECT columns_are('lease', 'shard_leases', ARRAY[
    'app_name', 'stream_name', 'shard_id', 'lease_owner', 'lease_count', 'checkpoint',
    'checkpoint_sub_sequence', 'parent_shard_ids', 'lease_expires_at',
    'owner_switches_since_checkpoint', 'lease_epoch', 'handoff_to', 'handoff_requested_at',
    'handoff_deadline', 'handoff_lease_duration', 'pending_checkpoint', 'created_at', 'updated_at',
    'checkpointed_at', 'weight', 'work_rate'],
    'shard_leases has exactly the documented columns');

-- types, nullability and defaults, as pinned by the API
SELECT is(
    (SELECT string_agg(format('%s %s%s%s', a.attname, format_type(a.atttypid, a.atttypmod),
                              CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END,
                              ' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid)), E'\n' ORDER BY a.attnum)
       FROM pg_attribute a
       LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
      WHERE a.attrelid = 'lease.shard_leases'::regclass AND a.attnum > 0 AND NOT a.attisdropped
        AND a.attname NOT IN ('created_at', 'updated_at', 'checkpointed_at')),
    E'app_name text NOT NULL\n' ||
    E'stream_name text NOT NULL\n' ||
    E'shard_id text NOT NULL\n' ||
    E'lease_owner text\n' ||
    E'lease_count bigint NOT NULL DEFAULT 0\n' ||
    E'checkpoint text NOT NULL DEFAULT ''TRIM_HORIZON''::text\n' ||
    E'checkpoint_sub_sequence bigint NOT NULL DEFAULT 0\n' ||
    E'parent_shard_ids text[] NOT NULL DEFAULT ''{}''::text[]\n' ||
    E'lease_expires_at timestamp with time zone\n' ||
    E'owner_switches_since_checkpoint bigint NOT NULL DEFAULT 0\n' ||
    E'lease_epoch bigint NOT NULL DEFAULT 0\n' ||
    E'handoff_to text\n' ||
    E'handoff_requested_at timestamp with time zone\n' ||
    E'handoff_deadline timestamp with time zone\n' ||
    E'handoff_lease_duration interval\n' ||
    E'pending_checkpoint text\n' ||
    E'weight double precision\n' ||
    E'work_rate double precision',
    'shard_leases columns have the pinned types, nullability and defaults');
SELECT col_type_is('lease', 'shard_leases', 'created_at', 'timestamp with time zone', 'created_at is timestamptz');
SELECT col_type_is('lease', 'shard_leases', 'updated_at', 'timestamp with time zone', 'updated_at is timestamptz');
SELECT col_not_null('lease', 'shard_leases', 'updated_at', 'updated_at is NOT NULL');
SELECT col_type_is('lease', 'shard_leases', 'checkpointed_at', 'timestamp with time zone', 'checkpointed_at is timestamptz');
SELECT col_not_null('lease', 'shard_leases', 'checkpointed_at', 'checkpointed_at is NOT NULL');

-- "all leases of one owner in one stream" is an index scan
SELECT has_index('lease', 'shard_leases', 'shard_leases_owner_idx',
                 ARRAY['app_name', 'stream_name', 'lease_owner', 'shard_id'], 'the owner index exists');
SELECT is((SELECT pg_get_expr(indpred, indrelid) FROM pg_index
            WHERE indexrelid = 'lease.shard_leases_owner_idx'::regclass),
          '(lease_owner IS NOT NULL)', 'the owner index is partial on owned leases');
SELECT has_check('lease', 'shard_leases', 'shard_leases has CHECK constraints');

-- the extension: not relocatable, in schema lease, its table dumped by pg_dump
SELECT is((SELECT extrelocatable FROM pg_extension WHERE extname = 'pg_lease'), false,
          'pg_lease is not relocatable');
SELECT is((SELECT n.nspname::text FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
            WHERE e.extname = 'pg_lease'), 'lease', 'pg_lease lives in schema lease');
SELECT ok((SELECT 'lease.shard_leases'::regclass::oid = ANY (extconfig) FROM pg_extension
            WHERE extname = 'pg_lease'), 'shard_leases is marked for pg_dump');
SELECT is((SELECT reloptions FROM pg_class WHERE oid = 'lease.shard_leases'::regclass),
          ARRAY['fillfactor=70'], 'shard_leases leaves room for HOT renewals');
SELECT throws_ok($$INSERT INTO lease.shard_leases (app_name, stream_name, shard_id, lease_owner)
                   VALUES ('a', 's', 'x', 'w')$$, '23514', NULL,
                 'an owner without an expiry is rejected by the table itself');

SELECT * FROM finish();
ROLLBACK;
