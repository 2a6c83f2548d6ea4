-- lease.restore_rotated_channel along rotation chains: a restore
-- never leaves a channel unbound.  While the failed replacement still holds
-- the channel, it goes back to the previous conversation if that is live and
-- unbound, else to the nearest live, unbound ancestor up the rotated_from
-- chain across failed conversations (never across an ended one, never to one
-- bound elsewhere); with no such conversation the replacement keeps the
-- channel, the restore answers failed (WARNING) and the pair is queued until
-- the replacement is rotated away from, started or ended.  Each case is one
-- tenant 'rc-N' with channel 'general'.

-- The WARNINGs below name conversation ids: this file's ids start at 9001.
SELECT max(id) < 9000 AS ids_free FROM lease.conversations;
SELECT setval(pg_get_serial_sequence('lease.conversations', 'id'), 9000);

-- A tenant's first conversation on 'general', and a rotation of 'general'.
CREATE FUNCTION lease_test.start(tenant text) RETURNS bigint
LANGUAGE sql AS $$
    SELECT conversation_id FROM lease.start_conversation(tenant, 'agent', NULL, NULL, 'general')
$$;
CREATE FUNCTION lease_test.rotate(tenant text, from_id bigint) RETURNS bigint
LANGUAGE sql AS $$
    SELECT conversation_id FROM lease.rotate_channel(tenant, 'agent', NULL, NULL, 'general', from_id)
$$;
-- A tenant's conversations: status, binding, sandbox, rotated_from.
CREATE FUNCTION lease_test.chain(tenant text)
RETURNS TABLE (id bigint, status text, channel_id text, sandbox text, rotated_from bigint)
LANGUAGE sql AS $$
    SELECT c.id, c.status, c.channel_id, s.status, c.rotated_from
      FROM lease.conversations c JOIN lease.sandboxes s ON s.id = c.sandbox_id
     WHERE c.user_id = tenant ORDER BY c.id
$$;
-- Who holds 'general' in the tenant's scope (NULL: nobody).
CREATE FUNCTION lease_test.holder(tenant text) RETURNS bigint
LANGUAGE sql AS $$
    SELECT lease.find_channel_conversation(tenant, 'agent', NULL, NULL, 'general')
$$;
-- The tenant's queued compensations.
CREATE FUNCTION lease_test.queue(tenant text)
RETURNS TABLE (previous bigint, failed bigint, channel_id text, reason text, sqlstate text,
               attempts int, resolved boolean)
LANGUAGE sql AS $$
    SELECT f.previous_conversation_id, f.failed_conversation_id, f.channel_id, f.reason,
           f.sqlstate, f.attempts, f.resolved_at IS NOT NULL
      FROM lease.compensation_failures f
     WHERE f.failed_conversation_id IN (SELECT c.id FROM lease.conversations c WHERE c.user_id = tenant)
     ORDER BY f.id
$$;

-- The issue's sequence: c1 -> c2 (client A), c2 -> c3 (client B); A's
-- restore is superseded (c3 holds the channel, c2 fails), B's restore gives
-- the channel to c1, the nearest live unbound conversation across failed c2
SELECT lease_test.start('rc-1') AS c1 \gset
SELECT lease_test.rotate('rc-1', :c1) AS c2 \gset
SELECT lease_test.rotate('rc-1', :c2) AS c3 \gset
SELECT lease.restore_rotated_channel(:c1, :c2);
SELECT * FROM lease_test.chain('rc-1');
SELECT lease.restore_rotated_channel(:c2, :c3);
SELECT * FROM lease_test.chain('rc-1');
SELECT lease_test.holder('rc-1') = :c1 AS c1_holds_it;
-- repeating either restore changes nothing, and nothing was queued
SELECT lease_test.digest() AS before \gset
SELECT lease.restore_rotated_channel(:c1, :c2), lease.restore_rotated_channel(:c2, :c3);
SELECT lease_test.digest() = :'before' AS nothing_written;
SELECT count(*) AS queued FROM lease_test.queue('rc-1');

-- the same restores in the other order: each gives the channel back one step
SELECT lease_test.start('rc-2') AS c1 \gset
SELECT lease_test.rotate('rc-2', :c1) AS c2 \gset
SELECT lease_test.rotate('rc-2', :c2) AS c3 \gset
SELECT lease.restore_rotated_channel(:c2, :c3);
SELECT lease_test.holder('rc-2') = :c2 AS c2_holds_it;
SELECT lease.restore_rotated_channel(:c1, :c2);
SELECT * FROM lease_test.chain('rc-2');
SELECT lease_test.holder('rc-2') = :c1 AS c1_holds_it;

-- across several failed conversations: c1 -> c2 -> c3 -> c4, c2 and c3
-- superseded, c4's restore reaches c1
SELECT lease_test.start('rc-3') AS c1 \gset
SELECT lease_test.rotate('rc-3', :c1) AS c2 \gset
SELECT lease_test.rotate('rc-3', :c2) AS c3 \gset
SELECT lease_test.rotate('rc-3', :c3) AS c4 \gset
SELECT lease.restore_rotated_channel(:c1, :c2), lease.restore_rotated_channel(:c2, :c3);
SELECT lease.restore_rotated_channel(:c3, :c4);
SELECT * FROM lease_test.chain('rc-3');
SELECT lease_test.holder('rc-3') = :c1 AS c1_holds_it;

-- no target: the previous conversation was ended.  The replacement keeps
-- the channel and stays pending, the restore answers failed with a WARNING
-- naming the channel and the reason, and the pair is queued (55000)
SELECT lease_test.start('rc-4') AS c1 \gset
SELECT lease_test.rotate('rc-4', :c1) AS c2 \gset
SELECT lease.end_conversation(:c1);
SELECT lease.restore_rotated_channel(:c1, :c2);
SELECT * FROM lease_test.chain('rc-4');
SELECT lease_test.holder('rc-4') = :c2 AS c2_keeps_it;
SELECT * FROM lease_test.queue('rc-4');
-- asking again changes nothing but the attempt count
SELECT lease.restore_rotated_channel(:c1, :c2);
SELECT * FROM lease_test.queue('rc-4');
SELECT * FROM lease_test.chain('rc-4');
\set rc4_c2 :c2

-- no target: the previous conversation is bound elsewhere; it keeps that
-- binding and is never taken
SELECT lease_test.start('rc-5') AS c1 \gset
SELECT lease_test.rotate('rc-5', :c1) AS c2 \gset
UPDATE lease.conversations SET channel_id = 'elsewhere' WHERE id = :c1;
SELECT lease.restore_rotated_channel(:c1, :c2);
SELECT * FROM lease_test.chain('rc-5');
SELECT * FROM lease_test.queue('rc-5');
\set rc5_c2 :c2

-- no target, up the chain: an ended conversation is never crossed.  c1 ->
-- c2 -> c3 -> c4, c2 ended on purpose, c3 superseded: c4's restore stops at
-- c2 and leaves live, unbound c1 alone
SELECT lease_test.start('rc-6') AS c1 \gset
SELECT lease_test.rotate('rc-6', :c1) AS c2 \gset
SELECT lease_test.rotate('rc-6', :c2) AS c3 \gset
SELECT lease.end_conversation(:c2);
SELECT lease_test.rotate('rc-6', :c3) AS c4 \gset
SELECT lease.restore_rotated_channel(:c2, :c3);
SELECT lease.restore_rotated_channel(:c3, :c4);
SELECT * FROM lease_test.chain('rc-6');
SELECT * FROM lease_test.queue('rc-6');
\set rc6_c4 :c4

-- no target, up the chain: an ancestor bound elsewhere is never taken
SELECT lease_test.start('rc-7') AS c1 \gset
SELECT lease_test.rotate('rc-7', :c1) AS c2 \gset
SELECT lease_test.rotate('rc-7', :c2) AS c3 \gset
SELECT lease.restore_rotated_channel(:c1, :c2);
UPDATE lease.conversations SET channel_id = 'elsewhere' WHERE id = :c1;
SELECT lease.restore_rotated_channel(:c2, :c3);
SELECT * FROM lease_test.chain('rc-7');
SELECT * FROM lease_test.queue('rc-7');
\set rc7_c3 :c3

-- a retry changes nothing while nothing can take the channels back: each
-- pair answers failed again (one WARNING each), the replacements keep them
SELECT lease_test.digest() AS before \gset
SELECT * FROM lease.retry_failed_compensations();
SELECT lease_test.holder('rc-4') = :rc4_c2 AS rc4, lease_test.holder('rc-5') = :rc5_c2 AS rc5,
       lease_test.holder('rc-6') = :rc6_c4 AS rc6, lease_test.holder('rc-7') = :rc7_c3 AS rc7;
SELECT q.failed, q.attempts, q.resolved
  FROM unnest(ARRAY['rc-4', 'rc-5', 'rc-6', 'rc-7']) t, lease_test.queue(t) q;

-- a queued pair resolves to superseded once its replacement was ended
-- (rc-4), rotated away from (rc-5: the rotation's replacement holds the
-- channel, the queued one fails), or started (rc-6: a turn made it running;
-- it keeps the channel); rc-7 stays queued
SELECT lease.end_conversation(:rc4_c2);
SELECT lease_test.rotate('rc-5', :rc5_c2) AS rc5_c3 \gset
SELECT lease.admit_turn(:rc6_c4) > 0 AS turn;
SELECT * FROM lease.retry_failed_compensations();
SELECT * FROM lease_test.chain('rc-4');
SELECT * FROM lease_test.chain('rc-5');
SELECT lease_test.holder('rc-5') = :rc5_c3 AS rotation_holds_it;
SELECT * FROM lease_test.chain('rc-6');
SELECT q.failed, q.attempts, q.resolved
  FROM unnest(ARRAY['rc-4', 'rc-5', 'rc-6', 'rc-7']) t, lease_test.queue(t) q;
-- rc-7: the ancestor's other binding ends, so the pair can be restored at
-- last (c1 is live and unbound)
UPDATE lease.conversations SET channel_id = NULL
 WHERE user_id = 'rc-7' AND channel_id = 'elsewhere' RETURNING id AS freed \gset
SELECT * FROM lease.retry_failed_compensations();
SELECT * FROM lease_test.chain('rc-7');
SELECT lease_test.holder('rc-7') = :freed AS c1_holds_it;
SELECT count(*) FILTER (WHERE NOT q.resolved) AS unresolved
  FROM unnest(ARRAY['rc-4', 'rc-5', 'rc-6', 'rc-7']) t, lease_test.queue(t) q;
SELECT * FROM lease.retry_failed_compensations();

-- the quota: a replacement that keeps its channel keeps its pending sandbox,
-- which counts against the tenant's limit; failed ones do not
INSERT INTO lease.tenant_limits VALUES ('rc-8', 2);
SELECT lease_test.start('rc-8') AS c1 \gset
SELECT lease_test.rotate('rc-8', :c1) AS c2 \gset
SELECT lease.end_conversation(:c1);
SELECT lease.restore_rotated_channel(:c1, :c2);
SELECT outcome FROM lease.start_conversation('rc-8', 'agent', NULL, NULL, 'other');
SELECT outcome, detail FROM lease.start_conversation('rc-8', 'agent', NULL, NULL, 'third');
SELECT lease.end_conversation(:c2);
SELECT * FROM lease.retry_failed_compensations();
DELETE FROM lease.tenant_limits WHERE user_id = 'rc-8';

-- no target: the chain ends at a failed conversation that was not itself a
-- rotation (only a hand edit makes one; the walk stops there)
SELECT lease_test.start('rc-9') AS c1 \gset
SELECT lease_test.rotate('rc-9', :c1) AS c2 \gset
UPDATE lease.conversations SET status = 'failed' WHERE id = :c1;
SELECT lease.restore_rotated_channel(:c1, :c2);
SELECT * FROM lease_test.queue('rc-9');
SELECT lease.end_conversation(:c2);
SELECT * FROM lease.retry_failed_compensations();

DROP FUNCTION lease_test.start(text), lease_test.rotate(text, bigint), lease_test.chain(text),
    lease_test.holder(text), lease_test.queue(text);
