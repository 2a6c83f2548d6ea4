-- Data for the dump/restore test (test/upgrade/dump.sh), written through the
-- lease.* functions so that every table holding user data has rows of every
-- kind: leases with owners, fencing epochs, checkpoints, a pending two-phase
-- checkpoint, a pending handoff and parents; their events; conversations
-- started, rotated, ended and restored; sandboxes; turns; a tenant limit; a
-- compensation failure, resolved and unresolved; an app grant (0.2.0).
\set ON_ERROR_STOP 1
\set QUIET 1
SET client_min_messages = error;   -- the injected failures' WARNINGs

-- Leases and their events.
SELECT lease.create_lease('dump', 's', 'parent');
SELECT lease.create_lease('dump', 's', 'a', ARRAY['parent']);
SELECT lease.create_lease('dump', 's', 'b', '{}', 'AT_SEQUENCE_1');
SELECT lease.create_lease('dump', 's', 'c');
SELECT lease.create_lease('dump', 's', 'd');
SELECT lease.take_lease('dump', 's', 'parent', 'w1', NULL, '1 hour');
SELECT lease.close_shard('dump', 's', 'parent', 'w1');
SELECT lease.take_lease('dump', 's', 'b', 'w1', NULL, '1 hour');
SELECT lease.update_checkpoint('dump', 's', 'b', 'w1', '4711', 3);
SELECT lease.prepare_checkpoint('dump', 's', 'b', 'w1', '4800');
SELECT lease.take_lease('dump', 's', 'c', 'w1', NULL, '1 hour');
SELECT lease.request_handoff('dump', 's', 'c', 'w2');
SELECT * FROM lease.take_leases('dump', 's', 'w2', '1 hour');
SELECT lease.release_lease('dump', 's', 'd', 'w2');
-- Prune the parent's events (made old here): 0.3.0 adds them to
-- lease.lease_event_totals.
UPDATE lease.lease_events SET occurred_at = occurred_at - interval '2 days'
 WHERE app_name = 'dump' AND shard_id = 'parent';
SELECT lease.prune_events('1 day');
-- created after a round counted the stream: leaves a lineage_changes row
SELECT lease.create_lease('dump', 's', 'e');

-- Conversations, sandboxes, turns, rotations.
INSERT INTO lease.tenant_limits (user_id, sandbox_limit) VALUES ('dump-u1', 10), ('dump-u2', 0);
SELECT conversation_id AS c1 FROM lease.start_conversation('dump-u1', 'agent', 'vault', NULL, 'ch1') \gset
SELECT lease.admit_turn(:c1);
SELECT lease.admit_turn(:c1);
SELECT conversation_id AS c2 FROM lease.rotate_channel('dump-u1', 'agent', 'vault', NULL, 'ch1', :c1) \gset
SELECT lease.admit_turn(:c2);
SELECT conversation_id AS c3 FROM lease.start_conversation('dump-u1', 'agent', NULL, NULL, 'ch2') \gset
SELECT lease.end_conversation(:c3);
SELECT conversation_id AS c4 FROM lease.start_conversation('dump-u1', 'other', NULL, 'env', 'ch3') \gset
SELECT conversation_id AS c5 FROM lease.rotate_channel('dump-u1', 'other', NULL, 'env', 'ch3', :c4) \gset
SELECT lease.restore_rotated_channel(:c4, :c5);
SELECT * FROM lease.start_conversation('dump-u2', 'agent', NULL, NULL, 'refused');

-- Compensation failures: a restore that fails (a trigger raising, as in
-- test/sql/12_restore_rotated_channel.sql): one pair that fails and is then
-- resolved by a retry (its replacement ended: superseded), another that fails twice and stays unresolved.  The trigger is dropped again: the dump must
-- hold only what pg_lease itself creates.
CREATE FUNCTION public.dump_inject() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'injected failure' USING ERRCODE = 'deadlock_detected';
END $$;
CREATE TRIGGER dump_inject BEFORE UPDATE ON lease.conversations
    FOR EACH ROW EXECUTE FUNCTION public.dump_inject();
SELECT conversation_id AS c6 FROM lease.start_conversation('dump-u1', 'agent', NULL, NULL, 'ch4') \gset
SELECT conversation_id AS c7 FROM lease.start_conversation('dump-u1', 'agent', NULL, NULL, 'ch5') \gset
DROP TRIGGER dump_inject ON lease.conversations;
SELECT conversation_id AS c8 FROM lease.rotate_channel('dump-u1', 'agent', NULL, NULL, 'ch4', :c6) \gset
SELECT conversation_id AS c9 FROM lease.rotate_channel('dump-u1', 'agent', NULL, NULL, 'ch5', :c7) \gset
CREATE TRIGGER dump_inject BEFORE UPDATE ON lease.conversations
    FOR EACH ROW EXECUTE FUNCTION public.dump_inject();
SELECT lease.restore_rotated_channel(:c7, :c9);
ALTER TABLE lease.conversations DISABLE TRIGGER dump_inject;
SELECT lease.end_conversation(:c9);
SELECT * FROM lease.retry_failed_compensations();
ALTER TABLE lease.conversations ENABLE TRIGGER dump_inject;
SELECT lease.restore_rotated_channel(:c6, :c8);
SELECT lease.restore_rotated_channel(:c6, :c8);
DROP TRIGGER dump_inject ON lease.conversations;
DROP FUNCTION public.dump_inject();

-- 0.2.0 and later: an app grant.
\ir dump_grants.sql

-- Ids that are not the next value: a gap left by a rolled-back insert.
BEGIN;
SELECT conversation_id FROM lease.start_conversation('dump-u1', 'agent', NULL, NULL, 'gone');
ROLLBACK;

-- Every table must have rows, or the test proves nothing for it.
DO $$
DECLARE
    t regclass;
    n bigint;
BEGIN
    FOR t IN SELECT c.oid FROM pg_class c
              WHERE c.relnamespace = 'lease'::regnamespace AND c.relkind = 'r'
                -- a setting, 0.3.0 and later: dump.sh fills it (dump_id_partition.sql)
                AND c.relname <> 'conversation_id_partition'
                -- 0.4.0 and later: dump.sh fills them (dump_balancing.sql)
                AND c.relname NOT IN ('worker_capacities', 'stream_balancing')
                -- 0.5.0 and later: dump.sh fills it (dump_placement.sql)
                AND c.relname <> 'stream_placements' LOOP
        EXECUTE format('SELECT count(*) FROM %s', t) INTO n;
        IF n = 0 THEN
            RAISE EXCEPTION 'dump fixture: % has no rows', t;
        END IF;
    END LOOP;
    IF NOT EXISTS (SELECT 1 FROM lease.compensation_failures WHERE resolved_at IS NULL)
       OR NOT EXISTS (SELECT 1 FROM lease.compensation_failures WHERE resolved_at IS NOT NULL)
       OR NOT EXISTS (SELECT 1 FROM lease.shard_leases WHERE handoff_to IS NOT NULL)
       OR NOT EXISTS (SELECT 1 FROM lease.shard_leases WHERE pending_checkpoint IS NOT NULL)
       OR NOT EXISTS (SELECT 1 FROM lease.conversations WHERE rotated_from IS NOT NULL) THEN
        RAISE EXCEPTION 'dump fixture: a kind of row is missing';
    END IF;
END $$;
