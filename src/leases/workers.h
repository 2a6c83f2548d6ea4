/*-------------------------------------------------------------------------
 *
 * src/leases/workers.h
 *	  A worker's heartbeat and liveness record (lease.stream_workers).
 *
 *-------------------------------------------------------------------------
 */
#ifndef LEASE_WORKERS_H
#define LEASE_WORKERS_H

#include "fmgr.h"

/*
 * Fills values[0..2] (and nulls[0..2]) with the calling session: backend
 * pid, backend start, server incarnation (NULL on a standby).
 */
extern void lease_session_params(Datum *values, char *nulls);

/*
 * Inside an SPI connection as the owner: records on the row of worker
 * stream[2] in stream stream[0]/stream[1] its session, renew_every (NULL
 * when !have_every: the worker leaves the mode) and the database time; with
 * a duration, the heartbeat too (renew_leases): every lease the worker
 * holds is live until now + *duration.
 */
extern void lease_record_session(Datum *stream, bool have_every, Datum renew_every,
								 Datum *duration);

#endif							/* LEASE_WORKERS_H */
