/*-------------------------------------------------------------------------
 *
 * src/leases/taker.c
 *	  The server-side lease taker: balanced take_leases, graceful handoff
 *	  requests and batch renewal.
 *
 * One take_leases call is one balancing round for one worker, in four
 * prepared statements inside one SPI connection:
 *
 *	 1. loads: the stream's workers and their live leases, from
 *		lease.stream_workers (a worker's own leases are read only when its
 *		expiry bound has passed), and the number of takeable leases, cached
 *		in lease.stream_takeable (counted from the stream only after a
 *		lease was created, imported, deleted or ended);
 *	 2. claim: the leases promised to the caller whose handoff deadline has
 *		passed are taken from their holders;
 *	 3. take: unowned leases (a partial index) and the expired leases of
 *		workers whose bound has passed, unowned first then oldest-expired
 *		first, up to the caller's fair share, FOR NO KEY UPDATE SKIP LOCKED so
 *		concurrent callers neither block on nor collide over the same rows;
 *	 4. request: if the most-loaded worker holds at least two more leases
 *		than the caller, ask it to hand some over (never so many that the
 *		caller would end up above it).
 *
 * Loads are "effective": a live lease with a pending handoff counts for the
 * worker it is promised to, not its holder, so a request is never made
 * twice and a balanced stream is a fixed point (a further round changes
 * nothing).  Each statement that changes a lease records its events and
 * notifications in the same statement (events.h).
 *
 * The statements a round runs every time are prepared for generic plans
 * (CURSOR_OPT_GENERIC_PLAN): each is an index scan whatever the stream, and
 * planning a custom plan for the call's values, which the plan cache does
 * for the first calls and whenever it judges it cheaper, costs more than
 * running the statement (docs/taker-internals.md).
 *
 *-------------------------------------------------------------------------
 */
#include "pg_lease.h"

#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "nodes/parsenodes.h"
#include "access/xact.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/tuplestore.h"

#include "common/args.h"
#include "common/config.h"
#include "leases/events.h"
#include "leases/leases.h"
#include "leases/privileges.h"
#include "common/spi_util.h"

/*
 * Loads: one row per worker holding leases in the stream, per target of a
 * pending handoff, and for the caller $3, with its effective live load (a
 * lease promised away counts for the worker it is promised to), its number
 * of live leases (a worker is someone with a live lease, or the caller),
 * and whether it may hold expired leases.  Most loaded first.
 *
 * Nothing here reads the stream's leases: the workers come from
 * lease.stream_workers; a worker whose expires_min is still ahead holds
 * live leases only, so its count is its live count; only a worker whose
 * bound has passed (it may be dead, or renews lease by lease) has its own
 * leases counted, through shard_leases_owner_idx.  The pending handoffs
 * come through shard_leases_handoff_idx.
 */
static LeaseStatement loads_stmt = {
	.name = "take_leases: count loads",
	.sql =
	"WITH h AS ("
	" SELECT l.lease_owner, l.handoff_to"
	"   FROM lease.shard_leases AS l, " LEASE_SQL_CLOCK
	"  WHERE " LEASE_STREAM_MATCHES
	"    AND l.handoff_to IS NOT NULL"
	"    AND " LEASE_SQL_LIVE("l", LEASE_SQL_NOW)
	"    AND " LEASE_SQL_HANDOFF_PENDING("l", LEASE_SQL_NOW) "),"
	" o AS ("
	" SELECT w.worker,"
	"        w.expires_min OPERATOR(pg_catalog.<=) k.now AS suspect,"
	"        CASE WHEN w.expires_min OPERATOR(pg_catalog.>) k.now THEN w.leases"
	"             ELSE (SELECT pg_catalog.count(*) FROM lease.shard_leases AS l"
	"                    WHERE " LEASE_STREAM_MATCHES
	"                      AND l.lease_owner OPERATOR(pg_catalog.=) w.worker"
	"                      AND l.lease_expires_at OPERATOR(pg_catalog.>) k.now) END AS live"
	"   FROM lease.stream_workers AS w, " LEASE_SQL_CLOCK
	"  WHERE w.app_name OPERATOR(pg_catalog.=) $1"
	"    AND w.stream_name OPERATOR(pg_catalog.=) $2"
	"    AND w.leases OPERATOR(pg_catalog.>) 0)"
	" SELECT x.worker, pg_catalog.sum(x.load)::pg_catalog.int8 AS load,"
	"        pg_catalog.sum(x.live)::pg_catalog.int8 AS live,"
	"        pg_catalog.bool_or(x.suspect) AS suspect"
	"   FROM (SELECT o.worker, o.live AS load, o.live, o.suspect FROM o"
	"         UNION ALL"
	"         SELECT h.lease_owner, -1, 0, false FROM h"
	"         UNION ALL"
	"         SELECT h.handoff_to, 1, 1, false FROM h"
	"         UNION ALL"
	"         SELECT $3, 0, 1, false) AS x"
	"  GROUP BY x.worker"
	"  ORDER BY load DESC, x.worker COLLATE pg_catalog.\"C\"",
	.nargs = 3,
	.argtypes = {TEXTOID, TEXTOID, TEXTOID},
	.expected = SPI_OK_SELECT,
	.cursor_options = CURSOR_OPT_GENERIC_PLAN
};

/*
 * The stream's number of takeable leases (not ended, not blocked), as
 * cached by an earlier round: NULL when there is no count yet or a change
 * has made it stale (lease.lineage_changes); exists is false when the
 * stream has no lease.stream_takeable row.
 */
static LeaseStatement takeable_cached_stmt = {
	.name = "take_leases: cached takeable count",
	.sql =
	"SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM lease.lineage_changes AS g"
	"                              WHERE g.app_name OPERATOR(pg_catalog.=) $1"
	"                                AND g.stream_name OPERATOR(pg_catalog.=) $2)"
	"            THEN t.takeable END"
	"  FROM lease.stream_takeable AS t"
	" WHERE t.app_name OPERATOR(pg_catalog.=) $1"
	"   AND t.stream_name OPERATOR(pg_catalog.=) $2",
	.nargs = 2,
	.argtypes = {TEXTOID, TEXTOID},
	.expected = SPI_OK_SELECT,
	.cursor_options = CURSOR_OPT_GENERIC_PLAN
};

/*
 * Locks the stream's takeable row unless another round (counting) or a
 * change (lineage, FOR SHARE) holds it: one row when this round may store
 * its count.
 */
static LeaseStatement takeable_lock_stmt = {
	.name = "take_leases: lock the takeable row",
	.sql =
	"SELECT 1 FROM lease.stream_takeable AS t"
	" WHERE t.app_name OPERATOR(pg_catalog.=) $1"
	"   AND t.stream_name OPERATOR(pg_catalog.=) $2"
	"   FOR NO KEY UPDATE SKIP LOCKED",
	.nargs = 2,
	.argtypes = {TEXTOID, TEXTOID},
	.expected = SPI_OK_SELECT
};

/* The takeable count, read from every lease of the stream. */
#define TAKEABLE_COUNT_SQL \
	"SELECT pg_catalog.count(*) AS n FROM lease.shard_leases AS l" \
	" WHERE " LEASE_STREAM_MATCHES \
	"   AND " LEASE_SQL_NOT_ENDED("l") " AND NOT " LEASE_SQL_BLOCKED("l")

static LeaseStatement takeable_count_stmt = {
	.name = "take_leases: count takeable leases",
	.sql = TAKEABLE_COUNT_SQL,
	.nargs = 2,
	.argtypes = {TEXTOID, TEXTOID},
	.expected = SPI_OK_SELECT
};

/*
 * Counts and stores, with the row locked: the changes this count sees
 * (those visible to its snapshot) are deleted in the same statement, so a
 * change committed later leaves its row and makes the next round count
 * again.
 */
static LeaseStatement takeable_store_stmt = {
	.name = "take_leases: count and store takeable leases",
	.sql =
	"WITH n AS (" TAKEABLE_COUNT_SQL "),"
	" seen AS (DELETE FROM lease.lineage_changes AS g"
	"  WHERE g.app_name OPERATOR(pg_catalog.=) $1"
	"    AND g.stream_name OPERATOR(pg_catalog.=) $2)"
	" UPDATE lease.stream_takeable AS t SET takeable = n.n"
	"   FROM n"
	"  WHERE t.app_name OPERATOR(pg_catalog.=) $1"
	"    AND t.stream_name OPERATOR(pg_catalog.=) $2"
	" RETURNING t.takeable",
	.nargs = 2,
	.argtypes = {TEXTOID, TEXTOID},
	.expected = SPI_OK_UPDATE_RETURNING
};

/* The select list every taking statement returns (see put_rows). */
#define TAKER_RESULT(chan) \
	" SELECT c.shard_id, c.lease_count, c.from_owner, c.lease_epoch, " \
	LEASE_SQL_NOTIFY(chan) " FROM c ORDER BY c.shard_id COLLATE pg_catalog.\"C\""

/*
 * Claim: leases promised to $3 whose handoff deadline has passed and whose
 * holder still has them (live), taken with duration $4.
 */
static LeaseStatement claim_stmt = {
	.name = "take_leases: claim due handoffs",
	.sql =
	"WITH o AS ("
	" SELECT l.app_name, l.stream_name, l.shard_id, l.lease_owner AS from_owner"
	"   FROM lease.shard_leases AS l, " LEASE_SQL_CLOCK
	"  WHERE " LEASE_STREAM_MATCHES
	"    AND l.handoff_to OPERATOR(pg_catalog.=) $3"
	"    AND " LEASE_SQL_LIVE("l", LEASE_SQL_NOW)
	"    AND " LEASE_SQL_HANDOFF_PENDING("l", LEASE_SQL_NOW)
	"    AND " LEASE_SQL_NOW " OPERATOR(pg_catalog.>=) l.handoff_deadline"
	"    AND " LEASE_SQL_NOT_ENDED("l")
	"    AND NOT " LEASE_SQL_BLOCKED("l")
	"    FOR NO KEY UPDATE OF l SKIP LOCKED),"
	" c AS (UPDATE lease.shard_leases AS l"
	"    SET " LEASE_SQL_SET_NEW_OWNER("l", "$3", "$4", LEASE_SQL_NOW)
	"   FROM o, " LEASE_SQL_CLOCK
	"  WHERE " LEASE_SQL_SAME_KEY("l", "o")
	"  RETURNING l.app_name, l.stream_name, l.shard_id, 'transfer' AS event, o.from_owner,"
	"            l.lease_owner AS to_owner, l.lease_count, l.lease_epoch,"
	"            l.lease_expires_at AS to_expires_at)"
	LEASE_SQL_RECORD_EVENTS("$5")
	LEASE_SQL_RECORD_LOADS
	TAKER_RESULT("$6"),
	.nargs = 6,
	.argtypes = {TEXTOID, TEXTOID, TEXTOID, INTERVALOID, LEASE_EVENT_ARGTYPES},
	.expected = SPI_OK_SELECT,
	.cursor_options = CURSOR_OPT_GENERIC_PLAN
};

/*
 * Take: at most $5 unowned or expired takeable leases, unowned first, then
 * the longest expired, skipping rows another transaction has locked.  An
 * expired lease is takeable even with a handoff pending: its holder is gone.
 */
static LeaseStatement take_free_stmt = {
	.name = "take_leases: take unowned and expired",
	.sql =
	"WITH o AS ("
	" SELECT l.app_name, l.stream_name, l.shard_id, l.lease_owner AS from_owner"
	"   FROM lease.shard_leases AS l, " LEASE_SQL_CLOCK
	"  WHERE " LEASE_STREAM_MATCHES
	"    AND ((l.lease_owner IS NULL AND " LEASE_SQL_NOT_ENDED("l") ")"
	"         OR l.lease_owner OPERATOR(pg_catalog.=) ANY ($8))"
	"    AND NOT " LEASE_SQL_LIVE("l", LEASE_SQL_NOW)
	"    AND " LEASE_SQL_NOT_ENDED("l")
	"    AND NOT " LEASE_SQL_BLOCKED("l")
	"  ORDER BY l.lease_expires_at NULLS FIRST, l.shard_id COLLATE pg_catalog.\"C\""
	"  LIMIT $5"
	"    FOR NO KEY UPDATE OF l SKIP LOCKED),"
	" c AS (UPDATE lease.shard_leases AS l"
	"    SET " LEASE_SQL_SET_NEW_OWNER("l", "$3", "$4", LEASE_SQL_NOW)
	"   FROM o, " LEASE_SQL_CLOCK
	"  WHERE " LEASE_SQL_SAME_KEY("l", "o")
	"  RETURNING l.app_name, l.stream_name, l.shard_id,"
	"            CASE WHEN o.from_owner IS NULL THEN 'take' ELSE 'expiry_takeover' END AS event,"
	"            o.from_owner, l.lease_owner AS to_owner, l.lease_count, l.lease_epoch,"
	"            l.lease_expires_at AS to_expires_at)"
	LEASE_SQL_RECORD_EVENTS("$6")
	LEASE_SQL_RECORD_LOADS
	TAKER_RESULT("$7"),
	.nargs = 8,
	.argtypes = {TEXTOID, TEXTOID, TEXTOID, INTERVALOID, INT8OID, LEASE_EVENT_ARGTYPES,
	TEXTARRAYOID},
	.expected = SPI_OK_SELECT,
	.cursor_options = CURSOR_OPT_GENERIC_PLAN
};

/*
 * Request: ask holder $5 to hand at most $6 of its live leases (those not
 * already promised) over to $3, by deadline now + $7; $4 is the lease
 * duration the requester will hold them for.  Neither lease_count nor
 * lease_epoch changes: the holder keeps renewing and checkpointing.
 */
static LeaseStatement request_stmt = {
	.name = "take_leases: request handoffs",
	.sql =
	"WITH o AS ("
	" SELECT l.app_name, l.stream_name, l.shard_id"
	"   FROM lease.shard_leases AS l, " LEASE_SQL_CLOCK
	"  WHERE " LEASE_STREAM_MATCHES
	"    AND l.lease_owner OPERATOR(pg_catalog.=) $5"
	"    AND " LEASE_SQL_LIVE("l", LEASE_SQL_NOW)
	"    AND NOT " LEASE_SQL_HANDOFF_PENDING("l", LEASE_SQL_NOW)
	"    AND " LEASE_SQL_NOT_ENDED("l")
	"  ORDER BY l.shard_id COLLATE pg_catalog.\"C\""
	"  LIMIT $6"
	"    FOR NO KEY UPDATE OF l SKIP LOCKED),"
	" c AS (UPDATE lease.shard_leases AS l"
	"    SET handoff_to = $3,"
	"        handoff_requested_at = " LEASE_SQL_NOW ","
	"        handoff_deadline = " LEASE_SQL_NOW " OPERATOR(pg_catalog.+) $7,"
	"        handoff_lease_duration = $4,"
	"        updated_at = pg_catalog.now()"
	"   FROM o, " LEASE_SQL_CLOCK
	"  WHERE " LEASE_SQL_SAME_KEY("l", "o")
	"  RETURNING l.app_name, l.stream_name, l.shard_id, 'handoff_request' AS event,"
	"            l.lease_owner AS from_owner, l.handoff_to AS to_owner,"
	"            l.lease_count, l.lease_epoch)"
	LEASE_SQL_RECORD_EVENTS("$8")
	TAKER_RESULT("$9"),
	.nargs = 9,
	.argtypes = {TEXTOID, TEXTOID, TEXTOID, INTERVALOID, TEXTOID, INT8OID, INTERVALOID,
	LEASE_EVENT_ARGTYPES},
	.expected = SPI_OK_SELECT
};

/*
 * renew_leases gives every lease of $3 in the stream the same expiry, so
 * that expiry is the worker's expires_min, unless an ownership change of
 * the worker raced the renewal (its version moved since the statement's
 * snapshot: it may have brought a lease this renewal did not see), in which
 * case the bound is only lowered if need be.
 */
#define RENEW_SQL_RAISE_BOUND \
	", bound AS (UPDATE lease.stream_workers AS w" \
	"    SET expires_min = CASE WHEN w.version OPERATOR(pg_catalog.=) s.version" \
	"                           THEN r.expires_at" \
	"                           ELSE LEAST(w.expires_min, r.expires_at) END" \
	"   FROM lease.stream_workers AS s," \
	"        (SELECT pg_catalog.min(c.expires_at) AS expires_at FROM c) AS r" \
	"  WHERE w.app_name OPERATOR(pg_catalog.=) $1" \
	"    AND w.stream_name OPERATOR(pg_catalog.=) $2" \
	"    AND w.worker OPERATOR(pg_catalog.=) $3" \
	"    AND s.app_name OPERATOR(pg_catalog.=) $1" \
	"    AND s.stream_name OPERATOR(pg_catalog.=) $2" \
	"    AND s.worker OPERATOR(pg_catalog.=) $3" \
	"    AND r.expires_at IS NOT NULL" \
	"    AND w.expires_min IS DISTINCT FROM r.expires_at)"

/*
 * Renew every lease $3 holds in the stream (guarded on ownership: a lease
 * taken away is simply absent), reporting pending handoff requests and each
 * lease's fencing token.  A lease handed to $3 by its holder's
 * release_lease is held by $3 already, so it shows up here with the epoch
 * the transfer gave it.
 */
static LeaseStatement renew_all_stmt = {
	.name = "renew_leases",
	.sql =
	"WITH c AS (UPDATE lease.shard_leases AS l"
	"    SET lease_count = l.lease_count OPERATOR(pg_catalog.+) 1,"
	"        lease_expires_at = " LEASE_SQL_NOW " OPERATOR(pg_catalog.+) $4,"
	"        updated_at = pg_catalog.now()"
	"   FROM " LEASE_SQL_CLOCK
	"  WHERE " LEASE_STREAM_MATCHES
	"    AND l.lease_owner OPERATOR(pg_catalog.=) $3"
	"  RETURNING l.shard_id, l.lease_count,"
	"            CASE WHEN " LEASE_SQL_HANDOFF_PENDING("l", LEASE_SQL_NOW)
	"                 THEN l.handoff_to END AS handoff_to, l.lease_epoch,"
	"            l.lease_expires_at AS expires_at)"
	RENEW_SQL_RAISE_BOUND
	" SELECT c.shard_id, c.lease_count, c.handoff_to, c.lease_epoch"
	"   FROM c ORDER BY c.shard_id COLLATE pg_catalog.\"C\"",
	.nargs = 4,
	.argtypes = {TEXTOID, TEXTOID, TEXTOID, INTERVALOID},
	.expected = SPI_OK_SELECT
};

/*
 * An operator's handoff request: a live lease, not already promised, not
 * held by $4 already, to be handed to $4 by now + $5 (lease duration $6).
 */
static LeaseStatement request_one_stmt = {
	.name = "request_handoff",
	.sql =
	"WITH c AS (UPDATE lease.shard_leases AS l"
	"    SET handoff_to = $4,"
	"        handoff_requested_at = " LEASE_SQL_NOW ","
	"        handoff_deadline = " LEASE_SQL_NOW " OPERATOR(pg_catalog.+) $5,"
	"        handoff_lease_duration = $6,"
	"        updated_at = pg_catalog.now()"
	"   FROM " LEASE_SQL_CLOCK
	"  WHERE " LEASE_KEY_MATCHES
	"    AND " LEASE_SQL_LIVE("l", LEASE_SQL_NOW)
	"    AND NOT " LEASE_SQL_HANDOFF_PENDING("l", LEASE_SQL_NOW)
	"    AND " LEASE_SQL_NOT_ENDED("l")
	"    AND l.lease_owner OPERATOR(pg_catalog.<>) $4"
	"  RETURNING l.app_name, l.stream_name, l.shard_id, 'handoff_request' AS event,"
	"            l.lease_owner AS from_owner, l.handoff_to AS to_owner,"
	"            l.lease_count, l.lease_epoch)"
	LEASE_SQL_RECORD_EVENTS("$7")
	" SELECT true, " LEASE_SQL_NOTIFY("$8") " FROM c",
	.nargs = 8,
	.argtypes = {TEXTOID, TEXTOID, TEXTOID, TEXTOID, INTERVALOID, INTERVALOID,
	LEASE_EVENT_ARGTYPES},
	.expected = SPI_OK_SELECT
};

/*
 * The statements as they were before the bookkeeping tables (0.2 schema,
 * leases.h LEASE_STMT): one read of the whole stream per round.
 */
static LeaseStatement loads_stmt_0_2 = {
	.name = "take_leases: count loads (0.2 schema)",
	.sql =
	"SELECT w.worker, pg_catalog.sum(w.load)::pg_catalog.int8 AS load,"
	"       pg_catalog.sum(w.live)::pg_catalog.int8 AS live,"
	"       pg_catalog.max(pg_catalog.max(w.takeable)) OVER () AS takeable"
	"  FROM (SELECT l.lease_owner AS worker,"
	"               pg_catalog.count(*) FILTER (WHERE " LEASE_SQL_LIVE("l", LEASE_SQL_NOW)
	"                   AND NOT " LEASE_SQL_HANDOFF_PENDING("l", LEASE_SQL_NOW) ") AS load,"
	"               pg_catalog.count(*) FILTER (WHERE " LEASE_SQL_LIVE("l", LEASE_SQL_NOW) ") AS live,"
	"               pg_catalog.sum(pg_catalog.count(*) FILTER (WHERE "
	LEASE_SQL_NOT_ENDED("l") " AND NOT " LEASE_SQL_BLOCKED("l") "))"
	"                   OVER ()::pg_catalog.int8 AS takeable"
	"          FROM lease.shard_leases AS l, " LEASE_SQL_CLOCK
	"         WHERE " LEASE_STREAM_MATCHES
	"         GROUP BY l.lease_owner"
	"        UNION ALL"
	"        SELECT l.handoff_to, pg_catalog.count(*), pg_catalog.count(*), NULL"
	"          FROM lease.shard_leases AS l, " LEASE_SQL_CLOCK
	"         WHERE " LEASE_STREAM_MATCHES
	"           AND l.handoff_to IS NOT NULL"
	"           AND " LEASE_SQL_LIVE("l", LEASE_SQL_NOW)
	"           AND " LEASE_SQL_HANDOFF_PENDING("l", LEASE_SQL_NOW)
	"         GROUP BY l.handoff_to"
	"        UNION ALL"
	"        SELECT $3, 0, 1, NULL) AS w"
	" GROUP BY w.worker"
	" ORDER BY w.worker IS NULL, load DESC, w.worker COLLATE pg_catalog.\"C\"",
	.nargs = 3,
	.argtypes = {TEXTOID, TEXTOID, TEXTOID},
	.expected = SPI_OK_SELECT
};

static LeaseStatement claim_stmt_0_2 = {
	.name = "take_leases: claim due handoffs (0.2 schema)",
	.sql =
	"WITH o AS ("
	" SELECT l.app_name, l.stream_name, l.shard_id, l.lease_owner AS from_owner"
	"   FROM lease.shard_leases AS l, " LEASE_SQL_CLOCK
	"  WHERE " LEASE_STREAM_MATCHES
	"    AND l.handoff_to OPERATOR(pg_catalog.=) $3"
	"    AND " LEASE_SQL_LIVE("l", LEASE_SQL_NOW)
	"    AND " LEASE_SQL_HANDOFF_PENDING("l", LEASE_SQL_NOW)
	"    AND " LEASE_SQL_NOW " OPERATOR(pg_catalog.>=) l.handoff_deadline"
	"    AND " LEASE_SQL_NOT_ENDED("l")
	"    AND NOT " LEASE_SQL_BLOCKED("l")
	"    FOR NO KEY UPDATE OF l SKIP LOCKED),"
	" c AS (UPDATE lease.shard_leases AS l"
	"    SET " LEASE_SQL_SET_NEW_OWNER("l", "$3", "$4", LEASE_SQL_NOW)
	"   FROM o, " LEASE_SQL_CLOCK
	"  WHERE " LEASE_SQL_SAME_KEY("l", "o")
	"  RETURNING l.app_name, l.stream_name, l.shard_id, 'transfer' AS event, o.from_owner,"
	"            l.lease_owner AS to_owner, l.lease_count, l.lease_epoch)"
	LEASE_SQL_RECORD_EVENTS("$5")
	TAKER_RESULT("$6"),
	.nargs = 6,
	.argtypes = {TEXTOID, TEXTOID, TEXTOID, INTERVALOID, LEASE_EVENT_ARGTYPES},
	.expected = SPI_OK_SELECT
};

static LeaseStatement take_free_stmt_0_2 = {
	.name = "take_leases: take unowned and expired (0.2 schema)",
	.sql =
	"WITH o AS ("
	" SELECT l.app_name, l.stream_name, l.shard_id, l.lease_owner AS from_owner"
	"   FROM lease.shard_leases AS l, " LEASE_SQL_CLOCK
	"  WHERE " LEASE_STREAM_MATCHES
	"    AND NOT " LEASE_SQL_LIVE("l", LEASE_SQL_NOW)
	"    AND " LEASE_SQL_NOT_ENDED("l")
	"    AND NOT " LEASE_SQL_BLOCKED("l")
	"  ORDER BY l.lease_expires_at NULLS FIRST, l.shard_id COLLATE pg_catalog.\"C\""
	"  LIMIT $5"
	"    FOR NO KEY UPDATE OF l SKIP LOCKED),"
	" c AS (UPDATE lease.shard_leases AS l"
	"    SET " LEASE_SQL_SET_NEW_OWNER("l", "$3", "$4", LEASE_SQL_NOW)
	"   FROM o, " LEASE_SQL_CLOCK
	"  WHERE " LEASE_SQL_SAME_KEY("l", "o")
	"  RETURNING l.app_name, l.stream_name, l.shard_id,"
	"            CASE WHEN o.from_owner IS NULL THEN 'take' ELSE 'expiry_takeover' END AS event,"
	"            o.from_owner, l.lease_owner AS to_owner, l.lease_count, l.lease_epoch)"
	LEASE_SQL_RECORD_EVENTS("$6")
	TAKER_RESULT("$7"),
	.nargs = 7,
	.argtypes = {TEXTOID, TEXTOID, TEXTOID, INTERVALOID, INT8OID, LEASE_EVENT_ARGTYPES},
	.expected = SPI_OK_SELECT
};

static LeaseStatement renew_all_stmt_0_2 = {
	.name = "renew_leases (0.2 schema)",
	.sql =
	"WITH c AS (UPDATE lease.shard_leases AS l"
	"    SET lease_count = l.lease_count OPERATOR(pg_catalog.+) 1,"
	"        lease_expires_at = " LEASE_SQL_NOW " OPERATOR(pg_catalog.+) $4,"
	"        updated_at = pg_catalog.now()"
	"   FROM " LEASE_SQL_CLOCK
	"  WHERE " LEASE_STREAM_MATCHES
	"    AND l.lease_owner OPERATOR(pg_catalog.=) $3"
	"  RETURNING l.shard_id, l.lease_count,"
	"            CASE WHEN " LEASE_SQL_HANDOFF_PENDING("l", LEASE_SQL_NOW)
	"                 THEN l.handoff_to END AS handoff_to)"
	" SELECT c.shard_id, c.lease_count, c.handoff_to FROM c ORDER BY c.shard_id COLLATE pg_catalog.\"C\"",
	.nargs = 4,
	.argtypes = {TEXTOID, TEXTOID, TEXTOID, INTERVALOID},
	.expected = SPI_OK_SELECT
};

/* The actions take_leases reports (docs/shard-leases.md). */
#define LEASE_ACTION_TAKEN				"taken"
#define LEASE_ACTION_HANDOFF_REQUESTED	"handoff_requested"

/*
 * Appends every row of the current SPI result (shard_id, lease_count,
 * previous owner, lease_epoch) to the result set with the given action.
 * tuplestore_putvalues copies the values into the tuplestore's own memory,
 * so nothing points into SPI memory after SPI_finish.
 */
static void
put_rows(ReturnSetInfo *rsinfo, const char *action)
{
	Datum		action_datum = CStringGetTextDatum(action);

	for (uint64 row = 0; row < SPI_processed; row++)
	{
		Datum		values[5];
		bool		nulls[5] = {false, false, false, false, false};

		values[0] = lease_spi_value(row, 1, &nulls[0]);
		values[1] = lease_spi_value(row, 2, &nulls[1]);
		values[2] = action_datum;
		values[3] = lease_spi_value(row, 3, &nulls[3]);
		values[4] = lease_spi_value(row, 4, &nulls[4]);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
}

/* True when two text Datums are equal, byte for byte. */
static bool
text_equal(Datum a, Datum b)
{
	return DatumGetBool(DirectFunctionCall2Coll(texteq, C_COLLATION_OID, a, b));
}

/*
 * The stream's number of takeable leases: the cached count when no change
 * has made it stale; otherwise counted from the leases (the one read of
 * the whole stream, once after leases were created, imported, deleted or
 * ended), and stored when this round may: under READ COMMITTED (each
 * statement then sees everything committed before it, so the count taken
 * after the lock includes every change that did not wait for the lock),
 * with the row locked.
 */
static int64
stream_takeable(Datum *values)
{
	bool		isnull = true;
	Datum		cached = (Datum) 0;
	uint64		rows;

	rows = lease_spi_run(&takeable_cached_stmt, values, NULL, 0);
	if (rows > 0)
		cached = lease_spi_value(0, 1, &isnull);
	if (!isnull)
		return DatumGetInt64(cached);

	/* no row: the stream has no lease (create_lease adds the row) */
	if (rows > 0 && !IsolationUsesXactSnapshot() &&
			 lease_spi_run(&takeable_lock_stmt, values, NULL, 0) > 0)
	{
		lease_spi_run_with(&takeable_store_stmt, values, NULL, 0, "jit", "off");
		return DatumGetInt64(lease_spi_value(0, 1, &isnull));
	}
	/* JIT off: see lease_take_leases */
	lease_spi_run_with(&takeable_count_stmt, values, NULL, 0, "jit", "off");
	return DatumGetInt64(lease_spi_value(0, 1, &isnull));
}

PG_FUNCTION_INFO_V1(lease_take_leases);

/*
 * lease.take_leases: one balancing round for one worker; returns the
 * leases this call took or asked to be handed over.
 */
Datum
lease_take_leases(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	MemoryContext callcxt = CurrentMemoryContext;
	Datum		stream_args[3];	/* $1..$3 of every statement below */
	Datum		claim_args[4 + LEASE_EVENT_NPARAMS];
	Datum		take_args[5 + LEASE_EVENT_NPARAMS + 1];
	Datum		request_args[7 + LEASE_EVENT_NPARAMS];
	Datum		app,
				stream,
				owner,
				duration;
	int32		max_leases = 0;
	bool		capped;
	int32		max_steal;
	uint64		rows;
	int64		workers,
				takeable,
				target,
				mine = 0,
				victim_load = 0;
	Datum		victim = (Datum) 0;
	bool		have_victim = false;
	bool		state;
	Datum	   *suspects;
	int			nsuspects = 0;
	LeaseCaller caller;

	app = lease_arg_ident(fcinfo, 0, "app_name");
	stream = lease_arg_ident(fcinfo, 1, "stream_name");
	owner = lease_arg_ident(fcinfo, 2, "owner");
	duration = lease_arg_duration(fcinfo, 3, "lease_duration");
	capped = lease_arg_opt_positive_int32(fcinfo, 4, "max_leases", &max_leases);
	max_steal = lease_arg_nonneg_int32(fcinfo, 5, "max_steal");

	InitMaterializedSRF(fcinfo, 0);
	lease_app_begin(fcinfo, app, &caller);

	/* 1. the workers, their effective loads, and the takeable leases */
	stream_args[0] = app;
	stream_args[1] = stream;
	stream_args[2] = owner;
	state = lease_has_taker_state();
	/*
	 * JIT off: the planner prices the per-worker count (run only for a
	 * worker whose bound has passed; 0.2: the parent subquery) as if it ran
	 * for every row, so at 100,000 leases the estimate crosses
	 * jit_above_cost and compiling takes ~250 ms for a statement that runs
	 * in a tenth of a millisecond.
	 */
	rows = lease_spi_run_with(state ? &loads_stmt : &loads_stmt_0_2, stream_args, NULL, 0,
							  "jit", "off");
	workers = 0;
	takeable = 0;
	suspects = (Datum *) MemoryContextAlloc(callcxt, sizeof(Datum) * (rows + 1));
	for (uint64 row = 0; row < rows; row++)
	{
		bool		isnull;
		Datum		worker = lease_spi_value(row, 1, &isnull);
		bool		no_worker = isnull;
		int64		load = DatumGetInt64(lease_spi_value(row, 2, &isnull));
		int64		live = DatumGetInt64(lease_spi_value(row, 3, &isnull));
		Datum		col4 = lease_spi_value(row, 4, &isnull);

		if (!state && !isnull)
			takeable = DatumGetInt64(col4);		/* 0.2: the takeable total */
		else if (state && DatumGetBool(col4))
		{
			/* it may hold expired leases: the take looks at its leases too */
			MemoryContext oldcxt = MemoryContextSwitchTo(callcxt);

			suspects[nsuspects++] = datumCopy(worker, false, -1);
			MemoryContextSwitchTo(oldcxt);
		}
		if (no_worker || live == 0)
			continue;			/* unowned leases, or an owner whose leases all expired */
		workers++;
		if (text_equal(worker, owner))
			mine = load;
		else if (!have_victim)
		{
			/* rows come most loaded first, ties by name: the first other worker */
			MemoryContext oldcxt = MemoryContextSwitchTo(callcxt);

			victim = datumCopy(worker, false, -1);
			MemoryContextSwitchTo(oldcxt);
			victim_load = load;
			have_victim = true;
		}
	}
	if (workers < 1)
		elog(ERROR, "pg_lease: take_leases found no worker, not even the caller");
	if (state)
		takeable = stream_takeable(stream_args);
	target = (takeable + workers - 1) / workers;
	if (capped && target > max_leases)
		target = max_leases;

	/*
	 * 2. leases promised to the caller whose deadline has passed (already in
	 * mine); $4 the lease duration, then the event parameters
	 */
	memcpy(claim_args, stream_args, sizeof(stream_args));
	claim_args[3] = duration;
	lease_event_params(&claim_args[4]);
	lease_spi_run(state ? &claim_stmt : &claim_stmt_0_2, claim_args, NULL, 0);
	put_rows(rsinfo, LEASE_ACTION_TAKEN);

	/*
	 * 3. unowned and expired leases, up to the target: $4 the lease
	 * duration, $5 how many, the event parameters, then the workers whose
	 * leases may have expired
	 */
	if (mine < target)
	{
		memcpy(take_args, stream_args, sizeof(stream_args));
		take_args[3] = duration;
		take_args[4] = Int64GetDatum(target - mine);
		lease_event_params(&take_args[5]);
		take_args[5 + LEASE_EVENT_NPARAMS] =
			PointerGetDatum(construct_array(suspects, nsuspects, TEXTOID, -1, false, TYPALIGN_INT));
		mine += (int64) lease_spi_run_with(state ? &take_free_stmt : &take_free_stmt_0_2,
										   take_args, NULL, 0, "jit", "off");
		put_rows(rsinfo, LEASE_ACTION_TAKEN);
	}

	/*
	 * 4. handoff requests: only from a worker holding at least two more, at
	 * most max_steal, never beyond the target, and never so many that the
	 * caller would end up above that worker (mine + n <= victim_load - n).
	 */
	if (have_victim && max_steal > 0 && mine < target && victim_load - mine >= 2)
	{
		int64		n = Min((int64) max_steal, (victim_load - mine) / 2);

		n = Min(n, target - mine);
		/* $4 the lease duration, $5 the holder, $6 how many, $7 the deadline */
		memcpy(request_args, stream_args, sizeof(stream_args));
		request_args[3] = duration;
		request_args[4] = victim;
		request_args[5] = Int64GetDatum(n);
		request_args[6] = lease_interval_from_ms(lease_handoff_timeout_ms);
		lease_event_params(&request_args[7]);
		lease_spi_run(&request_stmt, request_args, NULL, 0);
		put_rows(rsinfo, LEASE_ACTION_HANDOFF_REQUESTED);
	}

	lease_app_end(&caller);
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(lease_renew_leases);

/*
 * lease.renew_leases: renews every lease the owner holds in the stream;
 * handoff_to is set where a handoff has been requested, lease_epoch is the
 * fencing token of each.
 */
Datum
lease_renew_leases(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Datum		values[4];
	LeaseCaller caller;

	values[0] = lease_arg_ident(fcinfo, 0, "app_name");
	values[1] = lease_arg_ident(fcinfo, 1, "stream_name");
	values[2] = lease_arg_ident(fcinfo, 2, "owner");
	values[3] = lease_arg_duration(fcinfo, 3, "lease_duration");

	InitMaterializedSRF(fcinfo, 0);
	lease_app_begin(fcinfo, values[0], &caller);
	lease_spi_run(LEASE_STMT(renew_all_stmt), values, NULL, 0);
	for (uint64 row = 0; row < SPI_processed; row++)
	{
		Datum		out[4];
		bool		nulls[4];

		/*
		 * The function's declared columns: 0.2.0's renew_leases has no
		 * lease_epoch, and its statement (renew_all_stmt_0_2) returns none.
		 */
		for (int col = 0; col < Min(rsinfo->setDesc->natts, 4); col++)
			out[col] = lease_spi_value(row, col + 1, &nulls[col]);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, nulls);
	}
	lease_app_end(&caller);
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(lease_request_handoff);

/*
 * lease.request_handoff: true when the lease's holder has been asked to
 * hand it to to_owner (for operators and leaders).
 */
Datum
lease_request_handoff(PG_FUNCTION_ARGS)
{
	Datum		values[6 + LEASE_EVENT_NPARAMS];

	values[0] = lease_arg_ident(fcinfo, 0, "app_name");
	values[1] = lease_arg_ident(fcinfo, 1, "stream_name");
	values[2] = lease_arg_ident(fcinfo, 2, "shard_id");
	values[3] = lease_arg_ident(fcinfo, 3, "to_owner");
	values[4] = lease_interval_from_ms(lease_handoff_timeout_ms);
	values[5] = lease_interval_from_ms(lease_default_lease_duration_ms);
	lease_event_params(&values[6]);

	PG_RETURN_BOOL(lease_spi_exec_for_app(fcinfo, &request_one_stmt, values, NULL) > 0);
}
