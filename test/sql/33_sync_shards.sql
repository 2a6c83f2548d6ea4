-- lease.sync_shards: shard discovery (docs/shard-leases.md, "Who creates a
-- stream's leases").  Missing leases are created with their lineage
-- ('created'), leases not listed and not ended are reported ('unlisted'),
-- nothing is ended, a second call changes nothing; every bad input raises
-- with its SQLSTATE and writes nothing.  Two workers at once:
-- test/specs/sync_shards_concurrent.spec.
CREATE ROLE lease_test_syncer;
GRANT USAGE ON SCHEMA lease TO lease_test_syncer;
GRANT EXECUTE ON FUNCTION lease.sync_shards(text, text, text[], text[]) TO lease_test_syncer;
SELECT lease.grant_app('sync', 'lease_test_syncer');
CREATE FUNCTION lease_test.sync_rows() RETURNS TABLE(shard_id text, parent_shard_ids text[], checkpoint text, lease_owner text)
LANGUAGE sql AS $$
SELECT shard_id, parent_shard_ids, checkpoint, lease_owner FROM lease.shard_leases
 WHERE app_name = 'sync' ORDER BY stream_name, shard_id COLLATE "C" $$;

SET ROLE lease_test_syncer;
-- A new stream: every shard is created, 1-D parents (NULL: none).
SELECT * FROM lease.sync_shards('sync', 's', ARRAY['a', 'b', 'c'], ARRAY[NULL, NULL, 'a']);
-- Again: nothing to do, nothing reported.
SELECT * FROM lease.sync_shards('sync', 's', ARRAY['a', 'b', 'c'], ARRAY[NULL, NULL, 'a']);
-- Without parent_ids: no lineage, and none is checked.
SELECT * FROM lease.sync_shards('sync', 's', ARRAY['c', 'b', 'a', 'd']);
-- A merge (2-D, NULL padding): e = b + d, f has one parent; a and c are no
-- longer listed and have not ended: reported, not ended.
SELECT * FROM lease.sync_shards('sync', 's', ARRAY['b', 'd', 'e', 'f'],
                                ARRAY[[NULL, NULL], [NULL, NULL], ['b', 'd'], ['e', NULL]]);
RESET ROLE;
SELECT * FROM lease_test.sync_rows();
-- An ended lease that is not listed is not reported.
SELECT lease.take_lease('sync', 's', 'a', 'w1'), lease.close_shard('sync', 's', 'a', 'w1');
SET ROLE lease_test_syncer;
SELECT * FROM lease.sync_shards('sync', 's', ARRAY['b', 'd', 'e', 'f']);
-- An empty list creates nothing and reports every lease not ended.
SELECT * FROM lease.sync_shards('sync', 's', '{}');
SELECT * FROM lease.sync_shards('sync', 's', '{}', '{}');
-- Listed parents in another order are the same set: no contradiction.
SELECT * FROM lease.sync_shards('sync', 's', ARRAY['e'], ARRAY[['d', 'b']]);
-- Another stream of the same app is its own.
SELECT * FROM lease.sync_shards('sync', 's2', ARRAY['a']);
RESET ROLE;
-- A lease created without parents (create_lease, import_kcl_ex) agrees with
-- any listed parents, and keeps none.
SELECT lease.create_lease('sync', 's3', 'x');
SELECT * FROM lease.sync_shards('sync', 's3', ARRAY['x'], ARRAY['w']);
SELECT parent_shard_ids FROM lease.shard_leases WHERE app_name = 'sync' AND stream_name = 's3';

-- Bad input: the SQLSTATE, and nothing written.
\set VERBOSITY terse
CREATE TABLE lease_test.sync_before AS SELECT lease_test.digest() AS d;
SET ROLE lease_test_syncer;
SELECT lease_test.try($$SELECT * FROM lease.sync_shards(NULL, 's', ARRAY['n1'])$$);
SELECT lease_test.try($$SELECT * FROM lease.sync_shards('sync', ' ', ARRAY['n1'])$$);
SELECT lease_test.try($$SELECT * FROM lease.sync_shards('sync', 's', NULL)$$);
SELECT lease_test.try($$SELECT * FROM lease.sync_shards('sync', 's', ARRAY['n1', NULL])$$);
SELECT lease_test.try($$SELECT * FROM lease.sync_shards('sync', 's', ARRAY['n1', ''])$$);
SELECT lease_test.try($$SELECT * FROM lease.sync_shards('sync', 's', ARRAY['n1', repeat('x', 257)])$$);
SELECT lease_test.try($$SELECT * FROM lease.sync_shards('sync', 's', ARRAY['n1', 'n2', 'n1'])$$);
SELECT lease_test.try($$SELECT * FROM lease.sync_shards('sync', 's', ARRAY[['n1'], ['n2']])$$);
-- parent_ids: length mismatch (1-D and 2-D), more than two dimensions,
-- empty parent, own parent, a parent named twice, too many columns
SELECT lease_test.try($$SELECT * FROM lease.sync_shards('sync', 's', ARRAY['n1', 'n2'], ARRAY['b'])$$);
SELECT lease_test.try($$SELECT * FROM lease.sync_shards('sync', 's', ARRAY['n1'], '{}')$$);
SELECT lease_test.try($$SELECT * FROM lease.sync_shards('sync', 's', ARRAY['n1', 'n2'], ARRAY[['b', 'd']])$$);
SELECT lease_test.try($$SELECT * FROM lease.sync_shards('sync', 's', ARRAY['n1'], ARRAY[[['b']]])$$);
SELECT lease_test.try($$SELECT * FROM lease.sync_shards('sync', 's', ARRAY['n1'], ARRAY[''])$$);
SELECT lease_test.try($$SELECT * FROM lease.sync_shards('sync', 's', ARRAY['n1', 'n2'], ARRAY[NULL, 'n2'])$$);
SELECT lease_test.try($$SELECT * FROM lease.sync_shards('sync', 's', ARRAY['n1'], ARRAY[['b', 'b']])$$);
SELECT lease_test.try($$SELECT * FROM lease.sync_shards('sync', 's', ARRAY['n1'], array_fill('p'::text, ARRAY[1, 33]))$$);
-- a lineage that is a cycle (each shard would wait for its own end): of
-- two shards, and of three through merges, with a parent outside the list
SELECT lease_test.try($$SELECT * FROM lease.sync_shards('sync', 's', ARRAY['c1', 'c2'], ARRAY['c2', 'c1'])$$);
SELECT lease_test.try($$SELECT * FROM lease.sync_shards('sync', 's', ARRAY['n1', 'c1', 'c2', 'c3'], ARRAY[[NULL, NULL], ['c3', 'x'], ['x', 'c1'], ['c2', NULL]])$$);
-- a listed lineage that contradicts a lease's: f's parent is e, not b;
-- e's parents are b and d, not b alone, nor none; n1 (new) is not created
SELECT lease_test.try($$SELECT * FROM lease.sync_shards('sync', 's', ARRAY['n1', 'f'], ARRAY[NULL, 'b'])$$);
SELECT lease_test.try($$SELECT * FROM lease.sync_shards('sync', 's', ARRAY['e', 'n1'], ARRAY['b', NULL])$$);
SELECT lease_test.try($$SELECT * FROM lease.sync_shards('sync', 's', ARRAY['e'], ARRAY[NULL::text])$$);
-- another app
SELECT lease_test.try($$SELECT * FROM lease.sync_shards('nosync', 's', ARRAY['n1'])$$);
-- another app is refused before the lists are read, whatever they hold: a
-- NULL element, a repeated id, a million ids, a cycle (each its own error
-- for an app the caller may act for)
SELECT lease_test.try($$SELECT * FROM lease.sync_shards('nosync', 's', ARRAY['n1', NULL])$$);
SELECT lease_test.try($$SELECT * FROM lease.sync_shards('nosync', 's', ARRAY['n1', 'n1'])$$);
SELECT lease_test.try($$SELECT * FROM lease.sync_shards('nosync', 's',
    (SELECT array_agg('id-' || i) FROM generate_series(1, 1000000) AS i))$$);
SELECT lease_test.try($$SELECT * FROM lease.sync_shards('nosync', 's', ARRAY['c1', 'c2'], ARRAY['c2', 'c1'])$$);
RESET ROLE;
SELECT lease_test.digest() = d AS nothing_written FROM lease_test.sync_before;
DROP TABLE lease_test.sync_before;
\set VERBOSITY default
-- a cycle's message in full
SELECT * FROM lease.sync_shards('sync', 's', ARRAY['c1', 'c2', 'c3'], ARRAY['c3', 'c1', 'c2']);
-- the contradiction's message in full
SELECT * FROM lease.sync_shards('sync', 's', ARRAY['f'], ARRAY['b']);
