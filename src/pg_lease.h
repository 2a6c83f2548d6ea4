/*-------------------------------------------------------------------------
 *
 * src/pg_lease.h
 *	  Limits and version shims shared by every pg_lease subsystem.
 *
 * Anything that differs between PostgreSQL major versions lives here and
 * nowhere else.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PG_LEASE_H
#define PG_LEASE_H

#include "postgres.h"

#if PG_VERSION_NUM < 150000
#error "pg_lease requires PostgreSQL 15 or later"
#endif

/* Longest identifier (app, stream, shard, owner, channel...) in bytes. */
#define LEASE_MAX_IDENT_BYTES		256

/* Longest checkpoint value in bytes (Kinesis sequence numbers are <= 128). */
#define LEASE_MAX_CHECKPOINT_BYTES	1024

/* Longest accepted lease duration, in milliseconds (7 days). */
#define LEASE_MAX_DURATION_MS		(7 * 24 * 60 * 60 * 1000)

/* Longest age an interval argument may give (prune_events' older_than). */
#define LEASE_MAX_AGE_YEARS			1000

/*
 * The counters an import may bring in (import_kcl_ex, import_kcl_ex_rows,
 * import_kcl_dynamodb) are below 2^61: the table's CHECK stops every
 * counter below 2^62 (shard_leases_counters_check), and a take or a renewal
 * adds one, so an imported lease keeps 2^61 of them in hand where 0.4.0
 * accepted 2^62 - 1, after which every take failed.  (A KCL worker adds one
 * per renewal, every few seconds: 2^61 is past any real table.)
 */
#define LEASE_MAX_IMPORTED_COUNTER	2305843009213693952

/* Most parent shards one lease may name (a merge has two). */
#define LEASE_MAX_PARENTS			32

/*
 * The capacities a worker may declare and the largest weight an operator
 * may set (src/leases/balancing.c; the CHECK constraints of 0.5.0 hold the
 * same bounds).  Both are relative: a capacity of 10^6 already takes
 * nearly every lease from a worker of capacity 1.  With them, and a
 * measured work rate bounded by its bigint input, no sum or product of the
 * balancing arithmetic (lease.worker_loads, lease.monitoring_worker_loads,
 * a weighted round) can overflow, so one app's extreme inputs cannot make
 * a fleet-wide view fail for every app.
 */
#define LEASE_MIN_CAPACITY			1e-6
#define LEASE_MAX_CAPACITY			1e6
#define LEASE_MAX_WEIGHT			1e15

/* Checkpoint sentinels, as in the Kinesis Client Library. */
#define LEASE_CHECKPOINT_TRIM_HORIZON	"TRIM_HORIZON"
#define LEASE_CHECKPOINT_LATEST			"LATEST"
#define LEASE_CHECKPOINT_SHARD_END		"SHARD_END"

/* A word (a status, a sentinel) as an SQL literal, for statement text. */
#define LEASE_SQL_WORD(word)			"'" word "'"

#define LEASE_SQL_SHARD_END				LEASE_SQL_WORD(LEASE_CHECKPOINT_SHARD_END)

#endif							/* PG_LEASE_H */
