-- lease.import_kcl_dynamodb: switching over from the AWS Kinesis Client
-- Library, from an export of its DynamoDB lease table.

-- Runs a statement and returns its SQLSTATE, message and detail, or 'ok'.
CREATE FUNCTION lease_test.try_detail(stmt text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    detail text;
BEGIN
    EXECUTE stmt;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL;
    RETURN SQLSTATE || ': ' || SQLERRM || COALESCE(' / ' || NULLIF(detail, ''), '');
END $$;

-- A KCL 2.x single-stream lease table exported to S3 in DynamoDB JSON
-- format: one {"Item": {...}} per line, written to a file as the export's
-- data files are (gunzipped).  Shard 0 split into 2 and 3; 4 and 5 merged
-- into 6, whose lease KCL had not created yet when the fleet stopped.
SELECT format('{"Item":%s}', item) FROM (VALUES
  (1, '{"leaseKey":{"S":"shardId-000000000000"},"leaseCounter":{"N":"812"},"leaseOwner":{"S":"worker-a"},"ownerSwitchesSinceCheckpoint":{"N":"0"},"checkpoint":{"S":"SHARD_END"},"checkpointSubSequenceNumber":{"N":"0"},"childShardIds":{"SS":["shardId-000000000002","shardId-000000000003"]},"startingHashKey":{"S":"0"},"endingHashKey":{"S":"170141183460469231731687303715884105727"}}'),
  (2, '{"leaseKey":{"S":"shardId-000000000001"},"leaseCounter":{"N":"1043"},"leaseOwner":{"S":"worker-b"},"ownerSwitchesSinceCheckpoint":{"N":"1"},"checkpoint":{"S":"49590338271490256608559692538361571095921575989136588817"},"checkpointSubSequenceNumber":{"N":"4"},"startingHashKey":{"S":"170141183460469231731687303715884105728"},"endingHashKey":{"S":"340282366920938463463374607431768211455"}}'),
  (3, '{"leaseKey":{"S":"shardId-000000000002"},"leaseCounter":{"N":"57"},"leaseOwner":{"S":"worker-a"},"ownerSwitchesSinceCheckpoint":{"N":"0"},"checkpoint":{"S":"49590338271490256608559692540925702759324208523137515618"},"checkpointSubSequenceNumber":{"N":"0"},"pendingCheckpoint":{"S":"49590338271490256608559692540925702759324208523137515700"},"pendingCheckpointSubSequenceNumber":{"N":"0"},"pendingCheckpointState":{"B":"c3RhdGU="},"parentShardId":{"SS":["shardId-000000000000"]},"startingHashKey":{"S":"0"},"endingHashKey":{"S":"85070591730234615865843651857942052863"}}'),
  (4, '{"leaseKey":{"S":"shardId-000000000003"},"leaseCounter":{"N":"2"},"ownerSwitchesSinceCheckpoint":{"N":"0"},"checkpoint":{"S":"TRIM_HORIZON"},"checkpointSubSequenceNumber":{"N":"0"},"parentShardId":{"SS":["shardId-000000000000"]},"startingHashKey":{"S":"85070591730234615865843651857942052864"},"endingHashKey":{"S":"170141183460469231731687303715884105727"}}'),
  (5, '{"leaseKey":{"S":"shardId-000000000004"},"leaseCounter":{"N":"300"},"ownerSwitchesSinceCheckpoint":{"N":"0"},"checkpoint":{"S":"SHARD_END"},"checkpointSubSequenceNumber":{"N":"0"},"childShardIds":{"SS":["shardId-000000000006"]}}'),
  (6, '{"leaseKey":{"S":"shardId-000000000005"},"leaseCounter":{"N":"301"},"leaseOwner":{"S":"worker-b"},"ownerSwitchesSinceCheckpoint":{"N":"0"},"checkpoint":{"S":"SHARD_END"},"checkpointSubSequenceNumber":{"N":"0"},"childShardIds":{"L":[{"S":"shardId-000000000006"}]}}'),
  (7, '{"leaseKey":{"S":"shardId-000000000007"},"leaseCounter":{"N":"9"},"leaseOwner":{"S":"worker-c"},"ownerSwitchesSinceCheckpoint":{"N":"3"},"checkpoint":{"S":"AT_TIMESTAMP"},"checkpointSubSequenceNumber":{"N":"0"},"pendingCheckpoint":{"NULL":true}}'),
  (8, '{"leaseKey":{"S":"shardId-000000000008"},"leaseCounter":{"N":"0"},"checkpoint":{"S":"LATEST"}}'))
  AS i(n, item) ORDER BY n
\g (format=unaligned tuples_only=on) results/29_kcl2_export.jsonl

-- imported the way docs/shard-leases.md says: the file into a psql variable
\set export `cat results/29_kcl2_export.jsonl`
SELECT * FROM lease.import_kcl_dynamodb('kcl2', 'orders', :'export');
-- every field: imported into its column, or named in the report above
SELECT shard_id, lease_owner, lease_count, checkpoint, checkpoint_sub_sequence, parent_shard_ids,
       owner_switches_since_checkpoint, pending_checkpoint, lease_epoch,
       lease_expires_at <= clock_timestamp() AS expired_at_once, handoff_to
  FROM lease.shard_leases WHERE app_name = 'kcl2' ORDER BY shard_id;
SELECT shard_id, state FROM lease.lease_status WHERE app_name = 'kcl2' ORDER BY shard_id;
-- the old owner taking its lease back under the same name is no owner switch
SELECT lease.take_lease('kcl2', 'orders', 'shardId-000000000007', 'worker-c') IS NOT NULL AS taken,
       (SELECT owner_switches_since_checkpoint FROM lease.shard_leases
         WHERE app_name = 'kcl2' AND shard_id = 'shardId-000000000007') AS switches;
-- a pg_lease worker's round takes leases with their imported checkpoints,
-- children of ended parents included, and an expired lease of the stopped
-- fleet is takeable at once by anyone
SELECT t.shard_id, t.action, l.checkpoint, l.checkpoint_sub_sequence, l.pending_checkpoint
  FROM lease.take_leases('kcl2', 'orders', 'pg-worker-1') AS t
  JOIN lease.shard_leases AS l ON l.app_name = 'kcl2' AND l.stream_name = 'orders' AND l.shard_id = t.shard_id
 ORDER BY t.shard_id;
SELECT lease.take_lease('kcl2', 'orders', 'shardId-000000000001', 'pg-worker-2') AS lease_count;

-- idempotent, and an existing lease is never overwritten, even when the
-- export says otherwise
SELECT lease_test.digest() AS before \gset
SELECT action, count(*) FROM lease.import_kcl_dynamodb('kcl2', 'orders', :'export') GROUP BY action ORDER BY action;
SELECT lease_test.digest() = :'before' AS nothing_changed;
SELECT action, detail FROM lease.import_kcl_dynamodb('kcl2', 'orders',
    '{"Item":{"leaseKey":{"S":"shardId-000000000001"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"TRIM_HORIZON"}}}');
SELECT lease_test.digest() = :'before' AS nothing_overwritten;

-- A KCL 3.x multi-stream lease table, as `aws dynamodb scan --output json`
-- prints it (one pretty-printed document), with the rows KCL keeps for
-- itself in the lease table: the leader lock, worker metrics and the
-- migration state.  Shard 0 was being handed from worker-1 to worker-2;
-- shard 1 was stopped while its owner was closing it.
SELECT jsonb_pretty(jsonb_build_object('Count', 7, 'ScannedCount', 7, 'ConsumedCapacity', NULL, 'Items', jsonb_build_array(
  '{"leaseKey":{"S":"111122223333:orders:1700000000:shardId-000000000000"},"streamName":{"S":"111122223333:orders:1700000000"},"shardId":{"S":"shardId-000000000000"},"entityType":{"S":"LEASE"},"leaseCounter":{"N":"77"},"leaseOwner":{"S":"worker-2"},"checkpointOwner":{"S":"worker-1"},"ownerSwitchesSinceCheckpoint":{"N":"0"},"checkpoint":{"S":"49650000000000000000000000000000000000000000000000000001"},"checkpointSubSequenceNumber":{"N":"0"},"throughputKBps":{"N":"42.5"},"startingHashKey":{"S":"0"},"endingHashKey":{"S":"340282366920938463463374607431768211455"}}'::jsonb,
  '{"leaseKey":{"S":"111122223333:orders:1700000000:shardId-000000000001"},"streamName":{"S":"111122223333:orders:1700000000"},"shardId":{"S":"shardId-000000000001"},"entityType":{"S":"LEASE"},"leaseCounter":{"N":"12"},"leaseOwner":{"S":"worker-1"},"ownerSwitchesSinceCheckpoint":{"N":"0"},"checkpoint":{"S":"49650000000000000000000000000000000000000000000000000900"},"checkpointSubSequenceNumber":{"N":"7"},"pendingCheckpoint":{"S":"SHARD_END"},"pendingCheckpointSubSequenceNumber":{"N":"0"},"pendingCheckpointState":{"N":"0"}}'::jsonb,
  '{"leaseKey":{"S":"111122223333:payments:1700000500:shardId-000000000000"},"streamName":{"S":"111122223333:payments:1700000500"},"shardId":{"S":"shardId-000000000000"},"entityType":{"S":"LEASE"},"leaseCounter":{"N":"5"},"checkpoint":{"S":"TRIM_HORIZON"}}'::jsonb,
  '{"leaseKey":{"S":"Leader"},"ownerName":{"S":"worker-1"},"leaseDuration":{"S":"20000"},"recordVersionNumber":{"S":"5c2a53d1-0b8d-4c39-9a8e-1f0c9d3d6a11"}}'::jsonb,
  '{"leaseKey":{"S":"worker-1"},"entityType":{"S":"WORKER_METRIC_STATS"},"lut":{"N":"1733000000"},"sts":{"M":{"CPU":{"L":[{"N":"35.5"},{"N":"40"}]}}},"opr":{"M":{"CPU":{"L":[{"N":"0"}]}}},"properties":{"M":{}},"sup":{"BOOL":true}}'::jsonb,
  '{"leaseKey":{"S":"Migration3.0"},"entityType":{"S":"CLIENT_VERSION_MIGRATION"},"cv":{"S":"CLIENT_VERSION_3X"},"mb":{"S":"worker-1"},"mts":{"N":"1733000000"},"h":{"L":[]}}'::jsonb,
  '{"leaseKey":{"S":"111122223333:orders:1700000000"},"entityType":{"S":"STREAM"},"sid":{"S":"abc"}}'::jsonb)))
\g (format=unaligned tuples_only=on) results/29_kcl3_scan.json

\set export `cat results/29_kcl3_scan.json`
SELECT * FROM lease.import_kcl_dynamodb('kcl3', 'orders', :'export');
SELECT shard_id, lease_owner, lease_count, checkpoint, checkpoint_sub_sequence, parent_shard_ids,
       owner_switches_since_checkpoint, pending_checkpoint,
       lease_expires_at <= clock_timestamp() AS expired_at_once, handoff_to
  FROM lease.shard_leases WHERE app_name = 'kcl3' ORDER BY stream_name, shard_id;
-- the other stream of the table, imported by a second call
SELECT * FROM lease.import_kcl_dynamodb('kcl3', 'payments', :'export') WHERE action <> 'not_a_lease';
SELECT stream_name, shard_id, checkpoint FROM lease.shard_leases WHERE app_name = 'kcl3' ORDER BY 1, 2;

-- the forms an export comes in: a bare item per line (jq -c '.Items[]'),
-- an array of items (jq '.Items'), white space (an empty table)
SELECT action FROM lease.import_kcl_dynamodb('kcl4', 'orders',
    E'{"leaseKey":{"S":"s-1"},"leaseCounter":{"N":"0"},"checkpoint":{"S":"TRIM_HORIZON"}}\r\n\n'
    '{"leaseKey":{"S":"s-2"},"leaseCounter":{"N":"0"},"checkpoint":{"S":"TRIM_HORIZON"}}');
SELECT action FROM lease.import_kcl_dynamodb('kcl4', 'orders',
    '[{"leaseKey":{"S":"s-3"},"leaseCounter":{"N":"0"},"checkpoint":{"S":"1"}}]');
SELECT count(*) AS rows FROM lease.import_kcl_dynamodb('kcl4', 'orders', E' \n ');
SELECT shard_id, checkpoint FROM lease.shard_leases WHERE app_name = 'kcl4' ORDER BY shard_id;

-- bad input: an error naming the first bad item, and nothing written
SELECT lease.create_lease('kcl-bad', 'orders', 'kb-x', ARRAY['kb-y']);
SELECT lease_test.digest() AS before \gset
CREATE TABLE lease_test.kcl_bad (label text, export text);
INSERT INTO lease_test.kcl_bad VALUES
    ('not json', E'{"leaseKey":{"S":"a"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"1"}}\n{"leaseKey":'),
    ('not an object', '[1]'),
    ('no leaseKey', '{"leaseCounter":{"N":"1"},"checkpoint":{"S":"1"}}'),
    ('leaseKey not S', '{"leaseKey":{"N":"1"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"1"}}'),
    ('untyped (plain JSON)', '{"leaseKey":"a","leaseCounter":1,"checkpoint":"1"}'),
    ('two types', '{"leaseKey":{"S":"a","N":"1"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"1"}}'),
    ('wrong type', '{"leaseKey":{"S":"a"},"leaseCounter":{"S":"1"},"checkpoint":{"S":"1"}}'),
    ('wrong set type', '{"leaseKey":{"S":"a"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"1"},"parentShardId":{"S":"p"}}'),
    ('no leaseCounter', '{"leaseKey":{"S":"a"},"checkpoint":{"S":"1"}}'),
    ('no checkpoint', '{"leaseKey":{"S":"a"},"leaseCounter":{"N":"1"}}'),
    ('negative counter', '{"leaseKey":{"S":"a"},"leaseCounter":{"N":"-1"},"checkpoint":{"S":"1"}}'),
    ('fractional counter', '{"leaseKey":{"S":"a"},"leaseCounter":{"N":"1.5"},"checkpoint":{"S":"1"}}'),
    ('counter 2^62', '{"leaseKey":{"S":"a"},"leaseCounter":{"N":"4611686018427387904"},"checkpoint":{"S":"1"}}'),
    -- no headroom: the next take would need 2^62, which the table refuses
    -- (0.4.0 imported it, and every take_leases of the stream failed)
    ('counter 2^62 - 1', '{"leaseKey":{"S":"a"},"leaseCounter":{"N":"4611686018427387903"},"checkpoint":{"S":"1"}}'),
    ('counter 2^61', '{"leaseKey":{"S":"a"},"leaseCounter":{"N":"2305843009213693952"},"checkpoint":{"S":"1"}}'),
    ('switches 2^61', '{"leaseKey":{"S":"a"},"leaseCounter":{"N":"1"},"ownerSwitchesSinceCheckpoint":{"N":"2305843009213693952"},"checkpoint":{"S":"1"}}'),
    ('negative switches', '{"leaseKey":{"S":"a"},"leaseCounter":{"N":"1"},"ownerSwitchesSinceCheckpoint":{"N":"-2"},"checkpoint":{"S":"1"}}'),
    ('negative sub-sequence', '{"leaseKey":{"S":"a"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"1"},"checkpointSubSequenceNumber":{"N":"-1"}}'),
    ('unknown sentinel', '{"leaseKey":{"S":"a"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"AT_SEQUENCE_NUMBER"}}'),
    ('bad pending', '{"leaseKey":{"S":"a"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"1"},"pendingCheckpoint":{"S":"LATEST"}}'),
    ('blank shard', '{"leaseKey":{"S":" "},"leaseCounter":{"N":"1"},"checkpoint":{"S":"1"}}'),
    ('long shard', format('{"leaseKey":{"S":"%s"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"1"}}', repeat('s', 257))),
    ('long owner', format('{"leaseKey":{"S":"a"},"leaseOwner":{"S":"%s"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"1"}}', repeat('w', 257))),
    ('duplicate', E'{"leaseKey":{"S":"a"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"1"}}\n{"leaseKey":{"S":"a"},"leaseCounter":{"N":"2"},"checkpoint":{"S":"2"}}'),
    ('own parent', '{"leaseKey":{"S":"a"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"1"},"parentShardId":{"SS":["a"]}}'),
    ('parent not a string', '{"leaseKey":{"S":"a"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"1"},"parentShardId":{"SS":[1]}}'),
    ('33 parents', format('{"leaseKey":{"S":"a"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"1"},"parentShardId":{"SS":%s}}',
                          (SELECT jsonb_agg('p' || i) FROM generate_series(1, 33) AS i))),
    -- lineage: more than 32 parents once a child's parentShardId and its
    -- parents' childShardIds are put together (0.4.0 imported 100), and
    -- lineage that is a cycle, in the export or with a lease already there
    ('33 parents by childShardIds', (SELECT string_agg(format('{"leaseKey":{"S":"p%s"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"SHARD_END"},"childShardIds":{"SS":["c"]}}', i), E'\n')
                                       FROM generate_series(1, 33) AS i)),
    ('parents 20 + 13', (SELECT string_agg(format('{"leaseKey":{"S":"p%s"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"SHARD_END"},"childShardIds":{"SS":["c"]}}', i), E'\n')
                           FROM generate_series(1, 13) AS i)
                        || E'\n' || format('{"leaseKey":{"S":"c"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"1"},"parentShardId":{"SS":%s}}',
                                             (SELECT jsonb_agg('q' || i) FROM generate_series(1, 20) AS i))),
    -- a's parent is c (its parentShardId), c's is b and b's is a (their
    -- parents' childShardIds)
    ('a cycle', E'{"leaseKey":{"S":"a"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"1"},"parentShardId":{"SS":["c"]},"childShardIds":{"SS":["b"]}}\n{"leaseKey":{"S":"b"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"1"},"childShardIds":{"SS":["c"]}}\n{"leaseKey":{"S":"c"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"1"}}'),
    ('a cycle with a lease there', '{"leaseKey":{"S":"kb-y"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"1"},"parentShardId":{"SS":["kb-x"]}}'),
    ('key of another stream', '{"leaseKey":{"S":"1:orders:1:shardId-0"},"streamName":{"S":"1:payments:1"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"1"}}'),
    ('shardId of another key', '{"leaseKey":{"S":"1:orders:1:shardId-0"},"shardId":{"S":"shardId-9"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"1"}}'),
    ('not a multi-stream key', '{"leaseKey":{"S":"orders:shardId-0"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"1"}}'),
    ('single in multi', E'{"leaseKey":{"S":"1:orders:1:shardId-0"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"1"}}\n{"leaseKey":{"S":"shardId-1"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"1"}}'),
    ('re-created stream', E'{"leaseKey":{"S":"1:orders:1:shardId-0"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"1"}}\n{"leaseKey":{"S":"1:orders:2:shardId-0"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"1"}}'),
    ('one page of a scan', '{"Items":[{"leaseKey":{"S":"a"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"1"}}],"Count":1,"LastEvaluatedKey":{"leaseKey":{"S":"a"}}}'),
    ('one page (CLI)', '{"Items":[],"NextToken":"eyJFeGNsdXNpdmVTdGFydEtleSI6IG51bGx9"}'),
    ('a good item and bad ones', E'{"leaseKey":{"S":"ok"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"1"}}\n{"leaseKey":{"S":"b1"},"leaseCounter":{"N":"-1"},"checkpoint":{"S":"1"}}\n{"leaseKey":{"S":"b2"},"checkpoint":{"S":"1"}}');
SELECT label, lease_test.try_detail(format('SELECT lease.import_kcl_dynamodb(%L, %L, %L)', 'kcl-bad', 'orders', export))
  FROM lease_test.kcl_bad ORDER BY label;
SELECT lease_test.try($$SELECT lease.import_kcl_dynamodb(NULL, 'orders', '')$$);
SELECT lease_test.try($$SELECT lease.import_kcl_dynamodb('kcl-bad', ' ', '')$$);
SELECT lease_test.try($$SELECT lease.import_kcl_dynamodb('kcl-bad', 'orders', NULL)$$);
-- an export of one line, 134,217,728 empty ones and another: the lines
-- are read one by one, never counted first (0.4.0 sized an array by the
-- count of lines, and failed with XX000 "invalid memory alloc request
-- size" before it read any)
SELECT lease_test.try($$SELECT lease.import_kcl_dynamodb('kcl-bad', 'orders', '1' || repeat(E'\n', 134217728) || '1')$$);
SELECT lease_test.digest() = :'before' AS nothing_written;
DROP TABLE lease_test.kcl_bad;

-- Lineage is the union of a child's parentShardId and its parents'
-- childShardIds, whichever the export has (parentShardIds, as some tools
-- write it, is read as parentShardId); a child of an open parent is
-- blocked, of an ended one unowned.  detail names only what was dropped:
-- never the lineage attributes, whose content is kept.
SELECT item, shard_id, action, detail FROM lease.import_kcl_dynamodb('kcl-lin', 'orders', concat_ws(E'\n',
    -- only the child names its parent (parentShardId), the parent is open
    '{"leaseKey":{"S":"p1"},"leaseCounter":{"N":"1"},"leaseOwner":{"S":"kw"},"checkpoint":{"S":"11"}}',
    '{"leaseKey":{"S":"c1"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"TRIM_HORIZON"},"parentShardId":{"SS":["p1"]}}',
    -- the same, spelt parentShardIds
    '{"leaseKey":{"S":"p2"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"12"}}',
    '{"leaseKey":{"S":"c2"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"TRIM_HORIZON"},"parentShardIds":{"L":[{"S":"p2"}]}}',
    -- only the parent names its child (childShardIds)
    '{"leaseKey":{"S":"p3"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"13"},"childShardIds":{"SS":["c3"]}}',
    '{"leaseKey":{"S":"c3"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"TRIM_HORIZON"}}',
    -- both
    '{"leaseKey":{"S":"p4"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"14"},"childShardIds":{"SS":["c4"]}}',
    '{"leaseKey":{"S":"c4"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"TRIM_HORIZON"},"parentShardId":{"SS":["p4"]}}',
    -- a merge: m1 names the child, the child names m2
    '{"leaseKey":{"S":"m1"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"15"},"childShardIds":{"SS":["mc"]}}',
    '{"leaseKey":{"S":"m2"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"16"}}',
    '{"leaseKey":{"S":"mc"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"TRIM_HORIZON"},"parentShardId":{"SS":["m2"]}}',
    -- an ended parent whose child has no lease yet: created, unowned; the
    -- ended lease's KCL owner is not kept
    '{"leaseKey":{"S":"e1"},"leaseCounter":{"N":"1"},"leaseOwner":{"S":"kw"},"checkpoint":{"S":"SHARD_END"},"childShardIds":{"SS":["ec"]}}'));
SELECT shard_id, lease_owner, parent_shard_ids, state FROM lease.lease_status
 WHERE app_name = 'kcl-lin' ORDER BY shard_id;
-- the KCL owner's name reused by a pg_lease worker: only the open lease is
-- its own; the ended one is nobody's
SELECT shard_id FROM lease.my_leases('kcl-lin', 'orders', 'kw') ORDER BY shard_id;
-- the children are taken once their parents end
SELECT lease.take_lease('kcl-lin', 'orders', 'm1', 'w'), lease.close_shard('kcl-lin', 'orders', 'm1', 'w');
SELECT shard_id, state FROM lease.lease_status WHERE app_name = 'kcl-lin' AND shard_id = 'mc';
SELECT lease.take_lease('kcl-lin', 'orders', 'm2', 'w'), lease.close_shard('kcl-lin', 'orders', 'm2', 'w');
SELECT shard_id, state FROM lease.lease_status WHERE app_name = 'kcl-lin' AND shard_id = 'mc';

-- the kcl_ex import keeps no owner of an ended lease either
CREATE TABLE lease_test.kcl_ended (shard_id text, app_name text, stream_name text, checkpoint text,
                                   lease_owner text, lease_count int, completed boolean);
INSERT INTO lease_test.kcl_ended VALUES
    ('done', 'kcl-ex-ended', 's', '99', 'node-a', 3, true),
    ('ended', 'kcl-ex-ended', 's', 'SHARD_END', 'node-a', 3, false),
    ('open', 'kcl-ex-ended', 's', '7', 'node-a', 3, false);
SELECT lease.import_kcl_ex('lease_test.kcl_ended');
SELECT shard_id, lease_owner, checkpoint FROM lease.shard_leases WHERE app_name = 'kcl-ex-ended' ORDER BY shard_id;
DROP TABLE lease_test.kcl_ended;
-- and refuses a lease_count with no headroom
SELECT lease_test.try($$SELECT lease.import_kcl_ex_rows('{kcl-ex-ended}', '{s}', '{big}', '{1}', '{w}', '{2305843009213693952}', '{f}')$$);

-- the caller's privileges: INSERT on lease.shard_leases, and row-level
-- security admits the rows of the caller's own apps only
CREATE ROLE lease_test_ddb;
GRANT USAGE ON SCHEMA lease TO lease_test_ddb;
GRANT EXECUTE ON FUNCTION lease.import_kcl_dynamodb(text, text, text) TO lease_test_ddb;
SET ROLE lease_test_ddb;
SELECT lease_test.try($$SELECT lease.import_kcl_dynamodb('kcl5', 'orders', '{"leaseKey":{"S":"a"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"1"}}')$$);
RESET ROLE;
GRANT SELECT, INSERT ON lease.shard_leases TO lease_test_ddb;
GRANT EXECUTE ON FUNCTION lease.has_app_access(text) TO lease_test_ddb;
SELECT lease.grant_app('kcl5', 'lease_test_ddb');
SET ROLE lease_test_ddb;
-- an app it is not granted: refused before the export is read, whatever it
-- holds (here text that is not JSON), and nothing imported
SELECT lease_test.try($$SELECT lease.import_kcl_dynamodb('kcl6', 'orders', '{"leaseKey":{"S":"a"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"1"}}')$$);
SELECT lease_test.try($$SELECT lease.import_kcl_dynamodb('kcl6', 'orders', repeat('not json ', 100000))$$);
SELECT action FROM lease.import_kcl_dynamodb('kcl5', 'orders', '{"leaseKey":{"S":"a"},"leaseCounter":{"N":"1"},"checkpoint":{"S":"1"}}');
RESET ROLE;
SELECT app_name, shard_id, checkpoint FROM lease.shard_leases WHERE app_name IN ('kcl5', 'kcl6');
SELECT lease.revoke_app('kcl5', 'lease_test_ddb');
REVOKE ALL ON lease.shard_leases FROM lease_test_ddb;
REVOKE ALL ON SCHEMA lease FROM lease_test_ddb;
REVOKE ALL ON FUNCTION lease.has_app_access(text) FROM lease_test_ddb;
REVOKE ALL ON FUNCTION lease.import_kcl_dynamodb(text, text, text) FROM lease_test_ddb;
DROP ROLE lease_test_ddb;
