/*-------------------------------------------------------------------------
 *
 * src/common/version.h
 *	  Which installed schema a call serves: the support window.
 *
 * The module serves two schemas: the current release's (0.5.0) and the
 * previous release's (0.4.0), no older (docs/operations.md, "Upgrades").
 * As in pg_stat_statements, each release's install script binds its own C
 * symbols: the 0.4.0 script and the 0.3.0--0.4.0 upgrade bind the _0_4
 * symbols (lease_take_lease_0_4), the 0.5.0 script and the 0.4.0--0.5.0
 * upgrade a _0_5 one where 0.5.0 changed what the C does (each written out
 * next to its function), so a call knows its schema by its symbol and never
 * looks at the catalog.  Each symbol calls one implementation with the
 * LeaseSchema, which picks the statements.
 *
 * The released 0.1.0 to 0.3.0 scripts (frozen) bind the plain symbols
 * (lease_take_lease).  Those stay defined, so that the old scripts still
 * install and ALTER EXTENSION pg_lease UPDATE can run the upgrade chain,
 * but each raises lease_schema_too_old() (src/common/version.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef LEASE_VERSION_H
#define LEASE_VERSION_H

#include "fmgr.h"

/* The schema a call's statements are written for, oldest first. */
typedef enum LeaseSchema
{
	LEASE_SCHEMA_0_4,			/* the previous release: the taker's
								 * bookkeeping in lease.stream_workers,
								 * lease.admission_gate,
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
 * Raises 55000: the installed schema is older than the previous release,
 * so this module has no statements for it (ALTER EXTENSION pg_lease UPDATE).
 */
extern void lease_schema_too_old(void) pg_attribute_noreturn();

#endif							/* LEASE_VERSION_H */
