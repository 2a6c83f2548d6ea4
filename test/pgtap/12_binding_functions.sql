-- pgTAP: the channel-binding functions' signatures and result types.
BEGIN;
SELECT plan(22);

SELECT has_function('lease', 'start_conversation', ARRAY['text', 'text', 'text', 'text', 'text']);
SELECT has_function('lease', 'find_channel_conversation', ARRAY['text', 'text', 'text', 'text', 'text']);
SELECT has_function('lease', 'rotate_channel', ARRAY['text', 'text', 'text', 'text', 'text', 'bigint']);
SELECT has_function('lease', 'restore_rotated_channel', ARRAY['bigint', 'bigint']);
SELECT has_function('lease', 'retry_failed_compensations', ARRAY[]::text[]);
SELECT has_function('lease', 'admit_turn', ARRAY['bigint']);
SELECT has_function('lease', 'end_conversation', ARRAY['bigint']);

-- argument names and order, and result types, as pinned by the issue
SELECT is(pg_get_function_arguments(p.oid) || ' -> ' || pg_get_function_result(p.oid), want,
          p.proname || ' signature')
  FROM (VALUES
    ('lease.start_conversation(text,text,text,text,text)',
     'user_id text, agent_id text, vault_id text, environment_id text, channel_id text -> TABLE(outcome text, conversation_id bigint, detail text)'),
    ('lease.find_channel_conversation(text,text,text,text,text)',
     'user_id text, agent_id text, vault_id text, environment_id text, channel_id text -> bigint'),
    ('lease.rotate_channel(text,text,text,text,text,bigint)',
     'user_id text, agent_id text, vault_id text, environment_id text, channel_id text, rotate_from bigint -> TABLE(outcome text, conversation_id bigint, previous_conversation_id bigint, detail text)'),
    ('lease.restore_rotated_channel(bigint,bigint)',
     'previous_conversation_id bigint, failed_conversation_id bigint -> text'),
    ('lease.retry_failed_compensations()',
     ' -> TABLE(previous_conversation_id bigint, failed_conversation_id bigint, outcome text)'),
    ('lease.admit_turn(bigint)', 'conversation_id bigint -> bigint'),
    ('lease.end_conversation(bigint)', 'conversation_id bigint -> boolean')
  ) AS f(sig, want)
  JOIN pg_proc p ON p.oid = f.sig::regprocedure;

SELECT function_lang_is('lease', 'rotate_channel', ARRAY['text', 'text', 'text', 'text', 'text', 'bigint'], 'c');
SELECT function_lang_is('lease', 'restore_rotated_channel', ARRAY['bigint', 'bigint'], 'c');

-- NULL where a value is required is 22004, not a NULL result
SELECT throws_ok($$SELECT * FROM lease.start_conversation(NULL, 'a', NULL, NULL, 'c')$$, '22004');
SELECT throws_ok($$SELECT * FROM lease.rotate_channel('u', 'a', NULL, NULL, 'c', NULL)$$, '22004');
SELECT throws_ok($$SELECT lease.restore_rotated_channel(NULL, 1)$$, '22004');
SELECT throws_ok($$SELECT lease.admit_turn(NULL)$$, '22004');
SELECT throws_ok($$SELECT * FROM lease.rotate_channel('u', 'a', '', NULL, 'c', 1)$$, '22023');
SELECT lives_ok($$SELECT lease.find_channel_conversation('u', 'a', NULL, NULL, 'nothing')$$,
                'an unbound channel is not an error');

SELECT * FROM finish();
ROLLBACK;
