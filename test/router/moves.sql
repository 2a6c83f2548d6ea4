-- Moving a stream between the router's two partitions (test/router/router_test.sh,
-- docs/scale-out.md "Moving a stream"): every step's outcome, a repeat of
-- any step, a stale directory, an undo, a move resumed after it stopped
-- half way, and the functions' bad input.  Apps here are 'rm-*'.
\set VERBOSITY terse
SET client_min_messages = warning;

-- a stream of three leases, one owned, checkpointed, weighted, with a child
SELECT lease.create_lease('rm-app', 'rm-s', 'a') AND lease.create_lease('rm-app', 'rm-s', 'b')
       AND lease.create_lease('rm-app', 'rm-s', 'c', '{a}') AS created;
SELECT shard_id, lease_epoch FROM lease.take_leases('rm-app', 'rm-s', 'w1', '1 minute', 1) ORDER BY 1;
SELECT lease.update_checkpoint('rm-app', 'rm-s', 'a', 'w1', '100', 0, 1) AS checkpointed,
       lease.set_weight('rm-app', 'rm-s', 'b', 2.5) AS weighted;
SELECT lease_router.stream_partition('rm-app', 'rm-s') & 1 AS source \gset
SELECT 1 - :source AS target \gset

-- the move: the leases keep owner, checkpoint, lineage and weight; every
-- epoch is above the source's
SELECT from_partition = :source AS from_source, generation, leases, frozen_for < '10 s' AS quick
  FROM lease_router.move_stream('rm-app', 'rm-s', :target);
SELECT lease_router.stream_partition('rm-app', 'rm-s') = :target AS routed_to_target,
       (SELECT partition_index FROM lease_router.stream_conninfo('rm-app', 'rm-s')) = :target AS conninfo_target,
       (SELECT conninfo FROM lease_router.stream_conninfo('rm-app', 'rm-s')) ~ ('dbname=lease_router_p' || :target) AS conninfo_names_it;
SELECT shard_id, lease_owner, checkpoint, lease_epoch, parent_shard_ids, state
  FROM lease.lease_status WHERE app_name = 'rm-app' ORDER BY 1;
SELECT state, peer_partition = :target AS names_target, generation
  FROM lease_router.move_stream_state_on(:source, 'rm-app', 'rm-s');
SELECT state, generation FROM lease_router.move_stream_state_on(:target, 'rm-app', 'rm-s');
-- the owner's old epoch is fenced out; the renewal reports the new one
SELECT lease.update_checkpoint('rm-app', 'rm-s', 'a', 'w1', '101', 0, 1) AS old_epoch_written;
SELECT shard_id, lease_epoch FROM lease.renew_leases('rm-app', 'rm-s', 'w1') ORDER BY 1;
SELECT lease.update_checkpoint('rm-app', 'rm-s', 'a', 'w1', '101', 0, 2) AS new_epoch_written;
SELECT lease_router.partition_count() AS partitions;

-- moving it where it is changes nothing
SELECT from_partition = :target AS in_place, generation, leases FROM lease_router.move_stream('rm-app', 'rm-s', :target);

-- a router whose directory is stale reaches the source, which refuses and
-- names the target; sync_directory repairs it
DELETE FROM lease_router.stream_directory WHERE app_name = 'rm-app';
SELECT router_test.try($$SELECT lease.renew_leases('rm-app', 'rm-s', 'w1')$$) ~ ('^40L01 \| stream "rm-app/rm-s" has moved to partition ' || :target) AS refused_naming_target;
-- and new leases of it, however inserted (the import's rows go where the stale directory says)
SELECT router_test.try($$SELECT lease.import_kcl_ex_rows(ARRAY['rm-app'], ARRAY['rm-s'], ARRAY['z'], ARRAY['TRIM_HORIZON'], ARRAY[NULL::text], ARRAY[0::bigint], ARRAY[false])$$) ~ '^40L01 \| stream "rm-app/rm-s" has moved' AS import_refused;
SELECT lease_router.sync_directory() AS synced;
SELECT count(*) AS renewed FROM lease.renew_leases('rm-app', 'rm-s', 'w1');

-- a move that stopped after its freeze: the stream is refused on both
-- partitions; undo_move serves it on the source again
SELECT lease_router.move_stream_freeze_on(:target, 'rm-app', 'rm-s', :source) AS frozen_generation;
SELECT router_test.try($$SELECT lease.renew_leases('rm-app', 'rm-s', 'w1')$$) ~ '^40L01 \| stream "rm-app/rm-s" is moving to partition' AS refused_while_moving;
SELECT from_partition = :target AS undone_on_old_source, generation FROM lease_router.undo_move('rm-app', 'rm-s');
SELECT count(*) AS renewed_after_undo FROM lease.renew_leases('rm-app', 'rm-s', 'w1');
SELECT router_test.try($$SELECT lease_router.undo_move('rm-app', 'rm-s')$$) AS undo_again;

-- a move that stopped after its import (the copy inert on the target):
-- move_stream again finishes it; the undone generation is not reused
SELECT lease_router.move_stream_freeze_on(:target, 'rm-app', 'rm-s', :source) AS frozen_generation;
SELECT lease_router.move_stream_import_on(:source, 'rm-app', 'rm-s', :target, 3,
           lease_router.move_stream_export_on(:target, 'rm-app', 'rm-s', 3)) AS imported;
SELECT state, generation FROM lease_router.move_stream_state_on(:source, 'rm-app', 'rm-s');
SELECT lease_router.move_stream_import_on(:source, 'rm-app', 'rm-s', :target, 3,
           lease_router.move_stream_export_on(:target, 'rm-app', 'rm-s', 3)) AS imported_again;
SELECT router_test.try($$SELECT lease.renew_leases('rm-app', 'rm-s', 'w1')$$) ~ '^40L01' AS refused_while_copied;
SELECT from_partition = :target AS resumed, generation, leases FROM lease_router.move_stream('rm-app', 'rm-s', :source);
SELECT shard_id, lease_owner, checkpoint, lease_epoch, state FROM lease.lease_status WHERE app_name = 'rm-app' ORDER BY 1;
-- a move that stopped after its commit point (the source let go, the
-- target not serving yet): no undo; move_stream finishes it
SELECT lease_router.move_stream_freeze_on(:source, 'rm-app', 'rm-s', :target) AS frozen_generation;
SELECT lease_router.move_stream_import_on(:target, 'rm-app', 'rm-s', :source, 4,
           lease_router.move_stream_export_on(:source, 'rm-app', 'rm-s', 4)) AS imported;
SELECT lease_router.move_stream_complete_on(:source, 'rm-app', 'rm-s', 4) AS source_left;
SELECT router_test.try($$SELECT lease_router.undo_move('rm-app', 'rm-s')$$) AS undo_after_commit;
SELECT from_partition = :target AS finished_on_target, generation, leases FROM lease_router.move_stream('rm-app', 'rm-s', :target);
SELECT count(*) AS renewed_on_target FROM lease.renew_leases('rm-app', 'rm-s', 'w1');
-- a late step of an older move does nothing
SELECT router_test.try(format($$SELECT lease_router.move_stream_import_on(%s, 'rm-app', 'rm-s', %s, 2, '{}')$$, :source, :target)) AS stale_import;
SELECT router_test.try(format($$SELECT lease_router.move_stream_complete_on(%s, 'rm-app', 'rm-s', 3)$$, :target)) AS stale_complete;


-- bad input, through the router and on a partition
SELECT router_test.try($$SELECT lease_router.move_stream(NULL, 'rm-s', 0)$$) AS null_app;
SELECT router_test.try($$SELECT lease_router.move_stream('rm-app', 'rm-s', 2)$$) AS no_such_partition;
SELECT router_test.try($$SELECT lease_router.add_partitions('host=x dbname=y')$$) AS three_partitions;
SELECT router_test.try($$SELECT lease_router.add_partitions(VARIADIC ARRAY[NULL, 'host=x']::text[])$$) AS null_partition;
SELECT router_test.try($$SELECT lease_router.rebalance_streams(0)$$) AS no_moves;
SELECT router_test.try(format($$SELECT lease_router.move_stream_freeze_on(%s, 'rm-app', 'rm-s', %s)$$, :source, :source)) AS freeze_to_itself;
SELECT router_test.try(format($$SELECT lease_router.move_stream_export_on(%s, 'rm-app', 'rm-s', 0)$$, :source)) AS generation_zero;
SELECT router_test.try(format($$SELECT lease_router.move_stream_complete_on(%s, 'rm-app', 'rm-s', 9)$$, :source)) AS no_such_generation;
SELECT router_test.try(format($$SELECT lease_router.move_stream_import_on(%s, 'rm-app', 'rm-s', %s, 9, '{"leases": [{"app_name": "other"}]}')$$, :target, :source)) AS foreign_document;
SELECT router_test.try(format($$SELECT lease_router.move_stream_import_on(%s, 'rm-app', 'rm-s', %s, 9, NULL)$$, :target, :source)) AS null_document;

