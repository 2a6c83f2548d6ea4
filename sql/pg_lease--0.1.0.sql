/* pg_lease--0.1.0.sql: first release.  Never edit a released script; add pg_lease--0.1.0--<next>.sql. */

\echo Use "CREATE EXTENSION pg_lease" to load this file. \quit

-- The schema `lease` is created by CREATE EXTENSION (pg_lease.control names it).
-- Nothing in it is granted to PUBLIC: see README.md, "Privileges".
REVOKE ALL ON SCHEMA lease FROM PUBLIC;

----------------------------------------------------------------------------
-- Shard leases
----------------------------------------------------------------------------

CREATE TABLE lease.shard_leases (
    app_name                        text        NOT NULL,
    stream_name                     text        NOT NULL,
    shard_id                        text        NOT NULL,
    lease_owner                     text,
    lease_count                     bigint      NOT NULL DEFAULT 0,
    checkpoint                      text        NOT NULL DEFAULT 'TRIM_HORIZON',
    checkpoint_sub_sequence         bigint      NOT NULL DEFAULT 0,
    parent_shard_ids                text[]      NOT NULL DEFAULT '{}',
    lease_expires_at                timestamptz,
    owner_switches_since_checkpoint bigint      NOT NULL DEFAULT 0,
    -- fencing token: bumped by every ownership change (take, transfer,
    -- release, close), never by a renewal or a checkpoint
    lease_epoch                     bigint      NOT NULL DEFAULT 0,
    -- a graceful handoff: whom the lease is promised to, since when, until
    -- when the holder may finish (lease.handoff_timeout), and the lease
    -- duration the requester asked for (the transferred lease gets it, and
    -- the request lapses that long after the deadline)
    handoff_to                      text,
    handoff_requested_at            timestamptz,
    handoff_deadline                timestamptz,
    handoff_lease_duration          interval,
    -- two-phase checkpoint: what the owner intends to checkpoint next
    pending_checkpoint              text,
    created_at                      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_at                      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (app_name, stream_name, shard_id),
    CONSTRAINT shard_leases_lease_count_check CHECK (lease_count >= 0),
    CONSTRAINT shard_leases_owner_expiry_check
        CHECK ((lease_owner IS NULL) = (lease_expires_at IS NULL)),
    CONSTRAINT shard_leases_handoff_check
        CHECK (num_nulls(handoff_to, handoff_requested_at, handoff_deadline,
                         handoff_lease_duration) IN (0, 4))
)
-- Renewals and checkpoints touch no indexed column: leave room on each page
-- so they stay HOT updates.
WITH (fillfactor = 70);

COMMENT ON TABLE lease.shard_leases IS
    'One row per shard lease (the model is the Kinesis Client Library lease table). Change it only through the lease.* functions.';

-- Serves renew_leases (one owner's leases), take_leases (the live leases of a
-- stream, counted per owner; the most-loaded worker's leases it asks to hand
-- over) and the view worker_loads.  Renewals and checkpoints do not change
-- lease_owner, so they remain HOT.
CREATE INDEX shard_leases_owner_idx
    ON lease.shard_leases (app_name, stream_name, lease_owner)
    WHERE lease_owner IS NOT NULL;

-- Serves take_leases claiming the leases promised to the caller whose
-- handoff deadline has passed.  handoff_to changes only when a handoff is
-- requested or completed, never on a renewal or a checkpoint, so those stay
-- HOT.  (lease_expires_at is deliberately not indexed: every renewal changes
-- it, and indexing it would make every renewal a non-HOT update.)
CREATE INDEX shard_leases_handoff_idx
    ON lease.shard_leases (app_name, stream_name, handoff_to)
    WHERE handoff_to IS NOT NULL;

SELECT pg_catalog.pg_extension_config_dump('lease.shard_leases', '');

-- Every function below is SECURITY DEFINER with search_path pinned: a worker
-- role is granted EXECUTE on the functions, never write access to the table,
-- so the only way to change a lease is through the protocol these functions
-- implement.  All SQL they run is fixed text with parameters and
-- schema-qualified names (src/leases.c).  They are not STRICT: a NULL where a
-- value is required is an error (22004) naming the argument.

CREATE FUNCTION lease.create_lease(
    app_name text, stream_name text, shard_id text,
    parent_shard_ids text[] DEFAULT '{}', checkpoint text DEFAULT 'TRIM_HORIZON')
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_create_lease'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.take_lease(
    app_name text, stream_name text, shard_id text, new_owner text,
    lease_count bigint DEFAULT NULL, lease_duration interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lease_take_lease'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.renew_lease(
    app_name text, stream_name text, shard_id text, owner text,
    lease_count bigint, lease_duration interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lease_renew_lease'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.update_checkpoint(
    app_name text, stream_name text, shard_id text, owner text,
    checkpoint text, sub_sequence bigint DEFAULT 0)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_update_checkpoint'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.release_lease(
    app_name text, stream_name text, shard_id text, owner text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_release_lease'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.close_shard(
    app_name text, stream_name text, shard_id text, owner text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_close_shard'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

----------------------------------------------------------------------------
-- Fencing, two-phase checkpoints, lineage maintenance (src/leases.c,
-- src/lineage.c)
----------------------------------------------------------------------------

-- The fenced checkpoint: written only while lease_epoch still equals
-- fencing_token.  No defaults, so a call is never ambiguous with the
-- six-argument function above.
CREATE FUNCTION lease.update_checkpoint(
    app_name text, stream_name text, shard_id text, owner text,
    checkpoint text, sub_sequence bigint, fencing_token bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_update_checkpoint_fenced'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.prepare_checkpoint(
    app_name text, stream_name text, shard_id text, owner text,
    pending_checkpoint text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_prepare_checkpoint'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.cleanup_ended(app_name text, stream_name text)
RETURNS integer
AS 'MODULE_PATHNAME', 'lease_cleanup_ended'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.delete_lease(app_name text, stream_name text, shard_id text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_delete_lease'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

----------------------------------------------------------------------------
-- The taker: balanced take_leases, batch renewal, graceful handoff
-- (src/taker.c)
----------------------------------------------------------------------------

CREATE FUNCTION lease.take_leases(
    app_name text, stream_name text, owner text,
    lease_duration interval DEFAULT NULL, max_leases integer DEFAULT NULL,
    max_steal integer DEFAULT 1)
RETURNS TABLE(shard_id text, lease_count bigint, action text,
              previous_owner text, lease_epoch bigint)
AS 'MODULE_PATHNAME', 'lease_take_leases'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.renew_leases(
    app_name text, stream_name text, owner text,
    lease_duration interval DEFAULT NULL)
RETURNS TABLE(shard_id text, lease_count bigint, handoff_to text)
AS 'MODULE_PATHNAME', 'lease_renew_leases'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.request_handoff(
    app_name text, stream_name text, shard_id text, to_owner text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_request_handoff'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

----------------------------------------------------------------------------
-- Ownership events (src/events.c)
----------------------------------------------------------------------------

CREATE TABLE lease.lease_events (
    event_id    bigserial   PRIMARY KEY,
    occurred_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    app_name    text        NOT NULL,
    stream_name text        NOT NULL,
    shard_id    text        NOT NULL,
    event       text        NOT NULL,
    from_owner  text,
    to_owner    text,
    lease_count bigint      NOT NULL,
    lease_epoch bigint      NOT NULL,
    CONSTRAINT lease_events_event_check CHECK (event IN
        ('take', 'expiry_takeover', 'steal', 'transfer', 'release', 'close',
         'handoff_request'))
);

COMMENT ON TABLE lease.lease_events IS
    'Every change of a lease''s ownership and every handoff request (lease.record_events); prune with lease.prune_events().';

-- Serves prune_events (delete everything older than a point in time).
CREATE INDEX lease_events_occurred_at_idx ON lease.lease_events (occurred_at);

SELECT pg_catalog.pg_extension_config_dump('lease.lease_events', '');
SELECT pg_catalog.pg_extension_config_dump('lease.lease_events_event_id_seq', '');

CREATE FUNCTION lease.prune_events(older_than interval)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lease_prune_events'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

----------------------------------------------------------------------------
-- Observability views.  Not granted to PUBLIC: grant SELECT to a
-- monitoring role (README "Privileges").
----------------------------------------------------------------------------

CREATE VIEW lease.lease_status AS
SELECT l.app_name,
       l.stream_name,
       l.shard_id,
       l.lease_owner,
       CASE
           WHEN l.checkpoint = 'SHARD_END' THEN 'ended'
           WHEN EXISTS (SELECT 1 FROM lease.shard_leases AS p
                         WHERE p.app_name = l.app_name
                           AND p.stream_name = l.stream_name
                           AND p.shard_id = ANY (l.parent_shard_ids)
                           AND p.checkpoint <> 'SHARD_END') THEN 'blocked'
           WHEN l.lease_owner IS NULL THEN 'unowned'
           WHEN l.lease_expires_at <= pg_catalog.clock_timestamp() THEN 'expired'
           WHEN h.pending THEN 'handoff_pending'
           ELSE 'owned'
       END AS state,
       l.lease_expires_at - pg_catalog.clock_timestamp() AS time_to_expiry,
       l.checkpoint,
       l.checkpoint_sub_sequence,
       l.pending_checkpoint,
       l.lease_count,
       l.lease_epoch,
       CASE WHEN h.pending THEN l.handoff_to END AS handoff_to,
       CASE WHEN h.pending THEN l.handoff_deadline END AS handoff_deadline,
       l.owner_switches_since_checkpoint,
       l.parent_shard_ids,
       l.updated_at
  FROM lease.shard_leases AS l,
       LATERAL (SELECT l.handoff_to IS NOT NULL
                       AND pg_catalog.clock_timestamp()
                           < l.handoff_deadline + l.handoff_lease_duration AS pending) AS h;

COMMENT ON VIEW lease.lease_status IS
    'One row per lease: state (owned, expired, unowned, ended, blocked, handoff_pending), time to expiry, checkpoint, fencing epoch, pending handoff.';

CREATE VIEW lease.worker_loads AS
SELECT app_name, stream_name, lease_owner, pg_catalog.count(*) AS live_leases
  FROM lease.shard_leases
 WHERE lease_owner IS NOT NULL
   AND lease_expires_at > pg_catalog.clock_timestamp()
 GROUP BY app_name, stream_name, lease_owner;

COMMENT ON VIEW lease.worker_loads IS
    'Live (unexpired) leases per owner and stream.';

----------------------------------------------------------------------------
-- Switching over from the Elixir kcl_ex Ecto adapter (src/import.c)
----------------------------------------------------------------------------

-- SECURITY INVOKER on purpose, unlike every other function here: it reads a
-- table the caller names, so it must run with the caller's own privileges
-- (SELECT on the source, INSERT on lease.shard_leases).  It is an operator
-- function; worker roles are not granted it.
CREATE FUNCTION lease.import_kcl_ex(source regclass)
RETURNS bigint
AS 'MODULE_PATHNAME', 'lease_import_kcl_ex'
LANGUAGE C VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp;

----------------------------------------------------------------------------
-- Channel bindings: sandboxes, conversations, turns, quotas, rotation
----------------------------------------------------------------------------

-- A sandbox is the compute a conversation's worker runs in.  Active
-- (pending, starting, ready) sandboxes count against the fleet capacity and
-- the tenant's limit; admission (src/conversations.c) inserts them `pending`,
-- the worker infrastructure moves them on, end_conversation and
-- restore_rotated_channel end them.
CREATE TABLE lease.sandboxes (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id     text        NOT NULL,
    status      text        NOT NULL DEFAULT 'pending',
    created_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT sandboxes_status_check
        CHECK (status IN ('pending', 'starting', 'ready', 'suspended', 'terminated', 'failed'))
);

COMMENT ON TABLE lease.sandboxes IS
    'One row per sandbox; pending, starting and ready ones count against lease.fleet_capacity and the tenant''s limit.';

-- Serves admission's quota counts (start_conversation, rotate_channel): the
-- tenant's active sandboxes are an index range on user_id, the fleet's are
-- the whole (small) index.  Its predicate is exactly the "active" status list
-- the counting statement uses, so the planner can prove it applies.
CREATE INDEX sandboxes_active_user_idx
    ON lease.sandboxes (user_id)
    WHERE status IN ('pending', 'starting', 'ready');

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
        CHECK (status IN ('pending', 'running', 'idle', 'failed', 'terminated')),
    -- The invariant every function keeps, enforced by the table itself: a
    -- channel is only ever bound to a live conversation.
    CONSTRAINT conversations_binding_live_check
        CHECK (channel_id IS NULL OR status IN ('pending', 'running', 'idle')),
    CONSTRAINT conversations_not_rotated_from_itself_check
        CHECK (rotated_from IS DISTINCT FROM id)
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
    created_at      timestamptz NOT NULL DEFAULT pg_catalog.now()
);

-- Serves the foreign key turns.conversation_id (a conversation's turns).
CREATE INDEX turns_conversation_idx
    ON lease.turns (conversation_id);

-- Per-tenant sandbox limits; a tenant without a row gets
-- lease.default_sandbox_limit.
CREATE TABLE lease.tenant_limits (
    user_id       text NOT NULL PRIMARY KEY,
    sandbox_limit int  NOT NULL,
    CONSTRAINT tenant_limits_sandbox_limit_check CHECK (sandbox_limit >= 0)
);

-- The queue of post-commit compensations that failed: restore_rotated_channel
-- writes a row when its restore raised an error (after rolling the restore
-- back), retry_failed_compensations drains it.
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
    CONSTRAINT compensation_failures_sqlstate_check CHECK (sqlstate ~ '^[0-9A-Z]{5}$'),
    CONSTRAINT compensation_failures_attempts_check CHECK (attempts >= 1)
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

-- The functions below follow the lease core's rules: C, not STRICT (a NULL
-- where a value is required is 22004 naming the argument), SECURITY DEFINER
-- with search_path pinned, fixed schema-qualified SQL with parameters
-- (src/conversations.c, src/rotation.c).  The admission lock they take is
-- transaction-scoped: call each in its own short transaction (autocommit).

CREATE FUNCTION lease.start_conversation(
    user_id text, agent_id text, vault_id text, environment_id text, channel_id text)
RETURNS TABLE (outcome text, conversation_id bigint, detail text)
AS 'MODULE_PATHNAME', 'lease_start_conversation'
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
AS 'MODULE_PATHNAME', 'lease_rotate_channel'
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
AS 'MODULE_PATHNAME', 'lease_admit_turn'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION lease.end_conversation(conversation_id bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'lease_end_conversation'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA lease FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA lease FROM PUBLIC;
