/*-------------------------------------------------------------------------
 *
 * src/leases/incarnation.c
 *	  Server incarnations and the restart grace (see incarnation.h).
 *
 * Why on the server: a worker's client cannot tell an outage of the
 * coordinator from its own connection's, and the first call back after a
 * restart may be a taker's.  So the server records when it first saw each
 * incarnation (a row of lease.server_incarnations, replicated with the
 * leases, so a promoted standby knows the incarnations before its own),
 * and the take that comes first gives every holder one lease duration from
 * then before anything is taken as expired.  Nothing else changes: a
 * released, handed-off or closed lease moves as before (it is not taken by
 * expiry), and a fast-failover holder whose session ended in the new
 * incarnation is still judged by that (lease.liveness_cutoff cuts the
 * extended expiry short as it cut the old one).
 *
 *-------------------------------------------------------------------------
 */
#include "pg_lease.h"

#include "access/xlog.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "common/config.h"
#include "common/spi_util.h"
#include "leases/events.h"
#include "leases/incarnation.h"
#include "leases/lease_sql.h"

/* See incarnation.h. */
text *
lease_server_incarnation(void)
{
	if (RecoveryInProgress())
		return NULL;
	return cstring_to_text(psprintf(INT64_FORMAT "/%u/" INT64_FORMAT, (int64) PgStartTime,
									GetWALInsertionTimeLine(),
									(int64) pgstat_fetch_stat_bgwriter()->stat_reset_timestamp));
}

/*
 * The incarnation this session last looked up (in TopMemoryContext), when
 * it was first seen and whether it follows an earlier one; provisional
 * while another session is recording it (first seen when this session
 * first saw it, until the row is there).  A session lives in one
 * incarnation, except a standby's that sees a promotion.
 */
static char *known_incarnation = NULL;
static TimestampTz known_first_seen;
static bool known_follows;
static bool known_provisional = false;

/* Remembers `name` as this session's incarnation. */
static void
incarnation_remember(const char *name, bool provisional)
{
	if (known_incarnation != NULL)
		pfree(known_incarnation);
	known_incarnation = MemoryContextStrdup(TopMemoryContext, name);
	known_provisional = provisional;
}

/*
 * The incarnation $1's row, and the latest incarnation recorded: read in a
 * snapshot taken now (lease_spi_run_latest), whatever the caller's
 * isolation level, so a row another session committed is never missed.
 */
static LeaseStatement incarnation_read_stmt = {
	.name = "read the server incarnation",
	.sql = "SELECT i.first_seen, i.follows IS NOT NULL FROM lease.server_incarnations AS i"
	"  WHERE i.incarnation OPERATOR(pg_catalog.=) $1",
	.nargs = 1,
	.argtypes = {TEXTOID},
	.expected = SPI_OK_SELECT,
};

static LeaseStatement incarnation_latest_stmt = {
	.name = "read the latest server incarnation",
	.sql = "SELECT i.incarnation FROM lease.server_incarnations AS i"
	" ORDER BY i.first_seen DESC LIMIT 1",
	.nargs = 0,
	.expected = SPI_OK_SELECT,
};

/* Records incarnation $1, first seen now, following $2 (NULL: none). */
static LeaseStatement incarnation_insert_stmt = {
	.name = "record the server incarnation",
	.sql = "INSERT INTO lease.server_incarnations AS i (incarnation, first_seen, follows)"
	" VALUES ($1, pg_catalog.clock_timestamp(), $2)"
	" RETURNING i.first_seen",
	.nargs = 2,
	.argtypes = {TEXTOID, TEXTOID},
	.expected = SPI_OK_INSERT_RETURNING,
};

/*
 * The grace itself, for stream $1, $2 until $3: every owned lease not
 * ended whose expiry, its own or its holder's heartbeat (the effective
 * expiry without the fast-failover cutoff, which still applies to the
 * result), comes before $3 is extended to $3, locked in shard order, with
 * an event `restart_grace` when $4 (lease.record_events), each counted in
 * the sequence lease.restart_grace_extended (a nextval never waits, where
 * a counter row would make every take of every app wait for one another).
 * A lease_expires_at that only grows keeps the holder's
 * worker_holdings.expires_min a lower bound.
 */
#define RESTART_GRACE_SQL(lock) \
	"WITH t AS (SELECT l.shard_id FROM lease.shard_leases AS l" \
	"            WHERE l.app_name OPERATOR(pg_catalog.=) $1" \
	"              AND l.stream_name OPERATOR(pg_catalog.=) $2" \
	"              AND l.lease_owner IS NOT NULL" \
	"              AND " LEASE_SQL_NOT_ENDED("l") \
	"              AND GREATEST(l.lease_expires_at," \
	"                           (SELECT hw.renewed_until FROM lease.stream_workers AS hw" \
	"                             WHERE hw.app_name OPERATOR(pg_catalog.=) l.app_name" \
	"                               AND hw.stream_name OPERATOR(pg_catalog.=) l.stream_name" \
	"                               AND hw.worker OPERATOR(pg_catalog.=) l.lease_owner))" \
	"                  OPERATOR(pg_catalog.<) $3" \
	"            ORDER BY l.shard_id COLLATE pg_catalog.\"C\"" \
	"              FOR NO KEY UPDATE OF l" lock ")," \
	"      c AS (UPDATE lease.shard_leases AS l SET lease_expires_at = $3" \
	"              FROM t" \
	"             WHERE l.app_name OPERATOR(pg_catalog.=) $1" \
	"               AND l.stream_name OPERATOR(pg_catalog.=) $2" \
	"               AND l.shard_id OPERATOR(pg_catalog.=) t.shard_id" \
	"               AND l.lease_expires_at OPERATOR(pg_catalog.<) $3" \
	"            RETURNING l.app_name, l.stream_name, l.shard_id," \
	"                      CAST('restart_grace' AS pg_catalog.text) AS event," \
	"                      l.lease_owner AS from_owner, l.lease_owner AS to_owner," \
	"                      l.lease_count, l.lease_epoch)" \
	LEASE_SQL_RECORD_EVENTS("$4") \
	" SELECT pg_catalog.count(pg_catalog.nextval('lease.restart_grace_extended')) FROM c"

#define RESTART_GRACE_STMT(stmt_name, lock) \
	{ \
		.name = (stmt_name), .sql = RESTART_GRACE_SQL(lock), .nargs = 4, \
		.argtypes = {TEXTOID, TEXTOID, TIMESTAMPTZOID, BOOLOID}, .expected = SPI_OK_SELECT \
	}

/*
 * [0] for take_lease, which waits for a lease another transaction holds
 * and then judges it, so it must extend it first; [1] for a take_leases
 * round, which passes such a lease by (its statements skip locked rows),
 * so it passes it by here too and waits for no other take.
 */
static LeaseStatement restart_grace_stmts[2] = {
	RESTART_GRACE_STMT("restart grace: extend the stream's leases", ""),
	RESTART_GRACE_STMT("restart grace: extend the stream's unlocked leases", " SKIP LOCKED"),
};

/*
 * Looks the current incarnation up (unless `known_ok` and this session
 * knows it already: a renewal only needs it recorded), and records it when
 * it is new.  A take always reads the row: what it decides on is the row,
 * not what this session remembers of it.
 *
 * Recording never waits for another session: the first sessions of a new
 * incarnation may all try at once, and one of them may be a transaction
 * kept open (a worker's liveness must not wait for it).  So a session
 * records only while it holds the table's SHARE UPDATE EXCLUSIVE lock,
 * taken without waiting until its transaction ends, and reads again
 * under it: the inserts are one at a time, and none meets another's
 * uncommitted row.  A session that does not get the lock goes on as if the
 * incarnation were first seen when it first saw it (the grace it gives is
 * then no shorter, and does not slide on while the other transaction stays
 * open), and looks again at its next call.
 */
static void
incarnation_lookup(bool known_ok, text *incarnation)
{
	char	   *name;
	Datum		args[2];
	char		nulls[2] = {' ', ' '};
	bool		isnull;

	name = text_to_cstring(incarnation);
	if (known_ok && !known_provisional && known_incarnation != NULL &&
		strcmp(known_incarnation, name) == 0)
		return;

	args[0] = PointerGetDatum(incarnation);
	if (lease_spi_run_latest(&incarnation_read_stmt, args, NULL, 1) == 0 &&
		ConditionalLockRelationOid(get_relname_relid("server_incarnations",
													 get_namespace_oid("lease", false)),
								   ShareUpdateExclusiveLock) &&
		lease_spi_run_latest(&incarnation_read_stmt, args, NULL, 1) == 0)
	{
		/* new, and this session records it */
		if (lease_spi_run_latest(&incarnation_latest_stmt, NULL, NULL, 1) > 0)
			args[1] = datumCopy(lease_spi_value(0, 1, &isnull), false, -1);
		else
			nulls[1] = 'n';
		lease_spi_run(&incarnation_insert_stmt, args, nulls, 1);
		known_first_seen = DatumGetTimestampTz(lease_spi_value(0, 1, &isnull));
		known_follows = nulls[1] == ' ';
	}
	else if (SPI_processed == 0)
	{
		/* new, and another session is recording it right now */
		if (!known_provisional || known_incarnation == NULL || strcmp(known_incarnation, name) != 0)
		{
			known_first_seen = GetCurrentTimestamp();
			known_follows = lease_spi_run_latest(&incarnation_latest_stmt, NULL, NULL, 1) > 0;
			incarnation_remember(name, true);
		}
		return;
	}
	else
	{
		known_first_seen = DatumGetTimestampTz(lease_spi_value(0, 1, &isnull));
		known_follows = DatumGetBool(lease_spi_value(0, 2, &isnull));
	}
	incarnation_remember(name, false);
}

/* See incarnation.h. */
void
lease_incarnation_note(text *incarnation)
{
	if (incarnation != NULL)
		incarnation_lookup(true, incarnation);
}

/* See incarnation.h. */
void
lease_restart_grace(Datum *stream, Datum duration, bool round)
{
	text	   *incarnation = lease_server_incarnation();
	TimestampTz until;
	Datum		values[4];

	if (incarnation == NULL)
		return;
	incarnation_lookup(false, incarnation);
	if (!known_follows || !lease_restart_grace_on)
		return;
	until = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval,
													TimestampTzGetDatum(known_first_seen),
													duration));
	if (GetCurrentTimestamp() >= until)
		return;
	values[0] = stream[0];
	values[1] = stream[1];
	values[2] = TimestampTzGetDatum(until);
	values[3] = BoolGetDatum(lease_record_events);
	lease_spi_run(&restart_grace_stmts[round ? 1 : 0], values, NULL, 0);
}
