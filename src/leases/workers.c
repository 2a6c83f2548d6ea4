/*-------------------------------------------------------------------------
 *
 * src/leases/workers.c
 *	  The ownership bookkeeping of inserted and deleted leases (the trigger
 *	  lease.shard_leases_owners_changed), and each worker's heartbeat and
 *	  liveness record.
 *
 * Every statement that changes who holds a lease keeps the bookkeeping
 * exact with LEASE_SQL_RECORD_LOADS (lease_sql.h) in the same statement.
 * Inserts (create_lease, import_kcl_ex, a restore) and deletes
 * (delete_lease, cleanup_ended) reach it through this statement trigger,
 * which runs the same text over the statement's transition table, so the
 * rule is written once.
 *
 * Up to 0.4.0 the bookkeeping and the heartbeat share one row per worker,
 * lease.stream_workers: a transfer to a worker (release_lease inside an
 * open transaction) holds the row that worker's heartbeat writes, and the
 * worker's renewals wait for that transaction.  From 0.5.0 on the
 * bookkeeping is lease.worker_holdings, and lease.stream_workers is the
 * heartbeat row, written by its own worker only (and made, empty, with the
 * worker's first holdings row, by the trigger lease.worker_holdings_added):
 * another worker only locks it, when it takes one of the worker's leases by
 * expiry (LEASE_SQL_LOCK_WORKERS).  The heartbeat writes that row, then
 * reads the holdings in a snapshot of its own, so a change that committed
 * before shows in its leases_version (docs/shard-leases.md,
 * lease.heartbeat).
 *
 *-------------------------------------------------------------------------
 */
#include "pg_lease.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/procarray.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "common/args.h"
#include "common/config.h"
#include "common/durability.h"
#include "common/spi_util.h"
#include "leases/incarnation.h"
#include "leases/lease_sql.h"
#include "leases/placement.h"
#include "leases/privileges.h"
#include "leases/workers.h"

/*
 * The changing CTE LEASE_SQL_RECORD_LOADS reads, over the transition table
 * changed_rows: an inserted lease goes to its owner, a deleted one leaves it.
 */
#define OWNERS_CHANGED_SQL(loads, from_owner, to_owner, to_expires_at) \
	"WITH c AS (" \
	" SELECT r.app_name, r.stream_name, " from_owner " AS from_owner," \
	"        " to_owner " AS to_owner, " to_expires_at " AS to_expires_at" \
	"   FROM changed_rows AS r)" \
	loads \
	" SELECT 1"

#define OWNERS_CHANGED_STMT(stmt_name, loads, from_owner, to_owner, to_expires_at) \
	{ \
		.name = (stmt_name), \
		.sql = OWNERS_CHANGED_SQL(loads, from_owner, to_owner, to_expires_at), \
		.nargs = 0, .expected = SPI_OK_SELECT \
	}

#define OWNERS_INSERTED_STMT(stmt_name, loads) \
	OWNERS_CHANGED_STMT(stmt_name, loads, "CAST(NULL AS pg_catalog.text)", \
						"r.lease_owner", "r.lease_expires_at")
#define OWNERS_DELETED_STMT(stmt_name, loads) \
	OWNERS_CHANGED_STMT(stmt_name, loads, "r.lease_owner", \
						"CAST(NULL AS pg_catalog.text)", "CAST(NULL AS pg_catalog.timestamptz)")

/*
 * [schema][0] inserted leases, [schema][1] deleted ones; [0] up to 0.4.0
 * (lease.stream_workers), [1] from 0.5.0 on (lease.worker_holdings).
 */
static LeaseStatement owners_changed_stmts[2][2] = {
	{
		OWNERS_INSERTED_STMT("count the inserted leases' owners (0.4 schema)", LEASE_SQL_RECORD_LOADS_0_4),
		OWNERS_DELETED_STMT("count the deleted leases' owners (0.4 schema)", LEASE_SQL_RECORD_LOADS_0_4),
	},
	{
		OWNERS_INSERTED_STMT("count the inserted leases' owners", LEASE_SQL_RECORD_LOADS),
		OWNERS_DELETED_STMT("count the deleted leases' owners", LEASE_SQL_RECORD_LOADS),
	},
};

/*
 * lease.shard_leases_owners_changed: AFTER INSERT or AFTER DELETE on
 * lease.shard_leases, FOR EACH STATEMENT, REFERENCING its rows AS
 * changed_rows.
 */
static Datum
shard_leases_owners_changed(FunctionCallInfo fcinfo, LeaseSchema schema)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	bool		inserted;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_FOR_STATEMENT(trigdata->tg_event) ||
		!TRIGGER_FIRED_AFTER(trigdata->tg_event))
		elog(ERROR, "pg_lease: shard_leases_owners_changed must fire AFTER, FOR EACH STATEMENT");
	inserted = TRIGGER_FIRED_BY_INSERT(trigdata->tg_event);
	if (!inserted && !TRIGGER_FIRED_BY_DELETE(trigdata->tg_event))
		elog(ERROR, "pg_lease: shard_leases_owners_changed fires on INSERT or DELETE only");

	lease_spi_connect();
	if (SPI_register_trigger_data(trigdata) != SPI_OK_TD_REGISTER)
		elog(ERROR, "pg_lease: could not register the transition table");
	lease_spi_run(&owners_changed_stmts[schema >= LEASE_SCHEMA_0_5 ? 1 : 0][inserted ? 0 : 1],
				  NULL, NULL, 0);
	lease_spi_finish();
	return PointerGetDatum(NULL);
}

/* The trigger as the 0.3.0 and 0.4.0 scripts bind it (lease.stream_workers). */
PG_FUNCTION_INFO_V1(lease_shard_leases_owners_changed);
Datum lease_shard_leases_owners_changed(PG_FUNCTION_ARGS) { return shard_leases_owners_changed(fcinfo, LEASE_SCHEMA_0_4); }

/* The trigger on the 0.5.0 schema (the bookkeeping in lease.worker_holdings). */
PG_FUNCTION_INFO_V1(lease_shard_leases_owners_changed_0_5);
Datum lease_shard_leases_owners_changed_0_5(PG_FUNCTION_ARGS) { return shard_leases_owners_changed(fcinfo, LEASE_SCHEMA_0_5); }

/* See workers.h. */
void
lease_session_params(Datum *values, char *nulls)
{
	text	   *incarnation = lease_server_incarnation();

	values[0] = Int32GetDatum(MyProcPid);
	values[1] = TimestampTzGetDatum(MyStartTimestamp);
	values[2] = incarnation ? PointerGetDatum(incarnation) : (Datum) 0;
	nulls[0] = nulls[1] = ' ';
	nulls[2] = incarnation ? ' ' : 'n';
}

/*
 * The liveness columns a renewal (`until` the SET item of renewed_until)
 * or a take with renew_every writes to the caller's row: $3 the worker,
 * $4 renew_every (NULL: not in the mode), $5..$7 its session
 * (lease_session_params).  Up to 0.4.0 an UPDATE of the worker's
 * lease.stream_workers row (made by the first lease it got).
 */
#define RECORD_SESSION_SQL_0_4(until) \
	"UPDATE lease.stream_workers AS w" \
	"   SET " until "renewed_at = " LEASE_SQL_NOW "," \
	"       renew_every = $4, session_pid = $5, session_start = $6, server_incarnation = $7" \
	"  FROM " LEASE_SQL_CLOCK \
	" WHERE w.app_name OPERATOR(pg_catalog.=) $1" \
	"   AND w.stream_name OPERATOR(pg_catalog.=) $2" \
	"   AND w.worker OPERATOR(pg_catalog.=) $3"

/* The heartbeat's SET item: every lease of the worker live until now + $8. */
#define RECORD_SESSION_HEARTBEAT "renewed_until = " LEASE_SQL_NOW " OPERATOR(pg_catalog.+) $8, "

/*
 * From 0.5.0 on the same columns of the worker's heartbeat row, which only
 * the worker itself writes: upserted for a worker with a holdings row (the
 * row lease.worker_holdings_added made with it, or one removed by hand),
 * so a worker that never held a lease writes nothing, as before.  The
 * holdings row is read, not locked: a transfer to the worker that has not
 * committed holds it, and the heartbeat does not wait for it (a worker
 * whose first lease is arriving that way sees no holdings row and writes
 * nothing yet).  `until` is the inserted renewed_until and `set_until` its
 * SET item (both empty without one).
 */
#define RECORD_SESSION_SQL(until, set_until) \
	"INSERT INTO lease.stream_workers AS w" \
	"       (app_name, stream_name, worker, renewed_until, renewed_at, renew_every," \
	"        session_pid, session_start, server_incarnation)" \
	" SELECT h.app_name, h.stream_name, h.worker, " until ", " LEASE_SQL_NOW ", $4, $5, $6, $7" \
	"   FROM lease.worker_holdings AS h, " LEASE_SQL_CLOCK \
	"  WHERE h.app_name OPERATOR(pg_catalog.=) $1" \
	"    AND h.stream_name OPERATOR(pg_catalog.=) $2" \
	"    AND h.worker OPERATOR(pg_catalog.=) $3" \
	" ON CONFLICT (app_name, stream_name, worker) DO UPDATE" \
	"    SET " set_until "renewed_at = excluded.renewed_at, renew_every = excluded.renew_every," \
	"        session_pid = excluded.session_pid, session_start = excluded.session_start," \
	"        server_incarnation = excluded.server_incarnation"

/* $1..$8 of the statements below (record_session_values). */
#define RECORD_SESSION_ARGTYPES \
	{TEXTOID, TEXTOID, TEXTOID, INTERVALOID, INT4OID, TIMESTAMPTZOID, TEXTOID, INTERVALOID}

#define RECORD_SESSION_STMT(stmt_name, sql_, n, code) \
	{ \
		.name = (stmt_name), .sql = (sql_), .nargs = (n), \
		.argtypes = RECORD_SESSION_ARGTYPES, .expected = (code) \
	}

/*
 * [schema][0] a take with renew_every: the session only; [schema][1]
 * renew_leases and the heartbeat: the heartbeat too.  [0] on 0.4.0, [1]
 * from 0.5.0 on.
 */
static LeaseStatement record_session_stmts[2][2] = {
	{
		RECORD_SESSION_STMT("record the taker's session (0.4 schema)",
							RECORD_SESSION_SQL_0_4(""), 7, SPI_OK_UPDATE),
		RECORD_SESSION_STMT("renew_leases: heartbeat (0.4 schema)",
							RECORD_SESSION_SQL_0_4(RECORD_SESSION_HEARTBEAT), 8, SPI_OK_UPDATE),
	},
	{
		RECORD_SESSION_STMT("record the taker's session",
							RECORD_SESSION_SQL("CAST(NULL AS pg_catalog.timestamptz)", ""),
							7, SPI_OK_INSERT),
		RECORD_SESSION_STMT("renew_leases: heartbeat",
							RECORD_SESSION_SQL(LEASE_SQL_NOW " OPERATOR(pg_catalog.+) $8",
											   "renewed_until = excluded.renewed_until, "),
							8, SPI_OK_INSERT),
	},
};

/*
 * The parameters of those statements: stream[0..2] the app, stream and
 * worker, renew_every (NULL when !have_every), the calling session, and
 * the lease duration when there is one.
 */
static void
record_session_values(Datum *stream, bool have_every, Datum renew_every, Datum *duration,
					  Datum *values, char *nulls)
{
	memcpy(values, stream, 3 * sizeof(Datum));
	nulls[0] = nulls[1] = nulls[2] = ' ';
	values[3] = have_every ? renew_every : (Datum) 0;
	nulls[3] = have_every ? ' ' : 'n';
	lease_session_params(&values[4], &nulls[4]);
	values[7] = duration ? *duration : (Datum) 0;
	nulls[7] = duration ? ' ' : 'n';
}

/*
 * Records the server incarnation of a session record made by
 * record_session_values (its $7, NULL on a standby), so that the first call
 * of an incarnation, a renewal's too, is when it was first seen.
 */
static void
note_incarnation(Datum *values, const char *nulls)
{
	lease_incarnation_note(nulls[6] == ' ' ? DatumGetTextPP(values[6]) : NULL);
}

/* How many leases of worker $3 have a pending handoff request. */
#define HANDOFFS_PENDING_SQL \
	"(SELECT pg_catalog.count(*)" \
	"   FROM lease.shard_leases AS l, " LEASE_SQL_CLOCK \
	"  WHERE " LEASE_STREAM_MATCHES \
	"    AND l.lease_owner OPERATOR(pg_catalog.=) $3" \
	"    AND " LEASE_SQL_HANDOFF_PENDING("l", LEASE_SQL_NOW) ")"

/*
 * lease.heartbeat on 0.4.0: renew_leases' one write
 * (record_session_stmts[0][1]), answered from the worker's own row instead
 * of a list of its leases: how many it holds, the row's version (moved by
 * every statement that brings a lease to the worker or takes one away,
 * LEASE_SQL_RECORD_LOADS; the row lock the heartbeat takes orders it with
 * them), and how many of them have a pending handoff request
 * (shard_leases_handoff_owner_idx: the rare rows that have one).  The
 * statement's own snapshot counts the handoffs; the UPDATE's RETURNING
 * gives the row as the heartbeat left it.  A worker without a row holds
 * nothing: 0, NULL, 0.
 */
static LeaseStatement heartbeat_stmt_0_4 = {
	.name = "heartbeat (0.4 schema)",
	.sql = "WITH hb AS (" RECORD_SESSION_SQL_0_4(RECORD_SESSION_HEARTBEAT)
	"  RETURNING w.leases, w.version)"
	" SELECT COALESCE((SELECT hb.leases FROM hb), 0),"
	"        (SELECT hb.version FROM hb),"
	"        " HANDOFFS_PENDING_SQL,
	.nargs = 8,
	.argtypes = RECORD_SESSION_ARGTYPES,
	.expected = SPI_OK_SELECT
};

/*
 * lease.heartbeat from 0.5.0 on, after its write (record_session_stmts[1][1]):
 * the worker's holdings as they are now, in this statement's own snapshot
 * (under READ COMMITTED one taken after the write; see
 * lease_check_holdings_current for the others).  A takeover of one of the
 * worker's leases by expiry locked the heartbeat row, so the write waited
 * for it and this read sees it; a change that commits after this read is
 * ordered after the heartbeat.  A worker without holdings holds nothing:
 * 0, NULL, 0.
 */
static LeaseStatement heartbeat_holdings_stmt = {
	.name = "heartbeat: the worker's holdings",
	.sql = "SELECT COALESCE(h.leases, 0), h.version, " HANDOFFS_PENDING_SQL
	"  FROM (SELECT 1) AS one"
	"  LEFT JOIN lease.worker_holdings AS h"
	"    ON h.app_name OPERATOR(pg_catalog.=) $1"
	"   AND h.stream_name OPERATOR(pg_catalog.=) $2"
	"   AND h.worker OPERATOR(pg_catalog.=) $3",
	.nargs = 3,
	.argtypes = {TEXTOID, TEXTOID, TEXTOID},
	.expected = SPI_OK_SELECT
};

/*
 * The version of worker $3's holdings: [0] in the transaction's snapshot,
 * [1] in the latest one (every commit so far).
 */
#define HOLDINGS_VERSION_SQL \
	"SELECT h.version FROM lease.worker_holdings AS h" \
	" WHERE h.app_name OPERATOR(pg_catalog.=) $1" \
	"   AND h.stream_name OPERATOR(pg_catalog.=) $2" \
	"   AND h.worker OPERATOR(pg_catalog.=) $3"

static LeaseStatement holdings_version_stmts[2] = {
	{
		.name = "the worker's holdings version",
		.sql = HOLDINGS_VERSION_SQL,
		.nargs = 3, .argtypes = {TEXTOID, TEXTOID, TEXTOID}, .expected = SPI_OK_SELECT
	},
	{
		.name = "the worker's holdings version, latest",
		.sql = HOLDINGS_VERSION_SQL,
		.nargs = 3, .argtypes = {TEXTOID, TEXTOID, TEXTOID}, .expected = SPI_OK_SELECT,
		.latest_snapshot = true
	},
};

/* Worker stream[2]'s holdings version through statement `stmt`; *found false when it has none. */
static int64
holdings_version(LeaseStatement *stmt, Datum *stream, bool *found)
{
	bool		isnull = true;
	int64		version = 0;

	*found = lease_spi_run(stmt, stream, NULL, 0) > 0;
	if (*found)
		version = DatumGetInt64(lease_spi_value(0, 1, &isnull));
	return version;
}

/* See workers.h. */
void
lease_check_holdings_current(Datum *stream)
{
	bool		found;
	bool		latest_found;
	int64		version;
	int64		latest;

	if (!IsolationUsesXactSnapshot())
		return;
	version = holdings_version(&holdings_version_stmts[0], stream, &found);
	latest = holdings_version(&holdings_version_stmts[1], stream, &latest_found);
	if (found != latest_found || version != latest)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("could not serialize access due to a concurrent change of the leases of worker \"%s\"",
						TextDatumGetCString(stream[2])),
				 errdetail("A change of who holds one of its leases committed after this transaction's snapshot was taken."),
				 errhint("Retry the transaction.")));
}

/*
 * lease.heartbeat(app_name, stream_name, owner, lease_duration,
 * renew_every, OUT leases, OUT leases_version, OUT handoffs_pending)
 */
static Datum
heartbeat(FunctionCallInfo fcinfo, LeaseSchema schema)
{
	TupleDesc	tupdesc;
	Datum		stream[3];
	Datum		duration;
	Datum		renew_every = (Datum) 0;
	bool		have_every;
	Datum		values[8];
	char		nulls[8];
	Datum		out[3];
	bool		outnulls[3];
	LeaseCaller caller;
	Datum		result;
	bool		flush_free = schema >= LEASE_SCHEMA_0_5 && lease_heartbeat_flush_free_begin();

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "pg_lease: lease.heartbeat must return a row");
	stream[0] = lease_arg_ident(fcinfo, 0, "app_name");
	stream[1] = lease_arg_ident(fcinfo, 1, "stream_name");
	stream[2] = lease_arg_ident(fcinfo, 2, "owner");
	duration = lease_arg_duration(fcinfo, 3, "lease_duration");
	have_every = lease_arg_opt_duration(fcinfo, 4, "renew_every", &renew_every);
	record_session_values(stream, have_every, renew_every, &duration, values, nulls);

	lease_stream_begin(fcinfo, schema, stream[0], stream[1], &caller);
	if (schema >= LEASE_SCHEMA_0_5)
	{
		note_incarnation(values, nulls);
		lease_spi_run(&record_session_stmts[1][1], values, nulls, 0);
		lease_check_holdings_current(stream);
		lease_spi_run(&heartbeat_holdings_stmt, values, nulls, 0);
	}
	else
		lease_spi_run(&heartbeat_stmt_0_4, values, nulls, 0);
	for (int col = 0; col < 3; col++)
		out[col] = lease_spi_value(0, col + 1, &outnulls[col]);
	/* the row is made in SPI's memory, which SPI_finish frees: copied out */
	result = PointerGetDatum(SPI_returntuple(heap_form_tuple(tupdesc, out, outnulls), tupdesc));
	lease_heartbeat_flush_free_end(flush_free);
	lease_app_end(&caller);
	PG_RETURN_DATUM(result);
}

/* lease.heartbeat as the 0.4.0 script binds it (the bookkeeping in lease.stream_workers). */
PG_FUNCTION_INFO_V1(lease_heartbeat);
Datum lease_heartbeat(PG_FUNCTION_ARGS) { return heartbeat(fcinfo, LEASE_SCHEMA_0_4); }

/* lease.heartbeat from 0.5.0 on: the placement check (src/leases/placement.h), the heartbeat row only its worker writes. */
PG_FUNCTION_INFO_V1(lease_heartbeat_0_5);
Datum lease_heartbeat_0_5(PG_FUNCTION_ARGS) { return heartbeat(fcinfo, LEASE_SCHEMA_0_5); }

/* See workers.h. */
void
lease_record_session(LeaseSchema schema, Datum *stream, bool have_every, Datum renew_every,
					 Datum *duration)
{
	Datum		values[8];
	char		nulls[8];

	record_session_values(stream, have_every, renew_every, duration, values, nulls);
	if (schema >= LEASE_SCHEMA_0_5)
		note_incarnation(values, nulls);
	lease_spi_run(&record_session_stmts[schema >= LEASE_SCHEMA_0_5 ? 1 : 0][duration ? 1 : 0],
				  values, nulls, 0);
}

PG_FUNCTION_INFO_V1(lease_liveness_cutoff);

/*
 * lease.liveness_cutoff(session_pid, session_start, server_incarnation,
 * renewed_at, renew_every, now): the time from which the leases of a worker
 * in the fast-failover mode may be taken before their expiry, or NULL while
 * they may not.  Non-NULL only when all of these hold: now is at least
 * renewed_at + renew_every + lease.liveness_grace (the worker missed a
 * renewal); the session recorded at its last renewal lived in this server
 * incarnation (a restart or a failover ends every session, and there the
 * lease duration rules); and no backend with that process id is running
 * (one that is, even a reused pid, keeps the leases: the check fails
 * safe).  NULL when an argument is NULL: a worker not in the mode
 * (renew_every NULL), or one that never renewed.
 */
Datum
lease_liveness_cutoff(PG_FUNCTION_ARGS)
{
	int32		pid;
	text	   *incarnation;
	Datum		cutoff;
	text	   *current;

	for (int i = 0; i < 6; i++)
		if (PG_ARGISNULL(i))
			PG_RETURN_NULL();
	pid = PG_GETARG_INT32(0);
	incarnation = PG_GETARG_TEXT_PP(2);

	cutoff = DirectFunctionCall2(timestamptz_pl_interval, PG_GETARG_DATUM(3), PG_GETARG_DATUM(4));
	cutoff = DirectFunctionCall2(timestamptz_pl_interval, cutoff,
								 lease_interval_from_ms(lease_liveness_grace_ms));
	if (PG_GETARG_TIMESTAMPTZ(5) < DatumGetTimestampTz(cutoff))
		PG_RETURN_NULL();
	current = lease_server_incarnation();
	if (current == NULL ||
		!DatumGetBool(DirectFunctionCall2Coll(texteq, C_COLLATION_OID, PointerGetDatum(current),
											  PointerGetDatum(incarnation))))
		PG_RETURN_NULL();
	if (BackendPidGetProc(pid) != NULL)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(cutoff);
}
