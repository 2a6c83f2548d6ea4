/* pg_lease_router--0.4.0--0.5.0.sql: from 0.4.0 to 0.5.0.  Never edit once released. */

\echo Use "ALTER EXTENSION pg_lease_router UPDATE TO '0.5.0'" to load this file. \quit

-- Security and robustness: the monitoring function of the notifications
-- skipped while the NOTIFY queue is full, one row per partition, as
-- src/router/generate.sql writes it.
CREATE FUNCTION lease.monitoring_notifications()
RETURNS TABLE(skipped bigint, queue_usage double precision)
LANGUAGE plproxy AS $$
    CLUSTER 'pg_lease';
    RUN ON ALL;
$$;

REVOKE ALL ON FUNCTION lease.monitoring_notifications() FROM PUBLIC;

-- The platform's own statuses, routed to the partition that made the
-- conversation, as src/router/generate.sql writes them.
CREATE FUNCTION lease.set_conversation_status(conversation_id bigint, status text)
RETURNS boolean
LANGUAGE plproxy AS $$
    CLUSTER 'pg_lease';
    RUN ON lease_router.conversation_partition(conversation_id);
$$;

CREATE FUNCTION lease.set_sandbox_status(conversation_id bigint, status text)
RETURNS boolean
LANGUAGE plproxy AS $$
    CLUSTER 'pg_lease';
    RUN ON lease_router.conversation_partition(conversation_id);
$$;

REVOKE ALL ON FUNCTION lease.set_conversation_status(bigint, text), lease.set_sandbox_status(bigint, text)
    FROM PUBLIC;
