-- lease.rotate_channel: every outcome, the scope rules, what a non-rotated
-- outcome leaves behind (nothing), the admission locks, lock_timeout, bad
-- input.  Tenants here are 'rot-*'.

SELECT conversation_id AS old FROM lease.start_conversation('rot-u1', 'agent', NULL, NULL, 'general') \gset
SELECT conversation_id AS old_vault FROM lease.start_conversation('rot-u1', 'agent', 'vault', NULL, 'general') \gset

-- rotated: a new pending conversation (and sandbox) holds the channel, the
-- old one is unbound but otherwise untouched
SELECT outcome, conversation_id AS new, previous_conversation_id = :old AS from_old, detail IS NULL AS no_detail
  FROM lease.rotate_channel('rot-u1', 'agent', NULL, NULL, 'general', :old) \gset
SELECT :'outcome' AS outcome, :'from_old' AS from_old, :'no_detail' AS no_detail;
SELECT id = :new AS is_new, channel_id, status, rotated_from = :old AS rotated_from_old,
       (SELECT status FROM lease.sandboxes s WHERE s.id = c.sandbox_id) AS sandbox_status
  FROM lease.conversations c WHERE id IN (:old, :new) ORDER BY id;
SELECT lease.find_channel_conversation('rot-u1', 'agent', NULL, NULL, 'general') = :new AS found_new;
-- the vault-scoped binding of the same channel is another scope: untouched
SELECT lease.find_channel_conversation('rot-u1', 'agent', 'vault', NULL, 'general') = :old_vault AS vault_untouched;

-- binding_changed: the conversation no longer holds the channel (a stale
-- rotation), holds another one, or is not found in the caller's scope; each
-- leaves nothing behind
SELECT lease_test.digest() AS before \gset
SELECT outcome, conversation_id, previous_conversation_id = :old AS echoed, detail
  FROM lease.rotate_channel('rot-u1', 'agent', NULL, NULL, 'general', :old);
SELECT outcome FROM lease.rotate_channel('rot-u1', 'agent', NULL, NULL, 'random', :new) AS wrong_channel;
SELECT outcome FROM lease.rotate_channel('rot-u2', 'agent', NULL, NULL, 'general', :new) AS other_tenant;
SELECT outcome FROM lease.rotate_channel('rot-u1', 'agent2', NULL, NULL, 'general', :new) AS other_agent;
SELECT outcome FROM lease.rotate_channel('rot-u1', 'agent', 'vault', NULL, 'general', :new) AS value_vs_null_vault;
SELECT outcome FROM lease.rotate_channel('rot-u1', 'agent', NULL, NULL, 'general', :old_vault) AS null_vs_value_vault;
SELECT outcome FROM lease.rotate_channel('rot-u1', 'agent', NULL, 'prod', 'general', :new) AS value_vs_null_env;
SELECT outcome FROM lease.rotate_channel('rot-u1', 'agent', NULL, NULL, 'general', -1) AS unknown_id;
SELECT lease_test.digest() = :'before' AS nothing_written;

-- a rotation in a vault scope
SELECT outcome, conversation_id AS new_vault
  FROM lease.rotate_channel('rot-u1', 'agent', 'vault', NULL, 'general', :old_vault) \gset
SELECT :'outcome' AS outcome,
       lease.find_channel_conversation('rot-u1', 'agent', 'vault', NULL, 'general') = :new_vault AS found;

-- a chain: rotate the replacement again; rotated_from records each step
SELECT conversation_id AS newer FROM lease.rotate_channel('rot-u1', 'agent', NULL, NULL, 'general', :new) \gset
SELECT (SELECT rotated_from FROM lease.conversations WHERE id = :newer) = :new AS newer_from_new,
       lease.find_channel_conversation('rot-u1', 'agent', NULL, NULL, 'general') = :newer AS found_newer,
       (SELECT count(*) FROM lease.conversations
         WHERE user_id = 'rot-u1' AND agent_id = 'agent' AND vault_id IS NULL
           AND channel_id = 'general') AS bindings;

-- refused by the tenant's limit: the unbind is undone, no sandbox or
-- conversation is left behind, the channel stays with the old conversation
INSERT INTO lease.tenant_limits
SELECT 'rot-u1', count(*) FROM lease.sandboxes WHERE user_id = 'rot-u1' AND status IN ('pending', 'starting', 'ready');
SELECT lease_test.digest() AS before \gset
SELECT outcome, conversation_id, previous_conversation_id = :newer AS echoed, detail ~ '^tenant limit of \d+ active sandboxes reached; end one' AS tenant_detail
  FROM lease.rotate_channel('rot-u1', 'agent', NULL, NULL, 'general', :newer);
SELECT lease_test.digest() = :'before' AS nothing_written,
       lease.find_channel_conversation('rot-u1', 'agent', NULL, NULL, 'general') = :newer AS still_bound;
DELETE FROM lease.tenant_limits WHERE user_id = 'rot-u1';
-- refused by the fleet capacity, likewise
SELECT lease_test.digest() AS before \gset
SELECT count(*) AS fleet_active FROM lease.sandboxes WHERE status IN ('pending', 'starting', 'ready') \gset
SET lease.fleet_capacity = :fleet_active;
SELECT outcome, detail LIKE format('fleet capacity of %s active sandboxes reached; %%', :fleet_active) AS fleet_detail
  FROM lease.rotate_channel('rot-u1', 'agent', NULL, NULL, 'general', :newer);
SELECT lease_test.digest() = :'before' AS nothing_written;
RESET lease.fleet_capacity;

-- the admission lock is the row of lease.admission_gate, held to the end of
-- the caller's transaction (test/specs/admission_gate_busy.spec), never an
-- advisory lock, which any role could hold; a refused rotation's
-- subtransaction was rolled back, and its locks with it
BEGIN;
SELECT outcome FROM lease.rotate_channel('rot-u1', 'agent', NULL, NULL, 'general', :newer);
SELECT count(*) AS advisory_locks FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid();
ROLLBACK;
INSERT INTO lease.tenant_limits VALUES ('rot-u1', 0);
BEGIN;
SELECT outcome FROM lease.rotate_channel('rot-u1', 'agent', NULL, NULL, 'general', :newer);
SELECT count(*) AS advisory_locks FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid();
ROLLBACK;
DELETE FROM lease.tenant_limits WHERE user_id = 'rot-u1';
SELECT lease.find_channel_conversation('rot-u1', 'agent', NULL, NULL, 'general') = :newer AS rolled_back;

-- lock_timeout after a rotation is the caller's own: a session SET, a SET
-- LOCAL, or the default (lease.rotation_lock_timeout bounds only the locking read)
SET lock_timeout = '3s';
SELECT outcome FROM lease.rotate_channel('rot-u1', 'agent', NULL, NULL, 'general', :newer);
SHOW lock_timeout;
BEGIN;
SET LOCAL lock_timeout = '4s';
SELECT outcome FROM lease.rotate_channel('rot-u1', 'agent', NULL, NULL, 'general',
                                         lease.find_channel_conversation('rot-u1', 'agent', NULL, NULL, 'general'));
SHOW lock_timeout;
COMMIT;
SHOW lock_timeout;
RESET lock_timeout;
SELECT outcome FROM lease.rotate_channel('rot-u1', 'agent', NULL, NULL, 'general',
                                         lease.find_channel_conversation('rot-u1', 'agent', NULL, NULL, 'general'));
SHOW lock_timeout;
-- and after a non-rotated outcome too
SET lock_timeout = '5s';
SELECT outcome FROM lease.rotate_channel('rot-u1', 'agent', NULL, NULL, 'general', :old);
SHOW lock_timeout;
RESET lock_timeout;

-- the whole history of the channel: one binding, each replacement rotated
-- from the one before
SELECT count(*) FILTER (WHERE channel_id IS NOT NULL) AS bound,
       count(*) FILTER (WHERE rotated_from IS NOT NULL) AS rotations
  FROM lease.conversations WHERE user_id = 'rot-u1' AND agent_id = 'agent' AND vault_id IS NULL;

-- bad input: errors, and nothing written
SELECT lease_test.digest() AS before \gset
SELECT lease_test.try($$SELECT * FROM lease.rotate_channel(NULL, 'agent', NULL, NULL, 'general', 1)$$);
SELECT lease_test.try($$SELECT * FROM lease.rotate_channel('rot-u1', NULL, NULL, NULL, 'general', 1)$$);
SELECT lease_test.try($$SELECT * FROM lease.rotate_channel('rot-u1', 'agent', NULL, NULL, NULL, 1)$$);
SELECT lease_test.try($$SELECT * FROM lease.rotate_channel('rot-u1', 'agent', NULL, NULL, 'general', NULL)$$);
SELECT lease_test.try($$SELECT * FROM lease.rotate_channel('rot-u1', 'agent', '', NULL, 'general', 1)$$);
SELECT lease_test.try($$SELECT * FROM lease.rotate_channel('rot-u1', 'agent', NULL, ' ', 'general', 1)$$);
SELECT lease_test.try($$SELECT * FROM lease.rotate_channel('rot-u1', 'agent', NULL, NULL, repeat('c', 257), 1)$$);
SELECT lease_test.try($$SELECT * FROM lease.rotate_channel('', 'agent', NULL, NULL, 'general', 1)$$);
SELECT lease_test.digest() = :'before' AS nothing_written;
