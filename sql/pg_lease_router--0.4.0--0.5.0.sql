/* pg_lease_router--0.4.0--0.5.0.sql: from 0.4.0 to 0.5.0.  Never edit once released. */

\echo Use "ALTER EXTENSION pg_lease_router UPDATE TO '0.5.0'" to load this file. \quit
