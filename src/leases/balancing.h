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


/* The tolerance of a stream (lease.stream_balancing or the default). */
extern double lease_stream_tolerance(Datum *stream);

#endif							/* LEASE_BALANCING_H */
