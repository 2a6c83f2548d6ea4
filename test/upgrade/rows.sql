-- Every row of every table in schema lease, and the state of every sequence
-- there, one line each in a fixed order: test/upgrade/dump.sh diffs this
-- listing between a database and its pg_dump/pg_restore copy.  Generic over
-- the tables present, so a table added by a later version is covered too.
-- Each table's rows are those its pg_extension_config_dump filter keeps:
-- what a dump must carry (lease.app_grants leaves out stale grants).
\ir listing.sql
SELECT pg_catalog.format('SELECT %L || '' '' || t::text FROM %s AS t %s ORDER BY t::text COLLATE "C"',
                         c.oid::regclass, c.oid::regclass, COALESCE(x.condition, ''))
  FROM pg_catalog.pg_class c
  LEFT JOIN (SELECT u.config, u.condition
               FROM pg_catalog.pg_extension AS e,
                    LATERAL ROWS FROM (pg_catalog.unnest(e.extconfig), pg_catalog.unnest(e.extcondition))
                            AS u(config, condition)
              WHERE e.extname = 'pg_lease') AS x ON x.config = c.oid
 WHERE c.relnamespace = 'lease'::regnamespace AND c.relkind IN ('r', 'p')
   -- derived from shard_leases and rebuilt by a restore, not copied
   -- (test/lib/taker_state_check.sql checks them against a recount)
   AND c.relname NOT IN ('stream_workers', 'worker_holdings', 'stream_takeable', 'lineage_changes')
 ORDER BY c.oid::regclass::text
\gexec
SELECT pg_catalog.format('SELECT %L || '' last_value='' || last_value || '' is_called='' || is_called FROM %s',
                         c.oid::regclass, c.oid::regclass)
  FROM pg_catalog.pg_class c
 WHERE c.relnamespace = 'lease'::regnamespace AND c.relkind = 'S'
 ORDER BY c.oid::regclass::text
\gexec
-- The views still read the restored rows (time_to_expiry left out: it moves).
SELECT 'lease_status ' || s.app_name || ' ' || s.stream_name || ' ' || s.shard_id || ' ' || s.state
  FROM lease.lease_status AS s ORDER BY s.app_name, s.stream_name, s.shard_id;
SELECT 'worker_loads ' || w::text FROM lease.worker_loads AS w ORDER BY w::text COLLATE "C";
