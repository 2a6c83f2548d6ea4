/*-------------------------------------------------------------------------
 *
 * src/leases/my_leases.c
 *	  lease.my_leases: what a worker can read about its own leases.
 *
 * A worker role is granted no privilege on lease.shard_leases or the
 * lease_status view, only the lease functions (the worker recipe).  When a
 * call says no (false or NULL), my_leases is how the worker finds out why:
 * whether it still holds the lease, under which fencing token, until when,
 * and whether it is being asked to hand the lease over or is about to
 * receive one (docs/worker-guide.md).  It changes nothing.
 *
 *-------------------------------------------------------------------------
 */
#include "pg_lease.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/tuplestore.h"

#include "common/args.h"
#include "common/spi_util.h"
#include "leases/lease_sql.h"
#include "leases/placement.h"
#include "leases/privileges.h"

#define MY_LEASES_COLUMNS 10

/* The columns both halves of my_leases_stmt return, for lease `l`. */
#define MY_LEASES_SELECT(expiry, handoff_to, handoff_from) \
	" SELECT l.shard_id, l.lease_count, l.lease_epoch, l.checkpoint," \
	"        l.checkpoint_sub_sequence, l.pending_checkpoint," \
	"        " expiry " OPERATOR(pg_catalog.-) " LEASE_SQL_NOW " AS expires_in," \
	"        " handoff_to " AS handoff_to, " handoff_from " AS handoff_from," \
	"        ARRAY(SELECT p.shard_id FROM lease.shard_leases AS p" \
	"               WHERE p.app_name OPERATOR(pg_catalog.=) l.app_name" \
	"                 AND p.stream_name OPERATOR(pg_catalog.=) l.stream_name" \
	"                 AND p.shard_id OPERATOR(pg_catalog.=) ANY (l.parent_shard_ids)" \
	"                 AND p.checkpoint OPERATOR(pg_catalog.<>) " LEASE_SQL_SHARD_END \
	"               ORDER BY p.shard_id COLLATE pg_catalog.\"C\") AS waiting_on" \
	"   FROM lease.shard_leases AS l, " LEASE_SQL_CLOCK

/*
 * The leases $3 holds in the stream (expired ones too: until another worker
 * takes it, a lease still belongs to its owner, and renew_lease works), and
 * those a pending handoff promises to $3.  The first half is served by
 * shard_leases_owner_idx, the second by shard_leases_handoff_idx.
 */
#define MY_LEASES_SQL(expiry) \
	"SELECT m.* FROM (" \
	MY_LEASES_SELECT(expiry, "CASE WHEN " LEASE_SQL_HANDOFF_PENDING("l", LEASE_SQL_NOW) \
	" THEN l.handoff_to END", \
	"CAST(NULL AS pg_catalog.text)") \
	"  WHERE " LEASE_STREAM_MATCHES \
	"    AND l.lease_owner OPERATOR(pg_catalog.=) $3" \
	" UNION ALL" \
	MY_LEASES_SELECT(expiry, "CAST(NULL AS pg_catalog.text)", "l.lease_owner") \
	"  WHERE " LEASE_STREAM_MATCHES \
	"    AND l.handoff_to OPERATOR(pg_catalog.=) $3" \
	"    AND l.lease_owner IS DISTINCT FROM $3" \
	"    AND " LEASE_SQL_HANDOFF_PENDING("l", LEASE_SQL_NOW) \
	") AS m ORDER BY m.shard_id COLLATE pg_catalog.\"C\""

static LeaseStatement my_leases_stmt = {
	.name = "my_leases",
	.sql = MY_LEASES_SQL(LEASE_SQL_EXPIRY("l", LEASE_SQL_NOW)),
	.nargs = 3,
	.argtypes = {TEXTOID, TEXTOID, TEXTOID},
	.expected = SPI_OK_SELECT
};


/*
 * lease.my_leases: the leases the owner holds or is promised in the stream,
 * with their fencing token, checkpoint, time left and handoff state.
 */
static Datum
my_leases(FunctionCallInfo fcinfo, LeaseSchema schema)
{
	Datum		values[3];
	LeaseCaller caller;

	values[0] = lease_arg_ident(fcinfo, 0, "app_name");
	values[1] = lease_arg_ident(fcinfo, 1, "stream_name");
	values[2] = lease_arg_ident(fcinfo, 2, "owner");

	InitMaterializedSRF(fcinfo, 0);
	lease_stream_begin(fcinfo, schema, values[0], values[1], &caller);
	lease_spi_run(&my_leases_stmt, values, NULL, 0);
	lease_spi_put_rows(fcinfo, MY_LEASES_COLUMNS);
	lease_app_end(&caller);
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(lease_my_leases_0_4);
/* lease.my_leases as the 0.4.0 script binds it. */
Datum lease_my_leases_0_4(PG_FUNCTION_ARGS) { return my_leases(fcinfo, LEASE_SCHEMA_0_4); }

PG_FUNCTION_INFO_V1(lease_my_leases_0_5);
/* lease.my_leases from 0.5.0 on: with the placement check (src/leases/placement.h). */
Datum lease_my_leases_0_5(PG_FUNCTION_ARGS) { return my_leases(fcinfo, LEASE_SCHEMA_0_5); }
