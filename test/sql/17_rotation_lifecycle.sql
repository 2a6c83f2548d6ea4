-- The lifecycle of a rotation: a restore is meaningful only while
-- the replacement is pending, so the previous conversation is ended, and its
-- sandbox slot freed, exactly when the replacement starts: its first turn
-- (admit_turn) or lease.confirm_rotation.  That ends the live, unbound
-- conversations up the replacement's rotated_from chain (pending ones that
-- were rotated away from before they ran, across failed ones), never one
-- that holds a channel, and nothing else.  Then list_conversations, what the
-- application sees of a tenant.  Each case is one tenant 'lc-N'.

-- Error messages below name conversation ids: this file's ids start at 17001.
SELECT max(id) < 17000 AS ids_free FROM lease.conversations;
SELECT setval(pg_get_serial_sequence('lease.conversations', 'id'), 17000);

CREATE FUNCTION lease_test.lc_start(tenant text) RETURNS bigint
LANGUAGE sql AS $$
    SELECT conversation_id FROM lease.start_conversation(tenant, 'agent', NULL, NULL, 'general')
$$;
CREATE FUNCTION lease_test.lc_rotate(tenant text, from_id bigint) RETURNS bigint
LANGUAGE sql AS $$
    SELECT conversation_id FROM lease.rotate_channel(tenant, 'agent', NULL, NULL, 'general', from_id)
$$;
-- A tenant's conversations, oldest first, with ids relative to its first.
CREATE FUNCTION lease_test.lc_chain(tenant text)
RETURNS TABLE (n bigint, status text, channel_id text, sandbox text, rotated_from bigint)
LANGUAGE sql AS $$
    SELECT c.id - f.id + 1, c.status, c.channel_id, s.status, c.rotated_from - f.id + 1
      FROM lease.conversations c JOIN lease.sandboxes s ON s.id = c.sandbox_id,
           (SELECT min(id) AS id FROM lease.conversations WHERE user_id = tenant) f
     WHERE c.user_id = tenant ORDER BY c.id
$$;

-- The issue's "done when": !rotate forever on a tenant with limit 2.  Each
-- rotation is followed by the replacement's first turn, which ends the
-- previous conversation; 100 rotations, none refused, one active sandbox.
SELECT lease.set_tenant_limit('lc-1', 2);
SELECT lease_test.lc_start('lc-1') AS c1 \gset
CREATE FUNCTION lease_test.lc_rotate_forever(tenant text, n int, confirm boolean)
RETURNS TABLE (rotated bigint, refused bigint)
LANGUAGE plpgsql AS $$
DECLARE
    cur bigint := lease.find_channel_conversation(tenant, 'agent', NULL, NULL, 'general');
    r record;
    ok bigint := 0;
    no bigint := 0;
BEGIN
    FOR i IN 1 .. n LOOP
        SELECT * INTO r FROM lease.rotate_channel(tenant, 'agent', NULL, NULL, 'general', cur);
        IF r.outcome = 'rotated' THEN
            ok := ok + 1;
            IF confirm THEN
                PERFORM lease.confirm_rotation(cur, r.conversation_id);
            END IF;
            PERFORM lease.admit_turn(r.conversation_id);
            cur := r.conversation_id;
        ELSE
            no := no + 1;
        END IF;
    END LOOP;
    RETURN QUERY SELECT ok, no;
END $$;
SELECT * FROM lease_test.lc_rotate_forever('lc-1', 100, false);
SELECT status, sandbox, count(*) FROM lease_test.lc_chain('lc-1') GROUP BY 1, 2 ORDER BY 1, 2;
SELECT * FROM lease.tenant_limit('lc-1');
-- the same with confirm_rotation after each start (then the turn finds it running)
SELECT lease.set_tenant_limit('lc-2', 2);
SELECT lease_test.lc_start('lc-2') IS NOT NULL AS started;
SELECT * FROM lease_test.lc_rotate_forever('lc-2', 100, true);
SELECT status, sandbox, count(*) FROM lease_test.lc_chain('lc-2') GROUP BY 1, 2 ORDER BY 1, 2;

-- Before the replacement runs, the previous conversation stays live and a
-- restore gives the channel back; a turn on the previous one ends nothing.
SELECT lease_test.lc_start('lc-3') AS c1 \gset
SELECT lease.admit_turn(:c1) IS NOT NULL AS turn;
SELECT lease_test.lc_rotate('lc-3', :c1) AS c2 \gset
SELECT * FROM lease_test.lc_chain('lc-3');
SELECT lease.restore_rotated_channel(:c1, :c2);
SELECT * FROM lease_test.lc_chain('lc-3');

-- Once the replacement's first turn ran, the previous conversation and its
-- sandbox are terminated, in that transaction, and a restore is superseded.
SELECT lease_test.lc_rotate('lc-3', :c1) AS c3 \gset
BEGIN;
SELECT lease.admit_turn(:c3) IS NOT NULL AS turn;
SELECT * FROM lease_test.lc_chain('lc-3');
ROLLBACK;
SELECT * FROM lease_test.lc_chain('lc-3');   -- rolled back with the turn
SELECT lease.admit_turn(:c3) IS NOT NULL AS turn;
SELECT lease.restore_rotated_channel(:c1, :c3);
SELECT * FROM lease_test.lc_chain('lc-3');
-- later turns end nothing more, and write only their turn
SELECT count(*) AS turns_before FROM lease.turns \gset
SELECT lease.admit_turn(:c3) IS NOT NULL AS turn;
SELECT count(*) - :turns_before AS new_turns FROM lease.turns;
SELECT * FROM lease_test.lc_chain('lc-3');

-- A chain rotated again before it ran: c1 -> c2 (pending) -> c3.  c3's
-- first turn ends c2 and c1, which no restore can need any more.
SELECT lease_test.lc_start('lc-4') AS c1 \gset
SELECT lease_test.lc_rotate('lc-4', :c1) AS c2 \gset
SELECT lease_test.lc_rotate('lc-4', :c2) AS c3 \gset
SELECT lease.admit_turn(:c3) IS NOT NULL AS turn;
SELECT * FROM lease_test.lc_chain('lc-4');

-- Across a failed conversation: c1 -> c2 -> c3, c2's restore superseded
-- (c2 failed); c3's first turn crosses c2 and ends c1, c2 stays failed.
SELECT lease_test.lc_start('lc-5') AS c1 \gset
SELECT lease_test.lc_rotate('lc-5', :c1) AS c2 \gset
SELECT lease_test.lc_rotate('lc-5', :c2) AS c3 \gset
SELECT lease.restore_rotated_channel(:c1, :c2);
SELECT lease.admit_turn(:c3) IS NOT NULL AS turn;
SELECT * FROM lease_test.lc_chain('lc-5');

-- Never an ancestor that holds a channel, nor one above it, nor one ended:
-- c1 -> c2 -> c3 -> c4, c2 bound to another channel (as a superuser could
-- bind it), c1 ended: c4's first turn ends c3 only.
SELECT lease_test.lc_start('lc-6') AS c1 \gset
SELECT lease_test.lc_rotate('lc-6', :c1) AS c2 \gset
SELECT lease_test.lc_rotate('lc-6', :c2) AS c3 \gset
SELECT lease_test.lc_rotate('lc-6', :c3) AS c4 \gset
UPDATE lease.conversations SET channel_id = 'other' WHERE id = :c2;
SELECT lease.admit_turn(:c4) IS NOT NULL AS turn;
SELECT * FROM lease_test.lc_chain('lc-6');
SELECT lease_test.lc_start('lc-7') AS c1 \gset
SELECT lease_test.lc_rotate('lc-7', :c1) AS c2 \gset
SELECT lease_test.lc_rotate('lc-7', :c2) AS c3 \gset
SELECT lease.end_conversation(:c2);
SELECT lease.admit_turn(:c3) IS NOT NULL AS turn;
SELECT * FROM lease_test.lc_chain('lc-7');

-- A conversation that was not rotated from anything: its first turn ends nothing.
SELECT lease_test.lc_start('lc-8') AS c1 \gset
SELECT (lease.start_conversation('lc-8', 'agent', NULL, NULL, NULL)).conversation_id AS c2 \gset
SELECT lease.admit_turn(:c2) IS NOT NULL AS turn;
SELECT * FROM lease_test.lc_chain('lc-8');

-- confirm_rotation: each outcome.
SELECT lease_test.lc_start('lc-9') AS c1 \gset
SELECT lease_test.lc_rotate('lc-9', :c1) AS c2 \gset
SELECT count(*) AS turns_before FROM lease.turns \gset
SELECT lease.confirm_rotation(:c1, :c2);           -- confirmed: c2 runs, c1 ended
SELECT lease.confirm_rotation(:c1, :c2);           -- already_running: nothing changes
SELECT count(*) - :turns_before AS new_turns FROM lease.turns;
SELECT * FROM lease_test.lc_chain('lc-9');
SELECT lease_test.lc_rotate('lc-9', :c2) AS c3 \gset
SELECT lease.restore_rotated_channel(:c2, :c3);
SELECT lease.confirm_rotation(:c2, :c3);           -- ended: c3 failed, c2 keeps the channel
SELECT * FROM lease_test.lc_chain('lc-9');
SELECT lease.end_conversation(:c2);
SELECT lease.confirm_rotation(:c1, :c2);           -- ended: c2 terminated
-- bad input: NULLs (22004), unknown ids and pairs that are not a rotation
-- (22023); each writes nothing
SELECT lease_test.digest() AS before \gset
SELECT lease_test.try('SELECT lease.confirm_rotation(NULL, 17001)');
SELECT lease_test.try('SELECT lease.confirm_rotation(17001, NULL)');
SELECT lease_test.try(format('SELECT lease.confirm_rotation(%s, 0)', :c1));
SELECT lease_test.try(format('SELECT lease.confirm_rotation(%s, %s)', :c2, :c1));
SELECT lease_test.try(format('SELECT lease.confirm_rotation(%s, %s)', :c1, :c3));
SELECT lease_test.digest() = :'before' AS nothing_written;

-- list_conversations: the live conversations of a tenant, filtered by
-- agent, vault and environment when given (NULL: every one), oldest first.
SELECT (lease.start_conversation('lc-10', 'agent', NULL, NULL, 'general')).conversation_id AS c1 \gset
SELECT (lease.start_conversation('lc-10', 'agent', 'v1', NULL, 'general')).conversation_id AS c2 \gset
SELECT (lease.start_conversation('lc-10', 'agent', 'v1', 'prod', 'general')).conversation_id AS c3 \gset
SELECT (lease.start_conversation('lc-10', 'other-agent', NULL, NULL, NULL)).conversation_id AS c4 \gset
SELECT lease_test.lc_rotate('lc-10', :c1) AS c5 \gset
SELECT (lease.start_conversation('lc-10', 'agent', NULL, NULL, 'ended')).conversation_id AS c6 \gset
SELECT lease.end_conversation(:c6);
SELECT conversation_id - :c1 + 1 AS n, agent_id, vault_id, environment_id, channel_id, status,
       sandbox_id IS NOT NULL AS has_sandbox, sandbox_status, rotated_from - :c1 + 1 AS rotated_from,
       created_at <= now() AS created_before, age = now() - created_at AS age_since_created
  FROM lease.list_conversations('lc-10', NULL, NULL, NULL);
SELECT conversation_id - :c1 + 1 AS n FROM lease.list_conversations('lc-10', 'agent', NULL, NULL);
SELECT conversation_id - :c1 + 1 AS n FROM lease.list_conversations('lc-10', NULL, 'v1', NULL);
SELECT conversation_id - :c1 + 1 AS n FROM lease.list_conversations('lc-10', 'agent', 'v1', 'prod');
SELECT conversation_id - :c1 + 1 AS n FROM lease.list_conversations('lc-10', NULL, NULL, 'prod');
SELECT count(*) AS other_tenant FROM lease.list_conversations('lc-nobody', NULL, NULL, NULL);
-- the refusal hint's loop: at the limit, find the tenant's oldest unbound
-- conversation and end it, then admission succeeds
SELECT lease.set_tenant_limit('lc-10', 5);
SELECT outcome FROM lease.start_conversation('lc-10', 'agent', NULL, NULL, 'new');
SELECT lease.end_conversation(conversation_id)
  FROM lease.list_conversations('lc-10', NULL, NULL, NULL)
 WHERE channel_id IS NULL ORDER BY conversation_id LIMIT 1;
SELECT outcome FROM lease.start_conversation('lc-10', 'agent', NULL, NULL, 'new');
-- bad input: 22004 for a NULL user_id, 22023 for blank or too long names
SELECT lease_test.try('SELECT * FROM lease.list_conversations(NULL, NULL, NULL, NULL)');
SELECT lease_test.try($$SELECT * FROM lease.list_conversations(' ', NULL, NULL, NULL)$$);
SELECT lease_test.try($$SELECT * FROM lease.list_conversations('lc-10', '', NULL, NULL)$$);
SELECT lease_test.try($$SELECT * FROM lease.list_conversations('lc-10', NULL, repeat('v', 300), NULL)$$);
SELECT lease_test.try($$SELECT * FROM lease.list_conversations('lc-10', NULL, NULL, '')$$);
