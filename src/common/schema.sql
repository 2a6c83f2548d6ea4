-- src/common/schema.sql: the schema
-- One part of pg_lease--<version>.sql (Makefile, SQL_PARTS); each change here
-- needs its twin in the upgrade script pg_lease--<previous>--<version>.sql.

-- The schema `lease` is created by CREATE EXTENSION (pg_lease.control names it).
-- Nothing in it is granted to PUBLIC: see docs/security.md.
REVOKE ALL ON SCHEMA lease FROM PUBLIC;
