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
#include "leases/leases.h"
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
PG_FUNCTION_INFO_V1(lease_set_weight);
Datum
lease_set_weight(PG_FUNCTION_ARGS)
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
	else
		values[3] = Float8GetDatum(weight);

	PG_RETURN_BOOL(lease_spi_exec_for_app(fcinfo, LEASE_SCHEMA_0_4, &set_weight_stmt, values, nulls) > 0);
}

/*
 * lease.set_balance_tolerance: sets the stream's tolerance (a fraction of
 * a worker's target, 0 to 1; NULL: back to the default); returns the
 * tolerance now in force.
 */
PG_FUNCTION_INFO_V1(lease_set_balance_tolerance);
Datum
lease_set_balance_tolerance(PG_FUNCTION_ARGS)
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

	lease_spi_exec_for_app(fcinfo, LEASE_SCHEMA_0_4, &set_tolerance_stmt, values, nulls);
	PG_RETURN_FLOAT8(tolerance);
}

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

/* Byte order of two text Datums (the "C" collation). */
static int
text_order(Datum a, Datum b)
{
	text	   *ta = DatumGetTextPP(a);
	text	   *tb = DatumGetTextPP(b);
	int			la = VARSIZE_ANY_EXHDR(ta);
	int			lb = VARSIZE_ANY_EXHDR(tb);
	int			cmp = memcmp(VARDATA_ANY(ta), VARDATA_ANY(tb), Min(la, lb));

	return cmp != 0 ? cmp : (la > lb) - (la < lb);
}

/* Heaviest first, then by shard id: the order free leases are placed in. */
static int
free_lease_order(const void *a, const void *b)
{
	const BalanceLease *la = (const BalanceLease *) a;
	const BalanceLease *lb = (const BalanceLease *) b;

	if (la->weight != lb->weight)
		return la->weight > lb->weight ? -1 : 1;
	return text_order(la->shard_id, lb->shard_id);
}

/* A worker's load per unit of capacity. */
static double
per_capacity(const BalanceWorker *w)
{
	return w->load / w->capacity;
}

void
balance_plan_start(BalancePlan *plan)
{
	bool		changed = true;

	plan->total = 0;
	plan->capacity = 0;
	for (int w = 0; w < plan->nworkers; w++)
	{
		plan->total += plan->workers[w].load;
		plan->capacity += plan->workers[w].capacity;
		plan->workers[w].pinned = false;
	}
	for (int i = 0; i < plan->nfree; i++)
		plan->total += plan->leases[i].weight;
	if (plan->nfree > 1)
		qsort(plan->leases, plan->nfree, sizeof(BalanceLease), free_lease_order);
	plan->next_free = 0;

	/*
	 * A worker holding one lease heavier than its share carries that lease
	 * alone: it is left where it is, and the others share the rest.
	 */
	while (changed)
	{
		double		load = plan->total;
		double		capacity = plan->capacity;

		for (int w = 0; w < plan->nworkers; w++)
			if (plan->workers[w].pinned)
			{
				load -= plan->workers[w].load;
				capacity -= plan->workers[w].capacity;
			}
		plan->fair = capacity > 0 && load > 0 ? load / capacity : 0;
		changed = false;
		for (int w = 0; w < plan->nworkers; w++)
		{
			BalanceWorker *worker = &plan->workers[w];

			if (!worker->pinned && worker->leases == 1 &&
				worker->load > plan->fair * worker->capacity)
				worker->pinned = changed = true;
		}
	}
}

bool
balance_out_of_tolerance(const BalancePlan *plan)
{
	for (int w = 0; w < plan->nworkers; w++)
	{
		const BalanceWorker *worker = &plan->workers[w];
		double		target = plan->fair * worker->capacity;

		if (worker->pinned || plan->fair <= 0)
			continue;
		if (worker->load > target * (1 + plan->tolerance) ||
			worker->load < target * (1 - plan->tolerance))
			return true;
	}
	return false;
}

bool
balance_is_donor(const BalancePlan *plan, int w)
{
	return !plan->workers[w].pinned && per_capacity(&plan->workers[w]) > plan->fair;
}

double
balance_imbalance(const BalancePlan *plan)
{
	double		worst = 0;

	if (plan->total <= 0 || plan->capacity <= 0)
		return 0;
	for (int w = 0; w < plan->nworkers; w++)
	{
		double		ratio = plan->workers[w].load /
			(plan->total * plan->workers[w].capacity / plan->capacity);

		worst = Max(worst, ratio);
	}
	return worst;
}

/* Moves lease `l` to worker `to` in the plan, filling in *move. */
static void
apply_move(BalancePlan *plan, int l, int to, BalanceMove *move)
{
	BalanceLease *lease = &plan->leases[l];

	move->lease = l;
	move->from = lease->owner;
	move->to = to;
	move->imbalance_before = balance_imbalance(plan);
	if (lease->owner >= 0)
	{
		plan->workers[lease->owner].load -= lease->weight;
		plan->workers[lease->owner].leases--;
	}
	plan->workers[to].load += lease->weight;
	plan->workers[to].leases++;
	lease->owner = to;
	lease->moved = true;
	move->imbalance_after = balance_imbalance(plan);
}

/*
 * The next step: first every free lease, heaviest first, goes to the worker
 * whose load over capacity would be least with it; then, while some worker
 * is outside the tolerance, the move of one lease from a worker above its
 * share to another that lowers the stream's spread the most.  A move must
 * narrow the gap between the two workers' loads per unit of capacity by
 * more than the tolerance times the fair load per unit (so a move never
 * undoes an earlier one, and a lease heavier than the gap stays), and each
 * lease moves at most once in a plan.
 */
bool
balance_plan_next(BalancePlan *plan, BalanceMove *move)
{
	int			best_lease = -1;
	int			best_to = -1;
	double		best_score = 0;

	while (plan->next_free < plan->nfree)
	{
		int			l = plan->next_free++;
		double		x = plan->leases[l].weight;

		for (int w = 0; w < plan->nworkers; w++)
		{
			const BalanceWorker *worker = &plan->workers[w];
			double		after;

			if (worker->full)
				continue;
			after = (worker->load + x) / worker->capacity;
			if (best_to < 0 || after < (plan->workers[best_to].load + x) / plan->workers[best_to].capacity ||
				(after == (plan->workers[best_to].load + x) / plan->workers[best_to].capacity &&
				 text_order(worker->name, plan->workers[best_to].name) < 0))
				best_to = w;
		}
		if (best_to >= 0)
		{
			apply_move(plan, l, best_to, move);
			return true;
		}
	}

	if (!balance_out_of_tolerance(plan))
		return false;
	for (int l = plan->nfree; l < plan->nleases; l++)
	{
		const BalanceLease *lease = &plan->leases[l];
		const BalanceWorker *from;
		double		x = lease->weight;

		if (lease->moved || lease->owner < 0 || !balance_is_donor(plan, lease->owner))
			continue;
		from = &plan->workers[lease->owner];
		for (int w = 0; w < plan->nworkers; w++)
		{
			const BalanceWorker *to = &plan->workers[w];
			double		gain;
			double		score;

			if (w == lease->owner || to->pinned || to->full)
				continue;
			gain = per_capacity(from) - per_capacity(to) -
				x * (1 / from->capacity + 1 / to->capacity) / 2;
			if (gain <= plan->tolerance * plan->fair)
				continue;
			score = x * gain;
			if (best_lease < 0 || score > best_score ||
				(score == best_score &&
				 (text_order(lease->shard_id, plan->leases[best_lease].shard_id) < 0 ||
				  (best_lease == l && text_order(to->name, plan->workers[best_to].name) < 0))))
			{
				best_lease = l;
				best_to = w;
				best_score = score;
			}
		}
	}
	if (best_lease < 0)
		return false;
	apply_move(plan, best_lease, best_to, move);
	return true;
}

char *
balance_move_reason(const BalancePlan *plan, const BalanceMove *move)
{
	const BalanceWorker *to = &plan->workers[move->to];

	if (move->from < 0)
		return psprintf("balance: free lease of weight %g to the least loaded worker (load %g of target %g)",
						plan->leases[move->lease].weight, to->load, plan->fair * to->capacity);
	return psprintf("balance: weight %g from %s to %s; loads after the move %g and %g, targets %g and %g; imbalance %g to %g",
					plan->leases[move->lease].weight,
					TextDatumGetCString(plan->workers[move->from].name), TextDatumGetCString(to->name),
					plan->workers[move->from].load, to->load,
					plan->fair * plan->workers[move->from].capacity, plan->fair * to->capacity,
					move->imbalance_before, move->imbalance_after);
}
