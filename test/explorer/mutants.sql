-- test/explorer/mutants.sql: seeded defects the explorer must find (suite
-- `explore`, test/explorer/run.sh).  Test-only: created in the schema
-- explore_mutant of the explorer's own database, never installed with the
-- extension.

CREATE SCHEMA explore_mutant;

-- Bindings: a PL/pgSQL replica of restore_rotated_channel as released in
-- 0.3.0 (src/bindings/rotation.c, restore_step, as 0.3.0 had it): lock the
-- previous conversation, then the failed one; a pending replacement is
-- marked failed and unbound (its sandbox failed); the previous conversation
-- is rebound only if the replacement had failed and still held the channel
-- and the previous one is unbound and live; otherwise `superseded`.  The
-- defect: "mark failed and unbind" is decided apart from "is there anything
-- to rebind", so a channel can be left bound to nothing.  (No lock timeout
-- path: the explorer's calls never overlap, so no wait ever times out.)
CREATE FUNCTION explore_mutant.restore_rotated_channel(
    previous_conversation_id bigint, failed_conversation_id bigint)
RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rotated_from bigint;
    prev record;
    failed record;
    replacement_failed boolean;
    outcome text;
BEGIN
    SELECT c.rotated_from INTO rotated_from
      FROM lease.conversations AS c WHERE c.id = failed_conversation_id;
    IF NOT FOUND OR rotated_from IS DISTINCT FROM previous_conversation_id THEN
        RAISE EXCEPTION 'conversation % is not a rotation of conversation %',
            failed_conversation_id, previous_conversation_id USING ERRCODE = '22023';
    END IF;
    SELECT c.status, c.channel_id INTO prev
      FROM lease.conversations AS c WHERE c.id = previous_conversation_id FOR NO KEY UPDATE;
    SELECT c.status, c.channel_id INTO failed
      FROM lease.conversations AS c WHERE c.id = failed_conversation_id FOR NO KEY UPDATE;
    IF failed.status = 'pending' THEN
        WITH f AS (UPDATE lease.conversations AS c
                      SET status = 'failed', channel_id = NULL, updated_at = now()
                    WHERE c.id = failed_conversation_id AND c.status = 'pending'
                    RETURNING c.sandbox_id)
        UPDATE lease.sandboxes AS s SET status = 'failed', updated_at = now()
          FROM f
         WHERE s.id = f.sandbox_id AND s.status IN ('pending', 'starting', 'ready');
        replacement_failed := true;
    ELSE
        replacement_failed := failed.status = 'failed';
    END IF;
    IF replacement_failed AND failed.channel_id IS NOT NULL
       AND prev.channel_id IS NULL AND prev.status IN ('pending', 'running', 'idle') THEN
        UPDATE lease.conversations AS c SET channel_id = failed.channel_id, updated_at = now()
         WHERE c.id = previous_conversation_id;
        outcome := 'restored';
    ELSE
        outcome := 'superseded';
    END IF;
    UPDATE lease.compensation_failures AS f SET resolved_at = now()
     WHERE f.previous_conversation_id = restore_rotated_channel.previous_conversation_id
       AND f.failed_conversation_id = restore_rotated_channel.failed_conversation_id
       AND f.resolved_at IS NULL;
    RETURN outcome;
END
$$;

-- Leases: update_checkpoint without its owner guard (the six-argument,
-- unfenced form): any worker's checkpoint is written while the shard has not
-- ended.
CREATE FUNCTION explore_mutant.update_checkpoint(
    app_name text, stream_name text, shard_id text, owner text, checkpoint text,
    sub_sequence bigint)
RETURNS boolean
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    WITH u AS (UPDATE lease.shard_leases AS l
                  SET checkpoint = $5, checkpoint_sub_sequence = $6,
                      owner_switches_since_checkpoint = 0, pending_checkpoint = NULL,
                      updated_at = now()
                WHERE l.app_name = $1 AND l.stream_name = $2 AND l.shard_id = $3
                  AND l.checkpoint <> 'SHARD_END'
                RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM u)
$$;

-- Leases: update_checkpoints without its guards (neither the owner nor the
-- fencing token is compared): every listed shard that has not ended is
-- written and answered true.
CREATE FUNCTION explore_mutant.update_checkpoints(
    app_name text, stream_name text, owner text, shard_ids text[], checkpoints text[],
    sub_sequences bigint[], fencing_tokens bigint[], work bigint[] DEFAULT NULL)
RETURNS TABLE(shard_id text, ok boolean, reason text)
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    WITH b AS (SELECT u.shard_id, u.checkpoint, u.sub_sequence, u.ord
                 FROM unnest($4, $5, $6) WITH ORDINALITY AS u(shard_id, checkpoint, sub_sequence, ord)),
         w AS (UPDATE lease.shard_leases AS l
                  SET checkpoint = b.checkpoint, checkpoint_sub_sequence = b.sub_sequence,
                      owner_switches_since_checkpoint = 0, pending_checkpoint = NULL,
                      updated_at = now()
                 FROM b
                WHERE l.app_name = $1 AND l.stream_name = $2 AND l.shard_id = b.shard_id
                  AND l.checkpoint <> 'SHARD_END'
                RETURNING l.shard_id)
    SELECT b.shard_id, w.shard_id IS NOT NULL, CASE WHEN w.shard_id IS NULL THEN 'ended' END
      FROM b LEFT JOIN w ON w.shard_id = b.shard_id
     ORDER BY b.ord
$$;

-- Bindings: admit_turn as released up to 0.3.0: a turn and nothing else
-- (the conversation locked, then the turn inserted and a pending
-- conversation made running), so a replacement's first turn leaves the
-- conversation it replaced live and holding its sandbox slot.
CREATE FUNCTION explore_mutant.admit_turn(conversation_id bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    st text;
    turn bigint;
BEGIN
    SELECT c.status INTO st FROM lease.conversations AS c
     WHERE c.id = admit_turn.conversation_id AND c.sandbox_id IS NOT NULL
       FOR UPDATE OF c;
    IF NOT FOUND OR st IN ('failed', 'terminated') THEN
        RAISE EXCEPTION 'conversation % cannot take a turn', admit_turn.conversation_id
            USING ERRCODE = '55000';
    END IF;
    INSERT INTO lease.turns (conversation_id) VALUES (admit_turn.conversation_id)
        RETURNING id INTO turn;
    UPDATE lease.conversations AS c SET status = 'running', updated_at = now()
     WHERE c.id = admit_turn.conversation_id AND c.status = 'pending';
    RETURN turn;
END
$$;

-- Leases (lease.heartbeat): a lease that leaves its holder (an
-- expiry or session_ended takeover, a claim past a handoff deadline, a
-- release or close) does not move the holder's leases_version, as if
-- LEASE_SQL_RECORD_LOADS bumped the version of the workers it brings leases
-- to only.  A heartbeat then tells a worker whose lease was taken over that
-- its list still stands.  A trigger on lease.worker_holdings (test-only,
-- this database only) that puts the version back, switched on by the
-- setting explore_mutant.keep_version = on (explore.py --setting), so the
-- explorer's other runs in this database see the extension as it is.
CREATE FUNCTION explore_mutant.keep_version()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF current_setting('explore_mutant.keep_version', true) = 'on' AND NEW.leases < OLD.leases THEN
        NEW.version := OLD.version;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER explore_mutant_keep_version
    BEFORE UPDATE OF version ON lease.worker_holdings
    FOR EACH ROW
    EXECUTE FUNCTION explore_mutant.keep_version();

-- Leases: the heartbeat as released up to 0.4.0, when the bookkeeping and
-- the heartbeat shared one row (lease.stream_workers): the heartbeat locks
-- the worker's bookkeeping row, which every ownership change of the worker
-- writes, so a transfer to the worker left open in another worker's
-- transaction makes its heartbeat wait.  (explore.py --heartbeat-function;
-- the lock is the 0.4.0 heartbeat's UPDATE of that row.)
CREATE FUNCTION explore_mutant.heartbeat(
    app_name text, stream_name text, owner text,
    lease_duration interval DEFAULT NULL, renew_every interval DEFAULT NULL,
    OUT leases bigint, OUT leases_version bigint, OUT handoffs_pending bigint)
RETURNS record
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM 1 FROM lease.worker_holdings AS h
     WHERE h.app_name = heartbeat.app_name AND h.stream_name = heartbeat.stream_name
       AND h.worker = heartbeat.owner
       FOR NO KEY UPDATE;
    SELECT b.leases, b.leases_version, b.handoffs_pending
      INTO leases, leases_version, handoffs_pending
      FROM lease.heartbeat(app_name, stream_name, owner, lease_duration, renew_every) AS b;
END
$$;

-- Leases: a renewal that locks the lease rows it renews (as renew_leases
-- did up to 0.3.0, writing every lease): it waits for any transaction that
-- wrote one of the worker's leases, a handoff request of another worker
-- left open, a takeover in progress.  (explore.py --renew-function.)
CREATE FUNCTION explore_mutant.renew_leases(
    app_name text, stream_name text, owner text,
    lease_duration interval DEFAULT NULL, renew_every interval DEFAULT NULL)
RETURNS TABLE(shard_id text, lease_count bigint, handoff_to text, lease_epoch bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM 1 FROM lease.shard_leases AS l
     WHERE l.app_name = renew_leases.app_name AND l.stream_name = renew_leases.stream_name
       AND l.lease_owner = renew_leases.owner
     ORDER BY l.shard_id
       FOR NO KEY UPDATE;
    RETURN QUERY SELECT * FROM lease.renew_leases(app_name, stream_name, owner, lease_duration, renew_every);
END
$$;

-- Leases: a takeover that ignores hold_lease.  Every ownership change is an
-- UPDATE of the lease row, which waits for hold_lease's FOR SHARE lock
-- (docs/exactly-once.md); a takeover ignoring the hold is what a hold
-- without that lock lets through: this hold_lease checks owner and epoch
-- and locks nothing, so a takeover proceeds while the batch is open and the
-- batch commits output for a lease it no longer holds.  (explore.py
-- --hold-function.)
CREATE FUNCTION explore_mutant.hold_lease(
    app_name text, stream_name text, shard_id text, owner text, lease_epoch bigint)
RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r record;
BEGIN
    SELECT l.lease_owner, l.lease_epoch, l.checkpoint INTO r
      FROM lease.shard_leases AS l
     WHERE l.app_name = hold_lease.app_name AND l.stream_name = hold_lease.stream_name
       AND l.shard_id = hold_lease.shard_id;
    IF NOT FOUND OR r.lease_owner IS DISTINCT FROM owner OR r.lease_epoch <> hold_lease.lease_epoch THEN
        RAISE EXCEPTION 'lease "%" of stream "%" is not held by "%" at epoch %',
            shard_id, stream_name, owner, lease_epoch USING ERRCODE = '55000';
    END IF;
    RETURN r.checkpoint;
END
$$;
