/*-------------------------------------------------------------------------
 *
 * leases.c
 *	  The lease core: create, take, renew, checkpoint, release and close.
 *
 * Each function checks its arguments, then runs exactly one SQL statement:
 * there is no read-then-write, so there is no window between a read and a
 * conditional write for a concurrent renewal to fall into.  take_lease and
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

#include "args.h"
#include "spi_util.h"

/* The key predicate every single-lease statement starts with. */
#define LEASE_KEY_MATCHES \
	"l.app_name OPERATOR(pg_catalog.=) $1" \
	" AND l.stream_name OPERATOR(pg_catalog.=) $2" \
	" AND l.shard_id OPERATOR(pg_catalog.=) $3"

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
 * given, otherwise only an unowned or expired lease.  Never an ended shard,
 * never a child whose parents (those still in the table) have not ended.
 */
static LeaseStatement take_stmt = {
	.name = "take_lease",
	.sql =
	"UPDATE lease.shard_leases AS l"
	" SET lease_owner = $4,"
	"     lease_count = l.lease_count OPERATOR(pg_catalog.+) 1,"
	"     lease_expires_at = pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) $6,"
	"     owner_switches_since_checkpoint = l.owner_switches_since_checkpoint"
	"         OPERATOR(pg_catalog.+) CASE WHEN l.lease_owner IS DISTINCT FROM $4 THEN 1 ELSE 0 END,"
	"     updated_at = pg_catalog.now()"
	" WHERE " LEASE_KEY_MATCHES
	"   AND l.checkpoint OPERATOR(pg_catalog.<>) 'SHARD_END'"
	"   AND CASE WHEN $5 IS NULL"
	"            THEN l.lease_owner IS NULL"
	"                 OR l.lease_expires_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp()"
	"            ELSE l.lease_count OPERATOR(pg_catalog.=) $5"
	"                 AND l.lease_owner IS DISTINCT FROM $4"
	"       END"
	"   AND NOT EXISTS (SELECT 1 FROM lease.shard_leases AS p"
	"                    WHERE p.app_name OPERATOR(pg_catalog.=) l.app_name"
	"                      AND p.stream_name OPERATOR(pg_catalog.=) l.stream_name"
	"                      AND p.shard_id OPERATOR(pg_catalog.=) ANY (l.parent_shard_ids)"
	"                      AND p.checkpoint OPERATOR(pg_catalog.<>) 'SHARD_END')"
	" RETURNING l.lease_count",
	.nargs = 6,
	.argtypes = {TEXTOID, TEXTOID, TEXTOID, TEXTOID, INT8OID, INTERVALOID},
	.expected = SPI_OK_UPDATE_RETURNING
};

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

/* Checkpoint: guarded on ownership only, never on lease_count. */
static LeaseStatement checkpoint_stmt = {
	.name = "update_checkpoint",
	.sql =
	"UPDATE lease.shard_leases AS l"
	" SET checkpoint = $5,"
	"     checkpoint_sub_sequence = $6,"
	"     owner_switches_since_checkpoint = 0,"
	"     updated_at = pg_catalog.now()"
	" WHERE " LEASE_KEY_MATCHES
	"   AND l.lease_owner OPERATOR(pg_catalog.=) $4"
	"   AND l.checkpoint OPERATOR(pg_catalog.<>) 'SHARD_END'"
	" RETURNING true",
	.nargs = 6,
	.argtypes = {TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, INT8OID},
	.expected = SPI_OK_UPDATE_RETURNING
};

/* Release: guarded on ownership; the lease becomes unowned. */
static LeaseStatement release_stmt = {
	.name = "release_lease",
	.sql =
	"UPDATE lease.shard_leases AS l"
	" SET lease_owner = NULL,"
	"     lease_expires_at = NULL,"
	"     lease_count = l.lease_count OPERATOR(pg_catalog.+) 1,"
	"     updated_at = pg_catalog.now()"
	" WHERE " LEASE_KEY_MATCHES
	"   AND l.lease_owner OPERATOR(pg_catalog.=) $4"
	" RETURNING true",
	.nargs = 4,
	.argtypes = {TEXTOID, TEXTOID, TEXTOID, TEXTOID},
	.expected = SPI_OK_UPDATE_RETURNING
};

/* Close: checkpoint SHARD_END and give the lease up, guarded on ownership. */
static LeaseStatement close_stmt = {
	.name = "close_shard",
	.sql =
	"UPDATE lease.shard_leases AS l"
	" SET checkpoint = 'SHARD_END',"
	"     checkpoint_sub_sequence = 0,"
	"     owner_switches_since_checkpoint = 0,"
	"     lease_owner = NULL,"
	"     lease_expires_at = NULL,"
	"     lease_count = l.lease_count OPERATOR(pg_catalog.+) 1,"
	"     updated_at = pg_catalog.now()"
	" WHERE " LEASE_KEY_MATCHES
	"   AND l.lease_owner OPERATOR(pg_catalog.=) $4"
	"   AND l.checkpoint OPERATOR(pg_catalog.<>) 'SHARD_END'"
	" RETURNING true",
	.nargs = 4,
	.argtypes = {TEXTOID, TEXTOID, TEXTOID, TEXTOID},
	.expected = SPI_OK_UPDATE_RETURNING
};

/* Runs a statement that RETURNING true on success; true when a row came back. */
static bool
run_returning_bool(LeaseStatement *stmt, Datum *values, const char *nulls)
{
	uint64		processed;

	lease_spi_connect();
	processed = lease_spi_run(stmt, values, nulls, 0);
	lease_spi_finish();
	return processed > 0;
}

/*
 * Runs a statement that RETURNING the new lease_count; false when no row
 * came back.  lease_count is by value, so it survives SPI_finish.
 */
static bool
run_returning_count(LeaseStatement *stmt, Datum *values, const char *nulls, int64 *count)
{
	uint64		processed;
	bool		isnull = true;

	lease_spi_connect();
	processed = lease_spi_run(stmt, values, nulls, 0);
	if (processed > 0)
		*count = DatumGetInt64(lease_spi_value(0, 1, &isnull));
	lease_spi_finish();
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
					 errmsg("shard %s cannot be its own parent",
							TextDatumGetCString(shard_id))));
	}
}

/* Raises 22023 when a checkpoint value would end the shard. */
static void
check_not_shard_end(Datum checkpoint)
{
	if (strcmp(TextDatumGetCString(checkpoint), LEASE_CHECKPOINT_SHARD_END) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("checkpoint SHARD_END can only be written by close_shard"),
				 errhint("Call lease.close_shard() to end a shard; it also releases the lease.")));
}

PG_FUNCTION_INFO_V1(lease_create_lease);

/* lease.create_lease: true when created, false when the lease already existed. */
Datum
lease_create_lease(PG_FUNCTION_ARGS)
{
	Datum		values[5];

	lease_key_args(fcinfo, values);
	values[3] = lease_arg_ident_array(fcinfo, 3, "parent_shard_ids");
	values[4] = lease_arg_checkpoint(fcinfo, 4, "checkpoint");
	check_not_own_parent(values[2], values[3]);

	PG_RETURN_BOOL(run_returning_bool(&create_stmt, values, NULL));
}

PG_FUNCTION_INFO_V1(lease_take_lease);

/* lease.take_lease: the new lease_count, or NULL when not taken. */
Datum
lease_take_lease(PG_FUNCTION_ARGS)
{
	Datum		values[6];
	char		nulls[6] = {' ', ' ', ' ', ' ', ' ', ' '};
	int64		count;

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

	if (!run_returning_count(&take_stmt, values, nulls, &count))
		PG_RETURN_NULL();
	PG_RETURN_INT64(count);
}

PG_FUNCTION_INFO_V1(lease_renew_lease);

/* lease.renew_lease: the new lease_count, or NULL when the lease was lost. */
Datum
lease_renew_lease(PG_FUNCTION_ARGS)
{
	Datum		values[6];
	int64		count;

	lease_key_args(fcinfo, values);
	values[3] = lease_arg_ident(fcinfo, 3, "owner");
	values[4] = Int64GetDatum(lease_arg_nonneg_int64(fcinfo, 4, "lease_count"));
	values[5] = lease_arg_duration(fcinfo, 5, "lease_duration");

	if (!run_returning_count(&renew_stmt, values, NULL, &count))
		PG_RETURN_NULL();
	PG_RETURN_INT64(count);
}

PG_FUNCTION_INFO_V1(lease_update_checkpoint);

/* lease.update_checkpoint: true when written by the current owner. */
Datum
lease_update_checkpoint(PG_FUNCTION_ARGS)
{
	Datum		values[6];

	lease_key_args(fcinfo, values);
	values[3] = lease_arg_ident(fcinfo, 3, "owner");
	values[4] = lease_arg_checkpoint(fcinfo, 4, "checkpoint");
	values[5] = Int64GetDatum(lease_arg_nonneg_int64(fcinfo, 5, "sub_sequence"));
	check_not_shard_end(values[4]);

	PG_RETURN_BOOL(run_returning_bool(&checkpoint_stmt, values, NULL));
}

PG_FUNCTION_INFO_V1(lease_release_lease);

/* lease.release_lease: true when the owner gave the lease up. */
Datum
lease_release_lease(PG_FUNCTION_ARGS)
{
	Datum		values[4];

	lease_key_args(fcinfo, values);
	values[3] = lease_arg_ident(fcinfo, 3, "owner");

	PG_RETURN_BOOL(run_returning_bool(&release_stmt, values, NULL));
}

PG_FUNCTION_INFO_V1(lease_close_shard);

/* lease.close_shard: true when the owner ended the shard. */
Datum
lease_close_shard(PG_FUNCTION_ARGS)
{
	Datum		values[4];

	lease_key_args(fcinfo, values);
	values[3] = lease_arg_ident(fcinfo, 3, "owner");

	PG_RETURN_BOOL(run_returning_bool(&close_stmt, values, NULL));
}
