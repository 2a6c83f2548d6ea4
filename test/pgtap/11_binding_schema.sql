-- pgTAP: the channel-binding schema: tables, columns, keys, constraints,
-- the partial unique binding index and its predicate, the query indexes.
BEGIN;
SELECT plan(44);

SELECT has_table('lease', t, format('lease.%s exists', t))
  FROM unnest(ARRAY['sandboxes', 'conversations', 'turns', 'tenant_limits', 'compensation_failures']) t;

SELECT columns_are('lease', 'sandboxes', ARRAY['id', 'user_id', 'status', 'created_at', 'updated_at'],
                   'sandboxes has exactly the documented columns');
SELECT columns_are('lease', 'conversations', ARRAY[
    'id', 'user_id', 'agent_id', 'vault_id', 'environment_id', 'channel_id', 'sandbox_id',
    'status', 'rotated_from', 'created_at', 'updated_at'],
    'conversations has exactly the documented columns');
SELECT columns_are('lease', 'turns', ARRAY['id', 'conversation_id', 'created_at'],
                   'turns has exactly the documented columns');
SELECT columns_are('lease', 'tenant_limits', ARRAY['user_id', 'sandbox_limit'],
                   'tenant_limits has exactly the documented columns');
SELECT columns_are('lease', 'compensation_failures', ARRAY[
    'id', 'previous_conversation_id', 'failed_conversation_id', 'channel_id', 'reason', 'sqlstate',
    'occurred_at', 'last_failed_at', 'attempts', 'resolved_at'],
    'compensation_failures has exactly the documented columns');

-- types and nullability of conversations, as pinned by the issue
SELECT is(
    (SELECT string_agg(format('%s %s%s', a.attname, format_type(a.atttypid, a.atttypmod),
                              CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END), E'\n' ORDER BY a.attnum)
       FROM pg_attribute a
      WHERE a.attrelid = 'lease.conversations'::regclass AND a.attnum > 0 AND NOT a.attisdropped
        AND a.attname NOT IN ('created_at', 'updated_at')),
    E'id bigint NOT NULL\n' ||
    E'user_id text NOT NULL\n' ||
    E'agent_id text NOT NULL\n' ||
    E'vault_id text\n' ||
    E'environment_id text\n' ||
    E'channel_id text\n' ||
    E'sandbox_id bigint\n' ||
    E'status text NOT NULL\n' ||
    E'rotated_from bigint',
    'conversations columns have the pinned types and nullability');

-- ids are bigint identities
SELECT is((SELECT string_agg(c.relname || '.' || a.attname || '=' || a.attidentity::text, ',' ORDER BY c.relname)
             FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
            WHERE c.relnamespace = 'lease'::regnamespace AND c.relkind = 'r' AND a.attname = 'id'),
          'compensation_failures.id=a,conversations.id=a,sandboxes.id=a,turns.id=a',
          'every id is GENERATED ALWAYS AS IDENTITY');
SELECT col_is_pk('lease', t, 'id', format('%s.id is the primary key', t))
  FROM unnest(ARRAY['sandboxes', 'conversations', 'turns', 'compensation_failures']) t;
SELECT col_is_pk('lease', 'tenant_limits', 'user_id', 'tenant_limits is keyed by user_id');

-- foreign keys
SELECT fk_ok('lease', 'conversations', 'sandbox_id', 'lease', 'sandboxes', 'id');
SELECT fk_ok('lease', 'conversations', 'rotated_from', 'lease', 'conversations', 'id');
SELECT fk_ok('lease', 'turns', 'conversation_id', 'lease', 'conversations', 'id');
SELECT is((SELECT count(*)::int FROM pg_constraint
            WHERE conrelid = 'lease.compensation_failures'::regclass AND contype = 'f'), 0,
          'compensation_failures has no foreign keys (it is written while conversations are locked)');

-- status domains and the binding invariant are CHECK constraints
SELECT throws_ok($$INSERT INTO lease.sandboxes (user_id, status) VALUES ('tap', 'busy')$$, '23514', NULL,
                 'a sandbox status outside the domain is rejected');
SELECT throws_ok($$INSERT INTO lease.conversations (user_id, agent_id, status) VALUES ('tap', 'a', 'done')$$,
                 '23514', NULL, 'a conversation status outside the domain is rejected');
SELECT throws_ok($$INSERT INTO lease.conversations (user_id, agent_id, channel_id, status)
                   VALUES ('tap', 'a', 'c', 'failed')$$, '23514', NULL,
                 'a channel bound to a conversation that is not live is rejected');
SELECT throws_ok($$INSERT INTO lease.tenant_limits VALUES ('tap', -1)$$, '23514', NULL,
                 'a negative tenant limit is rejected');
SELECT throws_ok($$INSERT INTO lease.compensation_failures
                   (previous_conversation_id, failed_conversation_id, reason, sqlstate)
                   VALUES (1, 2, 'x', 'nope')$$, '23514', NULL, 'a malformed SQLSTATE is rejected');

-- the binding index: unique, NULLS NOT DISTINCT, partial on bound rows
SELECT has_index('lease', 'conversations', 'conversations_channel_binding_key',
                 ARRAY['user_id', 'agent_id', 'vault_id', 'environment_id', 'channel_id'],
                 'the binding index covers the scope and the channel');
SELECT index_is_unique('lease', 'conversations', 'conversations_channel_binding_key');
SELECT is((SELECT indnullsnotdistinct FROM pg_index
            WHERE indexrelid = 'lease.conversations_channel_binding_key'::regclass), true,
          'the binding index compares NULL vault/environment as equal');
SELECT is((SELECT pg_get_expr(indpred, indrelid) FROM pg_index
            WHERE indexrelid = 'lease.conversations_channel_binding_key'::regclass),
          '(channel_id IS NOT NULL)', 'the binding index is partial on bound conversations');
SELECT ok(obj_description('lease.conversations_channel_binding_key'::regclass, 'pg_class') ~ 'FOR NO KEY UPDATE',
          'the binding index says why it is partial');
-- no non-partial unique index other than the primary key: channel_id is not a
-- key column, so binding updates take FOR NO KEY UPDATE
SELECT is((SELECT array_agg(indexrelid::regclass::text) FROM pg_index
            WHERE indrelid = 'lease.conversations'::regclass AND indisunique AND indpred IS NULL),
          ARRAY['lease.conversations_pkey'], 'the primary key is the only key of conversations');
SELECT is((SELECT count(*)::int FROM pg_constraint
            WHERE conrelid = 'lease.conversations'::regclass AND contype = 'u'), 0,
          'conversations has no UNIQUE constraint');

-- the query indexes and their predicates
SELECT is((SELECT pg_get_expr(indpred, indrelid) FROM pg_index
            WHERE indexrelid = 'lease.sandboxes_active_user_idx'::regclass),
          '(status = ANY (ARRAY[''pending''::text, ''starting''::text, ''ready''::text]))',
          'the quota index covers active sandboxes');
SELECT has_index('lease', 'sandboxes', 'sandboxes_active_user_idx', ARRAY['user_id'],
                 'active sandboxes per user is an index scan');
SELECT index_is_unique('lease', 'compensation_failures', 'compensation_failures_unresolved_key');
SELECT is((SELECT pg_get_expr(indpred, indrelid) FROM pg_index
            WHERE indexrelid = 'lease.compensation_failures_unresolved_key'::regclass),
          '(resolved_at IS NULL)', 'one unresolved failure per pair');
SELECT has_index('lease', 'compensation_failures', 'compensation_failures_queue_idx',
                 ARRAY['occurred_at', 'id'], 'the retry queue is an index scan, oldest first');
SELECT has_index('lease', 'turns', 'turns_conversation_idx', ARRAY['conversation_id'],
                 'turns of a conversation (the foreign key) are indexed');

-- pg_dump keeps the data: tables and their identity sequences
SELECT ok((SELECT ARRAY['lease.compensation_failures', 'lease.compensation_failures_id_seq',
                         'lease.conversations', 'lease.conversations_id_seq', 'lease.sandboxes',
                         'lease.sandboxes_id_seq', 'lease.tenant_limits', 'lease.turns',
                         'lease.turns_id_seq', 'lease.conversation_id_partition']::regclass[]::oid[] <@ extconfig
             FROM pg_extension WHERE extname = 'pg_lease'),
          'binding tables and their sequences are marked for pg_dump');

-- the admission gate: exactly one row, which the install script inserts
-- (so it is not marked for pg_dump: CREATE EXTENSION on restore inserts it)
SELECT col_is_pk('lease', 'admission_gate', 'only_row', 'the gate is keyed by only_row');
SELECT results_eq($$SELECT only_row FROM lease.admission_gate$$, $$VALUES (true)$$,
                  'the admission gate holds its one row');
SELECT throws_ok($$INSERT INTO lease.admission_gate VALUES (false)$$, '23514', NULL,
                 'the gate admits no second row');
SELECT ok((SELECT NOT 'lease.admission_gate'::regclass::oid = ANY (extconfig)
             FROM pg_extension WHERE extname = 'pg_lease'),
          'the admission gate is not marked for pg_dump');

SELECT * FROM finish();
ROLLBACK;
