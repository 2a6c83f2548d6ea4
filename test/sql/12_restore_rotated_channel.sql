-- lease.restore_rotated_channel and lease.retry_failed_compensations: every
-- outcome, a failed restore (WARNING, record, retry), the queue's one row
-- per pair, bad input.  Tenants here are 'rs-*'.

-- The WARNINGs below name conversation ids: this file's ids start at 1201.
SELECT max(id) < 1200 AS ids_free FROM lease.conversations;
SELECT setval(pg_get_serial_sequence('lease.conversations', 'id'), 1200);

-- A rotation of channel c in rs-u1's scope (agent, NULL, NULL): :old -> :new.
CREATE FUNCTION lease_test.rotation(channel text, OUT old bigint, OUT new bigint)
LANGUAGE sql AS $$
    SELECT s.conversation_id, r.conversation_id
      FROM lease.start_conversation('rs-u1', 'agent', NULL, NULL, channel) s,
           lease.rotate_channel('rs-u1', 'agent', NULL, NULL, channel, s.conversation_id) r
$$;
-- Who holds what: the pair's status, binding and sandbox status.
CREATE FUNCTION lease_test.pair(old bigint, new bigint)
RETURNS TABLE (who text, status text, channel_id text, sandbox text)
LANGUAGE sql AS $$
    SELECT CASE c.id WHEN old THEN 'old' WHEN new THEN 'new' END, c.status, c.channel_id, s.status
      FROM lease.conversations c JOIN lease.sandboxes s ON s.id = c.sandbox_id
     WHERE c.id IN (old, new) ORDER BY c.id
$$;

-- restored: the failed replacement still held the channel and the previous
-- conversation is unbound and alive; the replacement and its sandbox are failed
SELECT old, new FROM lease_test.rotation('restored') \gset
SELECT lease.restore_rotated_channel(:old, :new);
SELECT * FROM lease_test.pair(:old, :new);
SELECT lease.find_channel_conversation('rs-u1', 'agent', NULL, NULL, 'restored') = :old AS old_holds_it;
-- calling it again changes nothing: there is nothing left to restore
SELECT lease_test.digest() AS before \gset
SELECT lease.restore_rotated_channel(:old, :new);
SELECT lease_test.digest() = :'before' AS nothing_written;
-- the previous conversation, bound again, can be rotated again
SELECT outcome FROM lease.rotate_channel('rs-u1', 'agent', NULL, NULL, 'restored', :old);

-- superseded: a newer rotation won; its binding stays, the failed
-- replacement is marked failed
SELECT old, new FROM lease_test.rotation('newer') \gset
SELECT conversation_id AS newer FROM lease.rotate_channel('rs-u1', 'agent', NULL, NULL, 'newer', :new) \gset
SELECT lease.restore_rotated_channel(:old, :new);
SELECT * FROM lease_test.pair(:old, :new);
SELECT lease.find_channel_conversation('rs-u1', 'agent', NULL, NULL, 'newer') = :newer AS newer_holds_it,
       (SELECT status FROM lease.conversations WHERE id = :newer) AS newer_status;

-- (a previous conversation that ended or is bound elsewhere, and rotation
-- chains: test/sql/16_restore_chains.sql)

-- superseded: the replacement did start (a turn moved it to running); it is
-- live and in use, so nothing is touched.  Its first turn ended the previous
-- conversation and its sandbox (sql/17_rotation_lifecycle.sql)
SELECT old, new FROM lease_test.rotation('started') \gset
SELECT lease.admit_turn(:new) > 0 AS turn;
SELECT lease_test.digest() AS before \gset
SELECT lease.restore_rotated_channel(:old, :new);
SELECT lease_test.digest() = :'before' AS nothing_written;
SELECT * FROM lease_test.pair(:old, :new);

-- failed: any error inside the restore (here a trigger raising, as a
-- deadlock would) rolls the restore back, raises a WARNING naming both
-- conversations, the channel and the cause, and records the failure
CREATE FUNCTION lease_test.inject() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'injected failure' USING ERRCODE = 'deadlock_detected';
END $$;
CREATE TRIGGER inject_failure BEFORE UPDATE ON lease.conversations
    FOR EACH ROW WHEN (current_setting('lease_test.inject', true) = 'on')
    EXECUTE FUNCTION lease_test.inject();
SELECT old, new FROM lease_test.rotation('broken') \gset
SELECT old AS old2, new AS new2 FROM lease_test.rotation('broken2') \gset
SET lease_test.inject = 'on';
BEGIN;
SELECT lease.restore_rotated_channel(:old, :new);
-- the caller's transaction is intact, the restore undone
SELECT * FROM lease_test.pair(:old, :new);
COMMIT;
SELECT previous_conversation_id = :old AS prev, failed_conversation_id = :new AS failed, channel_id,
       reason, sqlstate, attempts, occurred_at = last_failed_at AS first, resolved_at
  FROM lease.compensation_failures;
-- failing again updates that record: one unresolved row per pair
SELECT lease.restore_rotated_channel(:old, :new);
SELECT * FROM lease.retry_failed_compensations();
SELECT count(*) AS rows, max(attempts) AS attempts FROM lease.compensation_failures;
SELECT * FROM lease_test.pair(:old, :new);
-- a second failed pair, which is superseded by the time it is retried (its
-- replacement was ended)
SELECT lease.restore_rotated_channel(:old2, :new2);
RESET lease_test.inject;
SELECT lease.end_conversation(:new2);
-- once the cause is gone, a retry drains the queue, oldest first, and marks
-- what ended restored or superseded as resolved
SELECT * FROM lease.retry_failed_compensations();
SELECT failed_conversation_id = :new AS first_pair, attempts, resolved_at IS NOT NULL AS resolved
  FROM lease.compensation_failures ORDER BY id;
SELECT * FROM lease_test.pair(:old, :new);
SELECT * FROM lease_test.pair(:old2, :new2);
SELECT * FROM lease.retry_failed_compensations();

-- the record is written in the caller's transaction: a rollback of that
-- transaction removes it (the WARNING is in the server log regardless)
SELECT old, new FROM lease_test.rotation('direct') \gset
SET lease_test.inject = 'on';
BEGIN;
SELECT lease.restore_rotated_channel(:old, :new);
ROLLBACK;
SELECT count(*) AS recorded FROM lease.compensation_failures WHERE failed_conversation_id = :new;
-- a direct restore_rotated_channel call resolves a recorded failure too
SELECT lease.restore_rotated_channel(:old, :new);
RESET lease_test.inject;
SELECT lease.restore_rotated_channel(:old, :new);
SELECT count(*) FILTER (WHERE resolved_at IS NULL) AS unresolved, count(*) AS rows
  FROM lease.compensation_failures;
DROP TRIGGER inject_failure ON lease.conversations;

-- bad input: errors, and nothing written
SELECT old, new FROM lease_test.rotation('bad') \gset
SELECT conversation_id AS plain FROM lease.start_conversation('rs-u1', 'agent', NULL, NULL, 'plain') \gset
SELECT lease_test.digest() AS before \gset
SELECT lease_test.try(format('SELECT lease.restore_rotated_channel(%s, %s)', :new, :old));
SELECT lease_test.try(format('SELECT lease.restore_rotated_channel(%s, %s)', :plain, :new));
SELECT lease_test.try(format('SELECT lease.restore_rotated_channel(%s, %s)', :old, :plain));
SELECT lease_test.try(format('SELECT lease.restore_rotated_channel(%s, %s)', :old, -1));
SELECT lease_test.try(format('SELECT lease.restore_rotated_channel(%s, NULL)', :old));
SELECT lease_test.try(format('SELECT lease.restore_rotated_channel(NULL, %s)', :new));
SELECT lease_test.digest() = :'before' AS nothing_written;
DROP FUNCTION lease_test.inject(), lease_test.rotation(text), lease_test.pair(bigint, bigint);
