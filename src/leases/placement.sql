-- src/leases/placement.sql: where a stream lives: the record a move between partitions leaves, and the move's steps
-- One part of pg_lease--<version>.sql (Makefile, SQL_PARTS); each change here
-- needs its twin in the upgrade script pg_lease--<previous>--<version>.sql.

----------------------------------------------------------------------------
-- Stream placement (src/leases/placement.c; docs/scale-out.md, "Moving a
-- stream")
----------------------------------------------------------------------------

-- One row per stream that a move has touched on this partition (a stream
-- that never moved has none: it is served wherever it is called):
--   here        the stream is served here (it arrived by a move, or a move
--               out of here was undone);
--   moving_out  a move to peer_partition has begun: the stream's calls are
--               refused (40L01) while its leases are copied;
--   moved_out   the tombstone: the stream now lives on peer_partition, its
--               rows here are gone, and its calls are refused (40L01)
--               naming that partition;
--   arriving    a move from peer_partition has copied the leases here; the
--               calls are refused until the source has let go (then here).
-- partition_index is this partition's number, as the router that moved the
-- stream numbers its partitions; generation counts the stream's moves
-- (every move, and every undone one, takes the next number), so a step of
-- an older move can never act on a newer one.  Every stream function reads
-- its stream's row (src/leases/placement.c, lease_stream_begin: one
-- primary-key lookup) after taking the stream's placement lock.
CREATE TABLE lease.stream_placements (
    app_name        text        NOT NULL,
    stream_name     text        NOT NULL,
    state           text        NOT NULL,
    partition_index integer     NOT NULL,
    peer_partition  integer,
    generation      bigint      NOT NULL,
    changed_at      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (app_name, stream_name),
    CONSTRAINT stream_placements_state_check
        CHECK (state OPERATOR(pg_catalog.=) ANY (ARRAY['here', 'moving_out', 'moved_out', 'arriving'])),
    CONSTRAINT stream_placements_peer_check
        CHECK ((peer_partition IS NULL) OPERATOR(pg_catalog.=) (state OPERATOR(pg_catalog.=) 'here')
               AND peer_partition OPERATOR(pg_catalog.<>) partition_index),
    CONSTRAINT stream_placements_numbers_check
        CHECK (partition_index OPERATOR(pg_catalog.>=) 0 AND peer_partition OPERATOR(pg_catalog.>=) 0
               AND generation OPERATOR(pg_catalog.>=) 1)
);

COMMENT ON TABLE lease.stream_placements IS
    'Streams a move between partitions has touched: served here, moving out, moved out (the tombstone) or arriving (lease_router.move_stream).';

-- Dumped (marked in src/common/finish.sql, after the tables marked before
-- it): a restored source must go on refusing a stream that moved away.

-- New leases of a stream that is not served here are refused (40L01), by
-- whatever inserts them: create_lease and sync_shards check first anyway;
-- this is what stops import_kcl_ex, import_kcl_ex_rows and
-- import_kcl_dynamodb (their rows may name any stream) and an operator's
-- INSERT.
CREATE FUNCTION lease.shard_leases_placed()
RETURNS trigger
AS 'MODULE_PATHNAME', 'lease_shard_leases_placed'
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE TRIGGER shard_leases_placed
    AFTER INSERT ON lease.shard_leases
    REFERENCING NEW TABLE AS placed_rows
    FOR EACH STATEMENT
    EXECUTE FUNCTION lease.shard_leases_placed();

-- The steps of a move, each one transaction on one partition, called in
-- order by lease_router.move_stream and lease_router.undo_move on the
-- router (docs/scale-out.md, "Moving a stream": what each step does, and
-- under a failover).  Operator functions: each checks that the caller may
-- act for the app, then runs as the extension owner; no worker role is
-- granted them.  The router does not route them by stream (it calls each
-- on a named partition), so they are not part of its lease.* API.

-- This partition's record of the stream: no row when it has none.
CREATE FUNCTION lease.move_stream_state(app_name text, stream_name text)
RETURNS TABLE (state text, partition_index integer, peer_partition integer, generation bigint)
AS 'MODULE_PATHNAME', 'lease_move_stream_state'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

-- Every record of this partition (lease_router.sync_directory).
CREATE FUNCTION lease.move_stream_placements()
RETURNS TABLE (app_name text, stream_name text, state text, partition_index integer,
               peer_partition integer, generation bigint)
AS 'MODULE_PATHNAME', 'lease_move_stream_placements'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

-- 1. On the source: refuse the stream's calls from now on; the move's
-- generation.
CREATE FUNCTION lease.move_stream_freeze(app_name text, stream_name text,
                                         this_partition integer, to_partition integer)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lease_move_stream_freeze'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

-- 2. On the source: the frozen stream as one document (leases, events,
-- counters, capacities, tolerance, worker versions).  Changes nothing.
CREATE FUNCTION lease.move_stream_export(app_name text, stream_name text, generation bigint)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'lease_move_stream_export'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

-- 3. On the target: the document's rows, inert (arriving) until step 5;
-- how many leases it added (0: they were there already).
CREATE FUNCTION lease.move_stream_import(app_name text, stream_name text, this_partition integer,
                                         from_partition integer, generation bigint, stream jsonb)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lease_move_stream_import'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

-- 4. On the source (the move's commit point): its rows go, the tombstone
-- stays.  5. On the target: the stream is served.  The state it left.
CREATE FUNCTION lease.move_stream_complete(app_name text, stream_name text, generation bigint)
RETURNS text
AS 'MODULE_PATHNAME', 'lease_move_stream_complete'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

-- Undo, before step 4: on the source the stream is served again; on the
-- target its copy goes.  The state it left.
CREATE FUNCTION lease.move_stream_undo(app_name text, stream_name text, generation bigint)
RETURNS text
AS 'MODULE_PATHNAME', 'lease_move_stream_undo'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;
