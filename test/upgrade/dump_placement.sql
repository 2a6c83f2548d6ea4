-- 0.5.0 and later: where streams live (docs/scale-out.md, "Moving a
-- stream"): a stream that moved away leaves a tombstone the dump keeps, so
-- the restored source goes on refusing it (test/upgrade/dump.sh checks).
\set ON_ERROR_STOP 1
SELECT lease.create_lease('dump', 'moved-away', 'm-1');
SELECT lease.move_stream_freeze('dump', 'moved-away', 0, 1);
SELECT lease.move_stream_complete('dump', 'moved-away', 1);
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM lease.stream_placements WHERE state = 'moved_out') THEN
        RAISE EXCEPTION 'dump_placement: no tombstone';
    END IF;
END $$;
