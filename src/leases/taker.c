/*-------------------------------------------------------------------------
 *
 * src/leases/taker.c
 *	  The server-side lease taker: balanced take_leases rounds, and
 *	  plan_rebalance, the dry run of their weighted plan (the planner
 *	  itself is planner.c; renew_leases and request_handoff, renewal.c).
 *
 * One take_leases call is one balancing round for one worker, in four
 * prepared statements inside one SPI connection:
 *
 *	 1. loads: the stream's workers and their live leases, from
 *		lease.worker_holdings (lease.stream_workers up to 0.4.0) with each
 *		worker's heartbeat row (a worker's own leases are read only when its
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
#include "leases/balancing.h"
#include "leases/events.h"
#include "leases/incarnation.h"
#include "leases/lease_sql.h"
#include "leases/placement.h"
#include "leases/planner.h"
#include "leases/privileges.h"
#include "leases/workers.h"
#include "common/spi_util.h"

/*
 * Loads: one row per worker holding leases in the stream, per target of a
 * pending handoff, and for the caller $3, with its effective live load (a
 * lease promised away counts for the worker it is promised to), its number
 * of live leases (a worker is someone with a live lease, or the caller),
 * whether it may hold expired leases, its effective known load, how many
 * of its leases have a known weight, and its declared capacity.  Most
 * loaded first.
 *
 * Nothing here reads the stream's leases but the pending handoffs (through
 * shard_leases_handoff_idx) and the leases of a suspect worker: the
 * workers come from their bookkeeping rows.
 */
/*
 * A worker's leases are all live while its bound or its
 * heartbeat is ahead (min over its leases of GREATEST(own expiry,
 * heartbeat) = GREATEST(bound, heartbeat)) and no liveness cutoff applies
 * (LOADS_SUSPECT false); otherwise each lease's effective expiry
 * (LOADS_ALIVE) is read.  `hb` is the alias of the worker's heartbeat row,
 * `w` that of its bookkeeping (the same row on 0.4.0).
 */
#define LOADS_SUSPECT(hb) \
	"(GREATEST(w.expires_min, " hb ".renewed_until) OPERATOR(pg_catalog.<=) k.now" \
	" OR (" LEASE_SQL_CUTOFF(hb, "k.now") ") IS NOT NULL)"
#define LOADS_ALIVE(hb) LEASE_SQL_EXPIRY_W("l.lease_expires_at", hb, "k.now")

/*
 * The workers of the loads: on 0.4.0 one row per worker, bookkeeping and
 * heartbeat; from 0.5.0 on the bookkeeping joined to the heartbeat row.
 */
#define LOADS_WORKERS_0_4	"lease.stream_workers AS w"
#define LOADS_WORKERS \
	"lease.worker_holdings AS w" \
	" LEFT JOIN lease.stream_workers AS hb" \
	"   ON hb.app_name OPERATOR(pg_catalog.=) w.app_name" \
	"  AND hb.stream_name OPERATOR(pg_catalog.=) w.stream_name" \
	"  AND hb.worker OPERATOR(pg_catalog.=) w.worker"

/*
 * The last three columns: the worker's effective known load
 * (the sum of COALESCE(weight, work_rate) of its live leases, a promised
 * lease counting for the worker it is promised to), how many of those
 * leases have a known weight, and the worker's declared capacity.  A
 * worker that is not suspect has them in its bookkeeping row; a suspect
 * one has its leases read once (the lateral r, empty for the others).
 */
#define LEASE_SQL_KNOWN_WEIGHT(a) "COALESCE(" a ".weight, " a ".work_rate)"
#define LOADS_SQL_WEIGHTED(workers, hb) \
	"WITH h AS (" \
	" SELECT l.lease_owner, l.handoff_to, " LEASE_SQL_KNOWN_WEIGHT("l") " AS weight" \
	"   FROM lease.shard_leases AS l, " LEASE_SQL_CLOCK \
	"  WHERE " LEASE_STREAM_MATCHES \
	"    AND l.handoff_to IS NOT NULL" \
	"    AND " LEASE_SQL_LIVE("l", LEASE_SQL_NOW) \
	"    AND " LEASE_SQL_HANDOFF_PENDING("l", LEASE_SQL_NOW) ")," \
	" o AS (" \
	" SELECT w.worker, s.suspect," \
	"        CASE WHEN NOT s.suspect THEN w.leases ELSE r.live END AS live," \
	"        CASE WHEN NOT s.suspect THEN w.load ELSE r.wload END AS wload," \
	"        CASE WHEN NOT s.suspect THEN w.weighed ELSE r.weighed END AS weighed" \
	"   FROM " workers ", " LEASE_SQL_CLOCK "," \
	"        LATERAL (SELECT " LOADS_SUSPECT(hb) " AS suspect) AS s," \
	"        LATERAL (SELECT pg_catalog.count(*) AS live," \
	"                        COALESCE(pg_catalog.sum(" LEASE_SQL_KNOWN_WEIGHT("l") "), 0) AS wload," \
	"                        pg_catalog.count(" LEASE_SQL_KNOWN_WEIGHT("l") ") AS weighed" \
	"                   FROM lease.shard_leases AS l" \
	"                  WHERE s.suspect" \
	"                    AND " LEASE_STREAM_MATCHES \
	"                    AND l.lease_owner OPERATOR(pg_catalog.=) w.worker" \
	"                    AND " LOADS_ALIVE(hb) " OPERATOR(pg_catalog.>) k.now) AS r" \
	"  WHERE w.app_name OPERATOR(pg_catalog.=) $1" \
	"    AND w.stream_name OPERATOR(pg_catalog.=) $2" \
	"    AND w.leases OPERATOR(pg_catalog.>) 0)" \
	" SELECT x.worker, pg_catalog.sum(x.load)::pg_catalog.int8 AS load," \
	"        pg_catalog.sum(x.live)::pg_catalog.int8 AS live," \
	"        pg_catalog.bool_or(x.suspect) AS suspect," \
	"        pg_catalog.sum(x.wload)::pg_catalog.float8 AS wload," \
	"        pg_catalog.sum(x.weighed)::pg_catalog.int8 AS weighed," \
	"        COALESCE((SELECT c.capacity FROM lease.worker_capacities AS c" \
	"                   WHERE c.app_name OPERATOR(pg_catalog.=) $1" \
	"                     AND c.stream_name OPERATOR(pg_catalog.=) $2" \
	"                     AND c.worker OPERATOR(pg_catalog.=) x.worker), 1) AS capacity" \
	"   FROM (SELECT o.worker, o.live AS load, o.live, o.suspect," \
	"                o.wload::pg_catalog.float8 AS wload, o.weighed::pg_catalog.int8 AS weighed FROM o" \
	"         UNION ALL" \
	"         SELECT h.lease_owner, -1, 0, false," \
	"                OPERATOR(pg_catalog.-) COALESCE(h.weight, 0)," \
	"                CASE WHEN h.weight IS NULL THEN 0 ELSE -1 END FROM h" \
	"         UNION ALL" \
	"         SELECT h.handoff_to, 1, 1, false, COALESCE(h.weight, 0)," \
	"                CASE WHEN h.weight IS NULL THEN 0 ELSE 1 END FROM h" \
	"         UNION ALL" \
	"         SELECT $3, 0, 1, false, 0, 0) AS x" \
	"  GROUP BY x.worker" \
	"  ORDER BY load DESC, x.worker COLLATE pg_catalog.\"C\""

static LeaseStatement loads_stmts[2] =
	LEASE_SCHEMA_STMTS2("take_leases: loads",
						LOADS_SQL_WEIGHTED(LOADS_WORKERS_0_4, "w"), LOADS_SQL_WEIGHTED(LOADS_WORKERS, "hb"),
						CURSOR_OPT_GENERIC_PLAN, true, 3, TEXTOID, TEXTOID, TEXTOID);

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
	.expected = SPI_OK_SELECT,
	LEASE_STMT_JIT_OFF			/* see read_loads */
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
	.expected = SPI_OK_UPDATE_RETURNING,
	LEASE_STMT_JIT_OFF			/* see read_loads */
};

/* The select list every taking statement returns (see put_rows). */
#define TAKER_RESULT(chan) \
	" SELECT c.shard_id, c.lease_count, c.from_owner, c.lease_epoch, " \
	LEASE_SQL_NOTIFY(chan) " FROM c ORDER BY c.shard_id COLLATE pg_catalog.\"C\""

/*
 * Claim: leases promised to $3 whose handoff deadline has passed and whose
 * holder still has them (live), taken with duration $4.
 */
#define CLAIM_SQL(loads) \
	"WITH o AS (" \
	" SELECT l.app_name, l.stream_name, l.shard_id, l.lease_owner AS from_owner" \
	"   FROM lease.shard_leases AS l, " LEASE_SQL_CLOCK \
	"  WHERE " LEASE_STREAM_MATCHES \
	"    AND l.handoff_to OPERATOR(pg_catalog.=) $3" \
	"    AND " LEASE_SQL_LIVE("l", LEASE_SQL_NOW) \
	"    AND " LEASE_SQL_HANDOFF_PENDING("l", LEASE_SQL_NOW) \
	"    AND " LEASE_SQL_NOW " OPERATOR(pg_catalog.>=) l.handoff_deadline" \
	"    AND " LEASE_SQL_NOT_ENDED("l") \
	"    AND NOT " LEASE_SQL_BLOCKED("l") \
	"    FOR NO KEY UPDATE OF l SKIP LOCKED)," \
	LEASE_SQL_TAKE_LOCKED("$3", "$4", "'transfer'") \
	LEASE_SQL_RECORD_EVENTS("$5") \
	loads \
	TAKER_RESULT("$6")

static LeaseStatement claim_stmts[2] =
	LEASE_SCHEMA_STMTS2("take_leases: claim due handoffs",
						CLAIM_SQL(LEASE_SQL_RECORD_LOADS_0_4), CLAIM_SQL(LEASE_SQL_RECORD_LOADS),
						CURSOR_OPT_GENERIC_PLAN, false,
					   6, TEXTOID, TEXTOID, TEXTOID, INTERVALOID, LEASE_EVENT_ARGTYPES);

/*
 * Take: at most $5 unowned or expired takeable leases, unowned first, then
 * the longest expired, skipping rows another transaction has locked.  An
 * expired lease is takeable even with a handoff pending: its holder is gone.
 * `owners` limits the owned leases read: to those of $8, the workers whose
 * expiry bound has passed (an index scan per worker), or to the planned
 * ones.
 */
#define TAKE_FREE_SQL(owners, loads) \
	"WITH o0 AS (" \
	" SELECT l.app_name, l.stream_name, l.shard_id, l.lease_owner AS from_owner," \
	"        l.lease_expires_at AS from_expires_at" \
	"   FROM lease.shard_leases AS l, " LEASE_SQL_CLOCK \
	"  WHERE " LEASE_STREAM_MATCHES \
	owners \
	"    AND NOT " LEASE_SQL_LIVE("l", LEASE_SQL_NOW) \
	"    AND " LEASE_SQL_NOT_ENDED("l") \
	"    AND NOT " LEASE_SQL_BLOCKED("l") \
	"  ORDER BY " LEASE_SQL_EXPIRY("l", LEASE_SQL_NOW) " NULLS FIRST, l.shard_id COLLATE pg_catalog.\"C\"" \
	"  LIMIT $5" \
	"    FOR NO KEY UPDATE OF l SKIP LOCKED)," \
	TAKE_FREE_RECHECKED \
	LEASE_SQL_TAKE_LOCKED("$3", "$4", "o.event") \
	LEASE_SQL_RECORD_EVENTS("$6") \
	loads \
	TAKER_RESULT("$7")

/*
 * The expiry of an owned lease is judged again on its
 * holder's committed heartbeat, with the workers' rows locked (see
 * TAKE_RECHECKED in leases.c): a lease a renewal made live again is left.
 */
#define TAKE_FREE_RECHECKED \
	LEASE_SQL_RECHECKED("$3", \
						"CASE WHEN o0.from_owner IS NULL THEN 'take'" \
						"     ELSE " LEASE_SQL_EXPIRED_BECAUSE("o0.from_expires_at", "hw", LEASE_SQL_NOW) \
						" END", \
						"o0.from_owner IS NULL")

#define TAKE_FREE_SUSPECTS \
	"    AND ((l.lease_owner IS NULL AND " LEASE_SQL_NOT_ENDED("l") ")" \
	"         OR l.lease_owner OPERATOR(pg_catalog.=) ANY ($8))"

static LeaseStatement take_free_stmts[2] =
	LEASE_SCHEMA_STMTS2("take_leases: take unowned and expired",
						TAKE_FREE_SQL(TAKE_FREE_SUSPECTS, LEASE_SQL_RECORD_LOADS_0_4),
						TAKE_FREE_SQL(TAKE_FREE_SUSPECTS, LEASE_SQL_RECORD_LOADS),
						CURSOR_OPT_GENERIC_PLAN, true,
						8, TEXTOID, TEXTOID, TEXTOID, INTERVALOID, INT8OID, LEASE_EVENT_ARGTYPES,
						TEXTARRAYOID);

/*
 * Request: ask holder $5 to hand at most $6 of its live leases (those not
 * already promised) over to $3, by deadline now + $7; $4 is the lease
 * duration the requester will hold them for.  Neither lease_count nor
 * lease_epoch changes: the holder keeps renewing and checkpointing.
 */
#define REQUEST_SQL \
	"WITH o AS (" \
	" SELECT l.app_name, l.stream_name, l.shard_id" \
	"   FROM lease.shard_leases AS l, " LEASE_SQL_CLOCK \
	"  WHERE " LEASE_STREAM_MATCHES \
	"    AND l.lease_owner OPERATOR(pg_catalog.=) $5" \
	"    AND " LEASE_SQL_LIVE("l", LEASE_SQL_NOW) \
	"    AND NOT " LEASE_SQL_HANDOFF_PENDING("l", LEASE_SQL_NOW) \
	"    AND " LEASE_SQL_NOT_ENDED("l") \
	"  ORDER BY l.shard_id COLLATE pg_catalog.\"C\"" \
	"  LIMIT $6" \
	"    FOR NO KEY UPDATE OF l SKIP LOCKED)," \
	" c AS (UPDATE lease.shard_leases AS l" \
	"    SET handoff_to = $3," \
	"        handoff_requested_at = " LEASE_SQL_NOW "," \
	"        handoff_deadline = " LEASE_SQL_NOW " OPERATOR(pg_catalog.+) $7," \
	"        handoff_lease_duration = $4," \
	"        updated_at = pg_catalog.now()" \
	"   FROM o, " LEASE_SQL_CLOCK \
	"  WHERE " LEASE_SQL_SAME_KEY("l", "o") \
	"  RETURNING l.app_name, l.stream_name, l.shard_id, 'handoff_request' AS event," \
	"            l.lease_owner AS from_owner, l.handoff_to AS to_owner," \
	"            l.lease_count, l.lease_epoch)" \
	LEASE_SQL_RECORD_EVENTS("$8") \
	TAKER_RESULT("$9")

static LeaseStatement request_stmt =
	LEASE_SCHEMA_STMT_ENTRY("take_leases: request handoffs", REQUEST_SQL, 0, false, 9,
						TEXTOID, TEXTOID, TEXTOID, INTERVALOID, TEXTOID, INT8OID, INTERVALOID,
						LEASE_EVENT_ARGTYPES);



/*
 * A read of the stream's leases that `pred` selects (about row l, $3 a
 * text[] of workers), with their owners and known weights, in shard id
 * order; nothing is locked.
 */
#define WEIGHTS_STMT(stmt_name, pred) \
	{ \
		.name = stmt_name, \
		.sql = "SELECT l.shard_id, l.lease_owner, " LEASE_SQL_KNOWN_WEIGHT("l") \
		"  FROM lease.shard_leases AS l, " LEASE_SQL_CLOCK \
		" WHERE " LEASE_STREAM_MATCHES pred \
		" ORDER BY l.shard_id COLLATE pg_catalog.\"C\"", \
		.nargs = 3, \
		.argtypes = {TEXTOID, TEXTOID, TEXTARRAYOID}, \
		.expected = SPI_OK_SELECT, \
		.cursor_options = CURSOR_OPT_GENERIC_PLAN \
	}

/*
 * The free leases: unowned, or expired leases of the workers $3 whose bound
 * has passed; takeable.
 */
static LeaseStatement free_weights_stmt =
	WEIGHTS_STMT("take_leases: free leases and their weights",
				 "   AND ((l.lease_owner IS NULL AND " LEASE_SQL_NOT_ENDED("l") ")"
				 "        OR l.lease_owner OPERATOR(pg_catalog.=) ANY ($3))"
				 "   AND NOT " LEASE_SQL_LIVE("l", LEASE_SQL_NOW)
				 "   AND " LEASE_SQL_NOT_ENDED("l")
				 "   AND NOT " LEASE_SQL_BLOCKED("l"));

/*
 * The leases the workers $3 could hand over (live, no handoff pending, not
 * ended), through the owner index.
 */
static LeaseStatement movable_stmt =
	WEIGHTS_STMT("take_leases: movable leases and their weights",
				 "   AND l.lease_owner OPERATOR(pg_catalog.=) ANY ($3)"
				 "   AND " LEASE_SQL_LIVE("l", LEASE_SQL_NOW)
				 "   AND NOT " LEASE_SQL_HANDOFF_PENDING("l", LEASE_SQL_NOW)
				 "   AND " LEASE_SQL_NOT_ENDED("l"));

/*
 * Take the free leases $8 the plan gives the caller (still free, unlocked):
 * [0] on 0.4.0, [1] from 0.5.0 on (where the bookkeeping is kept).
 */
#define TAKE_IDS_STMT(stmt_name, loads) \
	{ \
		.name = stmt_name, \
		.sql = TAKE_FREE_SQL("    AND l.shard_id OPERATOR(pg_catalog.=) ANY ($8)", loads), \
		.nargs = 8, \
		.argtypes = {TEXTOID, TEXTOID, TEXTOID, INTERVALOID, INT8OID, LEASE_EVENT_ARGTYPES, TEXTARRAYOID}, \
		.expected = SPI_OK_SELECT, \
		.cursor_options = CURSOR_OPT_GENERIC_PLAN \
	}

static LeaseStatement take_ids_stmts[2] = {
	TAKE_IDS_STMT("take_leases: take the planned free leases (0.4 schema)", LEASE_SQL_RECORD_LOADS_0_4),
	TAKE_IDS_STMT("take_leases: take the planned free leases", LEASE_SQL_RECORD_LOADS),
};

/*
 * Ask holder $6 to hand lease $5 over to $3 by now + $7, recording the
 * reason $10 with the event (the plan's move).
 */
static LeaseStatement request_move_stmt = {
	.name = "take_leases: request a planned move",
	.sql =
	"WITH o AS ("
	" SELECT l.app_name, l.stream_name, l.shard_id"
	"   FROM lease.shard_leases AS l, " LEASE_SQL_CLOCK
	"  WHERE " LEASE_STREAM_MATCHES
	"    AND l.shard_id OPERATOR(pg_catalog.=) $5"
	"    AND l.lease_owner OPERATOR(pg_catalog.=) $6"
	"    AND " LEASE_SQL_LIVE("l", LEASE_SQL_NOW)
	"    AND NOT " LEASE_SQL_HANDOFF_PENDING("l", LEASE_SQL_NOW)
	"    AND " LEASE_SQL_NOT_ENDED("l")
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
	"            l.lease_count, l.lease_epoch),"
	" recorded AS (INSERT INTO lease.lease_events (" LEASE_EVENT_COLUMNS ", reason)"
	" SELECT " LEASE_EVENT_COLUMNS ", $10 FROM c WHERE $8)"
	TAKER_RESULT("$9"),
	.nargs = 10,
	.argtypes = {TEXTOID, TEXTOID, TEXTOID, INTERVALOID, TEXTOID, TEXTOID, INTERVALOID,
	LEASE_EVENT_ARGTYPES, TEXTOID},
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
		lease_spi_run(&takeable_store_stmt, values, NULL, 0);
		return DatumGetInt64(lease_spi_value(0, 1, &isnull));
	}
	/* JIT off (the statements say so): see read_loads */
	lease_spi_run(&takeable_count_stmt, values, NULL, 0);
	return DatumGetInt64(lease_spi_value(0, 1, &isnull));
}

/* One take_leases round: its arguments and what its phases found. */
typedef struct TakeRound
{
	LeaseSchema schema;
	ReturnSetInfo *rsinfo;
	MemoryContext callcxt;		/* outlives SPI: the copies below */
	Datum		stream[3];		/* $1..$3 of every statement: app, stream, caller */
	Datum		duration;		/* $4 of every statement: the lease duration */
	int64		workers;		/* workers with live leases, the caller included */
	int64		takeable;		/* the stream's takeable leases */
	int64		target;			/* the caller's fair share */
	int64		mine;			/* the caller's effective load */
	bool		have_victim;	/* the most loaded other worker: */
	Datum		victim;
	int64		victim_load;
	Datum	   *suspects;		/* workers whose leases may have expired */
	int			nsuspects;
	/* for weighted balancing: */
	BalanceWorker *bw;			/* the workers (rows with live leases) */
	int64	   *weighed;		/* how many of each one's leases have a weight */
	int			nbw;
	int			me;				/* the caller's index in bw */
	double		stored_capacity;	/* the caller's capacity as recorded */
} TakeRound;

/* A copy of a text Datum in the round's memory, which outlives SPI. */
static Datum
round_copy(TakeRound *r, Datum value)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(r->callcxt);
	Datum		copy = datumCopy(value, false, -1);

	MemoryContextSwitchTo(oldcxt);
	return copy;
}

/*
 * Phase 1: the workers, their effective loads, and the takeable leases.
 * JIT off (LEASE_STMT_JIT_OFF on the statements that read many leases):
 * the planner prices the per-worker count (run only for a worker
 * whose bound has passed) as if it ran for every
 * row, so at 100,000 leases the estimate crosses jit_above_cost and
 * compiling takes ~250 ms for a statement that runs in a tenth of a
 * millisecond.
 */
static void
read_loads(TakeRound *r)
{
	uint64		rows = lease_spi_run(LEASE_SCHEMA_STMT(loads_stmts, r->schema), r->stream, NULL, 0);

	r->suspects = (Datum *) MemoryContextAlloc(r->callcxt, sizeof(Datum) * (rows + 1));
	r->bw = (BalanceWorker *) MemoryContextAllocZero(r->callcxt, sizeof(BalanceWorker) * (rows + 1));
	r->weighed = (int64 *) MemoryContextAllocZero(r->callcxt, sizeof(int64) * (rows + 1));
	r->me = -1;
	r->stored_capacity = 1;
	for (uint64 row = 0; row < rows; row++)
	{
		bool		isnull;
		Datum		worker = lease_spi_value(row, 1, &isnull);
		bool		no_worker = isnull;
		int64		load = DatumGetInt64(lease_spi_value(row, 2, &isnull));
		int64		live = DatumGetInt64(lease_spi_value(row, 3, &isnull));
		Datum		suspect = lease_spi_value(row, 4, &isnull);
		BalanceWorker *w;

		if (DatumGetBool(suspect))
			r->suspects[r->nsuspects++] = round_copy(r, worker);	/* may hold expired leases */
		if (no_worker || live == 0)
			continue;			/* unowned leases, or an owner whose leases all expired */
		r->workers++;
		w = &r->bw[r->nbw];
		w->name = round_copy(r, worker);
		w->leases = load;
		w->load = DatumGetFloat8(lease_spi_value(row, 5, &isnull));
		r->weighed[r->nbw] = DatumGetInt64(lease_spi_value(row, 6, &isnull));
		w->capacity = DatumGetFloat8(lease_spi_value(row, 7, &isnull));
		if (text_equal(worker, r->stream[2]))
		{
			r->me = r->nbw;
			r->stored_capacity = w->capacity;
		}
		r->nbw++;
		if (text_equal(worker, r->stream[2]))
			r->mine = load;
		else if (!r->have_victim)
		{
			/* rows come most loaded first, ties by name: the first other worker */
			r->victim = round_copy(r, worker);
			r->victim_load = load;
			r->have_victim = true;
		}
	}
	if (r->workers < 1)
		elog(ERROR, "pg_lease: take_leases found no worker, not even the caller");
	r->takeable = stream_takeable(r->stream);
}

/* Fills $1..$4 of a taking statement; returns the number filled. */
static int
round_params(const TakeRound *r, Datum *values)
{
	memcpy(values, r->stream, sizeof(r->stream));
	values[3] = r->duration;
	return 4;
}

/*
 * Phase 2: leases promised to the caller whose deadline has passed
 * (already in mine); then the event parameters.
 */
static void
claim_due(TakeRound *r)
{
	Datum		values[4 + LEASE_EVENT_NPARAMS];
	int			n = round_params(r, values);

	lease_event_params(&values[n]);
	lease_spi_run(LEASE_SCHEMA_STMT(claim_stmts, r->schema), values, NULL, 0);
	put_rows(r->rsinfo, LEASE_ACTION_TAKEN);
}

/*
 * Phase 3: unowned and expired leases, up to the target: $5 how many, the
 * event parameters, then the workers whose leases may have expired.
 */
static void
take_free(TakeRound *r)
{
	Datum		values[5 + LEASE_EVENT_NPARAMS + 1];
	int			n = round_params(r, values);

	values[n++] = Int64GetDatum(r->target - r->mine);
	lease_event_params(&values[n]);
	n += LEASE_EVENT_NPARAMS;
	values[n] = PointerGetDatum(construct_array(r->suspects, r->nsuspects, TEXTOID, -1, false,
												TYPALIGN_INT));
	r->mine += (int64) lease_spi_run(LEASE_SCHEMA_STMT(take_free_stmts, r->schema), values, NULL, 0);
	put_rows(r->rsinfo, LEASE_ACTION_TAKEN);
}

/*
 * Phase 4: ask the most loaded other worker to hand over `count` leases: $5
 * the holder, $6 how many, $7 the deadline, then the event parameters.
 */
static void
request_handoffs(TakeRound *r, int64 count)
{
	Datum		values[7 + LEASE_EVENT_NPARAMS];
	int			n = round_params(r, values);

	values[n++] = r->victim;
	values[n++] = Int64GetDatum(count);
	values[n++] = lease_interval_from_ms(lease_handoff_timeout_ms);
	lease_event_params(&values[n]);
	lease_spi_run(&request_stmt, values, NULL, 0);
	put_rows(r->rsinfo, LEASE_ACTION_HANDOFF_REQUESTED);
}

/* A text[] of the Datums given. */
static Datum
text_array(Datum *items, int n)
{
	return PointerGetDatum(construct_array(items, n, TEXTOID, -1, false, TYPALIGN_INT));
}

/*
 * Appends the leases of the current SPI result (shard_id, owner, known
 * weight) to the plan; an owner that is one of the plan's workers makes the
 * lease movable from it, else the lease is free.  Sums the known weights.
 */
static void
plan_add_leases(BalancePlan *plan, MemoryContext cxt, double *known_sum, int64 *known_n)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(cxt);

	plan->leases = plan->leases == NULL ?
		(BalanceLease *) palloc0(sizeof(BalanceLease) * (SPI_processed + 1)) :
		(BalanceLease *) repalloc(plan->leases, sizeof(BalanceLease) * (plan->nleases + SPI_processed + 1));
	for (uint64 row = 0; row < SPI_processed; row++)
	{
		BalanceLease *lease = &plan->leases[plan->nleases++];
		bool		isnull;
		Datum		weight;

		memset(lease, 0, sizeof(BalanceLease));
		lease->shard_id = datumCopy(lease_spi_value(row, 1, &isnull), false, -1);
		lease->from_owner = lease_spi_value(row, 2, &isnull);
		lease->has_from = !isnull;
		if (lease->has_from)
			lease->from_owner = datumCopy(lease->from_owner, false, -1);
		lease->owner = -1;
		weight = lease_spi_value(row, 3, &isnull);
		lease->weight = isnull ? -1 : DatumGetFloat8(weight);
		if (!isnull && known_sum != NULL)
		{
			*known_sum += lease->weight;
			(*known_n)++;
		}
	}
	MemoryContextSwitchTo(oldcxt);
}

/*
 * Gives the plan's leases from `first` on their holders (a movable lease's
 * owner among the workers) and their weights (an unknown one: `mean`).
 */
static void
plan_settle_leases(BalancePlan *plan, int first, double mean, bool movable)
{
	for (int l = first; l < plan->nleases; l++)
	{
		BalanceLease *lease = &plan->leases[l];

		if (lease->weight < 0)
			lease->weight = mean;
		lease->owner = -1;
		if (movable)
			for (int w = 0; w < plan->nworkers; w++)
				if (text_equal(plan->workers[w].name, lease->from_owner))
					lease->owner = w;
	}
}

/*
 * The workers' loads from their known weights: an unknown weight counts as
 * the mean of the known ones (1 when none is known).  False when the stream
 * is balanced by count: no weight known and every capacity 1.
 */
static bool
plan_settle_workers(BalancePlan *plan, const int64 *weighed, double known_sum, int64 known_n,
					double *mean)
{
	bool		weighted = known_n > 0;

	for (int w = 0; w < plan->nworkers; w++)
	{
		known_sum += plan->workers[w].load;
		known_n += weighed[w];
		weighted |= weighed[w] > 0 || plan->workers[w].capacity != 1;
	}
	*mean = known_n > 0 ? known_sum / known_n : 1;
	if (known_n > 0 && *mean <= 0)
		return false;			/* every known weight is 0: nothing to share */
	for (int w = 0; w < plan->nworkers; w++)
		plan->workers[w].load += (plan->workers[w].leases - weighed[w]) * *mean;
	return weighted;
}

/*
 * The weighted round (0.4.0 on), when the stream has weights or a worker
 * declared a capacity other than 1: the plan of balancing.c decides; the
 * caller takes the free leases the plan gives it, and asks for the leading
 * moves of the plan that come to it (at most max_steal), so that what the
 * rounds do is what lease.plan_rebalance shows.  False, having done
 * nothing, for a stream balanced by count.
 */
static bool
weighted_round(TakeRound *r, bool capped, int32 max_leases, int32 max_steal)
{
	BalancePlan plan = {0};
	BalanceMove move;
	double		known_sum = 0;
	int64		known_n = 0;
	int64		held = 0;
	double		mean;
	Datum	   *mine;
	int			nmine = 0;
	int			requested = 0;
	Datum		values[10];

	if (r->me < 0)
		elog(ERROR, "pg_lease: take_leases found no row for its caller");
	plan.workers = r->bw;
	plan.nworkers = r->nbw;
	for (int w = 0; w < plan.nworkers; w++)
		held += plan.workers[w].leases;
	if (r->takeable > held)
	{
		values[0] = r->stream[0];
		values[1] = r->stream[1];
		values[2] = text_array(r->suspects, r->nsuspects);
		lease_spi_run(&free_weights_stmt, values, NULL, 0);
		plan_add_leases(&plan, r->callcxt, &known_sum, &known_n);
	}
	plan.nfree = plan.nleases;
	if (!plan_settle_workers(&plan, r->weighed, known_sum, known_n, &mean))
		return false;
	plan_settle_leases(&plan, 0, mean, false);
	plan.tolerance = lease_stream_tolerance(r->stream);
	plan.workers[r->me].full = capped && plan.workers[r->me].leases >= max_leases;

	claim_due(r);
	balance_plan_start(&plan);

	/* the free leases, each to the least loaded worker */
	mine = (Datum *) MemoryContextAlloc(r->callcxt, sizeof(Datum) * (plan.nfree + 1));
	while (plan.next_free < plan.nfree && balance_plan_next(&plan, &move))
		if (move.to == r->me)
		{
			mine[nmine++] = plan.leases[move.lease].shard_id;
			plan.workers[r->me].full = capped && plan.workers[r->me].leases >= max_leases;
		}
	plan.next_free = plan.nfree;
	if (nmine > 0)
	{
		int			n = round_params(r, values);

		values[n++] = Int64GetDatum(nmine);
		lease_event_params(&values[n]);
		n += LEASE_EVENT_NPARAMS;
		values[n] = text_array(mine, nmine);
		lease_spi_run(&take_ids_stmts[r->schema >= LEASE_SCHEMA_0_5 ? 1 : 0], values, NULL, 0);
		put_rows(r->rsinfo, LEASE_ACTION_TAKEN);
	}

	/* the leading moves of the plan that come to the caller */
	if (max_steal > 0 && balance_out_of_tolerance(&plan))
	{
		Datum	   *owners = (Datum *) MemoryContextAlloc(r->callcxt, sizeof(Datum) * (plan.nworkers + 1));
		int			nowners = 0;
		int			first = plan.nleases;

		/* the workers that may give a lease during this round's moves */
		for (int w = 0; w < plan.nworkers; w++)
			if (w == r->me || balance_is_donor(&plan, w))
				owners[nowners++] = plan.workers[w].name;
		values[0] = r->stream[0];
		values[1] = r->stream[1];
		values[2] = text_array(owners, nowners);
		lease_spi_run(&movable_stmt, values, NULL, 0);
		plan_add_leases(&plan, r->callcxt, NULL, NULL);
		plan_settle_leases(&plan, first, mean, true);
		balance_mark_heavy(&plan, first);
		while (requested < max_steal && balance_plan_next(&plan, &move) && move.to == r->me)
		{
			int			n = round_params(r, values);

			values[n++] = plan.leases[move.lease].shard_id;
			values[n++] = plan.workers[move.from].name;
			values[n++] = lease_interval_from_ms(lease_handoff_timeout_ms);
			lease_event_params(&values[n]);
			n += LEASE_EVENT_NPARAMS;
			values[n] = CStringGetTextDatum(balance_move_reason(&plan, &move));
			lease_spi_run(&request_move_stmt, values, NULL, 0);
			put_rows(r->rsinfo, LEASE_ACTION_HANDOFF_REQUESTED);
			requested++;
		}
	}
	return true;
}

/*
 * The round of a stream balanced by count: claim the due handoffs, take
 * free leases up to the target, and ask the most loaded worker for some.
 */
static void
count_round(TakeRound *r, bool capped, int32 max_leases, int32 max_steal)
{
	r->target = (r->takeable + r->workers - 1) / r->workers;
	if (capped && r->target > max_leases)
		r->target = max_leases;
	claim_due(r);
	if (r->mine < r->target)
		take_free(r);

	/*
	 * Handoff requests only from a worker holding at least two more, at
	 * most max_steal, never beyond the target, and never so many that the
	 * caller would end up above that worker (mine + n <= victim_load - n).
	 */
	if (r->have_victim && max_steal > 0 && r->mine < r->target && r->victim_load - r->mine >= 2)
		request_handoffs(r, Min(Min((int64) max_steal, (r->victim_load - r->mine) / 2),
								r->target - r->mine));
}

/*
 * lease.take_leases: one balancing round for one worker; returns the
 * leases this call took or asked to be handed over.
 */
static Datum
take_leases(FunctionCallInfo fcinfo, LeaseSchema schema)
{
	TakeRound	r = {.schema = schema, .callcxt = CurrentMemoryContext};
	int32		max_leases = 0;
	bool		capped;
	int32		max_steal;
	double		capacity = 1;
	LeaseCaller caller;
	Datum		renew_every = (Datum) 0;
	bool		have_every = false;

	r.stream[0] = lease_arg_ident(fcinfo, 0, "app_name");
	r.stream[1] = lease_arg_ident(fcinfo, 1, "stream_name");
	r.stream[2] = lease_arg_ident(fcinfo, 2, "owner");
	r.duration = lease_arg_duration(fcinfo, 3, "lease_duration");
	capped = lease_arg_opt_positive_int32(fcinfo, 4, "max_leases", &max_leases);
	max_steal = lease_arg_nonneg_int32(fcinfo, 5, "max_steal");
	if (PG_NARGS() > 6)
	{
		/* the 0.4.0 function: the caller's capacity and renewal interval */
		capacity = lease_arg_capacity(fcinfo, 6, "capacity");
		have_every = lease_arg_opt_duration(fcinfo, 7, "renew_every", &renew_every);
	}

	InitMaterializedSRF(fcinfo, 0);
	r.rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	lease_stream_begin(fcinfo, schema, r.stream[0], r.stream[1], &caller);
	if (schema >= LEASE_SCHEMA_0_5)
		lease_restart_grace(r.stream, r.duration, true);

	read_loads(&r);
	if (capacity != r.stored_capacity)
	{
		lease_record_capacity(r.stream, capacity);
		if (r.me >= 0)
			r.bw[r.me].capacity = capacity;
	}
	if (!weighted_round(&r, capped, max_leases, max_steal))
		count_round(&r, capped, max_leases, max_steal);
	if (have_every)
		lease_record_session(schema, r.stream, true, renew_every, NULL);

	lease_app_end(&caller);
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(lease_take_leases_0_4);
/* lease.take_leases as the 0.4.0 script binds it. */
Datum lease_take_leases_0_4(PG_FUNCTION_ARGS) { return take_leases(fcinfo, LEASE_SCHEMA_0_4); }

/* lease.take_leases from 0.5.0 on: the placement check (src/leases/placement.h), the bookkeeping in lease.worker_holdings. */
PG_FUNCTION_INFO_V1(lease_take_leases_0_5);
Datum lease_take_leases_0_5(PG_FUNCTION_ARGS) { return take_leases(fcinfo, LEASE_SCHEMA_0_5); }

/*
 * lease.plan_rebalance: the moves the weighted rounds would make from the
 * stream's current state (free leases placed, then handoffs), in order, with
 * the stream's imbalance before and after each; changes nothing.  The
 * workers are those holding live leases, and `owner` when given (as its
 * round sees the stream: a worker that holds nothing yet).  A stream
 * balanced by count has no plan.
 */
static Datum
plan_rebalance(FunctionCallInfo fcinfo, LeaseSchema schema)
{
	TakeRound	r = {.schema = schema, .callcxt = CurrentMemoryContext};
	BalancePlan plan = {0};
	BalanceMove move;
	double		known_sum = 0;
	int64		known_n = 0;
	double		mean;
	Datum		values[3];
	char		nulls[3] = {' ', ' ', ' '};
	Datum	   *owners;
	LeaseCaller caller;
	ReturnSetInfo *rsinfo;

	r.stream[0] = lease_arg_ident(fcinfo, 0, "app_name");
	r.stream[1] = lease_arg_ident(fcinfo, 1, "stream_name");
	r.stream[2] = (Datum) 0;
	if (PG_NARGS() < 3 || PG_ARGISNULL(2))
		nulls[2] = 'n';
	else
		r.stream[2] = lease_arg_ident(fcinfo, 2, "owner");

	InitMaterializedSRF(fcinfo, 0);
	rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	lease_stream_begin(fcinfo, schema, r.stream[0], r.stream[1], &caller);

	/* the workers, as a round of `owner` reads them */
	lease_spi_run(LEASE_SCHEMA_STMT(loads_stmts, schema), r.stream, nulls, 0);
	r.bw = (BalanceWorker *) MemoryContextAllocZero(r.callcxt, sizeof(BalanceWorker) * (SPI_processed + 1));
	r.weighed = (int64 *) MemoryContextAllocZero(r.callcxt, sizeof(int64) * (SPI_processed + 1));
	r.suspects = (Datum *) MemoryContextAlloc(r.callcxt, sizeof(Datum) * (SPI_processed + 1));
	owners = (Datum *) MemoryContextAlloc(r.callcxt, sizeof(Datum) * (SPI_processed + 1));
	for (uint64 row = 0; row < SPI_processed; row++)
	{
		bool		isnull;
		Datum		worker = lease_spi_value(row, 1, &isnull);

		if (isnull)
			continue;
		if (DatumGetBool(lease_spi_value(row, 4, &isnull)))
			r.suspects[r.nsuspects++] = round_copy(&r, worker);
		if (DatumGetInt64(lease_spi_value(row, 3, &isnull)) == 0)
			continue;
		r.bw[r.nbw].name = owners[r.nbw] = round_copy(&r, worker);
		r.bw[r.nbw].leases = DatumGetInt64(lease_spi_value(row, 2, &isnull));
		r.bw[r.nbw].load = DatumGetFloat8(lease_spi_value(row, 5, &isnull));
		r.weighed[r.nbw] = DatumGetInt64(lease_spi_value(row, 6, &isnull));
		r.bw[r.nbw].capacity = DatumGetFloat8(lease_spi_value(row, 7, &isnull));
		r.nbw++;
	}
	plan.workers = r.bw;
	plan.nworkers = r.nbw;

	values[0] = r.stream[0];
	values[1] = r.stream[1];
	values[2] = text_array(r.suspects, r.nsuspects);
	lease_spi_run(&free_weights_stmt, values, NULL, 0);
	plan_add_leases(&plan, r.callcxt, &known_sum, &known_n);
	plan.nfree = plan.nleases;
	if (plan.nworkers > 0 && plan_settle_workers(&plan, r.weighed, known_sum, known_n, &mean))
	{
		values[2] = text_array(owners, r.nbw);
		lease_spi_run(&movable_stmt, values, NULL, 0);
		plan_add_leases(&plan, r.callcxt, NULL, NULL);
		plan_settle_leases(&plan, 0, mean, false);
		plan_settle_leases(&plan, plan.nfree, mean, true);
		plan.tolerance = lease_stream_tolerance(r.stream);
		balance_plan_start(&plan);
		balance_mark_heavy(&plan, plan.nfree);
		while (balance_plan_next(&plan, &move))
		{
			Datum		out[7];
			bool		outnulls[7] = {false, false, false, false, false, false, false};
			const BalanceLease *lease = &plan.leases[move.lease];

			/* take: a free lease, as take_leases reports it; else a handoff */
			out[0] = lease->shard_id;
			out[1] = CStringGetTextDatum(move.from >= 0 ? LEASE_ACTION_HANDOFF_REQUESTED : LEASE_ACTION_TAKEN);
			out[2] = move.from >= 0 ? plan.workers[move.from].name : lease->from_owner;
			outnulls[2] = move.from < 0 && !lease->has_from;
			out[3] = plan.workers[move.to].name;
			out[4] = Float8GetDatum(lease->weight);
			out[5] = Float8GetDatum(move.imbalance_before);
			out[6] = Float8GetDatum(move.imbalance_after);
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, outnulls);
		}
	}
	lease_app_end(&caller);
	return (Datum) 0;
}

/* lease.plan_rebalance as the 0.4.0 script binds it. */
PG_FUNCTION_INFO_V1(lease_plan_rebalance);
Datum lease_plan_rebalance(PG_FUNCTION_ARGS) { return plan_rebalance(fcinfo, LEASE_SCHEMA_0_4); }

/* lease.plan_rebalance from 0.5.0 on: the placement check (src/leases/placement.h), the bookkeeping in lease.worker_holdings. */
PG_FUNCTION_INFO_V1(lease_plan_rebalance_0_5);
Datum lease_plan_rebalance_0_5(PG_FUNCTION_ARGS) { return plan_rebalance(fcinfo, LEASE_SCHEMA_0_5); }
