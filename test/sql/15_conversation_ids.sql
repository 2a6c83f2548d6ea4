-- Routable conversation ids (lease.conversation_id_partition, the router's
-- id routing).  Tenants here are 'ci-*'.

-- before any setting: ids come straight from the sequence
SELECT conversation_id AS legacy FROM lease.start_conversation('ci-u1', 'agent', NULL, NULL, 'legacy') \gset
SELECT pg_catalog.currval('lease.conversations_id_seq') = :legacy AS plain_sequence_id;

-- bad settings are refused by the table (stride a power of two, offset below it)
SELECT lease_test.try($$INSERT INTO lease.conversation_id_partition (id_stride, id_offset) VALUES (3, 0)$$);
SELECT lease_test.try($$INSERT INTO lease.conversation_id_partition (id_stride, id_offset) VALUES (4, 4)$$);
SELECT lease_test.try($$INSERT INTO lease.conversation_id_partition (id_stride, id_offset) VALUES (4, -1)$$);
SELECT lease_test.try($$INSERT INTO lease.conversation_id_partition (only_row, id_stride, id_offset) VALUES (false, 4, 1)$$);

-- partition 3 of 4: new ids are n * 4 + 3, all above the earlier ids; one row only
INSERT INTO lease.conversation_id_partition (id_stride, id_offset) VALUES (4, 3);
SELECT lease_test.try($$INSERT INTO lease.conversation_id_partition (id_stride, id_offset) VALUES (4, 2)$$);
SELECT conversation_id AS c1 FROM lease.start_conversation('ci-u1', 'agent', NULL, NULL, 'c1') \gset
SELECT :c1 % 4 AS c1_partition, :c1 > :legacy AS above_legacy,
       :c1 = pg_catalog.currval('lease.conversations_id_seq') * 4 + 3 AS from_sequence;
-- a rotation makes its replacement on the same partition
SELECT outcome, conversation_id % 4 AS partition, previous_conversation_id = :c1 AS from_c1
  FROM lease.rotate_channel('ci-u1', 'agent', NULL, NULL, 'c1', :c1);
SELECT conversation_id AS c2 FROM lease.start_conversation('ci-u2', 'agent', 'v', 'e', NULL) \gset
SELECT :c2 % 4 AS c2_partition, :c2 > :c1 AS increasing;

-- ids from before the setting keep working
SELECT lease.admit_turn(:legacy) > 0 AS legacy_turn;
SELECT lease.end_conversation(:legacy) AS legacy_ended;
SELECT lease.admit_turn(:c2) > 0 AS new_turn;

-- the setting is dumped with the data (pg_dump keeps it)
SELECT extconfig::regclass[] @> ARRAY['lease.conversation_id_partition'::regclass] AS dumped
  FROM pg_extension WHERE extname = 'pg_lease';

-- later files make plain ids again
DELETE FROM lease.conversation_id_partition;
SELECT conversation_id = pg_catalog.currval('lease.conversations_id_seq') AS plain_again
  FROM lease.start_conversation('ci-u3', 'agent', NULL, NULL, NULL);
