-- lease.set_sandbox_status and lease.set_conversation_status: the statuses
-- docs/channel-bindings.md gives the platform (a sandbox's starting, ready
-- and suspended, a conversation's idle), along the lifecycle only; every
-- refusal writes nothing.
\set VERBOSITY terse
SELECT conversation_id AS c1 FROM lease.start_conversation('ps-u', 'agent', NULL, NULL, 'c1') \gset
SELECT conversation_id AS c2 FROM lease.start_conversation('ps-u', 'agent', NULL, NULL, 'c2') \gset
-- lease_test.try, with the conversation ids (which depend on the tests
-- before) left out
CREATE FUNCTION lease_test.ps_try(stmt text) RETURNS text LANGUAGE sql AS $$
SELECT regexp_replace(lease_test.try(stmt), 'conversation -?[0-9]+', 'conversation N') $$;
CREATE FUNCTION lease_test.ps(id bigint) RETURNS text LANGUAGE sql AS $$
SELECT c.status || '/' || s.status FROM lease.conversations c JOIN lease.sandboxes s ON s.id = c.sandbox_id
 WHERE c.id = $1 $$;
-- the sandbox: pending -> starting -> ready; again: no change
SELECT lease.set_sandbox_status(:c1, 'starting') AS changed, lease_test.ps(:c1);
SELECT lease.set_sandbox_status(:c1, 'ready') AS changed, lease_test.ps(:c1);
SELECT lease.set_sandbox_status(:c1, 'ready') AS changed, lease_test.ps(:c1);
-- the conversation: pending cannot be idle (its first turn starts it)
SELECT lease_test.ps_try($$SELECT lease.set_conversation_status($$ || :c1 || $$, 'idle')$$);
SELECT lease.admit_turn(:c1) > 0 AS turn, lease_test.ps(:c1);
SELECT lease.set_conversation_status(:c1, 'idle') AS changed, lease_test.ps(:c1);
SELECT lease.set_conversation_status(:c1, 'idle') AS changed;
SELECT lease.set_conversation_status(:c1, 'running') AS changed, lease_test.ps(:c1);
-- an idle conversation still takes turns, and still counts
SELECT lease.set_conversation_status(:c1, 'idle'), lease.admit_turn(:c1) > 0 AS turn, lease_test.ps(:c1);
SELECT active_sandboxes FROM lease.tenant_limit('ps-u');
-- suspended: no longer active (a quota slot freed), and never active again
SELECT lease.set_sandbox_status(:c2, 'suspended') AS changed, lease_test.ps(:c2);
SELECT active_sandboxes FROM lease.tenant_limit('ps-u');
SELECT lease_test.digest() AS before \gset
SELECT lease_test.ps_try($$SELECT lease.set_sandbox_status($$ || :c2 || $$, 'ready')$$);
-- ended: nothing changes any more
SELECT lease.end_conversation(:c1);
SELECT lease_test.digest() AS before \gset
SELECT lease_test.ps_try($$SELECT lease.set_sandbox_status($$ || :c1 || $$, 'ready')$$);
SELECT lease_test.ps_try($$SELECT lease.set_conversation_status($$ || :c1 || $$, 'running')$$);
-- bad input: the statuses pg_lease writes itself, unknown ones, NULLs, no
-- such conversation, one without a sandbox
INSERT INTO lease.conversations (user_id, agent_id, status) VALUES ('ps-u', 'agent', 'running')
RETURNING id AS bare \gset
SELECT lease_test.digest() AS before \gset
SELECT lease_test.ps_try($$SELECT lease.set_sandbox_status($$ || :c2 || $$, 'terminated')$$);
SELECT lease_test.ps_try($$SELECT lease.set_sandbox_status($$ || :c2 || $$, 'pending')$$);
SELECT lease_test.ps_try($$SELECT lease.set_sandbox_status($$ || :c2 || $$, 'Ready')$$);
SELECT lease_test.ps_try($$SELECT lease.set_conversation_status($$ || :c2 || $$, 'terminated')$$);
SELECT lease_test.ps_try($$SELECT lease.set_conversation_status($$ || :c2 || $$, 'pending')$$);
SELECT lease_test.ps_try($$SELECT lease.set_sandbox_status($$ || :c2 || $$, NULL)$$);
SELECT lease_test.ps_try($$SELECT lease.set_sandbox_status(NULL, 'ready')$$);
SELECT lease_test.ps_try($$SELECT lease.set_conversation_status(NULL, 'idle')$$);
SELECT lease_test.ps_try($$SELECT lease.set_sandbox_status(-1, 'ready')$$);
SELECT lease_test.ps_try($$SELECT lease.set_conversation_status(-1, 'idle')$$);
SELECT lease_test.ps_try($$SELECT lease.set_sandbox_status($$ || :bare || $$, 'ready')$$);
SELECT lease_test.digest() = :'before' AS nothing_written;
DROP FUNCTION lease_test.ps(bigint);
DROP FUNCTION lease_test.ps_try(text);
