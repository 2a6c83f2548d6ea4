-- No write makes a lineage cycle (src/leases/lineage.c, the trigger
-- shard_leases_lineage_checked): create_lease, sync_shards and an INSERT of
-- the table's own are checked against the leases already there, not only
-- against their own list; a lease never gets more than 32 parents.  Each
-- refusal writes nothing.  Two transactions at once:
-- test/specs/lineage_cycle_race.spec; the importers: 30_import_kcl_dynamodb.
\set VERBOSITY terse
SELECT lease.create_lease('lin', 's', 'x', ARRAY['y']);
SELECT lease_test.digest() AS before \gset
-- two create_leases naming each other
SELECT lease_test.try($$SELECT lease.create_lease('lin', 's', 'y', ARRAY['x'])$$);
-- create_lease, then sync_shards closing the cycle through a shard of its own list
SELECT lease_test.try($$SELECT * FROM lease.sync_shards('lin', 's', ARRAY['y', 'z'], ARRAY['z', 'x'])$$);
-- through a longer chain of existing leases: x <- w <- v, then x's parent y <- v
SELECT lease.create_lease('lin', 's', 'w', ARRAY['x']), lease.create_lease('lin', 's', 'v', ARRAY['w']);
SELECT lease_test.digest() AS before \gset
SELECT lease_test.try($$SELECT lease.create_lease('lin', 's', 'y', ARRAY['v'])$$);
-- an INSERT of the table's own (an operator may INSERT for its imports)
SELECT lease_test.try($$INSERT INTO lease.shard_leases (app_name, stream_name, shard_id, parent_shard_ids)
                        VALUES ('lin', 's', 'y', ARRAY['v'])$$);
SELECT lease_test.try($$INSERT INTO lease.shard_leases (app_name, stream_name, shard_id, parent_shard_ids)
                        VALUES ('lin', 's', 'self', ARRAY['self'])$$);
SELECT lease_test.try($$INSERT INTO lease.shard_leases (app_name, stream_name, shard_id, parent_shard_ids)
                        SELECT 'lin', 's', 'wide', array_agg('p' || i) FROM generate_series(1, 33) AS i$$);
SELECT lease_test.digest() = :'before' AS nothing_written;
-- the same names in another stream or app are another lineage
SELECT lease.create_lease('lin', 's2', 'y', ARRAY['x']), lease.create_lease('lin2', 's', 'y', ARRAY['x']);
-- a shard named as a parent that has no lease is no cycle, nor is a merge
-- whose parents share an ancestor
SELECT lease.create_lease('lin', 's', 'm', ARRAY['v', 'w']);
SELECT shard_id, parent_shard_ids FROM lease.shard_leases WHERE app_name = 'lin' AND stream_name = 's'
 ORDER BY shard_id;
\set VERBOSITY default
-- the message in full: it names the cycle, from the new lease through its parents
SELECT lease.create_lease('lin', 's', 'y', ARRAY['v']);
INSERT INTO lease.shard_leases (app_name, stream_name, shard_id, parent_shard_ids)
SELECT 'lin', 's', 'wide', array_agg('p' || i) FROM generate_series(1, 33) AS i;
-- the lock of the stream's lineage writes: one row per stream written with parents
SELECT app_name, stream_name, writes FROM lease.stream_lineage WHERE app_name LIKE 'lin%' ORDER BY 1, 2;
