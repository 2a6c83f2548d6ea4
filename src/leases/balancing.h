/*-------------------------------------------------------------------------
 *
 * src/leases/balancing.h
 *	  Load balancing inputs: lease weights, measured work, worker capacity
 *	  and the per-stream tolerance (docs/shard-leases.md, "Balancing").
 *
 *-------------------------------------------------------------------------
 */
#ifndef LEASE_BALANCING_H
#define LEASE_BALANCING_H

#include "fmgr.h"

/*
 * The time constant, in seconds, of the exponentially decayed work rate
 * that update_checkpoint's records argument feeds (lease.shard_leases.
 * work_rate): a report `dt` seconds after the previous checkpoint moves the
 * rate by 1 - exp(-dt / LEASE_WORK_RATE_TAU_S) of the way to records / dt.
 */
#define LEASE_WORK_RATE_TAU_S "60"

/* A stream's tolerance when lease.set_balance_tolerance has set none. */
#define LEASE_DEFAULT_BALANCE_TOLERANCE 0.1

/* A required finite, positive float8 argument (a worker's capacity). */
extern double lease_arg_capacity(FunctionCallInfo fcinfo, int argno, const char *name);

/*
 * Records the caller's capacity for the stream, inside the caller's SPI
 * session (after lease_app_begin): stream[0..2] are app, stream, worker.
 * Writes only when the capacity changed.
 */
extern void lease_record_capacity(Datum *stream, double capacity);

#endif							/* LEASE_BALANCING_H */
