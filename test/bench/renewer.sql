\set s random(0, :nleases - 1)
SELECT lease_count AS c FROM lease.shard_leases WHERE app_name = 'bench' AND stream_name = :stream AND shard_id = 'shard-' || :s \gset
SELECT lease.renew_lease('bench', :stream, 'shard-' || :s, 'bench-owner', :c, '7 days');
