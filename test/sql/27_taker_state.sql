-- The taker's bookkeeping (lease.worker_holdings, lease.stream_takeable,
-- lease.lineage_changes) equals a recount from the leases after every
-- function that changes who holds a lease or what is takeable.  taker_disagreements
-- lists every disagreement (test/lib/taker_state_check.sql): no row is the
-- pass.  `counted` shows what the bookkeeping says for stream ts/s.
\ir test/lib/taker_state_check.sql
CREATE VIEW lease_test.counted AS
SELECT w.worker, w.leases, w.expires_min IS NOT NULL AS bounded,
       (SELECT t.takeable FROM lease.stream_takeable t WHERE t.app_name = 'ts' AND t.stream_name = 's') AS takeable,
       (SELECT count(*) FROM lease.lineage_changes g WHERE g.app_name = 'ts' AND g.stream_name = 's') AS stale
  FROM lease.worker_holdings w WHERE w.app_name = 'ts' AND w.stream_name = 's' AND w.leases > 0
 ORDER BY w.worker;

-- create_lease: the stream gets its takeable row (no count yet)
SELECT lease.create_lease('ts', 's', 'a' || i) FROM generate_series(1, 6) i;
SELECT lease.create_lease('ts', 's', 'p'), lease.create_lease('ts', 's', 'c', '{p}');
SELECT * FROM taker_disagreements;
SELECT takeable IS NULL AS no_count_yet FROM lease.stream_takeable WHERE app_name = 'ts';

-- take_leases take: counts the stream once (7 takeable: c is blocked by p)
SELECT shard_id, action FROM lease.take_leases('ts', 's', 'w1', max_leases => 4);
SELECT * FROM taker_disagreements;
SELECT * FROM lease_test.counted;
-- take_lease (unowned), renew_lease, renew_leases, update_checkpoint
SELECT lease.take_lease('ts', 's', 'a5', 'w2');
SELECT lease.renew_lease('ts', 's', 'a5', 'w2', 1);
SELECT count(*) FROM lease.renew_leases('ts', 's', 'w1');
SELECT lease.update_checkpoint('ts', 's', 'a1', 'w1', '42');
SELECT * FROM taker_disagreements;
SELECT * FROM lease_test.counted;
-- renew_leases sets the bound to the exact expiry of the worker's leases
SELECT w.expires_min = (SELECT min(lease_expires_at) FROM lease.shard_leases
                         WHERE app_name = 'ts' AND lease_owner = 'w1') AS bound_is_exact
  FROM lease.worker_holdings w WHERE w.app_name = 'ts' AND w.worker = 'w1';
-- a shorter duration moves expiries earlier: the trigger lowers the bound
SELECT lease.renew_lease('ts', 's', 'a5', 'w2', 2, '5 seconds');
SELECT count(*) FROM lease.renew_leases('ts', 's', 'w1', '6 seconds');
SELECT * FROM taker_disagreements;

-- take_leases take: w2 takes the unowned leases up to its share
SELECT shard_id, action FROM lease.take_leases('ts', 's', 'w2');
-- take_leases steal: w3 holds nothing, w1 holds 4: asks w1 to hand one
-- over; an operator's request_handoff for another
SELECT shard_id, action FROM lease.take_leases('ts', 's', 'w3');
SELECT lease.request_handoff('ts', 's', 'a2', 'w3');
SELECT * FROM taker_disagreements;
-- transfer on release (a1 is promised to w3)
SELECT lease.release_lease('ts', 's', 'a1', 'w1');
SELECT * FROM taker_disagreements;
SELECT * FROM lease_test.counted;
-- take_leases claim: a due handoff (a2 to w3) is taken
UPDATE lease.shard_leases SET handoff_deadline = clock_timestamp() - interval '1 s'
 WHERE app_name = 'ts' AND shard_id = 'a2';
SELECT shard_id, action, previous_owner FROM lease.take_leases('ts', 's', 'w3');
SELECT * FROM taker_disagreements;
-- release to nobody, then an optimistic steal with take_lease
SELECT lease.release_lease('ts', 's', 'a3', 'w1');
SELECT lease.take_lease('ts', 's', 'a4', 'w3', lease_count) FROM lease.shard_leases
 WHERE app_name = 'ts' AND shard_id = 'a4';
SELECT * FROM taker_disagreements;
SELECT * FROM lease_test.counted;

-- lapse: w2's leases expire; a round takes them over (expiry_takeover)
SELECT lease_test.expire('ts', 's', shard_id) FROM lease.shard_leases
 WHERE app_name = 'ts' AND lease_owner = 'w2';
SELECT * FROM taker_disagreements;
SELECT shard_id, action, previous_owner FROM lease.take_leases('ts', 's', 'w4');
SELECT * FROM taker_disagreements;
SELECT * FROM lease_test.counted;

-- close_shard: ends p, unblocks c; the cached count is stale until a round
SELECT lease_owner AS p_owner FROM lease.shard_leases WHERE app_name = 'ts' AND shard_id = 'p';
SELECT lease.close_shard('ts', 's', 'p', 'w4');
SELECT * FROM lease_test.counted;
SELECT shard_id, action FROM lease.take_leases('ts', 's', 'w4');
SELECT * FROM taker_disagreements;
SELECT * FROM lease_test.counted;

-- delete_lease (an owned lease), cleanup_ended (p)
SELECT lease.delete_lease('ts', 's', 'a6');
-- (p goes once its child c has checkpointed)
SELECT lease.update_checkpoint('ts', 's', 'c', 'w4', '1');
SELECT lease.cleanup_ended('ts', 's');
SELECT * FROM taker_disagreements;
SELECT count(*) FROM lease.take_leases('ts', 's', 'w1');
SELECT * FROM taker_disagreements;
SELECT * FROM lease_test.counted;

-- import_kcl_ex: owned rows count for their owners
CREATE TABLE lease_test.ts_kcl (shard_id text, app_name text, stream_name text, checkpoint text,
                                lease_owner text, lease_count int, completed boolean);
INSERT INTO lease_test.ts_kcl VALUES ('k1', 'ts', 's', '7', 'w9', 3, false),
                                     ('k2', 'ts', 's', NULL, 'w9', 1, true),
                                     ('k3', 'ts', 's', NULL, NULL, 0, false);
SELECT lease.import_kcl_ex('lease_test.ts_kcl');
SELECT * FROM taker_disagreements;
SELECT * FROM lease_test.counted;
-- the imported owner's leases expired at once: a round takes k1 (not k2: ended)
SELECT shard_id, action, previous_owner FROM lease.take_leases('ts', 's', 'w1', max_leases => 10);
SELECT * FROM taker_disagreements;

-- direct changes by the table's owner keep it too (statement triggers)
DELETE FROM lease.shard_leases WHERE app_name = 'ts' AND shard_id = 'k3';
INSERT INTO lease.shard_leases (app_name, stream_name, shard_id, lease_owner, lease_expires_at)
VALUES ('ts', 's', 'z', 'w8', clock_timestamp() + interval '1 minute');
SELECT * FROM taker_disagreements;
SELECT * FROM lease_test.counted;
DROP TABLE lease_test.ts_kcl;
DROP VIEW lease_test.counted;
