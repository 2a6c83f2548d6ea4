/*-------------------------------------------------------------------------
 *
 * src/leases/planner.c
 *	  The weighted balancing planner (planner.h), shared by take_leases'
 *	  weighted round and lease.plan_rebalance so that the dry run and the
 *	  rounds decide with one piece of code.  Plain C over the plan: it runs
 *	  no SQL; the caller (src/leases/taker.c) reads the inputs.
 *
 *-------------------------------------------------------------------------
 */
#include "pg_lease.h"

#include <math.h>

#include "utils/builtins.h"

#include "leases/planner.h"

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

/* A worker's load beyond the heavy leases it holds. */
static double
base_load(const BalanceWorker *w)
{
	return w->load - w->heavy_load;
}

/* A worker's target for that load: 0 on a home, else its share. */
static double
base_target(const BalancePlan *plan, const BalanceWorker *w)
{
	return w->home ? 0 : plan->fair * w->capacity;
}

/* How far a worker is above its target, per unit of capacity. */
static double
excess(const BalancePlan *plan, const BalanceWorker *w)
{
	return (base_load(w) - base_target(plan, w)) / w->capacity;
}

/* The stream's load per unit of capacity, heavy leases and homes aside. */
static void
compute_fair(BalancePlan *plan)
{
	double		load = plan->total;
	double		capacity = plan->capacity;

	for (int w = 0; w < plan->nworkers; w++)
	{
		load -= plan->workers[w].heavy;
		if (plan->workers[w].home)
			capacity -= plan->workers[w].capacity;
	}
	plan->fair = capacity > 0 && load > 0 ? load / capacity : 0;
}

/* Largest capacity first, then by name: the order homes are chosen in. */
static bool
roomier(const BalanceWorker *a, const BalanceWorker *b)
{
	return a->capacity > b->capacity ||
		(a->capacity == b->capacity && text_order(a->name, b->name) < 0);
}

/*
 * A worker holding one lease heavier than its share carries that lease
 * alone: the lease is heavy, and the others share the rest.  Heavy leases
 * go, heaviest first, to the roomiest workers: one already on a worker with
 * no roomier free worker stays (its worker is its home); another is moved
 * to the roomiest free worker, which sheds its other leases.
 */
void
balance_plan_start(BalancePlan *plan)
{
	bool		changed = true;

	plan->total = 0;
	plan->capacity = 0;
	for (int w = 0; w < plan->nworkers; w++)
	{
		BalanceWorker *worker = &plan->workers[w];

		plan->total += worker->load;
		plan->capacity += worker->capacity;
		worker->home = worker->heavy_marked = false;
		worker->relocate_to = -1;
		worker->heavy = worker->heavy_load = 0;
	}
	for (int i = 0; i < plan->nfree; i++)
		plan->total += plan->leases[i].weight;
	if (plan->nfree > 1)
		qsort(plan->leases, plan->nfree, sizeof(BalanceLease), free_lease_order);
	plan->next_free = 0;

	/* the heavy leases: iterate, each found lowers the others' share */
	while (changed)
	{
		changed = false;
		for (int w = 0; w < plan->nworkers; w++)
			if (plan->workers[w].heavy > 0)
				plan->workers[w].home = true;
		compute_fair(plan);
		for (int w = 0; w < plan->nworkers; w++)
		{
			BalanceWorker *worker = &plan->workers[w];

			if (worker->heavy == 0 && worker->leases == 1 &&
				worker->load > plan->fair * worker->capacity)
			{
				worker->heavy = worker->heavy_load = worker->load;
				changed = true;
			}
		}
	}

	/* their homes, heaviest first */
	for (int w = 0; w < plan->nworkers; w++)
		plan->workers[w].home = false;
	for (;;)
	{
		int			next = -1;
		int			room = -1;

		for (int w = 0; w < plan->nworkers; w++)
		{
			const BalanceWorker *worker = &plan->workers[w];

			if (worker->heavy > 0 && !worker->home && worker->relocate_to < 0 &&
				(next < 0 || worker->heavy > plan->workers[next].heavy ||
				 (worker->heavy == plan->workers[next].heavy &&
				  text_order(worker->name, plan->workers[next].name) < 0)))
				next = w;
		}
		if (next < 0)
			break;
		for (int w = 0; w < plan->nworkers; w++)
		{
			const BalanceWorker *worker = &plan->workers[w];

			/*
			 * A home must be roomier and hold lighter leases (on average)
			 * than the heavy one: moving it next to leases as heavy would
			 * only swap them.
			 */
			if (!worker->home && worker->heavy == 0 && !worker->full &&
				(worker->leases == 0 || worker->load / worker->leases < plan->workers[next].heavy) &&
				(room < 0 || roomier(worker, &plan->workers[room])))
				room = w;
		}
		if (room >= 0 && plan->workers[room].capacity > plan->workers[next].capacity)
		{
			plan->workers[next].relocate_to = room;
			plan->workers[room].home = true;
		}
		else
			plan->workers[next].home = true;
	}
	compute_fair(plan);
}

void
balance_mark_heavy(BalancePlan *plan, int first)
{
	for (int l = first; l < plan->nleases; l++)
	{
		BalanceLease *lease = &plan->leases[l];
		BalanceWorker *owner;

		lease->heavy = false;
		lease->home = -1;
		if (lease->owner < 0)
			continue;
		owner = &plan->workers[lease->owner];
		if (owner->heavy > 0 && !owner->heavy_marked && lease->weight == owner->heavy)
		{
			lease->heavy = owner->heavy_marked = true;
			lease->home = owner->relocate_to >= 0 ? owner->relocate_to : lease->owner;
		}
	}
}

bool
balance_relocates(const BalancePlan *plan, int w)
{
	return plan->workers[w].relocate_to >= 0 && plan->workers[w].heavy_load > 0;
}

bool
balance_out_of_tolerance(const BalancePlan *plan)
{
	if (plan->fair <= 0)
		return false;
	for (int w = 0; w < plan->nworkers; w++)
	{
		const BalanceWorker *worker = &plan->workers[w];
		double		load = base_load(worker);
		double		target = base_target(plan, worker);

		if (balance_relocates(plan, w))
			return true;
		if (worker->home ? load > plan->tolerance * plan->fair * worker->capacity :
			(load > target * (1 + plan->tolerance) || load < target * (1 - plan->tolerance)))
			return true;
	}
	return false;
}

bool
balance_is_donor(const BalancePlan *plan, int w)
{
	return excess(plan, &plan->workers[w]) > 0 || balance_relocates(plan, w);
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
		if (lease->heavy)
			plan->workers[lease->owner].heavy_load -= lease->weight;
	}
	plan->workers[to].load += lease->weight;
	plan->workers[to].leases++;
	if (lease->heavy)
		plan->workers[to].heavy_load += lease->weight;
	lease->owner = to;
	lease->moved = true;
	move->imbalance_after = balance_imbalance(plan);
}

/*
 * The first step of a plan: the next free lease to the worker it leaves
 * least loaded per unit of capacity (a home only when every other worker is
 * full or a home); false once every free lease is placed or none fits.
 */
static bool
place_next_free(BalancePlan *plan, BalanceMove *move)
{
	int			best_to = -1;

	while (plan->next_free < plan->nfree)
	{
		int			l = plan->next_free++;
		double		x = plan->leases[l].weight;
		bool		spare = false;

		for (int w = 0; w < plan->nworkers; w++)
			spare |= !plan->workers[w].full && !plan->workers[w].home;
		for (int w = 0; w < plan->nworkers; w++)
		{
			const BalanceWorker *worker = &plan->workers[w];
			double		after;
			double		best;

			if (worker->full || (spare && worker->home))
				continue;
			after = (worker->load + x) / worker->capacity;
			if (best_to >= 0)
				best = (plan->workers[best_to].load + x) / plan->workers[best_to].capacity;
			if (best_to < 0 || after < best ||
				(after == best && text_order(worker->name, plan->workers[best_to].name) < 0))
				best_to = w;
		}
		if (best_to >= 0)
		{
			apply_move(plan, l, best_to, move);
			return true;
		}
	}
	return false;
}

/*
 * The next step: first every free lease, heaviest first, goes to the worker
 * (not a home) whose load over capacity would be least with it; then each
 * heavy lease that belongs elsewhere goes to its home; then, while some
 * worker is outside the tolerance, the move of one lease from a worker
 * above its target to another that lowers the stream's spread the most.
 * Such a move must narrow the gap between the two workers' excess per unit
 * of capacity by more than the tolerance times the fair load per unit (so
 * a move never undoes an earlier one: the sum of load^2 / capacity falls
 * with each), never takes a heavy lease or brings a worker a lease heavier
 * than its share, and each lease moves at most once in a plan.
 */
bool
balance_plan_next(BalancePlan *plan, BalanceMove *move)
{
	int			best_lease = -1;
	int			best_to = -1;
	double		best_score = 0;
	bool		best_clean = false;

	if (place_next_free(plan, move))
		return true;

	for (int l = plan->nfree; l < plan->nleases; l++)
	{
		const BalanceLease *lease = &plan->leases[l];

		if (lease->heavy && lease->owner != lease->home && !lease->moved &&
			!plan->workers[lease->home].full)
		{
			apply_move(plan, l, lease->home, move);
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

		if (lease->moved || lease->heavy || lease->owner < 0 ||
			excess(plan, &plan->workers[lease->owner]) <= 0)
			continue;
		from = &plan->workers[lease->owner];
		for (int w = 0; w < plan->nworkers; w++)
		{
			const BalanceWorker *to = &plan->workers[w];
			double		gain;
			double		score;
			bool		clean;

			if (w == lease->owner || to->home || to->full || x > plan->fair * to->capacity)
				continue;
			gain = excess(plan, from) - excess(plan, to) -
				x * (1 / from->capacity + 1 / to->capacity) / 2;
			if (gain <= plan->tolerance * plan->fair)
				continue;

			/*
			 * A clean move leaves neither worker on the wrong side of its
			 * band (the giver not below, the taker not above): the largest
			 * such lease first, so that few moves close the gap and none
			 * opens another; failing any, the move that lowers the spread
			 * most.
			 */
			clean = base_load(from) - x >= base_target(plan, from) * (1 - plan->tolerance) &&
				base_load(to) + x <= base_target(plan, to) * (1 + plan->tolerance);
			score = x * gain;
			if (best_lease < 0 || (clean && !best_clean) ||
				(clean == best_clean &&
				 (score > best_score ||
				  (score == best_score &&
				   (text_order(lease->shard_id, plan->leases[best_lease].shard_id) < 0 ||
					(best_lease == l && text_order(to->name, plan->workers[best_to].name) < 0))))))
			{
				best_lease = l;
				best_to = w;
				best_score = score;
				best_clean = clean;
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
	return psprintf("balance: weight %g from %s to %s%s; loads after the move %g and %g, targets %g and %g; imbalance %g to %g",
					plan->leases[move->lease].weight,
					TextDatumGetCString(plan->workers[move->from].name), TextDatumGetCString(to->name),
					plan->leases[move->lease].heavy ? " (a lease heavier than a share, to the roomiest worker)" : "",
					plan->workers[move->from].load, to->load,
					base_target(plan, &plan->workers[move->from]) + plan->workers[move->from].heavy_load,
					base_target(plan, to) + to->heavy_load,
					move->imbalance_before, move->imbalance_after);
}
