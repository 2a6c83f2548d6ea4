/*-------------------------------------------------------------------------
 *
 * src/leases/leases.c
 *	  The lease core: create, take, renew, checkpoint, release and close.
 *
 * Each function checks its arguments, then runs exactly one SQL statement:
 * there is no read-then-write, so there is no window between a read and a
 * conditional write for a concurrent renewal to fall into.  The statements
 * that change ownership (take, release, close) record their event and send
 * their notification in the same statement (see events.h).  take_lease and
 * renew_lease use lease_count as their optimistic lock; update_checkpoint,
 * release_lease and close_shard are guarded on ownership only, so a renewal
 * (which bumps lease_count) can never make them fail.
 *
 * Under READ COMMITTED a statement that finds its row locked by a concurrent
 * writer waits, then re-checks its WHERE clause against the committed row
 * (EvalPlanQual): a take racing another take, or a renewal racing a steal,
 * sees the winner's row and returns NULL.
 *
 *-------------------------------------------------------------------------
 */
#include "pg_lease.h"

#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"

#include "common/args.h"
#include "leases/events.h"
#include "leases/incarnation.h"
#include "leases/lease_sql.h"
#include "leases/placement.h"
#include "leases/privileges.h"
#include "leases/workers.h"
#include "common/spi_util.h"

/* Insert an unowned lease unless the key exists. */
static LeaseStatement create_stmt = {
	.name = "create_lease",
	.sql =
	"INSERT INTO lease.shard_leases AS l"
	" (app_name, stream_name, shard_id, parent_shard_ids, checkpoint, lease_count)"
	" VALUES ($1, $2, $3, $4, $5, 0)"
	" ON CONFLICT (app_name, stream_name, shard_id) DO NOTHING"
	" RETURNING true",
	.nargs = 5,
	.argtypes = {TEXTOID, TEXTOID, TEXTOID, TEXTARRAYOID, TEXTOID},
	.expected = SPI_OK_INSERT_RETURNING
};

/*
 * Take a lease: optimistic steal when $5 (the expected lease_count) is
 * given, otherwise only an unowned or expired lease, or one promised to $4
 * whose handoff deadline has passed.  A live lease with a pending handoff
 * to someone else is not stolen.  Never an ended shard, never a child whose
 * parents (those still in the table) have not ended.
 *
 * The row is read and locked in `o` (the lock is taken only when the guard
 * holds, exactly as the UPDATE alone would, and a concurrent change is
 * re-checked against the committed row), so the event records the owner it
 * really took the lease from.
 */
#define TAKE_SQL(loads) \
	"WITH o0 AS (" \
	" SELECT l.app_name, l.stream_name, l.shard_id, l.lease_owner AS from_owner," \
	"        l.lease_expires_at AS from_expires_at," \
	"        (NOT " LEASE_SQL_HANDOFF_PENDING("l", LEASE_SQL_NOW) \
	"         OR l.handoff_to OPERATOR(pg_catalog.=) $4) AS may_steal," \
	"        CASE WHEN l.lease_owner IS NULL THEN 'take'" \
	"             WHEN NOT " LEASE_SQL_LIVE("l", LEASE_SQL_NOW) " THEN 'expiry_takeover'" \
	"             WHEN l.handoff_to OPERATOR(pg_catalog.=) $4" \
	"                  AND " LEASE_SQL_HANDOFF_PENDING("l", LEASE_SQL_NOW) " THEN 'transfer'" \
	"             ELSE 'steal' END AS event" \
	"   FROM lease.shard_leases AS l, " LEASE_SQL_CLOCK \
	"  WHERE " LEASE_KEY_MATCHES \
	"    AND " LEASE_SQL_NOT_ENDED("l") \
	"    AND CASE WHEN $5 IS NULL" \
	"             THEN NOT " LEASE_SQL_LIVE("l", LEASE_SQL_NOW) \
	"                  OR (l.handoff_to OPERATOR(pg_catalog.=) $4" \
	"                      AND " LEASE_SQL_HANDOFF_PENDING("l", LEASE_SQL_NOW) \
	"                      AND " LEASE_SQL_NOW " OPERATOR(pg_catalog.>=) l.handoff_deadline)" \
	"             ELSE l.lease_count OPERATOR(pg_catalog.=) $5" \
	"                  AND l.lease_owner IS DISTINCT FROM $4" \
	"                  AND (NOT " LEASE_SQL_LIVE("l", LEASE_SQL_NOW) \
	"                       OR NOT " LEASE_SQL_HANDOFF_PENDING("l", LEASE_SQL_NOW) \
	"                       OR l.handoff_to OPERATOR(pg_catalog.=) $4)" \
	"        END" \
	"    AND NOT " LEASE_SQL_BLOCKED("l") \
	"    FOR NO KEY UPDATE OF l)," \
	TAKE_RECHECKED \
	LEASE_SQL_TAKE_LOCKED("$4", "$6", "o.event") \
	LEASE_SQL_RECORD_EVENTS("$7") \
	loads \
	" SELECT c.lease_count, " LEASE_SQL_NOTIFY("$8") " FROM c"

/*
 * An expiry takeover is decided by the holder's heartbeat too, which a renewal moves without touching the lease row: the
 * workers' lease.stream_workers rows (holder and taker, in key order:
 * LEASE_SQL_LOCK_WORKERS) are locked and the expiry judged again on what is
 * committed
 * (a renewal either committed first, and the lease is live again, or waits
 * for this take and then no longer lists the lease).  Live again, an
 * expiry takeover is dropped, or with a lease_count given becomes the
 * steal it asked for.  A takeover before the lease's expiry because its
 * holder's session ended is recorded as 'session_ended'.
 */
#define TAKE_RECHECKED \
	LEASE_SQL_RECHECKED("$4", \
						"CASE WHEN o0.event OPERATOR(pg_catalog.<>) 'expiry_takeover' THEN o0.event" \
						"     WHEN " LEASE_SQL_HELD_AGAIN " THEN 'steal'" \
						"     ELSE " LEASE_SQL_EXPIRED_BECAUSE("o0.from_expires_at", "hw", LEASE_SQL_NOW) \
						" END", \
						"o0.event OPERATOR(pg_catalog.<>) 'expiry_takeover'" \
						" OR ($5 IS NOT NULL AND o0.may_steal)")

static LeaseStatement take_stmts[2] =
	LEASE_SCHEMA_STMTS2("take_lease", TAKE_SQL(LEASE_SQL_RECORD_LOADS_0_4), TAKE_SQL(LEASE_SQL_RECORD_LOADS),
						0, false, 8,
						TEXTOID, TEXTOID, TEXTOID, TEXTOID, INT8OID, INTERVALOID,
						LEASE_EVENT_ARGTYPES);

/* Renew: guarded on owner and lease_count. */
static LeaseStatement renew_stmt = {
	.name = "renew_lease",
	.sql =
	"UPDATE lease.shard_leases AS l"
	" SET lease_count = l.lease_count OPERATOR(pg_catalog.+) 1,"
	"     lease_expires_at = pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) $6,"
	"     updated_at = pg_catalog.now()"
	" WHERE " LEASE_KEY_MATCHES
	"   AND l.lease_owner OPERATOR(pg_catalog.=) $4"
	"   AND l.lease_count OPERATOR(pg_catalog.=) $5"
	" RETURNING l.lease_count",
	.nargs = 6,
	.argtypes = {TEXTOID, TEXTOID, TEXTOID, TEXTOID, INT8OID, INTERVALOID},
	.expected = SPI_OK_UPDATE_RETURNING
};

/*
 * Checkpoint: guarded on ownership only, never on lease_count; clears the
 * pending (two-phase) checkpoint.  `moved` is the SET item of
 * checkpointed_at: from 0.5.0 on the statement moves it itself when the
 * checkpoint changes (LEASE_SQL_SET_CHECKPOINTED), and the BEFORE trigger
 * shard_leases_checkpointed (src/leases/monitoring.sql) no longer fires
 * for it; up to 0.4.0 the trigger does it.
 */
#define CHECKPOINT_SET(moved) \
	"UPDATE lease.shard_leases AS l" \
	" SET checkpoint = $5," \
	"     checkpoint_sub_sequence = $6," \
	"     pending_checkpoint = NULL," \
	"     owner_switches_since_checkpoint = 0," \
	moved \
	"     updated_at = pg_catalog.now()"
#define CHECKPOINT_WHERE \
	" WHERE " LEASE_KEY_MATCHES \
	"   AND l.lease_owner OPERATOR(pg_catalog.=) $4" \
	"   AND l.checkpoint OPERATOR(pg_catalog.<>) " LEASE_SQL_SHARD_END
#define CHECKPOINT_0_4		""
#define CHECKPOINT_0_5		LEASE_SQL_SET_CHECKPOINTED("l", "$5", "$6") ","
#define CHECKPOINT_FENCED	"   AND l.lease_epoch OPERATOR(pg_catalog.=) $7"

/*
 * A checkpoint statement, `tail` after its SET list: [0] up to 0.4.0, [1]
 * from 0.5.0 on (which moves checkpointed_at itself).
 */
#define CHECKPOINT_STMTS(stmt_name, tail, n, ...) \
	{ \
		{ \
			.name = stmt_name " (0.4 schema)", .sql = CHECKPOINT_SET(CHECKPOINT_0_4) tail, .nargs = n, \
			.argtypes = {__VA_ARGS__}, .expected = SPI_OK_UPDATE_RETURNING \
		}, \
		{ \
			.name = stmt_name, .sql = CHECKPOINT_SET(CHECKPOINT_0_5) tail, .nargs = n, \
			.argtypes = {__VA_ARGS__}, .expected = SPI_OK_UPDATE_RETURNING \
		} \
	}

static LeaseStatement checkpoint_stmts[2] =
	CHECKPOINT_STMTS("update_checkpoint", CHECKPOINT_WHERE " RETURNING true", 6,
					 TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, INT8OID);

/* Fenced checkpoint: as above, and only while lease_epoch equals $7. */
static LeaseStatement checkpoint_fenced_stmts[2] =
	CHECKPOINT_STMTS("update_checkpoint (fenced)", CHECKPOINT_WHERE CHECKPOINT_FENCED " RETURNING true", 7,
					 TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, INT8OID, INT8OID);

/*
 * Measured checkpoint: as the fenced one above, and the lease's work rate
 * moves toward $8, the work reported (LEASE_SQL_DECAYED_WORK_RATE).
 */
static LeaseStatement checkpoint_measured_stmts[2] =
	CHECKPOINT_STMTS("update_checkpoint (work)",
					 ", work_rate = " LEASE_SQL_DECAYED_WORK_RATE("l", "$8::pg_catalog.float8")
					 CHECKPOINT_WHERE CHECKPOINT_FENCED " RETURNING true", 8,
					 TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, INT8OID, INT8OID, INT8OID);

/* Which of a checkpoint statement pair `schema` runs. */
#define CHECKPOINT_STMT(stmts, schema) (&(stmts)[(schema) >= LEASE_SCHEMA_0_5 ? 1 : 0])

/* Two-phase checkpoint, first phase: record the intent, guarded on ownership. */
static LeaseStatement prepare_stmt = {
	.name = "prepare_checkpoint",
	.sql =
	"UPDATE lease.shard_leases AS l"
	" SET pending_checkpoint = $5,"
	"     updated_at = pg_catalog.now()"
	" WHERE " LEASE_KEY_MATCHES
	"   AND l.lease_owner OPERATOR(pg_catalog.=) $4"
	"   AND l.checkpoint OPERATOR(pg_catalog.<>) " LEASE_SQL_SHARD_END
	" RETURNING true",
	.nargs = 5,
	.argtypes = {TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID},
	.expected = SPI_OK_UPDATE_RETURNING
};

/*
 * Release: guarded on ownership.  With a pending handoff the lease goes
 * straight to the requester (for the lease duration it asked for), so no
 * third worker can grab it in between; otherwise it becomes unowned.
 */
#define RELEASE_SQL(loads) \
	"WITH c AS (UPDATE lease.shard_leases AS l" \
	" SET lease_owner = CASE WHEN " LEASE_SQL_HANDOFF_PENDING("l", LEASE_SQL_NOW) \
	"                   THEN l.handoff_to END," \
	"     lease_expires_at = CASE WHEN " LEASE_SQL_HANDOFF_PENDING("l", LEASE_SQL_NOW) \
	"                   THEN " LEASE_SQL_NOW " OPERATOR(pg_catalog.+) l.handoff_lease_duration END," \
	"     owner_switches_since_checkpoint = l.owner_switches_since_checkpoint" \
	"         OPERATOR(pg_catalog.+) CASE WHEN " LEASE_SQL_HANDOFF_PENDING("l", LEASE_SQL_NOW) \
	"                   THEN 1 ELSE 0 END," \
	"     lease_count = l.lease_count OPERATOR(pg_catalog.+) 1," \
	"     lease_epoch = l.lease_epoch OPERATOR(pg_catalog.+) 1," \
	"     " LEASE_SQL_CLEAR_HANDOFF "," \
	"     updated_at = pg_catalog.now()" \
	" FROM " LEASE_SQL_CLOCK \
	" WHERE " LEASE_KEY_MATCHES \
	"   AND l.lease_owner OPERATOR(pg_catalog.=) $4" \
	" RETURNING l.app_name, l.stream_name, l.shard_id," \
	"           CASE WHEN l.lease_owner IS NULL THEN 'release' ELSE 'transfer' END AS event," \
	"           $4 AS from_owner, l.lease_owner AS to_owner, l.lease_count, l.lease_epoch," \
	"           l.lease_expires_at AS to_expires_at)" \
	LEASE_SQL_RECORD_EVENTS("$5") \
	loads \
	" SELECT true, " LEASE_SQL_NOTIFY("$6") " FROM c"

static LeaseStatement release_stmts[2] =
	LEASE_OWNERSHIP_STMTS("release_lease", RELEASE_SQL, 6,
						  TEXTOID, TEXTOID, TEXTOID, TEXTOID, LEASE_EVENT_ARGTYPES);

/* Close: checkpoint SHARD_END and give the lease up, guarded on ownership. */
#define CLOSE_SQL(loads) \
	"WITH c AS (UPDATE lease.shard_leases AS l" \
	" SET checkpoint = " LEASE_SQL_SHARD_END "," \
	"     checkpoint_sub_sequence = 0," \
	"     pending_checkpoint = NULL," \
	"     owner_switches_since_checkpoint = 0," \
	"     lease_owner = NULL," \
	"     lease_expires_at = NULL," \
	"     lease_count = l.lease_count OPERATOR(pg_catalog.+) 1," \
	"     lease_epoch = l.lease_epoch OPERATOR(pg_catalog.+) 1," \
	"     " LEASE_SQL_CLEAR_HANDOFF "," \
	"     updated_at = pg_catalog.now()" \
	" WHERE " LEASE_KEY_MATCHES \
	"   AND l.lease_owner OPERATOR(pg_catalog.=) $4" \
	"   AND l.checkpoint OPERATOR(pg_catalog.<>) " LEASE_SQL_SHARD_END \
	" RETURNING l.app_name, l.stream_name, l.shard_id, 'close' AS event," \
	"           $4 AS from_owner, CAST(NULL AS pg_catalog.text) AS to_owner," \
	"           l.lease_count, l.lease_epoch," \
	"           CAST(NULL AS pg_catalog.timestamptz) AS to_expires_at)" \
	LEASE_SQL_RECORD_EVENTS("$5") \
	loads \
	" SELECT true, " LEASE_SQL_NOTIFY("$6") " FROM c"

static LeaseStatement close_stmts[2] =
	LEASE_OWNERSHIP_STMTS("close_shard", CLOSE_SQL, 6,
						  TEXTOID, TEXTOID, TEXTOID, TEXTOID, LEASE_EVENT_ARGTYPES);

/*
 * Runs a statement that RETURNING the new lease_count, as the owner once
 * the caller's access to the app (values[0]) is checked; false when no row
 * came back.  lease_count is by value, so it survives SPI_finish.
 */
static bool
run_returning_count(FunctionCallInfo fcinfo, LeaseSchema schema, LeaseStatement *stmt,
					Datum *values, const char *nulls, int64 *count)
{
	LeaseCaller caller;
	uint64		processed;
	bool		isnull = true;

	lease_stream_begin(fcinfo, schema, values[0], values[1], &caller);
	processed = lease_spi_run(stmt, values, nulls, 0);
	if (processed > 0)
		*count = DatumGetInt64(lease_spi_value(0, 1, &isnull));
	lease_app_end(&caller);
	return processed > 0 && !isnull;
}

/* Fills values[0..2] with the checked (app_name, stream_name, shard_id). */
static void
lease_key_args(FunctionCallInfo fcinfo, Datum *values)
{
	values[0] = lease_arg_ident(fcinfo, 0, "app_name");
	values[1] = lease_arg_ident(fcinfo, 1, "stream_name");
	values[2] = lease_arg_ident(fcinfo, 2, "shard_id");
}

/* Raises 22023 when a shard names itself as its own parent. */
static void
check_not_own_parent(Datum shard_id, Datum parents)
{
	ArrayType  *array = DatumGetArrayTypeP(parents);
	Datum	   *elems;
	int			nelems;

	deconstruct_array(array, TEXTOID, -1, false, TYPALIGN_INT, &elems, NULL, &nelems);
	for (int i = 0; i < nelems; i++)
	{
		if (DatumGetBool(DirectFunctionCall2Coll(texteq, C_COLLATION_OID, elems[i], shard_id)))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("shard \"%s\" cannot be its own parent",
							TextDatumGetCString(shard_id)),
					 errhint("Remove the shard from parent_shard_ids.")));
	}
}

/* lease.create_lease: true when created, false when the lease already existed. */
static Datum
create_lease(FunctionCallInfo fcinfo, LeaseSchema schema)
{
	Datum		values[5];

	lease_key_args(fcinfo, values);
	values[3] = lease_arg_ident_array(fcinfo, 3, "parent_shard_ids");
	values[4] = lease_arg_checkpoint(fcinfo, 4, "checkpoint");
	check_not_own_parent(values[2], values[3]);

	PG_RETURN_BOOL(lease_spi_exec_for_stream(fcinfo, schema, &create_stmt, values, NULL) > 0);
}

PG_FUNCTION_INFO_V1(lease_create_lease_0_4);
/* lease.create_lease as the 0.4.0 script binds it. */
Datum lease_create_lease_0_4(PG_FUNCTION_ARGS) { return create_lease(fcinfo, LEASE_SCHEMA_0_4); }

PG_FUNCTION_INFO_V1(lease_create_lease_0_5);
/* lease.create_lease from 0.5.0 on: with the placement check (src/leases/placement.h). */
Datum lease_create_lease_0_5(PG_FUNCTION_ARGS) { return create_lease(fcinfo, LEASE_SCHEMA_0_5); }

/*
 * lease.take_lease: the new lease_count, or NULL when not taken.  From
 * 0.4.0 on, a renew_every (argument 7) records the taker's session with it
 * (docs/worker-guide.md, "Fast failover").
 */
static Datum
take_lease(FunctionCallInfo fcinfo, LeaseSchema schema)
{
	Datum		values[6 + LEASE_EVENT_NPARAMS];
	char		nulls[6 + LEASE_EVENT_NPARAMS] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
	Datum		renew_every = (Datum) 0;
	bool		have_every = false;
	LeaseCaller caller;
	bool		isnull = true;
	int64		count = 0;

	lease_key_args(fcinfo, values);
	values[3] = lease_arg_ident(fcinfo, 3, "new_owner");
	if (PG_ARGISNULL(4))
	{
		values[4] = (Datum) 0;
		nulls[4] = 'n';
	}
	else
		values[4] = Int64GetDatum(lease_arg_nonneg_int64(fcinfo, 4, "lease_count"));
	values[5] = lease_arg_duration(fcinfo, 5, "lease_duration");
	if (PG_NARGS() > 6)
		have_every = lease_arg_opt_duration(fcinfo, 6, "renew_every", &renew_every);
	lease_event_params(&values[6]);

	lease_stream_begin(fcinfo, schema, values[0], values[1], &caller);
	if (schema >= LEASE_SCHEMA_0_5)
		lease_restart_grace(values, values[5], false);
	if (lease_spi_run(LEASE_SCHEMA_STMT(take_stmts, schema), values, nulls, 0) > 0)
		count = DatumGetInt64(lease_spi_value(0, 1, &isnull));
	if (!isnull && have_every)
	{
		Datum		taker[3] = {values[0], values[1], values[3]};

		lease_record_session(schema, taker, true, renew_every, NULL);
	}
	lease_app_end(&caller);
	if (isnull)
		PG_RETURN_NULL();
	PG_RETURN_INT64(count);
}

PG_FUNCTION_INFO_V1(lease_take_lease_0_4);
/* lease.take_lease as the 0.4.0 script binds it. */
Datum lease_take_lease_0_4(PG_FUNCTION_ARGS) { return take_lease(fcinfo, LEASE_SCHEMA_0_4); }

/* lease.take_lease from 0.5.0 on: the placement check (src/leases/placement.h), the bookkeeping in lease.worker_holdings. */
PG_FUNCTION_INFO_V1(lease_take_lease_0_5);
Datum lease_take_lease_0_5(PG_FUNCTION_ARGS) { return take_lease(fcinfo, LEASE_SCHEMA_0_5); }

/* lease.renew_lease: the new lease_count, or NULL when the lease was lost. */
static Datum
renew_lease(FunctionCallInfo fcinfo, LeaseSchema schema)
{
	Datum		values[6];
	int64		count;

	lease_key_args(fcinfo, values);
	values[3] = lease_arg_ident(fcinfo, 3, "owner");
	values[4] = Int64GetDatum(lease_arg_nonneg_int64(fcinfo, 4, "lease_count"));
	values[5] = lease_arg_duration(fcinfo, 5, "lease_duration");

	if (!run_returning_count(fcinfo, schema, &renew_stmt, values, NULL, &count))
		PG_RETURN_NULL();
	PG_RETURN_INT64(count);
}

PG_FUNCTION_INFO_V1(lease_renew_lease_0_4);
/* lease.renew_lease as the 0.4.0 script binds it. */
Datum lease_renew_lease_0_4(PG_FUNCTION_ARGS) { return renew_lease(fcinfo, LEASE_SCHEMA_0_4); }

PG_FUNCTION_INFO_V1(lease_renew_lease_0_5);
/* lease.renew_lease from 0.5.0 on: with the placement check (src/leases/placement.h). */
Datum lease_renew_lease_0_5(PG_FUNCTION_ARGS) { return renew_lease(fcinfo, LEASE_SCHEMA_0_5); }

/* Fills values[0..5] with the checked arguments both update_checkpoints share. */
static void
checkpoint_args(FunctionCallInfo fcinfo, Datum *values)
{
	lease_key_args(fcinfo, values);
	values[3] = lease_arg_ident(fcinfo, 3, "owner");
	values[4] = lease_arg_checkpoint(fcinfo, 4, "checkpoint");
	values[5] = Int64GetDatum(lease_arg_nonneg_int64(fcinfo, 5, "sub_sequence"));
	lease_check_not_shard_end(values[4]);
}

/* lease.update_checkpoint: true when written by the current owner. */
static Datum
update_checkpoint(FunctionCallInfo fcinfo, LeaseSchema schema)
{
	Datum		values[6];

	checkpoint_args(fcinfo, values);

	PG_RETURN_BOOL(lease_spi_exec_for_stream(fcinfo, schema, CHECKPOINT_STMT(checkpoint_stmts, schema),
											 values, NULL) > 0);
}

PG_FUNCTION_INFO_V1(lease_update_checkpoint_0_4);
/* lease.update_checkpoint as the 0.4.0 script binds it. */
Datum lease_update_checkpoint_0_4(PG_FUNCTION_ARGS) { return update_checkpoint(fcinfo, LEASE_SCHEMA_0_4); }

PG_FUNCTION_INFO_V1(lease_update_checkpoint_0_5);
/* lease.update_checkpoint from 0.5.0 on: with the placement check (src/leases/placement.h); checkpointed_at moved by the statement. */
Datum lease_update_checkpoint_0_5(PG_FUNCTION_ARGS) { return update_checkpoint(fcinfo, LEASE_SCHEMA_0_5); }

/*
 * lease.update_checkpoint with a fencing token: true when written by the
 * current owner while lease_epoch still equals the token; work (0.4.0,
 * optional) feeds the lease's measured work rate.
 */
static Datum
update_checkpoint_fenced(FunctionCallInfo fcinfo, LeaseSchema schema)
{

	Datum		values[8];
	bool		measured = PG_NARGS() > 7 && !PG_ARGISNULL(7);

	checkpoint_args(fcinfo, values);
	values[6] = Int64GetDatum(lease_arg_nonneg_int64(fcinfo, 6, "fencing_token"));
	if (measured)
		values[7] = Int64GetDatum(lease_arg_nonneg_int64(fcinfo, 7, "work"));

	PG_RETURN_BOOL(lease_spi_exec_for_stream(fcinfo, schema,
											 measured ? CHECKPOINT_STMT(checkpoint_measured_stmts, schema)
											 : CHECKPOINT_STMT(checkpoint_fenced_stmts, schema),
											 values, NULL) > 0);
}

PG_FUNCTION_INFO_V1(lease_update_checkpoint_fenced_0_4);
/* lease.update_checkpoint_fenced as the 0.4.0 script binds it. */
Datum lease_update_checkpoint_fenced_0_4(PG_FUNCTION_ARGS) { return update_checkpoint_fenced(fcinfo, LEASE_SCHEMA_0_4); }

PG_FUNCTION_INFO_V1(lease_update_checkpoint_fenced_0_5);
/* lease.update_checkpoint with a fencing token from 0.5.0 on: with the placement check (src/leases/placement.h); checkpointed_at moved by the statement. */
Datum lease_update_checkpoint_fenced_0_5(PG_FUNCTION_ARGS) { return update_checkpoint_fenced(fcinfo, LEASE_SCHEMA_0_5); }

/* lease.prepare_checkpoint: true when the owner recorded its intended checkpoint. */
static Datum
prepare_checkpoint(FunctionCallInfo fcinfo, LeaseSchema schema)
{
	Datum		values[5];

	lease_key_args(fcinfo, values);
	values[3] = lease_arg_ident(fcinfo, 3, "owner");
	values[4] = lease_arg_checkpoint(fcinfo, 4, "pending_checkpoint");
	lease_check_not_shard_end(values[4]);

	PG_RETURN_BOOL(lease_spi_exec_for_stream(fcinfo, schema, &prepare_stmt, values, NULL) > 0);
}

PG_FUNCTION_INFO_V1(lease_prepare_checkpoint_0_4);
/* lease.prepare_checkpoint as the 0.4.0 script binds it. */
Datum lease_prepare_checkpoint_0_4(PG_FUNCTION_ARGS) { return prepare_checkpoint(fcinfo, LEASE_SCHEMA_0_4); }

PG_FUNCTION_INFO_V1(lease_prepare_checkpoint_0_5);
/* lease.prepare_checkpoint from 0.5.0 on: with the placement check (src/leases/placement.h). */
Datum lease_prepare_checkpoint_0_5(PG_FUNCTION_ARGS) { return prepare_checkpoint(fcinfo, LEASE_SCHEMA_0_5); }

/*
 * Runs the ownership change of `stmts` (release_stmts or close_stmts) for
 * the key and owner of the call, with the event parameters: true when the
 * owner's lease changed.
 */
static Datum
give_up_lease(FunctionCallInfo fcinfo, LeaseSchema schema, LeaseStatement *stmts)
{
	Datum		values[4 + LEASE_EVENT_NPARAMS];

	lease_key_args(fcinfo, values);
	values[3] = lease_arg_ident(fcinfo, 3, "owner");
	lease_event_params(&values[4]);

	PG_RETURN_BOOL(lease_spi_exec_for_stream(fcinfo, schema, LEASE_SCHEMA_STMT(stmts, schema),
											 values, NULL) > 0);
}

/*
 * lease.release_lease: true when the owner gave the lease up (to the
 * requester of a pending handoff, or to nobody).
 */
static Datum
release_lease(FunctionCallInfo fcinfo, LeaseSchema schema)
{
	return give_up_lease(fcinfo, schema, release_stmts);
}

PG_FUNCTION_INFO_V1(lease_release_lease_0_4);
/* lease.release_lease as the 0.4.0 script binds it. */
Datum lease_release_lease_0_4(PG_FUNCTION_ARGS) { return release_lease(fcinfo, LEASE_SCHEMA_0_4); }

/* lease.release_lease from 0.5.0 on: the placement check (src/leases/placement.h), the bookkeeping in lease.worker_holdings. */
PG_FUNCTION_INFO_V1(lease_release_lease_0_5);
Datum lease_release_lease_0_5(PG_FUNCTION_ARGS) { return release_lease(fcinfo, LEASE_SCHEMA_0_5); }

/* lease.close_shard: true when the owner ended the shard. */
static Datum
close_shard(FunctionCallInfo fcinfo, LeaseSchema schema)
{
	return give_up_lease(fcinfo, schema, close_stmts);
}

PG_FUNCTION_INFO_V1(lease_close_shard_0_4);
/* lease.close_shard as the 0.4.0 script binds it. */
Datum lease_close_shard_0_4(PG_FUNCTION_ARGS) { return close_shard(fcinfo, LEASE_SCHEMA_0_4); }

/* lease.close_shard from 0.5.0 on: the placement check (src/leases/placement.h), the bookkeeping in lease.worker_holdings. */
PG_FUNCTION_INFO_V1(lease_close_shard_0_5);
Datum lease_close_shard_0_5(PG_FUNCTION_ARGS) { return close_shard(fcinfo, LEASE_SCHEMA_0_5); }

/*
 * Hold: lock the lease row FOR SHARE until the caller's transaction ends,
 * whoever holds it (the caller checks owner and epoch on the locked row
 * version, and raises when they are not its own, ending the lock with the
 * transaction).  FOR SHARE is the weakest row lock that every ownership
 * change waits for: take, steal, expiry takeover, transfer, release and
 * close are all UPDATEs of non-key columns (FOR NO KEY UPDATE), which
 * conflict with FOR SHARE; FOR KEY SHARE would let them through.  A
 * concurrent change makes the statement wait under the caller's
 * lock_timeout, then read the committed row (EvalPlanQual).
 */
static LeaseStatement hold_stmt = {
	.name = "hold_lease",
	.sql =
	"SELECT l.lease_owner, l.lease_epoch, l.checkpoint"
	"  FROM lease.shard_leases AS l"
	" WHERE " LEASE_KEY_MATCHES
	"   FOR SHARE OF l",
	.nargs = 3,
	.argtypes = {TEXTOID, TEXTOID, TEXTOID},
	.expected = SPI_OK_SELECT
};

/*
 * Raises 55000 for a hold_lease caller that does not hold the lease at the
 * epoch it gave: `found` tells whether the lease exists, `owner` (NULL for
 * none) and `epoch` are those of the locked row.
 */
static pg_attribute_noreturn() void
raise_not_held(Datum *values, int64 lease_epoch, bool found, const char *owner, int64 epoch)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("lease \"%s\" of stream \"%s\" is not held by \"%s\" at epoch " INT64_FORMAT,
					TextDatumGetCString(values[2]), TextDatumGetCString(values[1]),
					TextDatumGetCString(values[3]), lease_epoch),
			 !found ? errdetail("There is no such lease.") :
			 owner == NULL ? errdetail("Nobody holds it; its epoch is " INT64_FORMAT ".", epoch) :
			 errdetail("It is held by \"%s\" at epoch " INT64_FORMAT ".", owner, epoch),
			 errhint("Roll back and stop processing the shard under this epoch.")));
}

/*
 * lease.hold_lease: the lease's checkpoint, once the caller's transaction
 * holds the lease row FOR SHARE until it ends; raises 55000 unless `owner`
 * holds the lease at `lease_epoch`.  The fenced-transaction contract
 * (docs/exactly-once.md): output rows, hold_lease and the checkpoint in one
 * transaction commit together or not at all, and never after the lease
 * changed hands.
 */
static Datum
hold_lease(FunctionCallInfo fcinfo, LeaseSchema schema)
{
	Datum		values[4];
	int64		lease_epoch;
	LeaseCaller caller;
	bool		isnull;
	bool		owner_isnull;
	Datum		owner;
	int64		epoch;
	Datum		checkpoint;

	lease_key_args(fcinfo, values);
	values[3] = lease_arg_ident(fcinfo, 3, "owner");
	lease_epoch = lease_arg_nonneg_int64(fcinfo, 4, "lease_epoch");

	lease_stream_begin(fcinfo, schema, values[0], values[1], &caller);
	if (lease_spi_run(&hold_stmt, values, NULL, 0) == 0)
		raise_not_held(values, lease_epoch, false, NULL, 0);
	owner = lease_spi_value(0, 1, &owner_isnull);
	epoch = DatumGetInt64(lease_spi_value(0, 2, &isnull));
	if (owner_isnull ||
		!DatumGetBool(DirectFunctionCall2Coll(texteq, C_COLLATION_OID, owner, values[3])) ||
		epoch != lease_epoch)
		raise_not_held(values, lease_epoch, true,
					   owner_isnull ? NULL : TextDatumGetCString(owner), epoch);
	checkpoint = SPI_datumTransfer(lease_spi_value(0, 3, &isnull), false, -1);
	lease_app_end(&caller);

	PG_RETURN_DATUM(checkpoint);
}

PG_FUNCTION_INFO_V1(lease_hold_lease);
/* lease.hold_lease as the 0.4.0 script binds it. */
Datum lease_hold_lease(PG_FUNCTION_ARGS) { return hold_lease(fcinfo, LEASE_SCHEMA_0_4); }

PG_FUNCTION_INFO_V1(lease_hold_lease_0_5);
/* lease.hold_lease from 0.5.0 on: with the placement check (src/leases/placement.h). */
Datum lease_hold_lease_0_5(PG_FUNCTION_ARGS) { return hold_lease(fcinfo, LEASE_SCHEMA_0_5); }
