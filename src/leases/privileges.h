/*-------------------------------------------------------------------------
 *
 * src/leases/privileges.h
 *	  Per-application access: who may act for an app_name, and running a
 *	  function's SQL as its owner.
 *
 * The lease functions that take an app_name are SECURITY INVOKER (see
 * pg_lease--0.2.0.sql): inside a SECURITY DEFINER function the caller's
 * identity is gone, and the app check needs it.  Each such function checks
 * its arguments (no SQL), then calls lease_enter_app(): the caller (the
 * current user, GetUserId()) may act for the app when it has the privileges
 * of the function's owner (the extension owner; a superuser has every
 * role's privileges) or of a role granted the app in lease.app_grants.  The
 * function then runs its SQL as the owner, exactly as SECURITY DEFINER
 * would, and calls lease_exit_app() to become the caller again.  An error
 * in between needs no cleanup: transaction and subtransaction abort restore
 * the user id saved when they began (AbortTransaction,
 * AbortSubTransaction), and an internal subtransaction begun after the
 * switch (src/bindings/subxact.c) restores the owner, which lease_exit_app() then
 * replaces by the caller.
 *
 *-------------------------------------------------------------------------
 */
#ifndef LEASE_PRIVILEGES_H
#define LEASE_PRIVILEGES_H

#include "fmgr.h"

#include "common/spi_util.h"

/* The caller's identity, saved while a function runs as its owner. */
typedef struct LeaseCaller
{
	Oid			userid;
	int			sec_context;
} LeaseCaller;

/*
 * Raises 42501 unless the current user may act for app_name; then switches
 * to the function's owner, saving the caller in *caller.
 */
extern void lease_enter_app(FunctionCallInfo fcinfo, Datum app_name, LeaseCaller *caller);

/* Switches back to the caller saved by lease_enter_app. */
extern void lease_exit_app(const LeaseCaller *caller);

/*
 * lease_spi_exec (spi_util.h) for a statement whose first parameter is the
 * app_name: checks the caller's access to it, runs the statement as the
 * owner, becomes the caller again; returns SPI_processed.
 */
extern uint64 lease_spi_exec_for_app(FunctionCallInfo fcinfo, LeaseStatement *stmt,
									  Datum *values, const char *nulls);

#endif							/* LEASE_PRIVILEGES_H */
