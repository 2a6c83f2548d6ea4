\set v random(1, 1000000000)
\set last :v + :batch - 1
INSERT INTO bench.output (shard_id, record) SELECT 'shard-' || :client_id, g FROM generate_series(:v::bigint, :last::bigint) AS g;
SELECT lease.update_checkpoint('bench', :stream, 'shard-' || :client_id, 'bench-owner', :last::text, 0, :epoch);
