-- recipe: docs/security.md
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['lease_fleet_operator'] LOOP
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = r) THEN
            EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', r);
        END IF;
    END LOOP;
END
$$;
GRANT USAGE ON SCHEMA lease TO lease_fleet_operator;
GRANT EXECUTE ON FUNCTION
    lease.prune_events(interval),
    lease.retry_failed_compensations(),
    lease.set_tenant_limit(text, integer),
    lease.clear_tenant_limit(text),
    lease.tenant_limit(text),
    lease.list_tenant_limits(),
    lease.monitoring_compensation_failures(),
    lease.monitoring_fleet(),
    lease.monitoring_conversations(),
    lease.monitoring_sandboxes()
    TO lease_fleet_operator;
-- the queue retry_failed_compensations drains, as its runbook reads it
-- (monitoring.md, PgLeaseCompensationFailureUnresolved)
GRANT SELECT ON lease.compensation_failures TO lease_fleet_operator;
-- end of recipe
