/*-------------------------------------------------------------------------
 *
 * src/leases/privileges.h
 *	  Per-application access: who may act for an app_name, and running a
 *	  function's SQL as its owner.
 *
 * The lease functions that take an app_name are SECURITY INVOKER (see
 * src/leases/leases.sql): inside a SECURITY DEFINER function the caller's
 * identity is gone, and the app check needs it.  Each such function checks
 * its arguments (no SQL), then brackets its SQL with lease_app_begin() and
 * lease_app_end().  lease_app_begin: the caller (the current user,
 * GetUserId()) may act for the app when it has the privileges of the
 * function's owner (the extension owner; a superuser has every role's) or
 * of a role granted the app in lease.app_grants; the function then runs as
 * the owner, exactly as SECURITY DEFINER would, connected to SPI (the
 * switch is lease_spi_connect_as_owner, src/common/spi_util.h; the check
 * runs in the same SPI session as the function's SQL).
 * lease_app_end leaves SPI and becomes the caller again.  An error in
 * between needs no cleanup: transaction and subtransaction abort restore
 * the user id saved when they began (AbortTransaction,
 * AbortSubTransaction) and close SPI, and an internal subtransaction begun
 * after the switch (src/bindings/subxact.c) restores the owner, which
 * lease_app_end() then replaces by the caller.
 *
 *-------------------------------------------------------------------------
 */
#ifndef LEASE_PRIVILEGES_H
#define LEASE_PRIVILEGES_H

#include "fmgr.h"

#include "common/spi_util.h"
#include "common/version.h"

/*
 * Switches to the function's owner, saving the caller in *caller, and
 * connects to SPI (one session for the check and the function's SQL); then
 * raises 42501 unless the caller may act for app_name (app_grants read as
 * `schema` has it).
 */
extern void lease_app_begin(FunctionCallInfo fcinfo, LeaseSchema schema, Datum app_name,
							LeaseCaller *caller);

/*
 * Raises 42501 unless the caller may act for app_name, and changes nothing
 * else: for a function that runs as its caller (import_kcl_dynamodb) and
 * must refuse a caller that may not act for the app before it reads
 * anything in proportion to its input.  SPI must not be connected.
 */
extern void lease_app_check(FunctionCallInfo fcinfo, LeaseSchema schema, Datum app_name);

/* Disconnects from SPI and switches back to the caller saved by lease_app_begin. */
extern void lease_app_end(const LeaseCaller *caller);

/*
 * One statement whose first parameter is the app_name, between
 * lease_app_begin and lease_app_end; returns SPI_processed.
 */
extern uint64 lease_spi_exec_for_app(FunctionCallInfo fcinfo, LeaseSchema schema,
									  LeaseStatement *stmt, Datum *values, const char *nulls);

#endif							/* LEASE_PRIVILEGES_H */
