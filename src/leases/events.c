/*-------------------------------------------------------------------------
 *
 * src/leases/events.c
 *	  Ownership events: the GUC parameters of every event-recording
 *	  statement, and lease.prune_events.
 *
 *-------------------------------------------------------------------------
 */
#include "pg_lease.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "utils/builtins.h"

#include "common/args.h"
#include "common/config.h"
#include "leases/events.h"
#include "common/spi_util.h"

/* Delete the events older than the given age. */
static LeaseStatement prune_stmt = {
	.name = "prune_events",
	.sql =
	"DELETE FROM lease.lease_events AS e"
	" WHERE e.occurred_at OPERATOR(pg_catalog.<)"
	"       (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) $1)",
	.nargs = 1,
	.argtypes = {INTERVALOID},
	.expected = SPI_OK_DELETE
};

/* Fills the record/notify parameters from the GUCs. */
void
lease_event_params(Datum *values)
{
	values[0] = BoolGetDatum(lease_record_events);
	values[1] = CStringGetTextDatum(lease_notify_channel != NULL ? lease_notify_channel : "");
}

PG_FUNCTION_INFO_V1(lease_prune_events);

/* lease.prune_events: how many events older than older_than were deleted. */
Datum
lease_prune_events(PG_FUNCTION_ARGS)
{
	Datum		values[1];

	values[0] = lease_arg_nonneg_interval(fcinfo, 0, "older_than");

	PG_RETURN_INT64((int64) lease_spi_exec(&prune_stmt, values, NULL));
}
