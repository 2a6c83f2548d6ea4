/*-------------------------------------------------------------------------
 *
 * src/leases/lineage.c
 *	  Shard lineage maintenance: removing ended leases once their children
 *	  have started, and deleting a lease outright.
 *
 * Children of a split or merge are held back from take_lease/take_leases
 * while a parent still in the table has not ended (leases.h,
 * LEASE_SQL_BLOCKED); an ended parent can be removed once every child has
 * started, i.e. checkpointed past TRIM_HORIZON / LATEST / AT_TIMESTAMP (the
 * starting positions KCL writes; an imported lease may hold any of them).
 *
 *-------------------------------------------------------------------------
 */
#include "pg_lease.h"

#include "catalog/pg_type.h"
#include "fmgr.h"

#include "common/args.h"
#include "leases/leases.h"
#include "leases/placement.h"
#include "leases/privileges.h"
#include "common/spi_util.h"

/*
 * Delete the ended leases of a stream no unstarted child names as a parent.
 * The children that have not started are collected once (a hashed subplan),
 * so this is one pass over the stream, not one per ended lease.
 */
static LeaseStatement cleanup_stmt = {
	.name = "cleanup_ended",
	.sql =
	"DELETE FROM lease.shard_leases AS l"
	" WHERE " LEASE_STREAM_MATCHES
	"   AND l.checkpoint OPERATOR(pg_catalog.=) " LEASE_SQL_SHARD_END
	"   AND NOT (l.shard_id OPERATOR(pg_catalog.=) ANY ("
	"        SELECT pg_catalog.unnest(c.parent_shard_ids)"
	"          FROM lease.shard_leases AS c"
	"         WHERE c.app_name OPERATOR(pg_catalog.=) $1"
	"           AND c.stream_name OPERATOR(pg_catalog.=) $2"
	"           AND c.checkpoint OPERATOR(pg_catalog.=) ANY ('{TRIM_HORIZON,LATEST,AT_TIMESTAMP}'::pg_catalog.text[])))",
	.nargs = 2,
	.argtypes = {TEXTOID, TEXTOID},
	.expected = SPI_OK_DELETE
};

/* Delete one lease by key. */
static LeaseStatement delete_stmt = {
	.name = "delete_lease",
	.sql =
	"DELETE FROM lease.shard_leases AS l"
	" WHERE " LEASE_KEY_MATCHES,
	.nargs = 3,
	.argtypes = {TEXTOID, TEXTOID, TEXTOID},
	.expected = SPI_OK_DELETE
};

/* lease.cleanup_ended: how many ended leases were deleted. */
static Datum
cleanup_ended(FunctionCallInfo fcinfo, LeaseSchema schema)
{
	Datum		values[2];
	uint64		processed;

	values[0] = lease_arg_ident(fcinfo, 0, "app_name");
	values[1] = lease_arg_ident(fcinfo, 1, "stream_name");

	processed = lease_spi_exec_for_stream(fcinfo, schema, &cleanup_stmt, values, NULL);
	if (processed > PG_INT32_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("cleanup_ended deleted more leases than an integer can count"),
				 errdetail("It deleted " UINT64_FORMAT " leases; the error undoes that.", processed),
				 errhint("Delete them in smaller batches with lease.delete_lease().")));
	PG_RETURN_INT32((int32) processed);
}

LEASE_VERSIONED_ENTRY_POINTS(lease_cleanup_ended, cleanup_ended, LEASE_SCHEMA_0_3)

PG_FUNCTION_INFO_V1(lease_cleanup_ended_0_5);
/* lease.cleanup_ended from 0.5.0 on: with the placement check (src/leases/placement.h). */
Datum lease_cleanup_ended_0_5(PG_FUNCTION_ARGS) { return cleanup_ended(fcinfo, LEASE_SCHEMA_0_5); }

/* lease.delete_lease: true when the lease existed and was deleted. */
static Datum
delete_lease(FunctionCallInfo fcinfo, LeaseSchema schema)
{
	Datum		values[3];

	values[0] = lease_arg_ident(fcinfo, 0, "app_name");
	values[1] = lease_arg_ident(fcinfo, 1, "stream_name");
	values[2] = lease_arg_ident(fcinfo, 2, "shard_id");

	PG_RETURN_BOOL(lease_spi_exec_for_stream(fcinfo, schema, &delete_stmt, values, NULL) > 0);
}

LEASE_VERSIONED_ENTRY_POINTS(lease_delete_lease, delete_lease, LEASE_SCHEMA_0_3)

PG_FUNCTION_INFO_V1(lease_delete_lease_0_5);
/* lease.delete_lease from 0.5.0 on: with the placement check (src/leases/placement.h). */
Datum lease_delete_lease_0_5(PG_FUNCTION_ARGS) { return delete_lease(fcinfo, LEASE_SCHEMA_0_5); }
