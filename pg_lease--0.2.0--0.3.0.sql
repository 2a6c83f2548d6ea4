/* pg_lease--0.2.0--0.3.0.sql: from 0.2.0 to 0.3.0.  Never edit once released. */

\echo Use "ALTER EXTENSION pg_lease UPDATE TO '0.3.0'" to load this file. \quit

----------------------------------------------------------------------------
-- What the taker reads instead of the whole stream (src/leases/taker.c;
-- docs/taker-internals.md).  Kept in the same statements that change the
-- leases, so every snapshot sees them agree with the rows.
----------------------------------------------------------------------------

-- Index of the rare rows a balancing round takes first: unowned leases
-- that have not ended (new leases, released ones, children waiting for
-- their parents).  Ownership changes are non-HOT updates already.
CREATE INDEX shard_leases_unowned_idx
    ON lease.shard_leases (app_name, stream_name)
    WHERE lease_owner IS NULL AND checkpoint <> 'SHARD_END';

-- One row per worker holding leases in a stream:
--   leases       exactly the number of rows of lease.shard_leases with
--                that lease_owner (expired or not);
--   expires_min  a lower bound of their lease_expires_at: no lease of the
--                worker expires before it (renew_leases sets it to the
--                exact expiry; meaningless when leases = 0);
--   version      bumped by every change of the worker's leases, so that
--                renew_leases raises expires_min only when no ownership
--                change raced it.
-- A worker whose expires_min is still ahead holds live leases only, so a
-- round counts it without reading its leases.
CREATE TABLE lease.stream_workers (
    app_name    text        NOT NULL,
    stream_name text        NOT NULL,
    worker      text        NOT NULL,
    leases      bigint      NOT NULL,
    expires_min timestamptz,
    version     bigint      NOT NULL DEFAULT 1,
    PRIMARY KEY (app_name, stream_name, worker)
);

COMMENT ON TABLE lease.stream_workers IS
    'Per worker and stream: how many leases it holds and a lower bound of their expiry (kept by the lease functions; what take_leases reads instead of the stream).';

-- Serves the round's read of a stream's workers; a worker left with no
-- lease stays out of it.
CREATE INDEX stream_workers_holding_idx
    ON lease.stream_workers (app_name, stream_name)
    WHERE leases > 0;


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


CREATE TABLE lease.lineage_changes (
    app_name    text        NOT NULL,
    stream_name text        NOT NULL
);

COMMENT ON TABLE lease.lineage_changes IS
    'Streams whose cached takeable count (lease.stream_takeable) a lease creation, import, deletion or close has made stale.';

-- Serves the round's check and its delete.
CREATE INDEX lineage_changes_stream_idx ON lease.lineage_changes (app_name, stream_name);


-- These three tables are derived from lease.shard_leases: marked for pg_dump
-- with a filter that keeps no row (src/common/finish.sql), since a restore
-- COPYs the leases back and the statement triggers below rebuild them from
-- those rows.

-- Rows added (create_lease, import_kcl_ex, a restore): every new stream gets
-- its lease.stream_takeable row, a cached count becomes stale, and the
-- owners of the new rows are counted (upserted in key order, like
-- LEASE_SQL_RECORD_LOADS in src/leases/leases.h).
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
    INSERT INTO lease.stream_workers AS w (app_name, stream_name, worker, leases, expires_min)
    SELECT n.app_name, n.stream_name, n.lease_owner, pg_catalog.count(*),
           pg_catalog.min(n.lease_expires_at)
      FROM new_rows AS n
     WHERE n.lease_owner IS NOT NULL
     GROUP BY n.app_name, n.stream_name, n.lease_owner
     ORDER BY n.app_name COLLATE "C", n.stream_name COLLATE "C", n.lease_owner COLLATE "C"
    ON CONFLICT (app_name, stream_name, worker) DO UPDATE
       SET leases = w.leases OPERATOR(pg_catalog.+) excluded.leases,
           expires_min = CASE WHEN w.leases OPERATOR(pg_catalog.=) 0 THEN excluded.expires_min
                              ELSE LEAST(w.expires_min, excluded.expires_min) END,
           version = w.version OPERATOR(pg_catalog.+) 1;
    RETURN NULL;
END
$$;

CREATE TRIGGER shard_leases_inserted
    AFTER INSERT ON lease.shard_leases
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT
    EXECUTE FUNCTION lease.shard_leases_inserted();

-- Rows deleted (delete_lease, cleanup_ended): their owners lose them; a
-- lease that had not ended may have counted as takeable or blocked a child.
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
    INSERT INTO lease.stream_workers AS w (app_name, stream_name, worker, leases)
    SELECT o.app_name, o.stream_name, o.lease_owner, -pg_catalog.count(*)
      FROM old_rows AS o
     WHERE o.lease_owner IS NOT NULL
     GROUP BY o.app_name, o.stream_name, o.lease_owner
     ORDER BY o.app_name COLLATE "C", o.stream_name COLLATE "C", o.lease_owner COLLATE "C"
    ON CONFLICT (app_name, stream_name, worker) DO UPDATE
       SET leases = w.leases OPERATOR(pg_catalog.+) excluded.leases,
           version = w.version OPERATOR(pg_catalog.+) 1;
    RETURN NULL;
END
$$;

CREATE TRIGGER shard_leases_deleted
    AFTER DELETE ON lease.shard_leases
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT
    EXECUTE FUNCTION lease.shard_leases_deleted();

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
    UPDATE lease.stream_workers AS w
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

-- The owner index also orders each worker's leases by shard_id (the order
-- in which take_leases asks for them to be handed over).
DROP INDEX lease.shard_leases_owner_idx;
CREATE INDEX shard_leases_owner_idx
    ON lease.shard_leases (app_name, stream_name, lease_owner, shard_id COLLATE "C")
    WHERE lease_owner IS NOT NULL;

-- Built from the existing rows: every worker's leases and the earliest
-- expiry among them (exact, hence a valid bound), a row (no count yet) for
-- every stream, nothing stale.
INSERT INTO lease.stream_workers (app_name, stream_name, worker, leases, expires_min)
SELECT l.app_name, l.stream_name, l.lease_owner, pg_catalog.count(*), pg_catalog.min(l.lease_expires_at)
  FROM lease.shard_leases AS l
 WHERE l.lease_owner IS NOT NULL
 GROUP BY l.app_name, l.stream_name, l.lease_owner;

INSERT INTO lease.stream_takeable (app_name, stream_name)
SELECT DISTINCT l.app_name, l.stream_name FROM lease.shard_leases AS l;

REVOKE ALL ON FUNCTION lease.shard_leases_expiry_lowered(), lease.shard_leases_inserted(),
    lease.shard_leases_deleted(), lease.shard_leases_ended() FROM PUBLIC;
REVOKE ALL ON TABLE lease.stream_workers, lease.stream_takeable, lease.lineage_changes FROM PUBLIC;

SELECT pg_catalog.pg_extension_config_dump('lease.stream_workers', 'WHERE false');
SELECT pg_catalog.pg_extension_config_dump('lease.stream_takeable', 'WHERE false');
SELECT pg_catalog.pg_extension_config_dump('lease.lineage_changes', 'WHERE false');
