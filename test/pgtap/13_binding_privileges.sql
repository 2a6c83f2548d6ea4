-- pgTAP: channel-binding privileges.  Nothing is granted to PUBLIC; a role
-- with the grants docs/security.md lists can run the protocol and cannot
-- write the tables.
BEGIN;
SELECT plan(19);

SELECT table_privs_are('lease', t, 'public', ARRAY[]::text[], format('PUBLIC has no privileges on %s', t))
  FROM unnest(ARRAY['sandboxes', 'conversations', 'turns', 'tenant_limits', 'compensation_failures',
                    'admission_gate']) t;

CREATE ROLE tap_chat_worker;
GRANT USAGE ON SCHEMA lease TO tap_chat_worker;
GRANT EXECUTE ON FUNCTION
    lease.start_conversation(text, text, text, text, text),
    lease.find_channel_conversation(text, text, text, text, text),
    lease.rotate_channel(text, text, text, text, text, bigint),
    lease.restore_rotated_channel(bigint, bigint),
    lease.admit_turn(bigint),
    lease.end_conversation(bigint)
    TO tap_chat_worker;
CREATE ROLE tap_chat_stranger;
GRANT USAGE ON SCHEMA lease TO tap_chat_stranger;

SET LOCAL ROLE tap_chat_worker;
SELECT is((SELECT outcome FROM lease.start_conversation('tap-u', 'agent', NULL, NULL, 'general')),
          'started', 'a worker starts a conversation');
SELECT is((SELECT outcome FROM lease.rotate_channel('tap-u', 'agent', NULL, NULL, 'general',
                  lease.find_channel_conversation('tap-u', 'agent', NULL, NULL, 'general'))),
          'rotated', 'a worker rotates a channel');
SELECT ok(lease.admit_turn(lease.find_channel_conversation('tap-u', 'agent', NULL, NULL, 'general')) > 0,
          'a worker admits a turn');
SELECT throws_ok($$UPDATE lease.conversations SET channel_id = NULL$$, '42501', NULL,
                 'a worker cannot unbind a channel directly');
SELECT throws_ok($$INSERT INTO lease.sandboxes (user_id) VALUES ('tap-u')$$, '42501', NULL,
                 'a worker cannot bypass admission');
SELECT throws_ok($$SELECT * FROM lease.retry_failed_compensations()$$, '42501', NULL,
                 'draining the failure queue is for operators');
SELECT throws_ok($$SET lease.fleet_capacity = 1000000$$, '42501', NULL,
                 'a worker cannot raise the fleet capacity');
-- the admission lock is the gate's row: a role with the recipe's grants
-- (USAGE on the schema) cannot lock it, so it cannot hold admission up
SELECT throws_ok($$SELECT 1 FROM lease.admission_gate FOR NO KEY UPDATE$$, '42501', NULL,
                 'a worker cannot lock the admission gate');
SELECT throws_ok($$LOCK TABLE lease.admission_gate IN ACCESS SHARE MODE$$, '42501', NULL,
                 'nor lock its table');
RESET ROLE;

SET LOCAL ROLE tap_chat_stranger;
SELECT throws_ok($$SELECT * FROM lease.start_conversation('tap-x', 'agent', NULL, NULL, 'general')$$, '42501',
                 NULL, 'a role without grants cannot start a conversation');
SELECT throws_ok($$SELECT lease.end_conversation(1)$$, '42501', NULL,
                 'a role without grants cannot end a conversation');
SELECT throws_ok($$SELECT * FROM lease.conversations$$, '42501', NULL,
                 'a role without grants cannot read conversations');
RESET ROLE;

SELECT results_eq($$SELECT count(*)::int FROM lease.conversations WHERE user_id IN ('tap-u', 'tap-x')$$,
                  $$VALUES (2)$$, 'only the worker''s two conversations exist');

SELECT * FROM finish();
ROLLBACK;
