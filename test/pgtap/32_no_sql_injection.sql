-- pgTAP: no function can be made to run SQL of the caller's.  Values with
-- quotes, semicolons, dollar quotes and backslashes are stored as data, and
-- import_kcl_ex's relation, the one name that reaches SQL text, is quoted.
BEGIN;
SELECT plan(9);

CREATE TEMP TABLE hostile (v text);
INSERT INTO hostile VALUES
    ($v$x'); DROP TABLE lease.shard_leases; --$v$),
    ($v$"; DELETE FROM lease.lease_events; --$v$),
    ($v$$$; TRUNCATE lease.conversations; $$$v$),
    ($v$\'; SELECT pg_sleep(10); -- $1 %s %I$v$);

SELECT is((SELECT bool_and(lease.create_lease(v, v, v, ARRAY[v || '-parent'], v)) FROM hostile), true,
          'leases with hostile identifiers and checkpoints are created');
SELECT is((SELECT count(*)::int FROM lease.shard_leases l JOIN hostile h
            ON l.app_name = h.v AND l.stream_name = h.v AND l.shard_id = h.v
           AND l.checkpoint = h.v AND l.parent_shard_ids = ARRAY[h.v || '-parent']), 4,
          'every hostile value is stored byte for byte');
SELECT is((SELECT count(*)::int FROM hostile WHERE lease.take_lease(v, v, v, v) = 1), 4,
          'hostile owners take them');
SELECT is((SELECT count(*)::int FROM lease.lease_events e JOIN hostile h
            ON e.app_name = h.v AND e.to_owner = h.v AND e.event = 'take'), 4,
          'the events record them as data');
SELECT is((SELECT count(*)::int FROM hostile h,
                  LATERAL lease.start_conversation(h.v, h.v, h.v, h.v, h.v) s
            WHERE s.outcome = 'started'), 4, 'hostile channel scopes start conversations');

-- a hostile notification channel is a parameter of pg_notify, not SQL
SET LOCAL lease.notify_channel = $v$x'; DROP TABLE lease.lease_events; --$v$;
SELECT is(lease.release_lease(v, v, v, v), true, 'a hostile notify channel is only a name')
  FROM hostile LIMIT 1;
RESET lease.notify_channel;

-- import_kcl_ex from a relation whose schema and name are hostile
CREATE SCHEMA "s""; DROP TABLE lease.shard_leases; --";
CREATE TABLE "s""; DROP TABLE lease.shard_leases; --"."kcl""; DELETE FROM lease.lease_events; --"
    (shard_id text, app_name text, stream_name text, checkpoint text,
     lease_owner text, lease_count int, completed boolean);
INSERT INTO "s""; DROP TABLE lease.shard_leases; --"."kcl""; DELETE FROM lease.lease_events; --"
    VALUES ('k', 'inj-import', 's', '1', NULL, 0, false);
SELECT is(lease.import_kcl_ex('"s""; DROP TABLE lease.shard_leases; --"."kcl""; DELETE FROM lease.lease_events; --"'),
          1::bigint, 'import_kcl_ex reads a relation with a hostile name');
SELECT is((SELECT count(*)::int FROM lease.lease_events e JOIN hostile h ON e.app_name = h.v), 5,
          'the events are all still there');
SELECT tables_are('lease', ARRAY['shard_leases', 'lease_events', 'sandboxes', 'conversations', 'turns',
                                 'tenant_limits', 'compensation_failures', 'app_grants',
                                 'lease_event_totals',
                                 'conversation_id_partition', 'admission_gate',
                                 'stream_workers', 'stream_takeable', 'lineage_changes',
                                 'worker_capacities', 'stream_balancing', 'stream_placements',
                                 'stream_lineage', 'worker_holdings', 'server_incarnations'],
                  'every table of the extension is still there');

SELECT * FROM finish();
ROLLBACK;
