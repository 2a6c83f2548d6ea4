/* pg_lease--0.4.0--0.5.0.sql: upgrade from 0.4.0 to 0.5.0.  Each change here has its twin in the SQL parts (Makefile, SQL_PARTS), and test/upgrade/upgrade.sh proves the two agree. */

\echo Use "ALTER EXTENSION pg_lease UPDATE TO '0.5.0'" to load this file. \quit
