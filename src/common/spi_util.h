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
	SPIPlanPtr	plan;			/* prepared and kept on first use */
} LeaseStatement;

/* SPI_connect, raising on failure. */
extern void lease_spi_connect(void);

/* SPI_finish, raising on failure. */
extern void lease_spi_finish(void);

/*
 * Runs a statement with the given parameters (nulls as for SPI: ' ' or 'n';
 * NULL means none are null) and returns SPI_processed.  Any return code
 * other than the statement's expected one is a can't-happen error.
 */
extern uint64 lease_spi_run(LeaseStatement *stmt, Datum *values, const char *nulls,
							long max_rows);

/*
 * lease_spi_run with SPI's read_only flag: true from a STABLE function (it
 * then runs in the caller's snapshot and makes no command-counter
 * increment, as PostgreSQL requires of a non-volatile function's SPI).
 */
extern uint64 lease_spi_run_mode(LeaseStatement *stmt, Datum *values, const char *nulls,
								 bool read_only, long max_rows);

/*
 * Connects, runs one statement, disconnects; returns SPI_processed.  For
 * statements whose result rows carry nothing but their number.
 */
extern uint64 lease_spi_exec(LeaseStatement *stmt, Datum *values, const char *nulls);

/*
 * As lease_spi_run, with one setting changed for exactly this statement
 * (planning included) and restored afterwards to whatever the caller had: a
 * session SET, a SET LOCAL or the default.  This is the GUC nest level a
 * function's SET clause uses; an error inside rolls it back with the
 * (sub)transaction.
 */
extern uint64 lease_spi_run_with(LeaseStatement *stmt, Datum *values, const char *nulls,
								 long max_rows, const char *guc, const char *value);

/*
 * In PG_CATCH around SPI: re-throws the error with SPI's CONTEXT line
 * quoting `sql` replaced by one naming the statement; `cxt` must outlive
 * the error.  Never returns.
 */
extern void lease_spi_rethrow_without_sql(const char *name, const char *sql,
										  MemoryContext cxt) pg_attribute_noreturn();

/* Column `col` (1-based) of result row `row`; *isnull set. */
extern Datum lease_spi_value(uint64 row, int col, bool *isnull);

#endif							/* LEASE_SPI_UTIL_H */
