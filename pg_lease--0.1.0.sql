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


REVOKE ALL ON ALL FUNCTIONS IN SCHEMA lease FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA lease FROM PUBLIC;
