-- The lease lifecycle, step by step (run by `make demo`).
\set ON_ERROR_STOP 1
\pset footer off
\echo '== a stream with three shards: shard-0 split into shard-1 and shard-2'
SELECT lease.create_lease('demo', 'orders', 'shard-0') AS created_0,
       lease.create_lease('demo', 'orders', 'shard-1', '{shard-0}') AS created_1,
       lease.create_lease('demo', 'orders', 'shard-2', '{shard-0}') AS created_2,
       lease.create_lease('demo', 'orders', 'shard-0') AS created_again;
\echo '== worker-a takes shard-0; the children wait for their parent to end'
SELECT lease.take_lease('demo', 'orders', 'shard-0', 'worker-a', NULL, '30 seconds') AS worker_a_count,
       lease.take_lease('demo', 'orders', 'shard-1', 'worker-a') AS child_count;
\echo '== worker-a renews and checkpoints; a renewal never makes a checkpoint fail'
SELECT lease.renew_lease('demo', 'orders', 'shard-0', 'worker-a', 1) AS renewed_count;
SELECT lease.update_checkpoint('demo', 'orders', 'shard-0', 'worker-a', '49590338271490256608559692538361571095921575989136588898') AS checkpointed;
SELECT lease.renew_lease('demo', 'orders', 'shard-0', 'worker-a', 2) AS renewed_count;
SELECT lease.update_checkpoint('demo', 'orders', 'shard-0', 'worker-a', '49590338271490256608559692538361571095921575989136589999', 3) AS checkpointed;
\echo '== worker-b cannot take a live lease, but can steal it with the current lease_count'
SELECT lease.take_lease('demo', 'orders', 'shard-0', 'worker-b') AS taken_without_count,
       lease.take_lease('demo', 'orders', 'shard-0', 'worker-b', 3) AS stolen_count;
\echo '== worker-a comes back: its renewal and checkpoint are refused'
SELECT lease.renew_lease('demo', 'orders', 'shard-0', 'worker-a', 3) AS renewed,
       lease.update_checkpoint('demo', 'orders', 'shard-0', 'worker-a', '1') AS checkpointed;
\echo '== worker-b reaches the end of shard-0 and closes it; the children become takeable'
SELECT lease.close_shard('demo', 'orders', 'shard-0', 'worker-b') AS closed;
SELECT lease.take_lease('demo', 'orders', 'shard-1', 'worker-a') AS shard_1_count,
       lease.take_lease('demo', 'orders', 'shard-2', 'worker-b') AS shard_2_count;
\echo '== worker-b shuts down and releases shard-2 for someone else'
SELECT lease.release_lease('demo', 'orders', 'shard-2', 'worker-b') AS released;
\echo '== the lease table'
SELECT shard_id, lease_owner, lease_count, checkpoint, checkpoint_sub_sequence AS sub_seq,
       parent_shard_ids AS parents, owner_switches_since_checkpoint AS switches,
       CASE WHEN lease_expires_at IS NULL THEN NULL
            ELSE date_trunc('second', lease_expires_at - clock_timestamp()) END AS expires_in
  FROM lease.shard_leases WHERE app_name = 'demo' ORDER BY shard_id;
