-- 0.3.0 and later: routable conversation ids (lease.conversation_id_partition):
-- the setting and the ids made under it survive the dump, and the restored
-- database goes on making ids of its partition (test/upgrade/dump.sh).
INSERT INTO lease.conversation_id_partition (id_stride, id_offset) VALUES (2, 1);
SELECT conversation_id FROM lease.start_conversation('dump-part', 'agent', NULL, NULL, 'routable');
