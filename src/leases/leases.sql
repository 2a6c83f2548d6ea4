-- src/leases/leases.sql: shard leases: the lease table, its functions, the taker, events, views, import
-- One part of pg_lease--<version>.sql (Makefile, SQL_PARTS); each change here
-- needs its twin in the upgrade script pg_lease--<previous>--<version>.sql.

----------------------------------------------------------------------------
-- Shard leases
----------------------------------------------------------------------------

CREATE TABLE lease.shard_leases (
    app_name                        text        NOT NULL,
    stream_name                     text        NOT NULL,
    shard_id                        text        NOT NULL,
    lease_owner                     text,
    lease_count                     bigint      NOT NULL DEFAULT 0,
    checkpoint                      text        NOT NULL DEFAULT 'TRIM_HORIZON',
    checkpoint_sub_sequence         bigint      NOT NULL DEFAULT 0,
    parent_shard_ids                text[]      NOT NULL DEFAULT '{}',
    lease_expires_at                timestamptz,
    owner_switches_since_checkpoint bigint      NOT NULL DEFAULT 0,
    -- fencing token: bumped by every ownership change (take, transfer,
    -- release, close), never by a renewal or a checkpoint
    lease_epoch                     bigint      NOT NULL DEFAULT 0,
    -- a graceful handoff: whom the lease is promised to, since when, until
    -- when the holder may finish (lease.handoff_timeout), and the lease
    -- duration the requester asked for (the transferred lease gets it, and
    -- the request lapses that long after the deadline)
    handoff_to                      text,
    handoff_requested_at            timestamptz,
    handoff_deadline                timestamptz,
    handoff_lease_duration          interval,
    -- two-phase checkpoint: what the owner intends to checkpoint next
    pending_checkpoint              text,
    created_at                      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_at                      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    -- when the checkpoint last changed (set by the trigger
    -- shard_leases_checkpointed, src/leases/monitoring.sql): updated_at moves
    -- with every renewal, so it cannot tell a worker that renews but no
    -- longer checkpoints (docs/monitoring.md).  Last, so a fresh table
    -- equals one upgraded from 0.2.0 (ALTER TABLE ... ADD COLUMN).
    checkpointed_at                 timestamptz NOT NULL DEFAULT pg_catalog.now(),
    -- the lease's load for balancing (src/leases/balancing.c): the
    -- operator's weight (lease.set_weight) or, when none, the rate of work
    -- update_checkpoint's work argument measured (work per second,
    -- exponentially decayed).  Last, so a fresh table equals one upgraded
    -- from 0.3.0.
    weight                          double precision,
    work_rate                       double precision,
    PRIMARY KEY (app_name, stream_name, shard_id),
    CONSTRAINT shard_leases_lease_count_check CHECK (lease_count OPERATOR(pg_catalog.>=) 0),
    CONSTRAINT shard_leases_owner_expiry_check
        CHECK ((lease_owner IS NULL) OPERATOR(pg_catalog.=) (lease_expires_at IS NULL)),
    CONSTRAINT shard_leases_handoff_check
        CHECK (pg_catalog.num_nulls(handoff_to, handoff_requested_at, handoff_deadline,
                                    handoff_lease_duration) OPERATOR(pg_catalog.=) ANY (ARRAY[0, 4])),
    -- Every row a write can produce (an operator's INSERT and import_kcl_ex
    -- included) is one the functions can go on with: the counters they
    -- increment stay below 2^62 (far more than any lease sees, so a row can
    -- not be stored at the end of their range, where the next take would
    -- fail), and the times that renewals, handoffs and monitoring compute
    -- with are finite.
    CONSTRAINT shard_leases_counters_check
        CHECK (lease_count OPERATOR(pg_catalog.<) 4611686018427387904
               AND lease_epoch OPERATOR(pg_catalog.<) 4611686018427387904
               AND owner_switches_since_checkpoint OPERATOR(pg_catalog.<) 4611686018427387904),
    CONSTRAINT shard_leases_times_check
        CHECK (pg_catalog.isfinite(lease_expires_at) AND pg_catalog.isfinite(handoff_requested_at)
               AND pg_catalog.isfinite(handoff_deadline) AND pg_catalog.isfinite(created_at)
               AND pg_catalog.isfinite(updated_at) AND pg_catalog.isfinite(checkpointed_at)),
    -- An operator's weight is at most 1e15 (LEASE_MAX_WEIGHT, src/pg_lease.h,
    -- 0.5.0): with it no sum of weights can overflow (a measured rate is
    -- bounded by its bigint input).
    CONSTRAINT shard_leases_load_check
        CHECK (weight OPERATOR(pg_catalog.>=) 0 AND weight OPERATOR(pg_catalog.<=) '1e15'
               AND work_rate OPERATOR(pg_catalog.>=) 0 AND work_rate OPERATOR(pg_catalog.<) 'Infinity')
)
-- Renewals and checkpoints touch no indexed column: leave room on each page
-- so they stay HOT updates.
WITH (fillfactor = 70);

COMMENT ON TABLE lease.shard_leases IS
    'One row per shard lease (the model is the Kinesis Client Library lease table). Change it only through the lease.* functions.';

-- Serves renew_leases (one owner's leases), take_leases (the leases of a
-- worker whose expiry bound has passed; the most-loaded worker's leases it
-- asks to hand over, first by shard_id, so a request reads as many leases as
-- it asks for) and the view worker_loads.  Renewals and checkpoints change
-- neither lease_owner nor shard_id, so they remain HOT.
CREATE INDEX shard_leases_owner_idx
    ON lease.shard_leases (app_name, stream_name, lease_owner, shard_id COLLATE pg_catalog."C")
    WHERE lease_owner IS NOT NULL;

-- Serves take_leases claiming the leases promised to the caller whose
-- handoff deadline has passed.  handoff_to changes only when a handoff is
-- requested or completed, never on a renewal or a checkpoint, so those stay
-- HOT.  (lease_expires_at is deliberately not indexed: every renewal changes
-- it, and indexing it would make every renewal a non-HOT update.)
CREATE INDEX shard_leases_handoff_idx
    ON lease.shard_leases (app_name, stream_name, handoff_to)
    WHERE handoff_to IS NOT NULL;

-- Serves lease.heartbeat's count of a worker's leases with a pending
-- handoff request: the same rare rows as shard_leases_handoff_idx, by
-- holder instead of by recipient.
CREATE INDEX shard_leases_handoff_owner_idx
    ON lease.shard_leases (app_name, stream_name, lease_owner)
    WHERE handoff_to IS NOT NULL;

SELECT pg_catalog.pg_extension_config_dump('lease.shard_leases', '');

----------------------------------------------------------------------------
-- What the taker reads instead of the whole stream (src/leases/taker.c;
-- docs/taker-internals.md).  Kept in the same statements that change the
-- leases, so every snapshot sees them agree with the rows.
----------------------------------------------------------------------------

-- Index of the rare rows a balancing round takes first: unowned leases
-- (new leases, released ones, children waiting for their parents, and the
-- ended ones until cleanup_ended deletes them; the round skips those).
-- Ownership changes are non-HOT updates already.  Its predicate names
-- lease_owner only: a column in an index predicate counts as indexed, so a
-- predicate on checkpoint would make every checkpoint a non-HOT update
-- (new entries in the primary key and shard_leases_owner_idx each time).
CREATE INDEX shard_leases_unowned_idx
    ON lease.shard_leases (app_name, stream_name)
    WHERE lease_owner IS NULL;

-- One row per worker holding leases in a stream (the bookkeeping):
--   leases       exactly the number of rows of lease.shard_leases with
--                that lease_owner (expired or not);
--   expires_min  a lower bound of their lease_expires_at: no lease of the
--                worker expires before it (meaningless when leases = 0);
--   version      bumped by every change of the worker's leases (what
--                lease.heartbeat answers as leases_version);
--   load, weighed
--                the balancing load: the sum of the known
--                weights (COALESCE(weight, work_rate)) of the leases it
--                holds, and how many of them have one; kept by the trigger
--                shard_leases_load_changed below.
-- Written by the statements that change who holds a lease, for both
-- workers (LEASE_SQL_RECORD_LOADS in src/leases/lease_sql.h), so a transfer
-- to a worker holds that worker's row until it commits.  Up to 0.4.0 these
-- were columns of lease.stream_workers, the row the worker's own heartbeat
-- writes: such a transfer left open made the worker's renewals wait
-- (0.5.0 moved them here).
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

-- One row per worker that ever held a lease in a stream: its heartbeat and
-- liveness record, written only by the worker's own renew_leases and
-- lease.heartbeat (one row per renewal, whatever the number of leases) and
-- its takes given renew_every (docs/worker-guide.md, "Fast failover"):
--   renewed_until       every lease the worker holds is live until at
--                       least then (its effective expiry is the later of
--                       this and its own lease_expires_at);
--   renewed_at          the database time of the last renewal (or take
--                       with renew_every);
--   renew_every         the renewal interval the worker declared, NULL
--                       when it is not in the fast-failover mode;
--   session_pid, session_start, server_incarnation
--                       the backend that renewed last, and the server
--                       incarnation (postmaster start, timeline) it lived in.
-- Another worker only locks the row, when it takes one of the worker's
-- leases by expiry (LEASE_SQL_LOCK_WORKERS), so a renewal waits for another
-- worker's transaction only while that transaction takes one of its leases
-- because it expired.  The row is made, empty, with the worker's first row
-- of lease.worker_holdings (lease.worker_holdings_added), so a takeover
-- always finds a row to lock.
-- A worker whose expires_min or renewed_until is still ahead, and whose
-- session has not ended (lease.liveness_cutoff), holds live leases only,
-- so a round counts it without reading its leases.
CREATE TABLE lease.stream_workers (
    app_name    text        NOT NULL,
    stream_name text        NOT NULL,
    worker      text        NOT NULL,
    renewed_until      timestamptz,
    renewed_at         timestamptz,
    renew_every        interval,
    session_pid        integer,
    session_start      timestamptz,
    server_incarnation text,
    PRIMARY KEY (app_name, stream_name, worker)
);

COMMENT ON TABLE lease.stream_workers IS
    'Per worker and stream: its heartbeat and liveness record, written by the worker''s own renewals (and takes given renew_every) only.';

-- A worker's first holdings row brings its heartbeat row, empty (a worker
-- that renews fills it).  ON CONFLICT DO NOTHING: a row left from before
-- stays as it is.
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


-- The number of takeable leases of a stream (not ended, not blocked by an
-- unfinished parent), as counted by a balancing round; NULL until a round
-- has counted it.  A change that can alter it (a lease created, imported,
-- deleted or ended) adds a row to lease.lineage_changes while a count is
-- cached; a round that finds such a row counts again.  Every stream with
-- leases has its row (create_lease and import_kcl_ex add it), so a change
-- always finds the row to lock.
CREATE TABLE lease.stream_takeable (
    app_name    text        NOT NULL,
    stream_name text        NOT NULL,
    takeable    bigint,
    PRIMARY KEY (app_name, stream_name)
);

COMMENT ON TABLE lease.stream_takeable IS
    'Per stream: the takeable leases counted by the last balancing round, valid while lease.lineage_changes has no row for the stream.';


-- What a worker declared as its capacity in its last take_leases call
-- (the 0.4.0 form; src/leases/balancing.c): the share of a
-- stream's load it should carry is its capacity over the sum of its
-- workers' capacities.  A worker with no row has capacity 1.
CREATE TABLE lease.worker_capacities (
    app_name    text             NOT NULL,
    stream_name text             NOT NULL,
    worker      text             NOT NULL,
    capacity    double precision NOT NULL,
    PRIMARY KEY (app_name, stream_name, worker),
    -- From 1e-6 to 1e6 (LEASE_MIN_CAPACITY, LEASE_MAX_CAPACITY,
    -- src/pg_lease.h, 0.5.0): no load or target computed from it can
    -- overflow.
    CONSTRAINT worker_capacities_capacity_check
        CHECK (capacity OPERATOR(pg_catalog.>=) '1e-6' AND capacity OPERATOR(pg_catalog.<=) '1e6')
);

COMMENT ON TABLE lease.worker_capacities IS
    'Per worker and stream: the capacity the worker declared in take_leases (1 when absent).';

-- Dumped (marked in src/common/finish.sql, after the tables marked before
-- it, in the order the 0.3.0--0.4.0 upgrade marks them).

-- A stream's balancing tolerance (lease.set_balance_tolerance): how far
-- above its target, as a fraction of the target, a worker may carry before
-- a move is worth making.  A stream with no row has the default, 0.1.
CREATE TABLE lease.stream_balancing (
    app_name    text             NOT NULL,
    stream_name text             NOT NULL,
    tolerance   double precision NOT NULL,
    PRIMARY KEY (app_name, stream_name),
    CONSTRAINT stream_balancing_tolerance_check
        CHECK (tolerance OPERATOR(pg_catalog.>=) 0 AND tolerance OPERATOR(pg_catalog.<=) 1)
);

COMMENT ON TABLE lease.stream_balancing IS
    'Per stream: the balancing tolerance set by lease.set_balance_tolerance (0.1 when absent).';

-- Dumped (marked in src/common/finish.sql, after the tables marked before
-- it, in the order the 0.3.0--0.4.0 upgrade marks them).


CREATE TABLE lease.lineage_changes (
    app_name    text        NOT NULL,
    stream_name text        NOT NULL
);

COMMENT ON TABLE lease.lineage_changes IS
    'Streams whose cached takeable count (lease.stream_takeable) a lease creation, import, deletion or close has made stale.';

-- Serves the round's check and its delete.
CREATE INDEX lineage_changes_stream_idx ON lease.lineage_changes (app_name, stream_name);

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


-- These three tables are derived from lease.shard_leases: marked for pg_dump
-- with a filter that keeps no row (src/common/finish.sql), since a restore
-- COPYs the leases back and the statement triggers below rebuild them from
-- those rows.

-- Rows added (create_lease, import_kcl_ex, a restore): every new stream gets
-- its lease.stream_takeable row and a cached count becomes stale (their
-- owners are counted by shard_leases_owners_changed below).
CREATE FUNCTION lease.shard_leases_inserted()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO lease.stream_takeable (app_name, stream_name)
    SELECT DISTINCT n.app_name, n.stream_name FROM new_rows AS n
    ON CONFLICT (app_name, stream_name) DO NOTHING;
    -- FOR SHARE: a round counting the stream holds the row FOR NO KEY
    -- UPDATE, so this change is either in its count or leaves its mark
    INSERT INTO lease.lineage_changes (app_name, stream_name)
    SELECT t.app_name, t.stream_name
      FROM (SELECT s.app_name, s.stream_name, s.takeable
              FROM lease.stream_takeable AS s
             WHERE EXISTS (SELECT 1 FROM new_rows AS n
                            WHERE n.app_name OPERATOR(pg_catalog.=) s.app_name
                              AND n.stream_name OPERATOR(pg_catalog.=) s.stream_name)
               FOR SHARE OF s) AS t
     WHERE t.takeable IS NOT NULL;
    RETURN NULL;
END
$$;

CREATE TRIGGER shard_leases_inserted
    AFTER INSERT ON lease.shard_leases
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT
    EXECUTE FUNCTION lease.shard_leases_inserted();

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

-- Rows deleted (delete_lease, cleanup_ended): a lease that had not ended
-- may have counted as takeable or blocked a child (its owner loses it in
-- shard_leases_owners_changed below).
CREATE FUNCTION lease.shard_leases_deleted()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO lease.lineage_changes (app_name, stream_name)
    SELECT t.app_name, t.stream_name
      FROM (SELECT s.app_name, s.stream_name, s.takeable
              FROM lease.stream_takeable AS s
             WHERE EXISTS (SELECT 1 FROM old_rows AS o
                            WHERE o.app_name OPERATOR(pg_catalog.=) s.app_name
                              AND o.stream_name OPERATOR(pg_catalog.=) s.stream_name
                              AND o.checkpoint OPERATOR(pg_catalog.<>) 'SHARD_END')
               FOR SHARE OF s) AS t
     WHERE t.takeable IS NOT NULL;
    RETURN NULL;
END
$$;

CREATE TRIGGER shard_leases_deleted
    AFTER DELETE ON lease.shard_leases
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT
    EXECUTE FUNCTION lease.shard_leases_deleted();

-- The owners of inserted and deleted leases (src/leases/workers.c): the
-- C runs the bookkeeping every ownership change runs (LEASE_SQL_RECORD_LOADS
-- in src/leases/lease_sql.h) over the statement's rows, so the rule is written
-- once.
CREATE FUNCTION lease.shard_leases_owners_changed()
RETURNS trigger
AS 'MODULE_PATHNAME', 'lease_shard_leases_owners_changed_0_5'
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE TRIGGER shard_leases_owners_inserted
    AFTER INSERT ON lease.shard_leases
    REFERENCING NEW TABLE AS changed_rows
    FOR EACH STATEMENT
    EXECUTE FUNCTION lease.shard_leases_owners_changed();

CREATE TRIGGER shard_leases_owners_deleted
    AFTER DELETE ON lease.shard_leases
    REFERENCING OLD TABLE AS changed_rows
    FOR EACH STATEMENT
    EXECUTE FUNCTION lease.shard_leases_owners_changed();

-- A lease ended (close_shard): it no longer counts as takeable, and its
-- children may no longer be blocked.  The WHEN clause keeps checkpoints off
-- this path.
CREATE FUNCTION lease.shard_leases_ended()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO lease.lineage_changes (app_name, stream_name)
    SELECT t.app_name, t.stream_name
      FROM (SELECT s.app_name, s.stream_name, s.takeable
              FROM lease.stream_takeable AS s
             WHERE s.app_name OPERATOR(pg_catalog.=) NEW.app_name
               AND s.stream_name OPERATOR(pg_catalog.=) NEW.stream_name
               FOR SHARE OF s) AS t
     WHERE t.takeable IS NOT NULL;
    RETURN NULL;
END
$$;

CREATE TRIGGER shard_leases_ended
    AFTER UPDATE OF checkpoint ON lease.shard_leases
    FOR EACH ROW
    WHEN ((OLD.checkpoint = 'SHARD_END') IS DISTINCT FROM (NEW.checkpoint = 'SHARD_END'))
    EXECUTE FUNCTION lease.shard_leases_ended();

-- A renewal (or a take by the same owner) that moves a lease's expiry
-- earlier than it was must lower the worker's expires_min bound.  Renewals
-- normally move it later, so the WHEN clause keeps this off their path; it
-- fires for UPDATE ... SET lease_expires_at only.
CREATE FUNCTION lease.shard_leases_expiry_lowered()
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

CREATE TRIGGER shard_leases_expiry_lowered
    AFTER UPDATE OF lease_expires_at ON lease.shard_leases
    FOR EACH ROW
    WHEN (NEW.lease_owner IS NOT NULL
          AND NEW.lease_owner IS NOT DISTINCT FROM OLD.lease_owner
          AND NEW.lease_expires_at < OLD.lease_expires_at)
    EXECUTE FUNCTION lease.shard_leases_expiry_lowered();

-- A lease's known weight (COALESCE(weight, work_rate): the operator's,
-- else the measured rate) counts in its owner's worker_holdings load
-- (src/leases/taker.c).  Row triggers whose WHEN clauses are false for a
-- lease with no weight, so an unweighted stream pays only the clause, and
-- renewals (which set none of these columns) not even that.  An ownership
-- change has already locked both workers' rows (LEASE_SQL_RECORD_LOADS, in
-- key order) before its AFTER triggers run; a weight change or a measured
-- checkpoint locks its owner's row.  An inserted lease's owner row may not
-- exist yet: it is made with no lease, and the statement trigger
-- shard_leases_owners_changed counts the lease after this one.
CREATE FUNCTION lease.shard_leases_load_changed()
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

CREATE TRIGGER shard_leases_load_inserted
    AFTER INSERT ON lease.shard_leases
    FOR EACH ROW
    WHEN (NEW.lease_owner IS NOT NULL AND COALESCE(NEW.weight, NEW.work_rate) IS NOT NULL)
    EXECUTE FUNCTION lease.shard_leases_load_changed();

CREATE TRIGGER shard_leases_load_deleted
    AFTER DELETE ON lease.shard_leases
    FOR EACH ROW
    WHEN (OLD.lease_owner IS NOT NULL AND COALESCE(OLD.weight, OLD.work_rate) IS NOT NULL)
    EXECUTE FUNCTION lease.shard_leases_load_changed();

CREATE TRIGGER shard_leases_load_updated
    AFTER UPDATE OF lease_owner, weight, work_rate ON lease.shard_leases
    FOR EACH ROW
    WHEN ((OLD.lease_owner IS DISTINCT FROM NEW.lease_owner
           AND COALESCE(OLD.weight, OLD.work_rate, NEW.weight, NEW.work_rate) IS NOT NULL)
          OR COALESCE(OLD.weight, OLD.work_rate) IS DISTINCT FROM COALESCE(NEW.weight, NEW.work_rate))
    EXECUTE FUNCTION lease.shard_leases_load_changed();

-- The functions that take an app_name are SECURITY INVOKER, with search_path
-- pinned: the per-app check needs the caller's identity, which SECURITY
-- DEFINER would replace by the owner's.  Each checks its arguments, then
-- that the caller may act for the app (lease.has_app_access: 42501 if not),
-- and only then runs its fixed, schema-qualified SQL as the function's
-- owner, exactly as SECURITY DEFINER would (src/leases/privileges.c).  A worker
-- role is granted EXECUTE on them and an app (lease.grant_app), never
-- access to the table, so the only way to change a lease is through the
-- protocol, and only for its apps.  They are not STRICT: a NULL where a
-- value is required is an error (22004) naming the argument.
-- Each is bound to the C entry point of this schema version (*_0_5,
-- src/common/version.h); the plain and _0_4 symbols serve the released
-- schemas until ALTER EXTENSION pg_lease UPDATE.

CREATE FUNCTION lease.create_lease(
    app_name text, stream_name text, shard_id text,
    parent_shard_ids text[] DEFAULT '{}', checkpoint text DEFAULT 'TRIM_HORIZON')
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_create_lease_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.take_lease(
    app_name text, stream_name text, shard_id text, new_owner text,
    lease_count bigint DEFAULT NULL, lease_duration interval DEFAULT NULL,
    renew_every interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lease_take_lease_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.renew_lease(
    app_name text, stream_name text, shard_id text, owner text,
    lease_count bigint, lease_duration interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lease_renew_lease_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.update_checkpoint(
    app_name text, stream_name text, shard_id text, owner text,
    checkpoint text, sub_sequence bigint DEFAULT 0)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_update_checkpoint_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.release_lease(
    app_name text, stream_name text, shard_id text, owner text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_release_lease_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.close_shard(
    app_name text, stream_name text, shard_id text, owner text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_close_shard_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

----------------------------------------------------------------------------
-- Fencing, two-phase checkpoints, lineage maintenance (src/leases/leases.c,
-- src/leases/lineage.c)
----------------------------------------------------------------------------

-- The fenced checkpoint: written only while lease_epoch still equals
-- fencing_token.  fencing_token has no default, so a call is never
-- ambiguous with the six-argument function above.  work, when given, is
-- the work the checkpoint covers (records or bytes, as the application
-- counts): it feeds the lease's decayed work rate, its measured weight for
-- balancing (src/leases/leases.c, docs/shard-leases.md "Balancing").
CREATE FUNCTION lease.update_checkpoint(
    app_name text, stream_name text, shard_id text, owner text,
    checkpoint text, sub_sequence bigint, fencing_token bigint,
    work bigint DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_update_checkpoint_fenced_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

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

-- The fenced-transaction contract (docs/exactly-once.md): inside the
-- caller's transaction, locks the lease row FOR SHARE until the transaction
-- ends and returns its checkpoint, or raises 55000 when owner does not hold
-- the lease at lease_epoch.  Every ownership change waits for the commit.
CREATE FUNCTION lease.hold_lease(
    app_name text, stream_name text, shard_id text, owner text,
    lease_epoch bigint)
RETURNS text
AS 'MODULE_PATHNAME', 'lease_hold_lease_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.prepare_checkpoint(
    app_name text, stream_name text, shard_id text, owner text,
    pending_checkpoint text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_prepare_checkpoint_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.cleanup_ended(app_name text, stream_name text)
RETURNS integer
AS 'MODULE_PATHNAME', 'lease_cleanup_ended_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.delete_lease(app_name text, stream_name text, shard_id text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_delete_lease_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

-- Shard discovery (src/leases/shard_sync.c): creates the missing leases of
-- the listed shards with their lineage ('created') and reports the leases
-- of the stream that are not listed and not ended ('unlisted'); ends
-- nothing.  parent_ids: one parent per shard (NULL for none), or one row of
-- parents per shard padded with NULLs (a merge has two).
CREATE FUNCTION lease.sync_shards(
    app_name text, stream_name text, shard_ids text[], parent_ids text[] DEFAULT NULL)
RETURNS TABLE(shard_id text, action text)
AS 'MODULE_PATHNAME', 'lease_sync_shards_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

----------------------------------------------------------------------------
-- The taker: balanced take_leases, batch renewal, graceful handoff
-- (src/leases/taker.c)
----------------------------------------------------------------------------

-- capacity: the share of the stream's load this worker should carry,
-- relative to the other workers' (src/leases/taker.c, "Balancing").
CREATE FUNCTION lease.take_leases(
    app_name text, stream_name text, owner text,
    lease_duration interval DEFAULT NULL, max_leases integer DEFAULT NULL,
    max_steal integer DEFAULT 1, capacity double precision DEFAULT 1,
    renew_every interval DEFAULT NULL)
RETURNS TABLE(shard_id text, lease_count bigint, action text,
              previous_owner text, lease_epoch bigint)
AS 'MODULE_PATHNAME', 'lease_take_leases_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

-- The dry run of weighted balancing (src/leases/taker.c, planner.c): the
-- moves the next rounds would make, changing nothing; owner: as that
-- worker's round sees the stream (counted even when it holds nothing).
CREATE FUNCTION lease.plan_rebalance(app_name text, stream_name text, owner text DEFAULT NULL)
RETURNS TABLE(shard_id text, action text, from_owner text, to_owner text, weight double precision,
              imbalance_before double precision, imbalance_after double precision)
AS 'MODULE_PATHNAME', 'lease_plan_rebalance_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

-- Balancing inputs for operators (src/leases/balancing.c): a lease's
-- weight (null: its measured rate counts) and a stream's tolerance (null:
-- the default, 0.1).
CREATE FUNCTION lease.set_weight(
    app_name text, stream_name text, shard_id text, weight double precision)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_set_weight_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.set_balance_tolerance(
    app_name text, stream_name text, tolerance double precision)
RETURNS double precision
AS 'MODULE_PATHNAME', 'lease_set_balance_tolerance_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.renew_leases(
    app_name text, stream_name text, owner text,
    lease_duration interval DEFAULT NULL, renew_every interval DEFAULT NULL)
RETURNS TABLE(shard_id text, lease_count bigint, handoff_to text, lease_epoch bigint)
AS 'MODULE_PATHNAME', 'lease_renew_leases_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

-- renew_leases' one write without its list (src/leases/workers.c): a worker
-- that lists its leases again only when leases_version moves or a handoff
-- is pending renews at the same cost whatever it holds.
CREATE FUNCTION lease.heartbeat(
    app_name text, stream_name text, owner text,
    lease_duration interval DEFAULT NULL, renew_every interval DEFAULT NULL,
    OUT leases bigint, OUT leases_version bigint, OUT handoffs_pending bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'lease_heartbeat_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

-- The fast-failover mode's test (src/leases/workers.c): from when the
-- leases of a worker whose recorded session has ended in this server
-- incarnation may be taken before their expiry, or NULL (also when an
-- argument is NULL: a worker not in the mode).  Called by the lease
-- functions and views as the extension owner; granted to nobody.
CREATE FUNCTION lease.liveness_cutoff(
    session_pid integer, session_start timestamptz, server_incarnation text,
    renewed_at timestamptz, renew_every interval, now timestamptz)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'lease_liveness_cutoff'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

-- What a worker may read about its own leases (src/leases/my_leases.c): the
-- leases the owner holds (expired ones too, until someone takes them) and
-- those a pending handoff promises to it, with the fencing token, the
-- checkpoint, the time left by the database clock, the handoff in either
-- direction and the unfinished parents.  Changes nothing.
CREATE FUNCTION lease.my_leases(app_name text, stream_name text, owner text)
RETURNS TABLE(shard_id text, lease_count bigint, lease_epoch bigint,
              checkpoint text, checkpoint_sub_sequence bigint,
              pending_checkpoint text, expires_in interval,
              handoff_to text, handoff_from text, waiting_on text[])
AS 'MODULE_PATHNAME', 'lease_my_leases_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.request_handoff(
    app_name text, stream_name text, shard_id text, to_owner text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_request_handoff_0_5'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

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

----------------------------------------------------------------------------
-- Ownership events (src/leases/events.c)
----------------------------------------------------------------------------

CREATE TABLE lease.lease_events (
    event_id    bigserial   PRIMARY KEY,
    occurred_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    app_name    text        NOT NULL,
    stream_name text        NOT NULL,
    shard_id    text        NOT NULL,
    event       text        NOT NULL,
    from_owner  text,
    to_owner    text,
    lease_count bigint      NOT NULL,
    lease_epoch bigint      NOT NULL,
    -- why a balancing round moved the lease: the loads and
    -- targets it saw.  Last, so a fresh table equals one upgraded from 0.3.0.
    reason      text,
    CONSTRAINT lease_events_event_check CHECK (event OPERATOR(pg_catalog.=) ANY (ARRAY[
        'take', 'expiry_takeover', 'steal', 'transfer', 'release', 'close',
        'handoff_request', 'session_ended', 'restart_grace']))
);

COMMENT ON TABLE lease.lease_events IS
    'Every change of a lease''s ownership and every handoff request (lease.record_events); prune with lease.prune_events().';

-- Serves prune_events (delete everything older than a point in time).
CREATE INDEX lease_events_occurred_at_idx ON lease.lease_events (occurred_at);

SELECT pg_catalog.pg_extension_config_dump('lease.lease_events', '');
SELECT pg_catalog.pg_extension_config_dump('lease.lease_events_event_id_seq', '');

CREATE FUNCTION lease.prune_events(older_than interval)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lease_prune_events'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

-- The notifications the ownership changes skipped because PostgreSQL's
-- NOTIFY queue was at lease.notify_queue_limit or fuller (src/leases/events.h):
-- a counter (nextval is not rolled back, so it also counts the skips of
-- changes whose transaction then rolled back; after a crash it may jump
-- ahead by up to 32), reported by lease.monitoring_notifications().
-- Marked for pg_dump in src/common/finish.sql, last, as the 0.4.0--0.5.0
-- upgrade adds it.
CREATE SEQUENCE lease.notifications_skipped;

COMMENT ON SEQUENCE lease.notifications_skipped IS
    'Ownership-change notifications skipped because the NOTIFY queue was at lease.notify_queue_limit or fuller (lease.monitoring_notifications).';

----------------------------------------------------------------------------
-- Observability views.  Not granted to PUBLIC: grant SELECT to a
-- monitoring role (docs/security.md).
----------------------------------------------------------------------------

-- security_barrier views filtered by lease.has_app_access: a role granted
-- SELECT sees the leases of its own apps only (the owner and superusers see
-- every app), and the barrier keeps a caller's own (leaky) functions in a
-- WHERE clause from seeing the other rows first.  The view reads the table
-- as its owner; the filter runs as the caller.

CREATE VIEW lease.lease_status WITH (security_barrier = true) AS
SELECT l.app_name,
       l.stream_name,
       l.shard_id,
       l.lease_owner,
       CASE
           WHEN l.checkpoint = 'SHARD_END' THEN 'ended'
           WHEN EXISTS (SELECT 1 FROM lease.shard_leases AS p
                         WHERE p.app_name = l.app_name
                           AND p.stream_name = l.stream_name
                           AND p.shard_id = ANY (l.parent_shard_ids)
                           AND p.checkpoint <> 'SHARD_END') THEN 'blocked'
           WHEN l.lease_owner IS NULL THEN 'unowned'
           WHEN e.expires_at <= pg_catalog.clock_timestamp() THEN 'expired'
           WHEN h.pending THEN 'handoff_pending'
           ELSE 'owned'
       END AS state,
       e.expires_at - pg_catalog.clock_timestamp() AS time_to_expiry,
       l.checkpoint,
       l.checkpoint_sub_sequence,
       l.pending_checkpoint,
       l.lease_count,
       l.lease_epoch,
       CASE WHEN h.pending THEN l.handoff_to END AS handoff_to,
       CASE WHEN h.pending THEN l.handoff_deadline END AS handoff_deadline,
       l.owner_switches_since_checkpoint,
       l.parent_shard_ids,
       l.updated_at
  FROM lease.shard_leases AS l
       LEFT JOIN lease.stream_workers AS w
              ON w.app_name = l.app_name AND w.stream_name = l.stream_name
             AND w.worker = l.lease_owner,
       -- the effective expiry (LEASE_SQL_EXPIRY_W, src/leases/leases.h)
       LATERAL (SELECT GREATEST(l.lease_expires_at, w.renewed_until) AS expires_at) AS e,
       LATERAL (SELECT l.handoff_to IS NOT NULL
                       AND pg_catalog.clock_timestamp()
                           < l.handoff_deadline + l.handoff_lease_duration AS pending) AS h
 WHERE lease.has_app_access(l.app_name);

COMMENT ON VIEW lease.lease_status IS
    'One row per lease: state (owned, expired, unowned, ended, blocked, handoff_pending), time to expiry, checkpoint, fencing epoch, pending handoff.';

-- The first four columns as in 0.1.0; load, capacity and target (issue
-- 22) show why a balancing round moves leases: a lease's weight is its
-- known one (the operator's, else the measured rate), else the mean of the
-- stream's known weights, else 1 (src/leases/taker.c).
CREATE VIEW lease.worker_loads WITH (security_barrier = true) AS
SELECT g.app_name, g.stream_name, g.lease_owner, g.live_leases,
       g.known OPERATOR(pg_catalog.+) ((g.live_leases OPERATOR(pg_catalog.-) g.weighed)
           OPERATOR(pg_catalog.*) COALESCE(pg_catalog.sum(g.known) OVER s
               OPERATOR(pg_catalog./) NULLIF(pg_catalog.sum(g.weighed) OVER s, 0), 1)) AS load,
       COALESCE(c.capacity, 1) AS capacity,
       (pg_catalog.sum(g.known) OVER s OPERATOR(pg_catalog.+)
        ((pg_catalog.sum(g.live_leases) OVER s OPERATOR(pg_catalog.-) pg_catalog.sum(g.weighed) OVER s)
           OPERATOR(pg_catalog.*) COALESCE(pg_catalog.sum(g.known) OVER s
               OPERATOR(pg_catalog./) NULLIF(pg_catalog.sum(g.weighed) OVER s, 0), 1)))
           OPERATOR(pg_catalog.*) COALESCE(c.capacity, 1)
           OPERATOR(pg_catalog./) pg_catalog.sum(COALESCE(c.capacity, 1)) OVER s AS target
  FROM (SELECT l.app_name, l.stream_name, l.lease_owner, pg_catalog.count(*) AS live_leases,
               COALESCE(pg_catalog.sum(COALESCE(l.weight, l.work_rate)), 0) AS known,
               pg_catalog.count(COALESCE(l.weight, l.work_rate)) AS weighed
          FROM lease.shard_leases AS l
          LEFT JOIN lease.stream_workers AS w
            ON w.app_name OPERATOR(pg_catalog.=) l.app_name
           AND w.stream_name OPERATOR(pg_catalog.=) l.stream_name
           AND w.worker OPERATOR(pg_catalog.=) l.lease_owner
         WHERE l.lease_owner IS NOT NULL
           AND lease.has_app_access(l.app_name)
           -- the effective expiry, as lease.lease_status
           AND GREATEST(l.lease_expires_at, w.renewed_until)
               OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
         GROUP BY l.app_name, l.stream_name, l.lease_owner) AS g
  LEFT JOIN lease.worker_capacities AS c
    ON c.app_name OPERATOR(pg_catalog.=) g.app_name
   AND c.stream_name OPERATOR(pg_catalog.=) g.stream_name
   AND c.worker OPERATOR(pg_catalog.=) g.lease_owner
WINDOW s AS (PARTITION BY g.app_name, g.stream_name);

COMMENT ON VIEW lease.worker_loads IS
    'Live (unexpired) leases per owner and stream, their load (the sum of their weights: the operator''s weight, else the measured work rate, else the mean of the stream''s known weights, else 1), the owner''s capacity and its target (the stream''s load shared in proportion to the capacities of the owners listed).';

----------------------------------------------------------------------------
-- Switching over from the Elixir kcl_ex Ecto adapter (src/leases/import/kcl_ex.c)
----------------------------------------------------------------------------

-- SECURITY INVOKER on purpose, unlike every other function here: it reads a
-- table the caller names, so it must run with the caller's own privileges
-- (SELECT on the source, INSERT on lease.shard_leases).  It is an operator
-- function; worker roles are not granted it.
CREATE FUNCTION lease.import_kcl_ex(source regclass)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lease_import_kcl_ex'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

-- import_kcl_ex of rows passed as arrays, one element per lease (element i
-- of each array is a column of lease i): what pg_lease_router sends each
-- partition, the rows of its streams.  Same checks and semantics, same
-- privileges (INSERT on lease.shard_leases, row-level security per app).
CREATE FUNCTION lease.import_kcl_ex_rows(app_names text[], stream_names text[],
                                         shard_ids text[], checkpoints text[],
                                         lease_owners text[], lease_counts bigint[],
                                         completed boolean[])
RETURNS bigint
AS 'MODULE_PATHNAME', 'lease_import_kcl_ex_rows'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

-- The leases of an export of the AWS Kinesis Client Library's DynamoDB
-- lease table (src/leases/import/kcl_dynamodb.c): one row per item saying what became of
-- it.  SECURITY INVOKER like import_kcl_ex_rows: the caller needs SELECT and
-- INSERT on lease.shard_leases, and row-level security admits the rows of
-- its own apps only.  An operator function; worker roles are not granted it.
CREATE FUNCTION lease.import_kcl_dynamodb(app_name text, stream_name text, export text)
RETURNS TABLE (item bigint, lease_key text, shard_id text, action text, detail text)
AS 'MODULE_PATHNAME', 'lease_import_kcl_dynamodb'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

----------------------------------------------------------------------------
-- Per-app visibility of the tables and views (docs/security.md)
----------------------------------------------------------------------------

-- Row-level security on the tables that hold app rows, for a role granted
-- SELECT (lease_events, app_grants: operators) or INSERT (shard_leases: an
-- import_kcl_ex caller that is not the owner): it sees and adds rows of its
-- own apps only.  There is no UPDATE or DELETE policy, so no role but the
-- owner can change rows even if granted the privilege.  The owner (and so
-- every SECURITY DEFINER function and every function running its SQL as the
-- owner) is not subject to it.
ALTER TABLE lease.shard_leases ENABLE ROW LEVEL SECURITY;
CREATE POLICY shard_leases_app_read ON lease.shard_leases
    FOR SELECT USING (lease.has_app_access(app_name));
CREATE POLICY shard_leases_app_insert ON lease.shard_leases
    FOR INSERT WITH CHECK (lease.has_app_access(app_name));

ALTER TABLE lease.lease_events ENABLE ROW LEVEL SECURITY;
CREATE POLICY lease_events_app_read ON lease.lease_events
    FOR SELECT USING (lease.has_app_access(app_name));
