/*-------------------------------------------------------------------------
 *
 * src/leases/planner.h
 *	  The weighted balancing planner: from the workers, their capacities
 *	  and the leases with their weights, the moves that bring every worker
 *	  within the stream's tolerance of its share (docs/shard-leases.md,
 *	  "Balancing").
 *
 *-------------------------------------------------------------------------
 */
#ifndef LEASE_PLANNER_H
#define LEASE_PLANNER_H

#include "fmgr.h"

/*
 * The weighted balancing plan (src/leases/planner.c), shared by
 * take_leases' weighted round and lease.plan_rebalance so that the dry run
 * and the rounds decide with one piece of code.
 */
typedef struct BalanceWorker
{
	Datum		name;			/* text */
	double		load;			/* effective load (promised leases count for
								 * the worker they are promised to) */
	double		capacity;
	int64		leases;			/* effective number of leases */
	bool		full;			/* may take no more (max_leases) */
	/* set by balance_plan_start: */
	bool		home;			/* its capacity is kept for one heavy lease */
	int			relocate_to;	/* where its heavy lease goes, or -1 */
	double		heavy;			/* the heavy lease it holds (0: none) */
	double		heavy_load;		/* the weight of heavy leases it holds now */
	bool		heavy_marked;	/* its heavy lease is marked in leases */
} BalanceWorker;

typedef struct BalanceLease
{
	Datum		shard_id;		/* text */
	Datum		from_owner;		/* text: the holder, or an expired lease's owner */
	bool		has_from;
	int			owner;			/* index of the live holder in workers, -1 when free */
	double		weight;
	bool		moved;			/* already placed by this plan */
	bool		heavy;			/* heavier than a share: moves only to its home */
	int			home;			/* where a heavy lease belongs */
} BalanceLease;

typedef struct BalanceMove
{
	int			lease;			/* index in leases */
	int			from;			/* worker index, -1 for a free lease */
	int			to;
	double		imbalance_before;
	double		imbalance_after;
} BalanceMove;

typedef struct BalancePlan
{
	BalanceWorker *workers;
	int			nworkers;
	BalanceLease *leases;		/* free leases first (nfree), then movable ones */
	int			nfree;
	int			nleases;
	double		tolerance;
	double		total;			/* the stream's load, free leases included */
	double		capacity;		/* the sum of the workers' capacities */
	double		fair;			/* load per unit of capacity, heavy leases and
								 * their homes aside */
	int			next_free;		/* free leases placed so far (heaviest first) */
} BalancePlan;

/*
 * Fixes total, capacity, the heavy leases, their homes and fair; sorts the
 * free leases.
 */
extern void balance_plan_start(BalancePlan *plan);

/* Marks the heavy lease among leases[first..] (after they were added). */
extern void balance_mark_heavy(BalancePlan *plan, int first);

/* True when worker w holds a heavy lease that belongs elsewhere. */
extern bool balance_relocates(const BalancePlan *plan, int w);

/* True when some worker is outside the tolerance of its share. */
extern bool balance_out_of_tolerance(const BalancePlan *plan);

/* True when worker w holds more than its share (its leases may move). */
extern bool balance_is_donor(const BalancePlan *plan, int w);

/* The next step of the plan, applied to it; false when there is none. */
extern bool balance_plan_next(BalancePlan *plan, BalanceMove *move);

/* The stream's imbalance: the largest load over target among the workers. */
extern double balance_imbalance(const BalancePlan *plan);

/* Text of an event's reason for a move. */
extern char *balance_move_reason(const BalancePlan *plan, const BalanceMove *move);

#endif							/* LEASE_PLANNER_H */
