/*-------------------------------------------------------------------------
 *
 * src/leases/workers.c
 *	  The ownership bookkeeping (lease.stream_workers) of inserted and
 *	  deleted leases: the trigger lease.shard_leases_owners_changed.
 *
 * Every statement that changes who holds a lease keeps lease.stream_workers
 * exact with LEASE_SQL_RECORD_LOADS (leases.h) in the same statement.
 * Inserts (create_lease, import_kcl_ex, a restore) and deletes
 * (delete_lease, cleanup_ended) reach it through this statement trigger,
 * which runs the same text over the statement's transition table, so the
 * rule is written once.
 *
 *-------------------------------------------------------------------------
 */
#include "pg_lease.h"

#include "commands/trigger.h"

#include "common/spi_util.h"
#include "leases/leases.h"

/*
 * The changing CTE LEASE_SQL_RECORD_LOADS reads, over the transition table
 * changed_rows: an inserted lease goes to its owner, a deleted one leaves it.
 */
#define OWNERS_CHANGED_SQL(from_owner, to_owner, to_expires_at) \
	"WITH c AS (" \
	" SELECT r.app_name, r.stream_name, " from_owner " AS from_owner," \
	"        " to_owner " AS to_owner, " to_expires_at " AS to_expires_at" \
	"   FROM changed_rows AS r)" \
	LEASE_SQL_RECORD_LOADS \
	" SELECT 1"

#define OWNERS_CHANGED_STMT(stmt_name, from_owner, to_owner, to_expires_at) \
	{ \
		.name = (stmt_name), \
		.sql = OWNERS_CHANGED_SQL(from_owner, to_owner, to_expires_at), \
		.nargs = 0, .expected = SPI_OK_SELECT \
	}

/* [0] inserted leases, [1] deleted ones. */
static LeaseStatement owners_changed_stmts[2] = {
	OWNERS_CHANGED_STMT("count the inserted leases' owners", "CAST(NULL AS pg_catalog.text)",
						"r.lease_owner", "r.lease_expires_at"),
	OWNERS_CHANGED_STMT("count the deleted leases' owners", "r.lease_owner",
						"CAST(NULL AS pg_catalog.text)", "CAST(NULL AS pg_catalog.timestamptz)"),
};

PG_FUNCTION_INFO_V1(lease_shard_leases_owners_changed);

/*
 * lease.shard_leases_owners_changed: AFTER INSERT or AFTER DELETE on
 * lease.shard_leases, FOR EACH STATEMENT, REFERENCING its rows AS
 * changed_rows.
 */
Datum
lease_shard_leases_owners_changed(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	bool		inserted;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_FOR_STATEMENT(trigdata->tg_event) ||
		!TRIGGER_FIRED_AFTER(trigdata->tg_event))
		elog(ERROR, "pg_lease: shard_leases_owners_changed must fire AFTER, FOR EACH STATEMENT");
	inserted = TRIGGER_FIRED_BY_INSERT(trigdata->tg_event);
	if (!inserted && !TRIGGER_FIRED_BY_DELETE(trigdata->tg_event))
		elog(ERROR, "pg_lease: shard_leases_owners_changed fires on INSERT or DELETE only");

	lease_spi_connect();
	if (SPI_register_trigger_data(trigdata) != SPI_OK_TD_REGISTER)
		elog(ERROR, "pg_lease: could not register the transition table");
	lease_spi_run(&owners_changed_stmts[inserted ? 0 : 1], NULL, NULL, 0);
	lease_spi_finish();
	return PointerGetDatum(NULL);
}
