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

#include "common/version.h"

/*
 * Fills values[0..2] (and nulls[0..2]) with the calling session: backend
 * pid, backend start, server incarnation (NULL on a standby).
 */
extern void lease_session_params(Datum *values, char *nulls);

/*
 * Inside an SPI connection as the owner: records on the heartbeat row of
 * worker stream[2] in stream stream[0]/stream[1] (lease.stream_workers)
 * its session, renew_every (NULL when !have_every: the worker leaves the
 * mode) and the database time; with a duration, the heartbeat too
 * (renew_leases): every lease the worker holds is live until now +
 * *duration.  `schema`: the installed schema the statement is written for.
 */
extern void lease_record_session(LeaseSchema schema, Datum *stream, bool have_every,
								 Datum renew_every, Datum *duration);

/*
 * From 0.5.0 on, after the caller's heartbeat row is written: under
 * REPEATABLE READ or SERIALIZABLE, raises 40001 when a change of who holds
 * one of worker stream[2]'s leases committed after the transaction's
 * snapshot (the heartbeat's answer and renew_leases' list, read in that
 * snapshot, would miss it).  Under READ COMMITTED each statement sees every
 * commit before it, and this does nothing.
 */
extern void lease_check_holdings_current(Datum *stream);

#endif							/* LEASE_WORKERS_H */
