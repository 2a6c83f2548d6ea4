/* pg_lease--0.4.0--0.5.0.sql: upgrade from 0.4.0 to 0.5.0.  Each change here has its twin in the SQL parts (Makefile, SQL_PARTS), and test/upgrade/upgrade.sh proves the two agree. */

\echo Use "ALTER EXTENSION pg_lease UPDATE TO '0.5.0'" to load this file. \quit

----------------------------------------------------------------------------
-- Moving a stream between partitions (src/leases/placement.sql,
-- src/leases/placement.c): where a stream lives, the placement check of
-- every stream function, the steps of a move.
----------------------------------------------------------------------------

----------------------------------------------------------------------------
-- Stream placement (src/leases/placement.c; docs/scale-out.md, "Moving a
-- stream")
----------------------------------------------------------------------------

-- One row per stream that a move has touched on this partition (a stream
-- that never moved has none: it is served wherever it is called):
--   here        the stream is served here (it arrived by a move, or a move
--               out of here was undone);
--   moving_out  a move to peer_partition has begun: the stream's calls are
--               refused (40L01) while its leases are copied;
--   moved_out   the tombstone: the stream now lives on peer_partition, its
--               rows here are gone, and its calls are refused (40L01)
--               naming that partition;
--   arriving    a move from peer_partition has copied the leases here; the
--               calls are refused until the source has let go (then here).
-- partition_index is this partition's number, as the router that moved the
-- stream numbers its partitions; generation counts the stream's moves
-- (every move, and every undone one, takes the next number), so a step of
-- an older move can never act on a newer one.  Every stream function reads
-- its stream's row (src/leases/placement.c, lease_stream_begin: one
-- primary-key lookup) after taking the stream's placement lock.
CREATE TABLE lease.stream_placements (
    app_name        text        NOT NULL,
    stream_name     text        NOT NULL,
    state           text        NOT NULL,
    partition_index integer     NOT NULL,
    peer_partition  integer,
    generation      bigint      NOT NULL,
    changed_at      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (app_name, stream_name),
    CONSTRAINT stream_placements_state_check
        CHECK (state OPERATOR(pg_catalog.=) ANY (ARRAY['here', 'moving_out', 'moved_out', 'arriving'])),
    CONSTRAINT stream_placements_peer_check
        CHECK ((peer_partition IS NULL) OPERATOR(pg_catalog.=) (state OPERATOR(pg_catalog.=) 'here')
               AND peer_partition OPERATOR(pg_catalog.<>) partition_index),
    CONSTRAINT stream_placements_numbers_check
        CHECK (partition_index OPERATOR(pg_catalog.>=) 0 AND peer_partition OPERATOR(pg_catalog.>=) 0
               AND generation OPERATOR(pg_catalog.>=) 1)
);

COMMENT ON TABLE lease.stream_placements IS
    'Streams a move between partitions has touched: served here, moving out, moved out (the tombstone) or arriving (lease_router.move_stream).';

-- Dumped (marked in src/common/finish.sql, after the tables marked before
-- it): a restored source must go on refusing a stream that moved away.

-- New leases of a stream that is not served here are refused (40L01), by
-- whatever inserts them: create_lease and sync_shards check first anyway;
-- this is what stops import_kcl_ex, import_kcl_ex_rows and
-- import_kcl_dynamodb (their rows may name any stream) and an operator's
-- INSERT.
CREATE FUNCTION lease.shard_leases_placed()
RETURNS trigger
AS 'MODULE_PATHNAME', 'lease_shard_leases_placed'
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE TRIGGER shard_leases_placed
    AFTER INSERT ON lease.shard_leases
    REFERENCING NEW TABLE AS placed_rows
    FOR EACH STATEMENT
    EXECUTE FUNCTION lease.shard_leases_placed();

-- The steps of a move, each one transaction on one partition, called in
-- order by lease_router.move_stream and lease_router.undo_move on the
-- router (docs/scale-out.md, "Moving a stream": what each step does, and
-- under a failover).  Operator functions: each checks that the caller may
-- act for the app, then runs as the extension owner; no worker role is
-- granted them.  The router does not route them by stream (it calls each
-- on a named partition), so they are not part of its lease.* API.

-- This partition's record of the stream: no row when it has none.
CREATE FUNCTION lease.move_stream_state(app_name text, stream_name text)
RETURNS TABLE (state text, partition_index integer, peer_partition integer, generation bigint)
AS 'MODULE_PATHNAME', 'lease_move_stream_state'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

-- Every record of this partition (lease_router.sync_directory).
CREATE FUNCTION lease.move_stream_placements()
RETURNS TABLE (app_name text, stream_name text, state text, partition_index integer,
               peer_partition integer, generation bigint)
AS 'MODULE_PATHNAME', 'lease_move_stream_placements'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

-- 1. On the source: refuse the stream's calls from now on; the move's
-- generation.
CREATE FUNCTION lease.move_stream_freeze(app_name text, stream_name text,
                                         this_partition integer, to_partition integer)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lease_move_stream_freeze'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

-- 2. On the source: the frozen stream as one document (leases, events,
-- counters, capacities, tolerance, worker versions).  Changes nothing.
CREATE FUNCTION lease.move_stream_export(app_name text, stream_name text, generation bigint)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'lease_move_stream_export'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

-- 3. On the target: the document's rows, inert (arriving) until step 5;
-- how many leases it added (0: they were there already).
CREATE FUNCTION lease.move_stream_import(app_name text, stream_name text, this_partition integer,
                                         from_partition integer, generation bigint, stream jsonb)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lease_move_stream_import'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

-- 4. On the source (the move's commit point): its rows go, the tombstone
-- stays.  5. On the target: the stream is served.  The state it left.
CREATE FUNCTION lease.move_stream_complete(app_name text, stream_name text, generation bigint)
RETURNS text
AS 'MODULE_PATHNAME', 'lease_move_stream_complete'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

-- Undo, before step 4: on the source the stream is served again; on the
-- target its copy goes.  The state it left.
CREATE FUNCTION lease.move_stream_undo(app_name text, stream_name text, generation bigint)
RETURNS text
AS 'MODULE_PATHNAME', 'lease_move_stream_undo'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

-- The stream functions, bound to their 0.5.0 entry points: the same
-- functions with the placement check (CREATE OR REPLACE keeps their
-- grants).
CREATE OR REPLACE FUNCTION lease.create_lease(
    app_name text, stream_name text, shard_id text,
    parent_shard_ids text[] DEFAULT '{}', checkpoint text DEFAULT 'TRIM_HORIZON')
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_create_lease_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION lease.take_lease(
    app_name text, stream_name text, shard_id text, new_owner text,
    lease_count bigint DEFAULT NULL, lease_duration interval DEFAULT NULL,
    renew_every interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lease_take_lease_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION lease.renew_lease(
    app_name text, stream_name text, shard_id text, owner text,
    lease_count bigint, lease_duration interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lease_renew_lease_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION lease.update_checkpoint(
    app_name text, stream_name text, shard_id text, owner text,
    checkpoint text, sub_sequence bigint DEFAULT 0)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_update_checkpoint_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION lease.release_lease(
    app_name text, stream_name text, shard_id text, owner text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_release_lease_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION lease.close_shard(
    app_name text, stream_name text, shard_id text, owner text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_close_shard_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION lease.update_checkpoint(
    app_name text, stream_name text, shard_id text, owner text,
    checkpoint text, sub_sequence bigint, fencing_token bigint,
    work bigint DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_update_checkpoint_fenced_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION lease.hold_lease(
    app_name text, stream_name text, shard_id text, owner text,
    lease_epoch bigint)
RETURNS text
AS 'MODULE_PATHNAME', 'lease_hold_lease_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION lease.prepare_checkpoint(
    app_name text, stream_name text, shard_id text, owner text,
    pending_checkpoint text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_prepare_checkpoint_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION lease.cleanup_ended(app_name text, stream_name text)
RETURNS integer
AS 'MODULE_PATHNAME', 'lease_cleanup_ended_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION lease.delete_lease(app_name text, stream_name text, shard_id text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_delete_lease_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION lease.sync_shards(
    app_name text, stream_name text, shard_ids text[], parent_ids text[] DEFAULT NULL)
RETURNS TABLE(shard_id text, action text)
AS 'MODULE_PATHNAME', 'lease_sync_shards_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION lease.take_leases(
    app_name text, stream_name text, owner text,
    lease_duration interval DEFAULT NULL, max_leases integer DEFAULT NULL,
    max_steal integer DEFAULT 1, capacity double precision DEFAULT 1,
    renew_every interval DEFAULT NULL)
RETURNS TABLE(shard_id text, lease_count bigint, action text,
              previous_owner text, lease_epoch bigint)
AS 'MODULE_PATHNAME', 'lease_take_leases_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION lease.plan_rebalance(app_name text, stream_name text, owner text DEFAULT NULL)
RETURNS TABLE(shard_id text, action text, from_owner text, to_owner text, weight double precision,
              imbalance_before double precision, imbalance_after double precision)
AS 'MODULE_PATHNAME', 'lease_plan_rebalance_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION lease.set_weight(
    app_name text, stream_name text, shard_id text, weight double precision)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_set_weight_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION lease.set_balance_tolerance(
    app_name text, stream_name text, tolerance double precision)
RETURNS double precision
AS 'MODULE_PATHNAME', 'lease_set_balance_tolerance_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION lease.renew_leases(
    app_name text, stream_name text, owner text,
    lease_duration interval DEFAULT NULL, renew_every interval DEFAULT NULL)
RETURNS TABLE(shard_id text, lease_count bigint, handoff_to text, lease_epoch bigint)
AS 'MODULE_PATHNAME', 'lease_renew_leases_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION lease.heartbeat(
    app_name text, stream_name text, owner text,
    lease_duration interval DEFAULT NULL, renew_every interval DEFAULT NULL,
    OUT leases bigint, OUT leases_version bigint, OUT handoffs_pending bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'lease_heartbeat_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION lease.my_leases(app_name text, stream_name text, owner text)
RETURNS TABLE(shard_id text, lease_count bigint, lease_epoch bigint,
              checkpoint text, checkpoint_sub_sequence bigint,
              pending_checkpoint text, expires_in interval,
              handoff_to text, handoff_from text, waiting_on text[])
AS 'MODULE_PATHNAME', 'lease_my_leases_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE OR REPLACE FUNCTION lease.request_handoff(
    app_name text, stream_name text, shard_id text, to_owner text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_request_handoff_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

SELECT pg_catalog.pg_extension_config_dump('lease.stream_placements', '');

REVOKE ALL ON FUNCTION lease.shard_leases_placed(), lease.move_stream_state(text, text),
    lease.move_stream_placements(), lease.move_stream_freeze(text, text, integer, integer),
    lease.move_stream_export(text, text, bigint),
    lease.move_stream_import(text, text, integer, integer, bigint, jsonb),
    lease.move_stream_complete(text, text, bigint), lease.move_stream_undo(text, text, bigint)
    FROM PUBLIC;
REVOKE ALL ON TABLE lease.stream_placements FROM PUBLIC;

-- Security and robustness (docs/security.md, "What the 0.4.0 review found"):
-- notifications that cannot fail a lease operation, bounded capacities and
-- weights, granted_by by name, no lineage cycle, the platform's statuses.
-- Admission at every isolation level, the imports and the cheap refusals
-- are in the module alone.  Each part's twin in the SQL parts is named in
-- its comment.
----------------------------------------------------------------------------

-- Notifications skipped when PostgreSQL's NOTIFY queue is at
-- lease.notify_queue_limit or fuller (src/leases/leases.sql,
-- src/leases/monitoring.sql, src/common/finish.sql).
CREATE SEQUENCE lease.notifications_skipped;

COMMENT ON SEQUENCE lease.notifications_skipped IS
    'Ownership-change notifications skipped because the NOTIFY queue was at lease.notify_queue_limit or fuller (lease.monitoring_notifications).';

CREATE FUNCTION lease.monitoring_notifications()
RETURNS TABLE (skipped bigint, queue_usage double precision)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
SELECT CASE WHEN s.is_called THEN s.last_value ELSE 0 END,
       pg_catalog.pg_notification_queue_usage()
  FROM lease.notifications_skipped AS s
$$;

COMMENT ON FUNCTION lease.monitoring_notifications() IS
    'Metrics: ownership-change notifications skipped because the NOTIFY queue was at lease.notify_queue_limit or fuller (a counter), and the queue''s fill.';

REVOKE ALL ON FUNCTION lease.monitoring_notifications() FROM PUBLIC;

SELECT pg_catalog.pg_extension_config_dump('lease.notifications_skipped', '');

-- Capacities and weights bounded (src/leases/leases.sql: the constraints
-- worker_capacities_capacity_check and shard_leases_load_check), so that
-- no sum or product of the balancing arithmetic can overflow and one app's
-- row cannot make lease.monitoring_worker_loads() fail for every app.
-- Rows above the bounds (0.4.0 accepted any finite value) are brought down
-- to them first.
UPDATE lease.worker_capacities
   SET capacity = GREATEST(LEAST(capacity, '1e6'), '1e-6')
 WHERE capacity OPERATOR(pg_catalog.>) '1e6' OR capacity OPERATOR(pg_catalog.<) '1e-6';
ALTER TABLE lease.worker_capacities
    DROP CONSTRAINT worker_capacities_capacity_check,
    ADD CONSTRAINT worker_capacities_capacity_check
        CHECK (capacity OPERATOR(pg_catalog.>=) '1e-6' AND capacity OPERATOR(pg_catalog.<=) '1e6');
UPDATE lease.shard_leases SET weight = '1e15' WHERE weight OPERATOR(pg_catalog.>) '1e15';
ALTER TABLE lease.shard_leases
    DROP CONSTRAINT shard_leases_load_check,
    ADD CONSTRAINT shard_leases_load_check
        CHECK (weight OPERATOR(pg_catalog.>=) 0 AND weight OPERATOR(pg_catalog.<=) '1e15'
               AND work_rate OPERATOR(pg_catalog.>=) 0 AND work_rate OPERATOR(pg_catalog.<) 'Infinity');

-- app_grants.granted_by holds the granter's name (src/leases/access.sql),
-- so pg_dump writes it by name even once that role is dropped.  A granter
-- dropped before the update is kept as PostgreSQL names an unknown role,
-- "unknown (OID=n)".  The trigger reads the column's name, so it is
-- dropped and made again around the change of type.
DROP TRIGGER app_grants_grantee_name ON lease.app_grants;
ALTER TABLE lease.app_grants
    ALTER COLUMN granted_by TYPE name USING pg_catalog.pg_get_userbyid(granted_by);
CREATE TRIGGER app_grants_grantee_name
    BEFORE INSERT OR UPDATE OF granted_by ON lease.app_grants
    FOR EACH ROW
    EXECUTE FUNCTION lease.app_grants_grantee_name();

-- No write makes a lineage cycle (src/leases/leases.sql: the table
-- stream_lineage and the trigger shard_leases_lineage_checked;
-- src/common/finish.sql marks the table).
-- The lock of a stream's lineage writes (src/leases/lineage.c, 0.5.0):
-- every statement that adds leases with parents to the stream upserts its
-- row (writes counts those statements) and holds it to the end of its
-- transaction, so that they take turns and each checks for a lineage cycle
-- against everything committed before it (the trigger
-- shard_leases_lineage_checked below).  Nothing else reads it.
CREATE TABLE lease.stream_lineage (
    app_name    text        NOT NULL,
    stream_name text        NOT NULL,
    writes      bigint      NOT NULL,
    PRIMARY KEY (app_name, stream_name)
);

COMMENT ON TABLE lease.stream_lineage IS
    'Per stream: how many statements added leases with parents (each one locks the row, so lineage writes of a stream take turns and none makes a cycle).';

REVOKE ALL ON lease.stream_lineage FROM PUBLIC;

-- Rows added (0.5.0): no lease may have more than 32 parents, and no
-- lineage may be a cycle, checked against every lease committed before,
-- with the stream's lease.stream_lineage row locked (src/leases/lineage.c).
-- C, so that the check is linear in the lineage it reads.
CREATE FUNCTION lease.shard_leases_lineage_checked()
RETURNS trigger
AS 'MODULE_PATHNAME', 'lease_shard_leases_lineage_checked'
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE TRIGGER shard_leases_lineage_checked
    AFTER INSERT ON lease.shard_leases
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT
    EXECUTE FUNCTION lease.shard_leases_lineage_checked();

REVOKE ALL ON FUNCTION lease.shard_leases_lineage_checked() FROM PUBLIC;

SELECT pg_catalog.pg_extension_config_dump('lease.stream_lineage', 'WHERE false');

-- The platform's own statuses (src/bindings/lifecycle.c, 0.5.0): a
-- sandbox's starting, ready and suspended, a conversation's idle, along
-- their lifecycle only, under the conversation's lock.
CREATE FUNCTION lease.set_sandbox_status(conversation_id bigint, status text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_set_sandbox_status'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.set_conversation_status(conversation_id bigint, status text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_set_conversation_status'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

REVOKE ALL ON FUNCTION lease.set_sandbox_status(bigint, text), lease.set_conversation_status(bigint, text)
    FROM PUBLIC;

----------------------------------------------------------------------------
-- Batched checkpoints: lease.update_checkpoints (src/leases/checkpoints.c)
----------------------------------------------------------------------------

-- The fenced checkpoints of many shards of one stream and owner in one
-- statement and one commit (src/leases/checkpoints.c): element i of each
-- array is shard i's; each shard is judged as the fenced update_checkpoint
-- above judges it, and refused shards come back with the reason
-- ('not_owner', 'stale_token', 'ended', 'unknown'), one row per shard in
-- the caller's order.  work, when given, has one element per shard (NULL
-- for a shard that reports none).
CREATE FUNCTION lease.update_checkpoints(
    app_name text, stream_name text, owner text, shard_ids text[],
    checkpoints text[], sub_sequences bigint[], fencing_tokens bigint[],
    work bigint[] DEFAULT NULL)
RETURNS TABLE(shard_id text, ok boolean, reason text)
AS 'MODULE_PATHNAME', 'lease_update_checkpoints'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;
REVOKE ALL ON FUNCTION lease.update_checkpoints(text, text, text, text[], text[], bigint[], bigint[], bigint[]) FROM PUBLIC;

----------------------------------------------------------------------------
-- Checkpoints are HOT updates: the index of unowned leases no longer names
-- checkpoint in its predicate (src/leases/leases.sql)
----------------------------------------------------------------------------

DROP INDEX lease.shard_leases_unowned_idx;
CREATE INDEX shard_leases_unowned_idx
    ON lease.shard_leases (app_name, stream_name)
    WHERE lease_owner IS NULL;

----------------------------------------------------------------------------
-- The checkpoint statements move checkpointed_at themselves (their 0.5.0
-- entry points, bound above); the trigger shard_leases_checkpointed skips
-- the rows they wrote (src/leases/leases.c, src/leases/monitoring.sql)
----------------------------------------------------------------------------

CREATE OR REPLACE TRIGGER shard_leases_checkpointed
    BEFORE UPDATE OF checkpoint, checkpoint_sub_sequence ON lease.shard_leases
    FOR EACH ROW
    WHEN ((OLD.checkpoint IS DISTINCT FROM NEW.checkpoint
           OR OLD.checkpoint_sub_sequence IS DISTINCT FROM NEW.checkpoint_sub_sequence)
          AND OLD.checkpointed_at IS NOT DISTINCT FROM NEW.checkpointed_at)
    EXECUTE FUNCTION lease.shard_leases_checkpointed();

----------------------------------------------------------------------------
-- A worker's heartbeat no longer waits for another worker's ownership
-- change (src/leases/leases.sql, src/leases/workers.c).  The bookkeeping
-- (leases, expires_min, version, load, weighed) moves from
-- lease.stream_workers, the row each worker's heartbeat writes, to
-- lease.worker_holdings, which the statements that change who holds a lease
-- write; lease.stream_workers keeps the heartbeat and liveness record, which
-- another worker only locks while it takes one of the worker's leases by
-- expiry.  The functions that write or read the bookkeeping run on it at
-- their 0.5.0 entry points, which the placement section above binds them to
-- (src/common/version.h); the trigger shard_leases_owners_changed moves to
-- its own (CREATE OR REPLACE with the same signature keeps its OID).
----------------------------------------------------------------------------

CREATE TABLE lease.worker_holdings (
    app_name    text        NOT NULL,
    stream_name text        NOT NULL,
    worker      text        NOT NULL,
    leases      bigint      NOT NULL,
    expires_min timestamptz,
    version     bigint      NOT NULL DEFAULT 1,
    load        double precision NOT NULL DEFAULT 0,
    weighed     bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (app_name, stream_name, worker)
);

COMMENT ON TABLE lease.worker_holdings IS
    'Per worker and stream: how many leases it holds, a lower bound of their expiry, the version of that set, the sum and number of their known weights (kept by the lease functions and triggers; what take_leases reads instead of the stream).';

-- Serves the round's read of a stream's workers; a worker left with no
-- lease stays out of it.
CREATE INDEX worker_holdings_holding_idx
    ON lease.worker_holdings (app_name, stream_name)
    WHERE leases OPERATOR(pg_catalog.>) 0;

INSERT INTO lease.worker_holdings (app_name, stream_name, worker, leases, expires_min, version, load, weighed)
SELECT w.app_name, w.stream_name, w.worker, w.leases, w.expires_min, w.version, w.load, w.weighed
  FROM lease.stream_workers AS w;

CREATE FUNCTION lease.worker_holdings_added()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO lease.stream_workers (app_name, stream_name, worker)
    VALUES (NEW.app_name, NEW.stream_name, NEW.worker)
    ON CONFLICT (app_name, stream_name, worker) DO NOTHING;
    RETURN NULL;
END
$$;

CREATE TRIGGER worker_holdings_added
    AFTER INSERT ON lease.worker_holdings
    FOR EACH ROW
    EXECUTE FUNCTION lease.worker_holdings_added();

CREATE OR REPLACE FUNCTION lease.shard_leases_expiry_lowered()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE lease.worker_holdings AS w
       SET expires_min = NEW.lease_expires_at,
           version = w.version OPERATOR(pg_catalog.+) 1
     WHERE w.app_name OPERATOR(pg_catalog.=) NEW.app_name
       AND w.stream_name OPERATOR(pg_catalog.=) NEW.stream_name
       AND w.worker OPERATOR(pg_catalog.=) NEW.lease_owner
       AND (w.expires_min IS NULL
            OR w.expires_min OPERATOR(pg_catalog.>) NEW.lease_expires_at);
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION lease.shard_leases_load_changed()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO lease.worker_holdings AS w
           (app_name, stream_name, worker, leases, load, weighed)
    SELECT d.app_name, d.stream_name, d.worker, 0,
           pg_catalog.sum(d.load), pg_catalog.sum(d.weighed)::pg_catalog.int8
      FROM (SELECT OLD.app_name, OLD.stream_name, OLD.lease_owner AS worker,
                   OPERATOR(pg_catalog.-) COALESCE(OLD.weight, OLD.work_rate) AS load,
                   -1 AS weighed
             WHERE TG_OP OPERATOR(pg_catalog.<>) 'INSERT' AND OLD.lease_owner IS NOT NULL
               AND COALESCE(OLD.weight, OLD.work_rate) IS NOT NULL
            UNION ALL
            SELECT NEW.app_name, NEW.stream_name, NEW.lease_owner,
                   COALESCE(NEW.weight, NEW.work_rate), 1
             WHERE TG_OP OPERATOR(pg_catalog.<>) 'DELETE' AND NEW.lease_owner IS NOT NULL
               AND COALESCE(NEW.weight, NEW.work_rate) IS NOT NULL) AS d
     GROUP BY d.app_name, d.stream_name, d.worker
     ORDER BY d.worker COLLATE pg_catalog."C"
    ON CONFLICT (app_name, stream_name, worker) DO UPDATE
       SET weighed = w.weighed OPERATOR(pg_catalog.+) excluded.weighed,
           -- exactly 0 when no weight is left, so rounding never lingers
           load = CASE WHEN w.weighed OPERATOR(pg_catalog.+) excluded.weighed
                            OPERATOR(pg_catalog.=) 0 THEN 0
                       ELSE w.load OPERATOR(pg_catalog.+) excluded.load END;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION lease.shard_leases_owners_changed()
RETURNS trigger
AS 'MODULE_PATHNAME', 'lease_shard_leases_owners_changed_0_5'
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

DROP INDEX lease.stream_workers_holding_idx;
ALTER TABLE lease.stream_workers
    DROP COLUMN leases, DROP COLUMN expires_min, DROP COLUMN version,
    DROP COLUMN load, DROP COLUMN weighed;

COMMENT ON TABLE lease.stream_workers IS
    'Per worker and stream: its heartbeat and liveness record, written by the worker''s own renewals (and takes given renew_every) only.';

-- Derived from the leases, like lease.stream_workers: no row is dumped
-- (src/common/finish.sql marks it last in a fresh install too).
SELECT pg_catalog.pg_extension_config_dump('lease.worker_holdings', 'WHERE false');
REVOKE ALL ON lease.worker_holdings FROM PUBLIC;
REVOKE ALL ON FUNCTION lease.worker_holdings_added() FROM PUBLIC;

----------------------------------------------------------------------------
-- Server incarnations and the restart grace (src/leases/incarnation.c;
-- docs/worker-guide.md, "After a restart")
----------------------------------------------------------------------------

-- One row per server incarnation (a run of this partition's server as a
-- primary: a restart, a crash reinitialisation and a promotion each begin
-- one), recorded by its first pg_lease call: when it was first seen and the
-- incarnation it follows (NULL for the first one pg_lease saw).  A take
-- within one lease duration of first_seen extends the leases that would
-- expire before then (lease.restart_grace).  Written by the lease functions
-- only, once per incarnation (never by a take: every take of every app
-- would contend for the row); replicated with the leases, so a promoted
-- standby knows what came before it.
CREATE TABLE lease.server_incarnations (
    incarnation text        PRIMARY KEY,
    first_seen  timestamptz NOT NULL,
    follows     text
);

COMMENT ON TABLE lease.server_incarnations IS
    'One row per server incarnation (restart, crash reinitialisation, promotion): when pg_lease first saw it and what it follows.';

-- The leases any restart grace extended, counted by a sequence: takes of
-- different apps never wait for one another to count (a nextval never
-- waits); reported by lease.monitoring_incarnations().
CREATE SEQUENCE lease.restart_grace_extended;

COMMENT ON SEQUENCE lease.restart_grace_extended IS
    'Leases extended by the restart grace since the install (lease.monitoring_incarnations).';

-- Metrics: the server incarnations (src/leases/incarnation.c), newest
-- first: when each was first seen, what it follows and how long ago it
-- began (its grace runs for one lease duration of each take from then);
-- and, on every row, the leases any restart grace extended since the
-- install (a counter).
CREATE FUNCTION lease.monitoring_incarnations()
RETURNS TABLE(incarnation text, first_seen timestamptz, follows text,
              seconds_since_first_seen double precision, leases_extended_total bigint)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
SELECT i.incarnation, i.first_seen, i.follows,
       pg_catalog.date_part('epoch', pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) i.first_seen),
       (SELECT CASE WHEN s.is_called THEN s.last_value ELSE 0 END FROM lease.restart_grace_extended AS s)
  FROM lease.server_incarnations AS i
 ORDER BY i.first_seen DESC
$$;

COMMENT ON FUNCTION lease.monitoring_incarnations() IS
    'Metrics: the server incarnations pg_lease has seen, newest first, and the leases restart graces extended since the install (a counter).';

SELECT pg_catalog.pg_extension_config_dump('lease.server_incarnations', '');
SELECT pg_catalog.pg_extension_config_dump('lease.restart_grace_extended', '');
REVOKE ALL ON lease.server_incarnations FROM PUBLIC;
REVOKE ALL ON FUNCTION lease.monitoring_incarnations() FROM PUBLIC;

-- The grace's event: restart_grace (a lease extended, its owner unchanged).
ALTER TABLE lease.lease_events DROP CONSTRAINT lease_events_event_check;
ALTER TABLE lease.lease_events ADD CONSTRAINT lease_events_event_check CHECK (event OPERATOR(pg_catalog.=) ANY (ARRAY[
        'take', 'expiry_takeover', 'steal', 'transfer', 'release', 'close',
        'handoff_request', 'session_ended', 'restart_grace']));

----------------------------------------------------------------------------
-- Synchronous replication against what the partition should have
-- (src/leases/monitoring.sql; docs/monitoring.md, PgLeaseSyncStandbysMissing)
----------------------------------------------------------------------------

-- Metrics: this server's synchronous replication against what the
-- operator expects of it (lease.expected_sync_standbys, the formation's
-- number_sync_standbys): the synchronous standbys synchronous_standby_names
-- asks for now (ANY n (...), FIRST n (...) and n (...) ask for n, a plain
-- list or '*' for 1, '' for none), how many standbys are
-- streaming and how many of them count as synchronous (pg_stat_replication's
-- sync_state sync or quorum), and the shortfall: expected minus
-- synchronous, 0 on a standby.  A primary that pg_auto_failover moved to
-- wait_primary has synchronous_standby_names = '' and acknowledges commits
-- no standby has: its shortfall is the expected number.
CREATE FUNCTION lease.monitoring_replication()
RETURNS TABLE (sync_standbys_expected integer, sync_standbys_configured integer,
               standbys bigint, sync_standbys bigint, sync_standbys_missing bigint)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
WITH c AS (SELECT pg_catalog.current_setting('synchronous_standby_names') AS names,
                  COALESCE(CAST(NULLIF(pg_catalog.current_setting('lease.expected_sync_standbys', true), '')
                                AS integer), 0) AS expected,
                  pg_catalog.pg_is_in_recovery() AS standby),
     r AS (SELECT pg_catalog.count(*) AS standbys,
                  pg_catalog.count(*) FILTER (WHERE s.sync_state OPERATOR(pg_catalog.=) ANY (ARRAY['sync', 'quorum']))
                      AS sync
             FROM pg_catalog.pg_stat_replication AS s)
SELECT c.expected,
       CASE WHEN pg_catalog.btrim(c.names) OPERATOR(pg_catalog.=) '' THEN 0
            WHEN c.names OPERATOR(pg_catalog.~*) '^\s*((any|first)\s+)?[0-9]+\s*\('
            THEN CAST(pg_catalog.substring(c.names, '([0-9]+)') AS integer)
            ELSE 1 END,
       r.standbys, r.sync,
       CASE WHEN c.standby THEN 0 ELSE GREATEST(c.expected OPERATOR(pg_catalog.-) r.sync, 0) END
  FROM c, r
$$;

COMMENT ON FUNCTION lease.monitoring_replication() IS
    'Metrics: synchronous standbys expected (lease.expected_sync_standbys), asked for (synchronous_standby_names) and streaming, and the shortfall (0 on a standby).';

REVOKE ALL ON FUNCTION lease.monitoring_replication() FROM PUBLIC;
