\set s random(0, :nleases - 1)
\set v random(1, 1000000000)
UPDATE lease.shard_leases SET checkpoint = :v::text, checkpoint_sub_sequence = 0, owner_switches_since_checkpoint = 0, updated_at = now() WHERE app_name = 'bench' AND stream_name = :stream AND shard_id = 'shard-' || :s AND lease_owner = 'bench-owner' AND checkpoint <> 'SHARD_END' RETURNING true;
