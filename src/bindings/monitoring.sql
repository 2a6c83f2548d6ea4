-- src/bindings/monitoring.sql: channel-binding metrics for a monitoring role
-- (docs/monitoring.md); the lease metrics and what the monitoring functions
-- share are in src/leases/monitoring.sql.
-- One part of pg_lease--<version>.sql (Makefile, SQL_PARTS); each change here
-- needs its twin in the upgrade script pg_lease--<previous>--<version>.sql.

-- Conversations per status, every status present.
CREATE FUNCTION lease.monitoring_conversations()
RETURNS TABLE (status text, conversations bigint)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
SELECT x.status, pg_catalog.count(c.status)
  FROM pg_catalog.unnest(ARRAY['pending', 'running', 'idle', 'failed', 'terminated']) AS x(status)
  LEFT JOIN lease.conversations AS c ON c.status = x.status
 GROUP BY 1
 ORDER BY 1
$$;

COMMENT ON FUNCTION lease.monitoring_conversations() IS
    'Metrics: conversations per status.';

-- Sandboxes per status, every status present.
CREATE FUNCTION lease.monitoring_sandboxes()
RETURNS TABLE (status text, sandboxes bigint)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
SELECT x.status, pg_catalog.count(s.status)
  FROM pg_catalog.unnest(ARRAY['pending', 'starting', 'ready', 'suspended', 'terminated',
                               'failed']) AS x(status)
  LEFT JOIN lease.sandboxes AS s ON s.status = x.status
 GROUP BY 1
 ORDER BY 1
$$;

COMMENT ON FUNCTION lease.monitoring_sandboxes() IS
    'Metrics: sandboxes per status.';

-- Admission's view of the fleet, one row: active sandboxes (pending,
-- starting, ready: what admission counts) against lease.fleet_capacity, and
-- how many tenants are at or within 80 % of their limit (lease.tenant_limits,
-- else lease.default_sandbox_limit).  The settings as the exporter's session
-- sees them: set them in postgresql.conf or ALTER DATABASE, not per role.
CREATE FUNCTION lease.monitoring_fleet()
RETURNS TABLE (active_sandboxes bigint, capacity_sandboxes bigint,
               tenants_at_limit bigint, tenants_near_limit bigint)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
WITH t AS (SELECT s.user_id, pg_catalog.count(*) AS active
             FROM lease.sandboxes AS s
            WHERE s.status IN ('pending', 'starting', 'ready')
            GROUP BY s.user_id),
     u AS (SELECT t.active,
                  COALESCE(tl.sandbox_limit,
                           CAST(COALESCE(NULLIF(pg_catalog.current_setting('lease.default_sandbox_limit', true), ''),
                                         '20') AS integer)) AS sandbox_limit
             FROM t LEFT JOIN lease.tenant_limits AS tl ON tl.user_id = t.user_id)
SELECT CAST(COALESCE((SELECT pg_catalog.sum(u.active) FROM u), 0) AS bigint),
       -- the setting's default when the module is not loaded in this
       -- session and nothing set it (src/common/config.c); a placeholder
       -- whose value was removed from the configuration reads ''
       CAST(COALESCE(NULLIF(pg_catalog.current_setting('lease.fleet_capacity', true), ''), '1000') AS bigint),
       (SELECT pg_catalog.count(*) FROM u WHERE u.active >= u.sandbox_limit),
       (SELECT pg_catalog.count(*) FROM u WHERE u.active >= 0.8 * u.sandbox_limit)
$$;

COMMENT ON FUNCTION lease.monitoring_fleet() IS
    'Metrics: active sandboxes, lease.fleet_capacity, tenants at and within 80 % of their sandbox limit.';

-- Unresolved compensation failures (restore_rotated_channel's queue): how
-- many, the oldest's age in seconds since its first failure (0 when none),
-- the most attempts any of them has had.
CREATE FUNCTION lease.monitoring_compensation_failures()
RETURNS TABLE (unresolved bigint, oldest_unresolved_age_seconds double precision,
               max_attempts bigint)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
SELECT pg_catalog.count(*),
       COALESCE(pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()
                                              - pg_catalog.min(f.occurred_at)), 0),
       COALESCE(pg_catalog.max(f.attempts), 0)
  FROM lease.compensation_failures AS f
 WHERE f.resolved_at IS NULL
$$;

COMMENT ON FUNCTION lease.monitoring_compensation_failures() IS
    'Metrics: unresolved compensation failures, the oldest''s age, the most attempts.';
