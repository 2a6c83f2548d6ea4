-- lease.update_checkpoints (docs/shard-leases.md): the fenced checkpoints of
-- many shards of one stream and owner in one statement; every shard judged
-- as the fenced update_checkpoint judges it, one row per shard in the
-- caller's order.
SELECT count(*) FROM (SELECT lease.create_lease('ucs', 's', 'c' || i) FROM generate_series(1, 6) i) AS c;
SELECT count(*) FROM lease.take_leases('ucs', 's', 'w1', '1 hour', max_leases => 4);   -- c1..c4
SELECT count(*) FROM lease.take_leases('ucs', 's', 'w2', '1 hour', max_leases => 1);   -- c5
SELECT lease.take_lease('ucs', 's', 'c6', 'w1') AS c6_count;
SELECT lease.close_shard('ucs', 's', 'c6', 'w1') AS c6_closed;
SELECT lease.prepare_checkpoint('ucs', 's', 'c1', 'w1', '105') AS c1_prepared;

-- every outcome in one call: written (c1, c3), a stale token (c2), not the
-- owner (c5), ended (c6), no such lease (c9); the rows come back in the
-- caller's order, and only the written shards changed
SELECT shard_id, lease_epoch FROM lease.my_leases('ucs', 's', 'w1') ORDER BY 1;
SELECT * FROM lease.update_checkpoints('ucs', 's', 'w1',
    ARRAY['c9', 'c3', 'c6', 'c1', 'c5', 'c2'], ARRAY['90', '30', '60', '10', '50', '20'],
    ARRAY[0, 3, 0, 1, 0, 0]::bigint[], ARRAY[1, 1, 2, 1, 1, 0]::bigint[]);
SELECT shard_id, lease_owner, checkpoint, checkpoint_sub_sequence, pending_checkpoint,
       owner_switches_since_checkpoint, checkpointed_at > created_at AS checkpointed
  FROM lease.shard_leases WHERE app_name = 'ucs' ORDER BY shard_id;

-- an empty batch: no row, nothing written
SELECT lease_test.digest() AS before \gset
SELECT * FROM lease.update_checkpoints('ucs', 's', 'w1', '{}', '{}', '{}', '{}', '{}');
SELECT lease_test.digest() = :'before' AS nothing_written;

-- work: a shard given work moves its work rate and its owner's load, as
-- the fenced update_checkpoint with work does; a NULL element reports none
SELECT * FROM lease.update_checkpoints('ucs', 's', 'w1', ARRAY['c1', 'c3'], ARRAY['11', '31'],
    ARRAY[0, 0]::bigint[], ARRAY[1, 1]::bigint[], ARRAY[600, NULL]::bigint[]);
SELECT shard_id, work_rate > 0 AS measured FROM lease.shard_leases
 WHERE app_name = 'ucs' AND shard_id IN ('c1', 'c3') ORDER BY 1;
SELECT worker, weighed, load > 0 AS loaded FROM lease.worker_holdings WHERE app_name = 'ucs' ORDER BY 1;
\ir test/lib/taker_state_check.sql

-- the same as N single calls in a row, whatever the order: two streams
-- with the same leases and owners, one written by single fenced calls in
-- one order, the other by one batch in the reverse order (work_rate and
-- the times depend on the clock: compared as "set or not")
SELECT count(*) FROM (SELECT lease.create_lease(a, 's', 'x' || i), lease.take_lease(a, 's', 'x' || i, 'w1')
                        FROM unnest(ARRAY['ucs-1', 'ucs-n']) AS a, generate_series(1, 5) AS i) AS c;
SELECT lease.take_lease(a, 's', 'x4', 'w2', 1) FROM unnest(ARRAY['ucs-1', 'ucs-n']) AS a;   -- w1 loses x4
SELECT lease.close_shard(a, 's', 'x5', 'w1') FROM unnest(ARRAY['ucs-1', 'ucs-n']) AS a;     -- x5 ends
SELECT lease.update_checkpoint('ucs-1', 's', s, 'w1', c, 2, t, w)
  FROM (VALUES ('x1', '100', 1, 7), ('x2', '200', 0, NULL), ('x3', '300', 1, NULL),
               ('x4', '400', 1, 9), ('x5', '500', 1, 5), ('x6', '600', 1, 1)) AS v(s, c, t, w)
 ORDER BY s;
SELECT shard_id, ok, reason FROM lease.update_checkpoints('ucs-n', 's', 'w1',
    ARRAY['x6', 'x5', 'x4', 'x3', 'x2', 'x1'], ARRAY['600', '500', '400', '300', '200', '100'],
    ARRAY[2, 2, 2, 2, 2, 2]::bigint[], ARRAY[1, 1, 1, 1, 0, 1]::bigint[],
    ARRAY[1, 5, 9, NULL, NULL, 7]::bigint[]);
SELECT count(*) AS differing_leases FROM (
    SELECT shard_id, lease_owner, checkpoint, checkpoint_sub_sequence, lease_count, lease_epoch,
            owner_switches_since_checkpoint, work_rate IS NULL AS unmeasured
       FROM lease.shard_leases WHERE app_name = 'ucs-1'
     EXCEPT
     SELECT shard_id, lease_owner, checkpoint, checkpoint_sub_sequence, lease_count, lease_epoch,
            owner_switches_since_checkpoint, work_rate IS NULL
       FROM lease.shard_leases WHERE app_name = 'ucs-n') AS d;
SELECT count(*) AS differing_workers FROM (
    SELECT worker, leases, weighed FROM lease.worker_holdings WHERE app_name = 'ucs-1'
    EXCEPT
    SELECT worker, leases, weighed FROM lease.worker_holdings WHERE app_name = 'ucs-n') AS d;

-- a renewal never makes a batch fail (it is guarded on owner and token,
-- never on lease_count), and an owner whose lease expired but was not
-- taken may still checkpoint, as with the single call
SELECT count(*) FROM lease.renew_leases('ucs', 's', 'w1');
SELECT lease_test.expire('ucs', 's', 'c4');
SELECT * FROM lease.update_checkpoints('ucs', 's', 'w1', ARRAY['c4'], ARRAY['40'],
    ARRAY[0]::bigint[], ARRAY[1]::bigint[]);

-- an app the caller may not act for: 42501, nothing written
CREATE ROLE lease_test_ucs;
GRANT USAGE ON SCHEMA lease TO lease_test_ucs;
GRANT EXECUTE ON FUNCTION lease.update_checkpoints(text, text, text, text[], text[], bigint[], bigint[], bigint[])
    TO lease_test_ucs;
SELECT lease_test.digest() AS before \gset
SET ROLE lease_test_ucs;
\set VERBOSITY terse
SELECT * FROM lease.update_checkpoints('ucs', 's', 'w1', ARRAY['c1'], ARRAY['12'],
    ARRAY[0]::bigint[], ARRAY[1]::bigint[]);
\set VERBOSITY default
RESET ROLE;
SELECT lease_test.digest() = :'before' AS nothing_written;
DROP OWNED BY lease_test_ucs;
DROP ROLE lease_test_ucs;

-- a stream frozen for a move to another partition (lease.move_stream_freeze,
-- docs/scale-out.md): the batch is refused as every stream function's call
-- is (40L01), nothing written; served again after the undo
SELECT lease.move_stream_freeze('ucs', 's', 0, 1) AS generation \gset
SELECT lease_test.digest() AS before \gset
SELECT lease_test.try($$SELECT * FROM lease.update_checkpoints('ucs', 's', 'w1', ARRAY['c1'], ARRAY['13'],
    ARRAY[0]::bigint[], ARRAY[1]::bigint[])$$) AS refused;
SELECT lease_test.digest() = :'before' AS nothing_written;
SELECT lease.move_stream_undo('ucs', 's', :generation) AS undone;
SELECT * FROM lease.update_checkpoints('ucs', 's', 'w1', ARRAY['c1'], ARRAY['13'],
    ARRAY[0]::bigint[], ARRAY[1]::bigint[]);
DELETE FROM lease.stream_placements WHERE app_name = 'ucs';

\ir test/lib/taker_state_check.sql
SELECT count(*) FROM (SELECT lease.delete_lease(app_name, stream_name, shard_id)
                        FROM lease.shard_leases WHERE app_name LIKE 'ucs%') AS d;
