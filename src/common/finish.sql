-- src/common/finish.sql: last: nothing the parts created is granted to PUBLIC
-- One part of pg_lease--<version>.sql (Makefile, SQL_PARTS); each change here
-- needs its twin in the upgrade script pg_lease--<previous>--<version>.sql.

-- The taker's bookkeeping tables (src/leases/leases.sql) are derived from
-- the leases: marked for pg_dump with a filter that keeps no row, so a
-- restore rebuilds them.  Marked last, after every other table, so that a
-- database upgraded from 0.2.0 (whose upgrade script adds them at its end)
-- lists the marked tables in the same order as a fresh install.
SELECT pg_catalog.pg_extension_config_dump('lease.stream_workers', 'WHERE false');
SELECT pg_catalog.pg_extension_config_dump('lease.stream_takeable', 'WHERE false');
SELECT pg_catalog.pg_extension_config_dump('lease.lineage_changes', 'WHERE false');

-- App grants (src/leases/access.sql): only those that still match their
-- role, by OID and name, are dumped (pg_dump runs the filter with an empty
-- search_path).  Marked last, for the same reason: the 0.3.0--0.4.0 upgrade
-- gives the table its filter by taking it out of the extension and adding
-- it back, which moves it to the end of the list.
SELECT pg_catalog.pg_extension_config_dump('lease.app_grants',
    'WHERE pg_catalog.pg_get_userbyid(grantee) OPERATOR(pg_catalog.=) grantee_name');

-- The balancing inputs (src/leases/leases.sql): declared capacities and
-- the tolerances set by operators.  Added by the 0.3.0--0.4.0 upgrade at
-- its end, so marked after app_grants.
SELECT pg_catalog.pg_extension_config_dump('lease.worker_capacities', '');
SELECT pg_catalog.pg_extension_config_dump('lease.stream_balancing', '');

-- Where streams live (src/leases/placement.sql): a restored source goes on
-- refusing a stream that moved away.  Added by the 0.4.0--0.5.0 upgrade at
-- its end, so marked after the balancing inputs.
SELECT pg_catalog.pg_extension_config_dump('lease.stream_placements', '');

-- The count of skipped notifications (src/leases/leases.sql), added by the
-- 0.4.0--0.5.0 upgrade after stream_placements: a counter, so a restore
-- carries on from it.
SELECT pg_catalog.pg_extension_config_dump('lease.notifications_skipped', '');

-- The lineage locks (src/leases/leases.sql, 0.5.0) are made by the writes
-- that need them: marked with a filter that keeps no row.
SELECT pg_catalog.pg_extension_config_dump('lease.stream_lineage', 'WHERE false');

-- The bookkeeping apart from the heartbeat rows (src/leases/leases.sql),
-- derived from the leases like lease.stream_workers: no row is dumped.
-- Added by the 0.4.0--0.5.0 upgrade after stream_lineage, so marked last.
SELECT pg_catalog.pg_extension_config_dump('lease.worker_holdings', 'WHERE false');

-- The server incarnations (src/leases/leases.sql, 0.5.0), added by the
-- 0.4.0--0.5.0 upgrade after worker_holdings: dumped whole, so a restored
-- database knows a restart happened (its first call is a new incarnation,
-- and the restart grace follows).
SELECT pg_catalog.pg_extension_config_dump('lease.server_incarnations', '');
-- and the count of leases the grace extended, carried on like the count of
-- skipped notifications
SELECT pg_catalog.pg_extension_config_dump('lease.restart_grace_extended', '');

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA lease FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA lease FROM PUBLIC;
