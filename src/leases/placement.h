/*-------------------------------------------------------------------------
 *
 * src/leases/placement.h
 *	  Where a stream lives: the check every stream function makes against a
 *	  move between partitions (lease.stream_placements).
 *
 * A stream function (its arguments start app_name, stream_name) begins with
 * lease_stream_begin instead of lease_app_begin, or runs its one statement
 * with lease_spi_exec_for_stream instead of lease_spi_exec_for_app.  From
 * the 0.5.0 schema on, after the app check, that takes the stream's
 * placement lock in share mode until the transaction ends and reads the
 * stream's row of lease.stream_placements (one primary-key lookup, in a
 * snapshot taken after the lock): a stream moving out, moved out or still
 * arriving is refused with SQLSTATE 40L01, naming the partition that
 * serves it.  A move's steps take the same lock in exclusive mode, so a
 * step waits for the transactions that passed the check, and every call
 * after it sees what it wrote.  Before 0.5.0 both are exactly
 * lease_app_begin and lease_spi_exec_for_app.
 *
 *-------------------------------------------------------------------------
 */
#ifndef LEASE_PLACEMENT_H
#define LEASE_PLACEMENT_H

#include "fmgr.h"

#include "common/spi_util.h"
#include "common/version.h"

/* The SQLSTATE of a call for a stream this partition does not serve. */
#define ERRCODE_LEASE_STREAM_MOVED	MAKE_SQLSTATE('4','0','L','0','1')

/* lease_app_begin, then (0.5.0 on) the placement check of the stream. */
extern void lease_stream_begin(FunctionCallInfo fcinfo, LeaseSchema schema, Datum app_name,
							   Datum stream_name, LeaseCaller *caller);

/*
 * lease_spi_exec_for_app for a statement whose first two parameters are
 * the app_name and the stream_name, with the placement check.
 */
extern uint64 lease_spi_exec_for_stream(FunctionCallInfo fcinfo, LeaseSchema schema,
										 LeaseStatement *stmt, Datum *values, const char *nulls);

#endif							/* LEASE_PLACEMENT_H */
