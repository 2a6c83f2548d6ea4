-- src/common/finish.sql: last: nothing the parts created is granted to PUBLIC
-- One part of pg_lease--<version>.sql (Makefile, SQL_PARTS); each change here
-- needs its twin in the upgrade script pg_lease--<previous>--<version>.sql.

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA lease FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA lease FROM PUBLIC;
