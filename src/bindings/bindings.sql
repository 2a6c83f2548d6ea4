-- src/bindings/bindings.sql: channel bindings: sandboxes, conversations, turns, quotas, rotation
-- One part of pg_lease--<version>.sql (Makefile, SQL_PARTS); each change here
-- needs its twin in the upgrade script pg_lease--<previous>--<version>.sql.

----------------------------------------------------------------------------
-- Channel bindings: sandboxes, conversations, turns, quotas, rotation
----------------------------------------------------------------------------

-- A sandbox is the compute a conversation's worker runs in.  Active
-- (pending, starting, ready) sandboxes count against the fleet capacity and
-- the tenant's limit; admission (src/bindings/conversations.c) inserts them `pending`,
-- the worker infrastructure moves them on, end_conversation and
-- restore_rotated_channel end them.
CREATE TABLE lease.sandboxes (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id     text        NOT NULL,
    status      text        NOT NULL DEFAULT 'pending',
    created_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT sandboxes_status_check
        CHECK (status OPERATOR(pg_catalog.=) ANY (ARRAY['pending', 'starting', 'ready', 'suspended',
                                                        'terminated', 'failed'])),
    -- Finite times only (admission and monitoring compute with them).
    CONSTRAINT sandboxes_times_check
        CHECK (pg_catalog.isfinite(created_at) AND pg_catalog.isfinite(updated_at))
);

COMMENT ON TABLE lease.sandboxes IS
    'One row per sandbox; pending, starting and ready ones count against lease.fleet_capacity and the tenant''s limit.';

-- Serves admission's quota counts (start_conversation, rotate_channel): the
-- tenant's active sandboxes are an index range on user_id, the fleet's are
-- the whole (small) index.  Its predicate is exactly the "active" status list
-- the counting statement uses, so the planner can prove it applies.
CREATE INDEX sandboxes_active_user_idx
    ON lease.sandboxes (user_id)
    WHERE status OPERATOR(pg_catalog.=) ANY (ARRAY['pending', 'starting', 'ready']);

CREATE TABLE lease.conversations (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id         text        NOT NULL,
    agent_id        text        NOT NULL,
    vault_id        text,
    environment_id  text,
    channel_id      text,
    sandbox_id      bigint      REFERENCES lease.sandboxes,
    status          text        NOT NULL DEFAULT 'pending',
    rotated_from    bigint      REFERENCES lease.conversations,
    created_at      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_at      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT conversations_status_check
        CHECK (status OPERATOR(pg_catalog.=) ANY (ARRAY['pending', 'running', 'idle', 'failed',
                                                        'terminated'])),
    -- The invariant every function keeps, enforced by the table itself: a
    -- channel is only ever bound to a live conversation.
    CONSTRAINT conversations_binding_live_check
        CHECK (channel_id IS NULL
               OR status OPERATOR(pg_catalog.=) ANY (ARRAY['pending', 'running', 'idle'])),
    CONSTRAINT conversations_not_rotated_from_itself_check
        CHECK (rotated_from IS DISTINCT FROM id),
    CONSTRAINT conversations_times_check
        CHECK (pg_catalog.isfinite(created_at) AND pg_catalog.isfinite(updated_at))
);

COMMENT ON TABLE lease.conversations IS
    'One row per agent conversation; channel_id is the channel binding. Change it only through the lease.* functions.';
COMMENT ON COLUMN lease.conversations.channel_id IS
    'The channel bound to this conversation, NULL when unbound. At most one conversation per (user_id, agent_id, vault_id, environment_id) scope holds a channel.';
COMMENT ON COLUMN lease.conversations.rotated_from IS
    'The conversation this one replaced by rotate_channel, NULL for one started by start_conversation.';

-- Binding uniqueness: at most one conversation holds a channel within one
-- scope (user_id, agent_id, vault_id, environment_id), NULL vault/environment
-- compared as equal (NULLS NOT DISTINCT).
--
-- It is a PARTIAL unique index on purpose, not a UNIQUE constraint.
-- heap_update() takes FOR UPDATE on a row whose update changes a "key"
-- column, and the key columns are those of unique indexes that are
-- non-partial and have no expressions (RelationGetIndexAttrBitmap,
-- INDEX_ATTR_BITMAP_KEY): the columns a foreign key can reference.  With a
-- UNIQUE constraint on these columns, binding and unbinding a channel would
-- take FOR UPDATE, which conflicts with the FOR KEY SHARE that every insert
-- of a row referencing the conversation (lease.turns) takes, so a rotation
-- would wait behind any open transaction that inserted a turn.  A partial
-- index is not a key, so binding updates stay at FOR NO KEY UPDATE, which
-- does not conflict with KEY SHARE (test/specs/rotation_fk_key_share.spec).
--
-- Serves find_channel_conversation, start_conversation's already_bound check
-- and restore's binding writes (uniqueness).
CREATE UNIQUE INDEX conversations_channel_binding_key
    ON lease.conversations (user_id, agent_id, vault_id, environment_id, channel_id)
    NULLS NOT DISTINCT
    WHERE channel_id IS NOT NULL;

COMMENT ON INDEX lease.conversations_channel_binding_key IS
    'At most one conversation holds a channel per (user_id, agent_id, vault_id, environment_id), NULLs equal. Partial on purpose, not a UNIQUE constraint: columns of a partial unique index are not key columns, so binding updates take FOR NO KEY UPDATE, which does not conflict with the FOR KEY SHARE of foreign-key inserts (lease.turns).';

-- Serves the foreign key from conversations.rotated_from (the rotation chain:
-- which conversation replaced this one) and the RI checks on it.
CREATE INDEX conversations_rotated_from_idx
    ON lease.conversations (rotated_from)
    WHERE rotated_from IS NOT NULL;

-- Serves the foreign key conversations.sandbox_id (status changes of a
-- sandbox find its conversation; RI checks on sandbox deletion).
CREATE INDEX conversations_sandbox_idx
    ON lease.conversations (sandbox_id);

-- A turn: one unit of work admitted on a conversation (admit_turn).  Its
-- insert takes FOR KEY SHARE on the conversation (the foreign key).
CREATE TABLE lease.turns (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    conversation_id bigint      NOT NULL REFERENCES lease.conversations,
    created_at      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT turns_times_check CHECK (pg_catalog.isfinite(created_at))
);

-- Serves the foreign key turns.conversation_id (a conversation's turns).
CREATE INDEX turns_conversation_idx
    ON lease.turns (conversation_id);

-- Per-tenant sandbox limits; a tenant without a row gets
-- lease.default_sandbox_limit.
CREATE TABLE lease.tenant_limits (
    user_id       text NOT NULL PRIMARY KEY,
    sandbox_limit int  NOT NULL,
    CONSTRAINT tenant_limits_sandbox_limit_check CHECK (sandbox_limit OPERATOR(pg_catalog.>=) 0)
);

-- The queue of post-commit compensations that failed: restore_rotated_channel
-- writes a row when its restore raised an error (after rolling the restore
-- back) or found no live conversation to give the channel back to (the
-- replacement keeps it; sqlstate 55000), retry_failed_compensations drains it.
--
-- At most one unresolved row per (previous, failed) pair: a restore of the
-- same pair that fails again updates that row (reason, sqlstate,
-- last_failed_at, attempts) instead of adding another.  occurred_at is the
-- first failure, so the queue is drained oldest first.
--
-- No foreign keys to lease.conversations, on purpose: the row is written
-- exactly when a conversation row is locked by someone else (a lock timeout),
-- and a foreign-key check would then wait for FOR KEY SHARE on it behind a
-- FOR UPDATE holder.  The ids are checked by restore_rotated_channel before
-- anything is written.
CREATE TABLE lease.compensation_failures (
    id                        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    previous_conversation_id  bigint      NOT NULL,
    failed_conversation_id    bigint      NOT NULL,
    channel_id                text,
    reason                    text        NOT NULL,
    sqlstate                  text        NOT NULL,
    occurred_at               timestamptz NOT NULL DEFAULT pg_catalog.now(),
    last_failed_at            timestamptz NOT NULL DEFAULT pg_catalog.now(),
    attempts                  int         NOT NULL DEFAULT 1,
    resolved_at               timestamptz,
    CONSTRAINT compensation_failures_sqlstate_check CHECK (sqlstate OPERATOR(pg_catalog.~) '^[0-9A-Z]{5}$'),
    CONSTRAINT compensation_failures_attempts_check CHECK (attempts OPERATOR(pg_catalog.>=) 1),
    -- A failure that recurs increments attempts (kept below 2^30, far from
    -- the end of its range); monitoring computes with the times.
    CONSTRAINT compensation_failures_counters_check
        CHECK (attempts OPERATOR(pg_catalog.<) 1073741824),
    CONSTRAINT compensation_failures_times_check
        CHECK (pg_catalog.isfinite(occurred_at) AND pg_catalog.isfinite(last_failed_at)
               AND pg_catalog.isfinite(resolved_at))
);

COMMENT ON COLUMN lease.compensation_failures.channel_id IS
    'The channel the failed replacement held when the restore was attempted; NULL when it held none any more.';

-- One unresolved failure per pair; serves restore_rotated_channel's
-- record-or-update (ON CONFLICT) and its "mark resolved" update.
CREATE UNIQUE INDEX compensation_failures_unresolved_key
    ON lease.compensation_failures (previous_conversation_id, failed_conversation_id)
    WHERE resolved_at IS NULL;

-- Serves retry_failed_compensations: unresolved failures, oldest first.
CREATE INDEX compensation_failures_queue_idx
    ON lease.compensation_failures (occurred_at, id)
    WHERE resolved_at IS NULL;

SELECT pg_catalog.pg_extension_config_dump('lease.sandboxes', '');
SELECT pg_catalog.pg_extension_config_dump('lease.sandboxes_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('lease.conversations', '');
SELECT pg_catalog.pg_extension_config_dump('lease.conversations_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('lease.turns', '');
SELECT pg_catalog.pg_extension_config_dump('lease.turns_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('lease.tenant_limits', '');
SELECT pg_catalog.pg_extension_config_dump('lease.compensation_failures', '');
SELECT pg_catalog.pg_extension_config_dump('lease.compensation_failures_id_seq', '');

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
        CHECK (id_stride OPERATOR(pg_catalog.>=) 1
               AND (id_stride OPERATOR(pg_catalog.&) (id_stride OPERATOR(pg_catalog.-) 1))
                   OPERATOR(pg_catalog.=) 0),
    CONSTRAINT conversation_id_partition_offset_check
        CHECK (id_offset OPERATOR(pg_catalog.>=) 0 AND id_offset OPERATOR(pg_catalog.<) id_stride)
);

COMMENT ON TABLE lease.conversation_id_partition IS
    'At most one row: new conversation ids are n * id_stride + id_offset, so they are unique across partitions and route to this one (pg_lease_router).';

SELECT pg_catalog.pg_extension_config_dump('lease.conversation_id_partition', '');

-- The admission gate (src/bindings/conversations.c): start_conversation and
-- rotate_channel lock its one row FOR NO KEY UPDATE until the caller's
-- transaction ends, so admissions take turns and their quota counts are
-- exact.  Only the extension's owner can lock the row: no other role has any
-- privilege on the table (finish.sql), so no other role can hold admission
-- up (an advisory lock, which any role may take, could).  The row is
-- inserted here and not marked for pg_dump: CREATE EXTENSION on restore
-- inserts it again.
CREATE TABLE lease.admission_gate (
    only_row  boolean NOT NULL DEFAULT true PRIMARY KEY,
    CONSTRAINT admission_gate_only_row_check CHECK (only_row)
);

COMMENT ON TABLE lease.admission_gate IS
    'Exactly one row, locked by every admission (start_conversation, rotate_channel) until its transaction ends. Do not lock, delete or add rows.';

INSERT INTO lease.admission_gate DEFAULT VALUES;

-- The channel functions are C, not STRICT (a NULL where a value is required
-- is 22004 naming the argument), SECURITY DEFINER with search_path pinned,
-- and run fixed schema-qualified SQL with parameters (src/bindings/).  They
-- take no app_name, so no per-app check applies: a role granted EXECUTE on
-- them acts for every tenant (docs/security.md).  The admission lock they take is
-- transaction-scoped: call each in its own short transaction (autocommit).
-- start_conversation and rotate_channel are bound to the C symbols of this
-- schema version (*_0_4: the admission gate); the symbols without a suffix
-- serve 0.1.0 to 0.3.0 schemas until ALTER EXTENSION UPDATE.

CREATE FUNCTION lease.start_conversation(
    user_id text, agent_id text, vault_id text, environment_id text, channel_id text)
RETURNS TABLE (outcome text, conversation_id bigint, detail text)
AS 'MODULE_PATHNAME', 'lease_start_conversation_0_4'
LANGUAGE C VOLATILE SECURITY DEFINER ROWS 1
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.find_channel_conversation(
    user_id text, agent_id text, vault_id text, environment_id text, channel_id text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lease_find_channel_conversation'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.rotate_channel(
    user_id text, agent_id text, vault_id text, environment_id text, channel_id text,
    rotate_from bigint)
RETURNS TABLE (outcome text, conversation_id bigint, previous_conversation_id bigint, detail text)
AS 'MODULE_PATHNAME', 'lease_rotate_channel_0_4'
LANGUAGE C VOLATILE SECURITY DEFINER ROWS 1
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.restore_rotated_channel(
    previous_conversation_id bigint, failed_conversation_id bigint)
RETURNS text
AS 'MODULE_PATHNAME', 'lease_restore_rotated_channel'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.retry_failed_compensations()
RETURNS TABLE (previous_conversation_id bigint, failed_conversation_id bigint, outcome text)
AS 'MODULE_PATHNAME', 'lease_retry_failed_compensations'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.admit_turn(conversation_id bigint)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lease_admit_turn_0_4'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.end_conversation(conversation_id bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_end_conversation'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

-- Serves list_conversations: a tenant's live conversations.
CREATE INDEX conversations_live_user_idx
    ON lease.conversations (user_id, agent_id)
    WHERE status OPERATOR(pg_catalog.=) ANY (ARRAY['pending', 'running', 'idle']);

-- The lifecycle of a rotation (src/bindings/lifecycle.c): a replacement
-- starts with its first turn (admit_turn, bound from 0.4.0 to the symbol
-- that also ends what it replaced) or with confirm_rotation; either ends the
-- live, unbound conversations up its rotated_from chain, freeing their
-- sandbox slots.  list_conversations is what the application sees of a
-- tenant; the quota functions are the fleet operator's (docs/security.md).

CREATE FUNCTION lease.confirm_rotation(
    previous_conversation_id bigint, conversation_id bigint)
RETURNS text
AS 'MODULE_PATHNAME', 'lease_confirm_rotation'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.list_conversations(
    user_id text, agent_id text, vault_id text, environment_id text)
RETURNS TABLE (conversation_id bigint, agent_id text, vault_id text, environment_id text,
               channel_id text, status text, sandbox_id bigint, sandbox_status text,
               rotated_from bigint, created_at timestamptz, age interval)
AS 'MODULE_PATHNAME', 'lease_list_conversations'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

-- The platform's own statuses (src/bindings/lifecycle.c, 0.5.0): a
-- sandbox's starting, ready and suspended, a conversation's idle, along
-- their lifecycle only, under the conversation's lock.
CREATE FUNCTION lease.set_sandbox_status(conversation_id bigint, status text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_set_sandbox_status'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.set_conversation_status(conversation_id bigint, status text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_set_conversation_status'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.set_tenant_limit(user_id text, sandbox_limit integer)
RETURNS integer
AS 'MODULE_PATHNAME', 'lease_set_tenant_limit'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.clear_tenant_limit(user_id text)
RETURNS integer
AS 'MODULE_PATHNAME', 'lease_clear_tenant_limit'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.tenant_limit(user_id text)
RETURNS TABLE (sandbox_limit integer, own_limit boolean, active_sandboxes bigint)
AS 'MODULE_PATHNAME', 'lease_tenant_limit'
LANGUAGE C VOLATILE SECURITY DEFINER ROWS 1
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.list_tenant_limits()
RETURNS TABLE (user_id text, sandbox_limit integer, active_sandboxes bigint)
AS 'MODULE_PATHNAME', 'lease_list_tenant_limits'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;
