/* pg_lease_router--0.3.0--0.4.0.sql: from 0.3.0 to 0.4.0.  Never edit once released. */

\echo Use "ALTER EXTENSION pg_lease_router UPDATE TO '0.4.0'" to load this file. \quit

-- pg_lease 0.4.0 routes the same functions with the same signatures as
-- 0.3.0 (the router test compares a fresh router with pg_lease's catalog):
-- nothing to change on a router.
