/* pg_lease--0.2.0--0.3.0.sql: from 0.2.0 to 0.3.0.  Never edit once released. */

\echo Use "ALTER EXTENSION pg_lease UPDATE TO '0.3.0'" to load this file. \quit

----------------------------------------------------------------------------
-- Routable conversation ids for pg_lease_router (issue 12; twin of the
-- table in src/bindings/bindings.sql)
----------------------------------------------------------------------------

-- Routable conversation ids (docs/scale-out.md).  Behind the pg_lease_router
-- router, the functions that take only a conversation id (admit_turn,
-- end_conversation, restore_rotated_channel) must reach the partition that
-- made the id.  With a row here, start_conversation and rotate_channel make
-- ids n * id_stride + id_offset (n from lease.conversations_id_seq): every
-- partition gets the same stride (the partition count, a power of two) and
-- its own offset (its partition number), so an id is unique across
-- partitions and id % id_stride names its partition.  New ids are always
-- above the ones made before the row existed, which keep working unchanged.
-- Set it once per partition before its first conversation; pg_dump keeps it.
CREATE TABLE lease.conversation_id_partition (
    only_row   boolean NOT NULL DEFAULT true PRIMARY KEY,
    id_stride  integer NOT NULL,
    id_offset  integer NOT NULL,
    CONSTRAINT conversation_id_partition_only_row_check CHECK (only_row),
    CONSTRAINT conversation_id_partition_stride_check
        CHECK (id_stride >= 1 AND id_stride & (id_stride - 1) = 0),
    CONSTRAINT conversation_id_partition_offset_check
        CHECK (id_offset >= 0 AND id_offset < id_stride)
);

COMMENT ON TABLE lease.conversation_id_partition IS
    'At most one row: new conversation ids are n * id_stride + id_offset, so they are unique across partitions and route to this one (pg_lease_router).';

SELECT pg_catalog.pg_extension_config_dump('lease.conversation_id_partition', '');
-- (src/common/finish.sql revokes PUBLIC on a fresh install)
REVOKE ALL ON lease.conversation_id_partition FROM PUBLIC;
