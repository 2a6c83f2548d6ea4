/*-------------------------------------------------------------------------
 *
 * src/common/args.h
 *	  Argument checks shared by every SQL-callable pg_lease function.
 *
 * Every public function is declared non-STRICT so that a NULL where a value
 * is required produces an error naming the argument (22004) rather than a
 * silent NULL.  Every check runs before any SQL is executed, so bad input
 * never writes anything.
 *
 *-------------------------------------------------------------------------
 */
#ifndef LEASE_ARGS_H
#define LEASE_ARGS_H

#include "fmgr.h"

/* A required identifier: not NULL (22004), not blank, not too long (22023). */
extern Datum lease_arg_ident(FunctionCallInfo fcinfo, int argno, const char *name);

/* An optional identifier: NULL passes (returns false), anything else as above. */
extern bool lease_arg_opt_ident(FunctionCallInfo fcinfo, int argno, const char *name,
								Datum *value);

/* A required checkpoint value: not NULL, not blank, not too long. */
extern Datum lease_arg_checkpoint(FunctionCallInfo fcinfo, int argno, const char *name);

/* Checks one checkpoint value (not blank, not too long); for array elements. */
extern void lease_check_checkpoint(text *value, const char *name);

/* A checkpoint a worker writes is not SHARD_END (22023: only close_shard ends a shard). */
extern void lease_check_not_shard_end(Datum checkpoint);

/* A required OID-valued argument such as a regrole (22004 when NULL). */
extern Oid	lease_arg_oid(FunctionCallInfo fcinfo, int argno, const char *name);

/* A required bigint (22004 when NULL). */
extern int64 lease_arg_int64(FunctionCallInfo fcinfo, int argno, const char *name);

/* A required bigint that must not be negative (22023). */
extern int64 lease_arg_nonneg_int64(FunctionCallInfo fcinfo, int argno, const char *name);

/*
 * A lease duration: NULL means lease.default_lease_duration; otherwise it
 * must be positive and at most LEASE_MAX_DURATION_MS (22023).  Returns an
 * interval Datum.
 */
extern Datum lease_arg_duration(FunctionCallInfo fcinfo, int argno, const char *name);

/* A required integer that must not be negative (22004 when NULL, 22023). */
extern int32 lease_arg_nonneg_int32(FunctionCallInfo fcinfo, int argno, const char *name);

/* An optional positive integer: NULL passes (returns false); <= 0 is 22023. */
extern bool lease_arg_opt_positive_int32(FunctionCallInfo fcinfo, int argno, const char *name,
										 int32 *value);

/* A required interval, not negative, at most LEASE_MAX_AGE_YEARS (22004, 22023). */
extern Datum lease_arg_nonneg_interval(FunctionCallInfo fcinfo, int argno, const char *name);

/* An interval Datum of the given number of milliseconds (for GUC values). */
extern Datum lease_interval_from_ms(int64 ms);

/* An optional duration: NULL passes (returns false), otherwise as lease_arg_duration. */
extern bool lease_arg_opt_duration(FunctionCallInfo fcinfo, int argno, const char *name,
								   Datum *value);

/* A required array of identifiers (parent shard ids): no NULL elements. */
extern Datum lease_arg_ident_array(FunctionCallInfo fcinfo, int argno, const char *name);

/* Checks one identifier value; used by the helpers above and for array elements. */
extern void lease_check_ident(text *value, const char *name);

#endif							/* LEASE_ARGS_H */
