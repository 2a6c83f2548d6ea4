/*-------------------------------------------------------------------------
 *
 * src/common/spi_util.h
 *	  Prepared, kept SPI statements and the checks around running them.
 *
 * Every statement pg_lease runs is a static LeaseStatement: fixed SQL text
 * with $n parameters (values never reach the SQL text), every object
 * schema-qualified and every operator written OPERATOR(pg_catalog.x).  The
 * plan is prepared on first use in a backend and kept (SPI_keepplan); the
 * plan cache re-plans it by itself after DDL on the tables it reads.
 *
 *-------------------------------------------------------------------------
 */
#ifndef LEASE_SPI_UTIL_H
#define LEASE_SPI_UTIL_H

#include "executor/spi.h"
#include "fmgr.h"

#define LEASE_STMT_MAX_ARGS 16

typedef struct LeaseStatement
{
	const char *name;			/* for error messages: what the statement does */
	const char *sql;
	int			nargs;
	Oid			argtypes[LEASE_STMT_MAX_ARGS];
	int			expected;		/* the SPI_OK_* code a success returns */
	int			cursor_options; /* for SPI_prepare_cursor: 0, or e.g.
								 * CURSOR_OPT_GENERIC_PLAN for a statement
								 * whose plan does not depend on the values */
	bool		read_only;		/* SPI's read_only: true for a statement run
								 * from a STABLE function (it then runs in
								 * the caller's snapshot and makes no
								 * command-counter increment, as PostgreSQL
								 * requires of a non-volatile function's SPI) */
	const char *setting;		/* a setting changed for exactly this
								 * statement, planning included, or NULL */
	const char *setting_value;	/* its value, or NULL: */
	const int  *setting_ms;		/* its value in milliseconds, read at each
								 * run (a pg_lease setting) */
	bool		latest_snapshot;	/* run in a snapshot taken now, whatever
									 * the caller's isolation level (a read
									 * that must see every commit made
									 * before a lock it just got) */
	SPIPlanPtr	plan;			/* prepared and kept on first use */
} LeaseStatement;

/* Initializers of a LeaseStatement's setting: JIT off for the statement. */
#define LEASE_STMT_JIT_OFF \
	.setting = "jit", .setting_value = "off"

/* lock_timeout for the statement: the value of int setting `ms`. */
#define LEASE_STMT_LOCK_TIMEOUT(ms) \
	.setting = "lock_timeout", .setting_ms = &(ms)

/* SPI_connect, raising on failure. */
extern void lease_spi_connect(void);

/* SPI_finish, raising on failure. */
extern void lease_spi_finish(void);

/* The caller's identity, saved while a function runs as its owner. */
typedef struct LeaseCaller
{
	Oid			userid;
	int			sec_context;
	Oid			owner;			/* the called function's owner */
} LeaseCaller;

/*
 * The one modifier for acting as the owner: becomes the called function's
 * owner, exactly as SECURITY DEFINER would (for a SECURITY INVOKER function
 * that needs its caller's identity first, src/leases/privileges.h), saving
 * the caller in *caller, and connects to SPI.  lease_spi_finish_as_caller
 * undoes both.  An error in between needs no cleanup: transaction and
 * subtransaction abort restore the user id saved when they began and close
 * SPI.
 */
extern void lease_spi_connect_as_owner(FunctionCallInfo fcinfo, LeaseCaller *caller);

/* Disconnects from SPI and becomes the caller saved by lease_spi_connect_as_owner. */
extern void lease_spi_finish_as_caller(const LeaseCaller *caller);

/*
 * The one runner: runs a statement with the given parameters (nulls as for
 * SPI: ' ' or 'n'; NULL means none are null), read-only and with its
 * setting as the statement says, and returns SPI_processed.  The setting is
 * changed at a new GUC nest level (what a function's SET clause uses) and
 * restored afterwards to whatever the caller had: a session SET, a SET
 * LOCAL or the default; an error inside rolls it back with the
 * (sub)transaction.  Any return code other than the statement's expected
 * one is a can't-happen error.
 */
extern uint64 lease_spi_run(LeaseStatement *stmt, Datum *values, const char *nulls,
							long max_rows);

/*
 * lease_spi_run for a read that must see every row committed before it
 * starts, whatever the caller's isolation level: under READ COMMITTED that
 * is what every statement sees; under REPEATABLE READ or SERIALIZABLE the
 * statement runs in a snapshot taken for it alone (GetLatestSnapshot, as
 * PostgreSQL's foreign-key checks do in ri_triggers.c), not in the
 * transaction's.  For a count made under a lock that every writer of the
 * rows counted takes first (admission's quota count under the admission
 * gate): the lock orders the writers, and this read sees all of them.
 */
extern uint64 lease_spi_run_latest(LeaseStatement *stmt, Datum *values, const char *nulls,
								   long max_rows);

/*
 * Connects, runs one statement, disconnects; returns SPI_processed.  For
 * statements whose result rows carry nothing but their number.
 */
extern uint64 lease_spi_exec(LeaseStatement *stmt, Datum *values, const char *nulls);

/*
 * In PG_CATCH around SPI: re-throws the error with SPI's CONTEXT line
 * quoting `sql` replaced by one naming the statement; `cxt` must outlive
 * the error.  Never returns.
 */
extern void lease_spi_rethrow_without_sql(const char *name, const char *sql,
										  MemoryContext cxt) pg_attribute_noreturn();

/* Column `col` (1-based) of result row `row`; *isnull set. */
extern Datum lease_spi_value(uint64 row, int col, bool *isnull);

/*
 * Appends every row of the current SPI result, its first `ncols` columns,
 * to the result set of `fcinfo`, a set-returning call in materialize mode
 * (InitMaterializedSRF); the values are copied, so nothing points into SPI
 * memory after SPI_finish.
 */
extern void lease_spi_put_rows(FunctionCallInfo fcinfo, int ncols);

#endif							/* LEASE_SPI_UTIL_H */
