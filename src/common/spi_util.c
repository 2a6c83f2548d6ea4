/*-------------------------------------------------------------------------
 *
 * src/common/spi_util.c
 *	  Prepared, kept SPI statements and the checks around running them.
 *
 *-------------------------------------------------------------------------
 */
#include "pg_lease.h"

#include "access/xact.h"
#include "catalog/pg_proc.h"
#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/tuplestore.h"
#include "utils/syscache.h"

#include "common/spi_util.h"

/* Connects to SPI. */
void
lease_spi_connect(void)
{
	int			rc = SPI_connect();

	if (rc != SPI_OK_CONNECT)
		elog(ERROR, "pg_lease: SPI_connect failed: %s", SPI_result_code_string(rc));
}

/* Disconnects from SPI. */
void
lease_spi_finish(void)
{
	int			rc = SPI_finish();

	if (rc != SPI_OK_FINISH)
		elog(ERROR, "pg_lease: SPI_finish failed: %s", SPI_result_code_string(rc));
}

/* The owner of the called function (the extension's owner). */
static Oid
function_owner(FunctionCallInfo fcinfo)
{
	HeapTuple	tuple;
	Oid			owner;

	tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(fcinfo->flinfo->fn_oid));
	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "pg_lease: cache lookup failed for function %u", fcinfo->flinfo->fn_oid);
	owner = ((Form_pg_proc) GETSTRUCT(tuple))->proowner;
	ReleaseSysCache(tuple);
	return owner;
}

/* Becomes the function's owner and connects to SPI. */
void
lease_spi_connect_as_owner(FunctionCallInfo fcinfo, LeaseCaller *caller)
{
	caller->owner = function_owner(fcinfo);
	GetUserIdAndSecContext(&caller->userid, &caller->sec_context);
	SetUserIdAndSecContext(caller->owner, caller->sec_context | SECURITY_LOCAL_USERID_CHANGE);
	lease_spi_connect();
}

/* Leaves SPI and becomes the caller again. */
void
lease_spi_finish_as_caller(const LeaseCaller *caller)
{
	lease_spi_finish();
	SetUserIdAndSecContext(caller->userid, caller->sec_context);
}

/* Prepares a statement once per backend and keeps the plan. */
static SPIPlanPtr
lease_spi_plan(LeaseStatement *stmt)
{
	SPIPlanPtr	plan;

	if (stmt->plan != NULL)
		return stmt->plan;

	plan = SPI_prepare_cursor(stmt->sql, stmt->nargs, stmt->argtypes, stmt->cursor_options);
	if (plan == NULL)
		elog(ERROR, "pg_lease: could not prepare \"%s\": %s",
			 stmt->name, SPI_result_code_string(SPI_result));
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "pg_lease: could not keep the plan for \"%s\"", stmt->name);
	stmt->plan = plan;
	return plan;
}

/*
 * Re-throws the error being handled with SPI's CONTEXT line for `sql`
 * ("SQL statement \"...\"": kilobytes of pg_lease's own SQL) replaced by
 * one naming the statement, `name`.  Errors a caller can cause surface
 * inside that SQL (a read-only transaction, a lock or statement timeout, a
 * serialization failure, row-level security), and the caller needs the
 * message, not the statement.  The context lines of the caller's own code
 * (a PL/pgSQL function calling pg_lease) are kept.  Call only in PG_CATCH,
 * with `cxt` a memory context that outlives the error.
 */
void
lease_spi_rethrow_without_sql(const char *name, const char *sql, MemoryContext cxt)
{
	ErrorData  *edata;

	MemoryContextSwitchTo(cxt);
	edata = CopyErrorData();
	FlushErrorState();
	if (edata->context != NULL)
	{
		char	   *needle = psprintf("SQL statement \"%s\"", sql);
		char	   *found = strstr(edata->context, needle);

		if (found != NULL)
		{
			StringInfoData context;

			initStringInfo(&context);
			appendBinaryStringInfo(&context, edata->context, (int) (found - edata->context));
			appendStringInfo(&context, "pg_lease statement \"%s\"", name);
			appendStringInfoString(&context, found + strlen(needle));
			edata->context = context.data;
		}
	}
	ReThrowError(edata);
}

/*
 * SPI_execute_plan, with no SQL in the CONTEXT of an error it raises; in a
 * snapshot taken now for a statement marked latest_snapshot, and with
 * `latest` under REPEATABLE READ or SERIALIZABLE (lease_spi_run_latest;
 * under READ COMMITTED each statement's snapshot is taken now anyway).
 */
static pg_noinline int
execute_plan(LeaseStatement *stmt, SPIPlanPtr plan, Datum *values, const char *nulls,
			 bool read_only, bool latest, long max_rows)
{
	MemoryContext cxt = CurrentMemoryContext;
	volatile int rc = 0;

	PG_TRY();
	{
		/* SPI advances the command counter: what this transaction wrote counts */
		if (stmt->latest_snapshot || (latest && IsolationUsesXactSnapshot()))
			rc = SPI_execute_snapshot(plan, values, nulls, GetLatestSnapshot(), InvalidSnapshot,
									  read_only, false, max_rows);
		else
			rc = SPI_execute_plan(plan, values, nulls, read_only, max_rows);
	}
	PG_CATCH();
	{
		lease_spi_rethrow_without_sql(stmt->name, stmt->sql, cxt);
	}
	PG_END_TRY();
	return rc;
}

/* Changes the statement's setting at a new GUC nest level, which it returns. */
static int
set_statement_setting(const LeaseStatement *stmt)
{
	int			level = NewGUCNestLevel();
	char		ms[32];
	const char *value = stmt->setting_value;

	if (value == NULL)
	{
		snprintf(ms, sizeof(ms), "%d", *stmt->setting_ms);
		value = ms;
	}
	(void) set_config_option(stmt->setting, value, PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	return level;
}

/* Runs a prepared statement (in a snapshot of its own: latest) and checks its exact return code. */
static uint64
run_statement(LeaseStatement *stmt, Datum *values, const char *nulls, bool latest, long max_rows)
{
	int			level = stmt->setting != NULL ? set_statement_setting(stmt) : -1;
	int			rc = execute_plan(stmt, lease_spi_plan(stmt), values, nulls, stmt->read_only,
								  latest, max_rows);

	if (level >= 0)
		AtEOXact_GUC(true, level);
	if (rc != stmt->expected)
		elog(ERROR, "pg_lease: \"%s\" returned %s, expected %s",
			 stmt->name, SPI_result_code_string(rc),
			 SPI_result_code_string(stmt->expected));
	return SPI_processed;
}

/* Runs a prepared statement and checks its exact return code. */
uint64
lease_spi_run(LeaseStatement *stmt, Datum *values, const char *nulls, long max_rows)
{
	return run_statement(stmt, values, nulls, false, max_rows);
}

/* lease_spi_run, seeing every row committed before the statement starts. */
uint64
lease_spi_run_latest(LeaseStatement *stmt, Datum *values, const char *nulls, long max_rows)
{
	Assert(!stmt->read_only);
	return run_statement(stmt, values, nulls, true, max_rows);
}

/* Runs one statement in its own SPI connection; returns the row count. */
uint64
lease_spi_exec(LeaseStatement *stmt, Datum *values, const char *nulls)
{
	uint64		processed;

	lease_spi_connect();
	processed = lease_spi_run(stmt, values, nulls, 0);
	lease_spi_finish();
	return processed;
}

/* One value of the current result set. */
Datum
lease_spi_value(uint64 row, int col, bool *isnull)
{
	if (SPI_tuptable == NULL || row >= SPI_processed)
		elog(ERROR, "pg_lease: no result row " UINT64_FORMAT, row);
	return SPI_getbinval(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, col, isnull);
}

/* spi_util.h */
void
lease_spi_put_rows(FunctionCallInfo fcinfo, int ncols)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Datum	   *values = (Datum *) palloc(sizeof(Datum) * ncols);
	bool	   *nulls = (bool *) palloc(sizeof(bool) * ncols);

	for (uint64 row = 0; row < SPI_processed; row++)
	{
		for (int col = 0; col < ncols; col++)
			values[col] = lease_spi_value(row, col + 1, &nulls[col]);
		/* tuplestore_putvalues copies the values out of SPI's memory */
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	pfree(values);
	pfree(nulls);
}
