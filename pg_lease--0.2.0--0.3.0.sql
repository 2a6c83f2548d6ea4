/* pg_lease--0.2.0--0.3.0.sql: from 0.2.0 to 0.3.0.  Never edit once released. */

\echo Use "ALTER EXTENSION pg_lease UPDATE TO '0.3.0'" to load this file. \quit
