/*-------------------------------------------------------------------------
 *
 * src/common/version.h
 *	  Which installed schema a call serves: versioned C entry points.
 *
 * One module serves every installed schema version until ALTER EXTENSION
 * pg_lease UPDATE.  As in pg_stat_statements, each release's install script
 * binds its own C symbols: the released scripts (0.1.0 to 0.3.0, frozen)
 * bind the plain symbols (lease_take_lease), the 0.4.0 script and the
 * 0.3.0--0.4.0 upgrade bind the _0_4 ones (lease_take_lease_0_4), and the
 * 0.5.0 script and the 0.4.0--0.5.0 upgrade bind a _0_5 one where 0.5.0
 * changed what the C does (each written out next to its function).  Every
 * function whose C depends on the schema has both, made by
 * LEASE_VERSIONED_ENTRY_POINTS from one implementation that takes the
 * LeaseSchema down to the statements it picks.  A _0_4 symbol never looks
 * at the catalog.
 *
 * The frozen 0.2.0 and 0.3.0 scripts bind the same plain symbols, so a
 * plain symbol cannot tell those two schemas apart by its name.  Where the
 * function's result row differs (renew_leases) the call's own tuple
 * descriptor tells them apart, as in pg_stat_statements.  Where it does not
 * and the statement differs (the taker's bookkeeping tables and the
 * conversation id partition came with 0.3.0), lease_schema_before_0_4()
 * looks the 0.3.0 table up: the one catalog look-up left, and only on the
 * plain symbols (docs/operations.md, "Upgrades").
 *
 *-------------------------------------------------------------------------
 */
#ifndef LEASE_VERSION_H
#define LEASE_VERSION_H

#include "fmgr.h"

/* The schema a call's statements are written for, oldest first. */
typedef enum LeaseSchema
{
	LEASE_SCHEMA_0_2,			/* 0.1.0 and 0.2.0 objects */
	LEASE_SCHEMA_0_3,			/* + the taker's bookkeeping tables,
								 * lease.conversation_id_partition */
	LEASE_SCHEMA_0_4,			/* + lease.admission_gate,
								 * app_grants.grantee_name */
	LEASE_SCHEMA_0_5			/* + lease.stream_placements (the stream
								 * functions' placement check,
								 * src/leases/placement.h),
								 * lease.worker_holdings (the bookkeeping
								 * apart from the heartbeat row);
								 * the checkpoint statements move
								 * checkpointed_at themselves */
} LeaseSchema;

/*
 * For a plain symbol whose statements differ between 0.2.0 and 0.3.0:
 * LEASE_SCHEMA_0_3 when lease.stream_workers exists, else LEASE_SCHEMA_0_2.
 */
extern LeaseSchema lease_schema_before_0_4(void);

/*
 * Defines the C entry points of a versioned function: `sym`, bound by the
 * released scripts, calls impl(fcinfo, plain) (`plain` is an expression:
 * LEASE_SCHEMA_0_3 when the statements do not differ before 0.4.0, else
 * e.g. lease_schema_before_0_4()); `sym`_0_4, bound from 0.4.0 on, calls
 * impl(fcinfo, LEASE_SCHEMA_0_4).
 */
#define LEASE_VERSIONED_ENTRY_POINTS(sym, impl, plain) \
	PG_FUNCTION_INFO_V1(sym); \
	Datum sym(PG_FUNCTION_ARGS) { return impl(fcinfo, (plain)); } \
	PG_FUNCTION_INFO_V1(sym##_0_4); \
	Datum sym##_0_4(PG_FUNCTION_ARGS) { return impl(fcinfo, LEASE_SCHEMA_0_4); }

#endif							/* LEASE_VERSION_H */
