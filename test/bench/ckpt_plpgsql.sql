\set s random(0, :nleases - 1)
\set v random(1, 1000000000)
SELECT bench.update_checkpoint_plpgsql('bench', :stream, 'shard-' || :s, 'bench-owner', :v::text, 0);
