-- lease.admit_turn and lease.end_conversation.  Tenants here are 'tn-*'.

SELECT conversation_id AS conv FROM lease.start_conversation('tn-u1', 'agent', NULL, NULL, 'general') \gset

-- a turn on a pending conversation makes it running; further turns keep it so
SELECT lease.admit_turn(:conv) AS turn1 \gset
SELECT lease.admit_turn(:conv) > :turn1 AS later_turn;
SELECT status, channel_id FROM lease.conversations WHERE id = :conv;
SELECT count(*) AS turns FROM lease.turns WHERE conversation_id = :conv;
-- an idle conversation takes turns and stays idle
UPDATE lease.conversations SET status = 'idle' WHERE id = :conv;
SELECT lease.admit_turn(:conv) > 0 AS idle_turn;
SELECT status FROM lease.conversations WHERE id = :conv;

-- the lock a turn takes, held to the end of the caller's transaction: the
-- conversation row FOR UPDATE (what a rotation waits on), and no advisory
-- lock (any role could hold one: test/specs/admission_stranger_locks.spec)
BEGIN;
SELECT lease.admit_turn(:conv) > 0 AS turn;
SELECT count(*) AS advisory_locks FROM pg_locks
 WHERE locktype = 'advisory' AND pid = pg_backend_pid();
ROLLBACK;

-- end_conversation: terminated, unbound, its sandbox terminated (the quota
-- slot is free); a second call returns false
SELECT lease.end_conversation(:conv);
SELECT c.status, c.channel_id, s.status AS sandbox
  FROM lease.conversations c JOIN lease.sandboxes s ON s.id = c.sandbox_id WHERE c.id = :conv;
SELECT lease.find_channel_conversation('tn-u1', 'agent', NULL, NULL, 'general') IS NULL AS unbound;
SELECT lease.end_conversation(:conv) AS again, lease.end_conversation(-1) AS unknown;
-- the channel can be bound again
SELECT outcome FROM lease.start_conversation('tn-u1', 'agent', NULL, NULL, 'general');

-- a sandbox that has already ended keeps its status
SELECT conversation_id AS conv2 FROM lease.start_conversation('tn-u1', 'agent', NULL, NULL, NULL) \gset
UPDATE lease.sandboxes SET status = 'failed' WHERE id = (SELECT sandbox_id FROM lease.conversations WHERE id = :conv2);
SELECT lease.end_conversation(:conv2);
SELECT c.status, s.status AS sandbox
  FROM lease.conversations c JOIN lease.sandboxes s ON s.id = c.sandbox_id WHERE c.id = :conv2;

-- turns on an ended or unknown conversation: errors, nothing written
SELECT regexp_replace(lease_test.try(format('SELECT lease.admit_turn(%s)', id)), ' \d+ ', ' N ') AS error, status
  FROM lease.conversations WHERE id IN (:conv, :conv2) ORDER BY id;
UPDATE lease.conversations SET status = 'failed' WHERE id = :conv2;
SELECT lease_test.digest() AS before \gset
SELECT regexp_replace(lease_test.try(format('SELECT lease.admit_turn(%s)', :conv2)), ' \d+ ', ' N ') AS failed;
SELECT lease_test.try('SELECT lease.admit_turn(-1)');
SELECT lease_test.try('SELECT lease.admit_turn(NULL)');
SELECT lease_test.try('SELECT lease.end_conversation(NULL)');
SELECT lease_test.digest() = :'before' AS nothing_written;
