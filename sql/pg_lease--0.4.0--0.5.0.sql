/* pg_lease--0.4.0--0.5.0.sql: upgrade from 0.4.0 to 0.5.0.  Each change here has its twin in the SQL parts (Makefile, SQL_PARTS), and test/upgrade/upgrade.sh proves the two agree. */

\echo Use "ALTER EXTENSION pg_lease UPDATE TO '0.5.0'" to load this file. \quit

----------------------------------------------------------------------------
-- A worker's heartbeat no longer waits for another worker's ownership
-- change (src/leases/leases.sql, src/leases/workers.c).  The bookkeeping
-- (leases, expires_min, version, load, weighed) moves from
-- lease.stream_workers, the row each worker's heartbeat writes, to
-- lease.worker_holdings, which the statements that change who holds a lease
-- write; lease.stream_workers keeps the heartbeat and liveness record, which
-- another worker only locks while it takes one of the worker's leases by
-- expiry.  The functions that write or read the bookkeeping move to their
-- 0.5.0 entry points (src/common/version.h); CREATE OR REPLACE with the same
-- signature keeps each function's OID and grants.
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

CREATE OR REPLACE FUNCTION lease.take_lease(
    app_name text, stream_name text, shard_id text, new_owner text,
    lease_count bigint DEFAULT NULL, lease_duration interval DEFAULT NULL,
    renew_every interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lease_take_lease_0_5'
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
