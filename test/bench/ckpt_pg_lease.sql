\set s random(0, :nleases - 1)
\set v random(1, 1000000000)
SELECT lease.update_checkpoint('bench', :stream, 'shard-' || :s, 'bench-owner', :v::text, 0);
