/*-------------------------------------------------------------------------
 *
 * src/leases/balancing.c
 *	  The inputs of load balancing: lease.set_weight, worker capacity and
 *	  lease.set_balance_tolerance.
 *
 * A lease's weight is what the operator set (lease.shard_leases.weight) or,
 * failing that, the rate of work its owner measured (work_rate, fed by
 * update_checkpoint's records argument, src/leases/leases.c).  A worker's
 * capacity is what it declared in its last take_leases call
 * (lease.worker_capacities; 1 when it never declared one).  A stream's
 * tolerance (lease.stream_balancing) is how far above its target a worker
 * may be before a move is worth it (docs/shard-leases.md, "Balancing").
 * Each function checks its arguments, then runs one statement.
 *
 *-------------------------------------------------------------------------
 */
#include "pg_lease.h"

#include <math.h>

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "nodes/parsenodes.h"
#include "utils/builtins.h"

#include "common/args.h"
#include "common/spi_util.h"
#include "leases/balancing.h"
#include "leases/lease_sql.h"
#include "leases/placement.h"
#include "leases/privileges.h"

/* The operator's weight of a lease; NULL clears it. */
static LeaseStatement set_weight_stmt = {
	.name = "set_weight",
	.sql =
	"UPDATE lease.shard_leases AS l"
	" SET weight = $4"
	" WHERE " LEASE_KEY_MATCHES
	" RETURNING true",
	.nargs = 4,
	.argtypes = {TEXTOID, TEXTOID, TEXTOID, FLOAT8OID},
	.expected = SPI_OK_UPDATE_RETURNING
};

/*
 * A worker's declared capacity, written only when it changed; capacity 1
 * (the default) is stored as no row.
 */
static LeaseStatement record_capacity_stmt = {
	.name = "take_leases (capacity)",
	.sql =
	"WITH dropped AS ("
	"  DELETE FROM lease.worker_capacities AS w"
	"   WHERE w.app_name OPERATOR(pg_catalog.=) $1"
	"     AND w.stream_name OPERATOR(pg_catalog.=) $2"
	"     AND w.worker OPERATOR(pg_catalog.=) $3"
	"     AND $4 OPERATOR(pg_catalog.=) 1)"
	" INSERT INTO lease.worker_capacities AS w"
	" (app_name, stream_name, worker, capacity)"
	" SELECT $1, $2, $3, $4 WHERE $4 OPERATOR(pg_catalog.<>) 1"
	" ON CONFLICT (app_name, stream_name, worker) DO UPDATE"
	"    SET capacity = excluded.capacity"
	"  WHERE w.capacity OPERATOR(pg_catalog.<>) excluded.capacity",
	.nargs = 4,
	.argtypes = {TEXTOID, TEXTOID, TEXTOID, FLOAT8OID},
	.expected = SPI_OK_INSERT
};

/* A stream's tolerance; a NULL tolerance removes the row (the default). */
static LeaseStatement set_tolerance_stmt = {
	.name = "set_balance_tolerance",
	.sql =
	"WITH cleared AS ("
	"  DELETE FROM lease.stream_balancing AS b"
	"   WHERE b.app_name OPERATOR(pg_catalog.=) $1"
	"     AND b.stream_name OPERATOR(pg_catalog.=) $2"
	"     AND $3 IS NULL)"
	" INSERT INTO lease.stream_balancing AS b (app_name, stream_name, tolerance)"
	" SELECT $1, $2, $3 WHERE $3 IS NOT NULL"
	" ON CONFLICT (app_name, stream_name) DO UPDATE SET tolerance = excluded.tolerance",
	.nargs = 3,
	.argtypes = {TEXTOID, TEXTOID, FLOAT8OID},
	.expected = SPI_OK_INSERT
};

/* An optional float8 argument: false when NULL, else *value (never NaN or infinite). */
static bool
arg_opt_finite_float8(FunctionCallInfo fcinfo, int argno, const char *name, double *value)
{
	if (PG_ARGISNULL(argno))
		return false;
	*value = PG_GETARG_FLOAT8(argno);
	if (isnan(*value) || isinf(*value))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a finite number", name),
				 errhint("Pass a finite number for %s.", name)));
	return true;
}

double
lease_arg_capacity(FunctionCallInfo fcinfo, int argno, const char *name)
{
	double		value;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", name),
				 errhint("Pass 1 for a worker like every other.")));
	value = PG_GETARG_FLOAT8(argno);
	if (isnan(value) || isinf(value) || value <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a positive finite number", name),
				 errdetail("The value given is %g.", value),
				 errhint("Pass 1 for a worker like every other, 2 for one that can carry twice as much.")));
	if (value < LEASE_MIN_CAPACITY || value > LEASE_MAX_CAPACITY)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be between %g and %g", name, LEASE_MIN_CAPACITY, LEASE_MAX_CAPACITY),
				 errdetail("The value given is %g.", value),
				 errhint("Capacities are relative: give the smallest worker 1 and the others a multiple of it.")));
	return value;
}

void
lease_record_capacity(Datum *stream, double capacity)
{
	Datum		values[4];

	values[0] = stream[0];
	values[1] = stream[1];
	values[2] = stream[2];
	values[3] = Float8GetDatum(capacity);
	lease_spi_run(&record_capacity_stmt, values, NULL, 0);
}

/*
 * lease.set_weight: true when the lease exists and now has the operator's
 * weight (NULL: none, its measured rate counts).
 */
static Datum
set_weight(FunctionCallInfo fcinfo, LeaseSchema schema)
{
	Datum		values[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};
	double		weight;

	values[0] = lease_arg_ident(fcinfo, 0, "app_name");
	values[1] = lease_arg_ident(fcinfo, 1, "stream_name");
	values[2] = lease_arg_ident(fcinfo, 2, "shard_id");
	values[3] = (Datum) 0;
	if (!arg_opt_finite_float8(fcinfo, 3, "weight", &weight))
		nulls[3] = 'n';
	else if (weight < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("weight must not be negative"),
				 errdetail("The value given is %g.", weight),
				 errhint("Pass zero or more, or null to use the measured rate.")));
	else if (weight > LEASE_MAX_WEIGHT)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("weight must be at most %g", LEASE_MAX_WEIGHT),
				 errdetail("The value given is %g.", weight),
				 errhint("Weights are relative: scale them so that the heaviest lease is at most %g.",
						 LEASE_MAX_WEIGHT)));
	else
		values[3] = Float8GetDatum(weight);

	PG_RETURN_BOOL(lease_spi_exec_for_stream(fcinfo, schema, &set_weight_stmt, values, nulls) > 0);
}

PG_FUNCTION_INFO_V1(lease_set_weight);
/* lease.set_weight as the 0.4.0 script binds it. */
Datum lease_set_weight(PG_FUNCTION_ARGS) { return set_weight(fcinfo, LEASE_SCHEMA_0_4); }

PG_FUNCTION_INFO_V1(lease_set_weight_0_5);
/* lease.set_weight from 0.5.0 on: with the placement check (src/leases/placement.h). */
Datum lease_set_weight_0_5(PG_FUNCTION_ARGS) { return set_weight(fcinfo, LEASE_SCHEMA_0_5); }

/*
 * lease.set_balance_tolerance: sets the stream's tolerance (a fraction of
 * a worker's target, 0 to 1; NULL: back to the default); returns the
 * tolerance now in force.
 */
static Datum
set_balance_tolerance(FunctionCallInfo fcinfo, LeaseSchema schema)
{
	Datum		values[3];
	char		nulls[3] = {' ', ' ', ' '};
	double		tolerance = LEASE_DEFAULT_BALANCE_TOLERANCE;

	values[0] = lease_arg_ident(fcinfo, 0, "app_name");
	values[1] = lease_arg_ident(fcinfo, 1, "stream_name");
	values[2] = (Datum) 0;
	if (!arg_opt_finite_float8(fcinfo, 2, "tolerance", &tolerance))
	{
		nulls[2] = 'n';
		tolerance = LEASE_DEFAULT_BALANCE_TOLERANCE;
	}
	else if (tolerance < 0 || tolerance > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("tolerance must be between 0 and 1"),
				 errdetail("The value given is %g.", tolerance),
				 errhint("Pass a fraction of a worker's target, e.g. 0.1 for 10 %%, or null for the default.")));
	else
		values[2] = Float8GetDatum(tolerance);

	lease_spi_exec_for_stream(fcinfo, schema, &set_tolerance_stmt, values, nulls);
	PG_RETURN_FLOAT8(tolerance);
}

PG_FUNCTION_INFO_V1(lease_set_balance_tolerance);
/* lease.set_balance_tolerance as the 0.4.0 script binds it. */
Datum lease_set_balance_tolerance(PG_FUNCTION_ARGS) { return set_balance_tolerance(fcinfo, LEASE_SCHEMA_0_4); }

PG_FUNCTION_INFO_V1(lease_set_balance_tolerance_0_5);
/* lease.set_balance_tolerance from 0.5.0 on: with the placement check (src/leases/placement.h). */
Datum lease_set_balance_tolerance_0_5(PG_FUNCTION_ARGS) { return set_balance_tolerance(fcinfo, LEASE_SCHEMA_0_5); }

/* The stream's tolerance, if an operator set one. */
static LeaseStatement tolerance_stmt = {
	.name = "take_leases: the stream's tolerance",
	.sql =
	"SELECT b.tolerance FROM lease.stream_balancing AS b"
	" WHERE b.app_name OPERATOR(pg_catalog.=) $1"
	"   AND b.stream_name OPERATOR(pg_catalog.=) $2",
	.nargs = 2,
	.argtypes = {TEXTOID, TEXTOID},
	.expected = SPI_OK_SELECT,
	.cursor_options = CURSOR_OPT_GENERIC_PLAN
};

double
lease_stream_tolerance(Datum *stream)
{
	bool		isnull;

	if (lease_spi_run(&tolerance_stmt, stream, NULL, 0) == 0)
		return LEASE_DEFAULT_BALANCE_TOLERANCE;
	return DatumGetFloat8(lease_spi_value(0, 1, &isnull));
}
