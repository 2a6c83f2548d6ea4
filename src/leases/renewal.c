/*-------------------------------------------------------------------------
 *
 * src/leases/renewal.c
 *	  A worker's batch renewal, lease.renew_leases, and an operator's
 *	  handoff request, lease.request_handoff: the stream entry points of
 *	  the taker that run no balancing round (that is taker.c).
 *
 *-------------------------------------------------------------------------
 */
#include "pg_lease.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"

#include "common/args.h"
#include "common/config.h"
#include "common/durability.h"
#include "common/spi_util.h"
#include "leases/events.h"
#include "leases/lease_sql.h"
#include "leases/placement.h"
#include "leases/privileges.h"
#include "leases/workers.h"

/*
 * A renewal writes one row, the worker's heartbeat
 * (lease_record_session), whatever the number of its leases; this
 * statement, run after it in a snapshot of its own, lists what the
 * heartbeat renewed: the leases $3 holds, with the pending handoffs and
 * the fencing tokens.  lease_count, lease_expires_at and updated_at of the
 * leases stay as they were (docs/shard-leases.md, "renew_leases").  A take
 * that judged one of them expired either locked the worker's row first
 * (the heartbeat waited for it, and the lease is gone from this list) or
 * waits for this renewal and then finds the lease live (TAKE_RECHECKED).
 */
#define RENEW_LIST_SQL \
	"SELECT l.shard_id, l.lease_count," \
	"       CASE WHEN " LEASE_SQL_HANDOFF_PENDING("l", LEASE_SQL_NOW) \
	"            THEN l.handoff_to END AS handoff_to, l.lease_epoch" \
	"  FROM lease.shard_leases AS l, " LEASE_SQL_CLOCK \
	" WHERE " LEASE_STREAM_MATCHES \
	"   AND l.lease_owner OPERATOR(pg_catalog.=) $3" \
	" ORDER BY l.shard_id COLLATE pg_catalog.\"C\""

static LeaseStatement renew_list_stmt =
	LEASE_SCHEMA_STMT_ENTRY("renew_leases", RENEW_LIST_SQL, 0, false, 4, TEXTOID, TEXTOID, TEXTOID, INTERVALOID);

/*
 * An operator's handoff request: a live lease, not already promised, not
 * held by $4 already, to be handed to $4 by now + $5 (lease duration $6).
 */
#define REQUEST_ONE_SQL \
	"WITH c AS (UPDATE lease.shard_leases AS l" \
	"    SET handoff_to = $4," \
	"        handoff_requested_at = " LEASE_SQL_NOW "," \
	"        handoff_deadline = " LEASE_SQL_NOW " OPERATOR(pg_catalog.+) $5," \
	"        handoff_lease_duration = $6," \
	"        updated_at = pg_catalog.now()" \
	"   FROM " LEASE_SQL_CLOCK \
	"  WHERE " LEASE_KEY_MATCHES \
	"    AND " LEASE_SQL_LIVE("l", LEASE_SQL_NOW) \
	"    AND NOT " LEASE_SQL_HANDOFF_PENDING("l", LEASE_SQL_NOW) \
	"    AND " LEASE_SQL_NOT_ENDED("l") \
	"    AND l.lease_owner OPERATOR(pg_catalog.<>) $4" \
	"  RETURNING l.app_name, l.stream_name, l.shard_id, 'handoff_request' AS event," \
	"            l.lease_owner AS from_owner, l.handoff_to AS to_owner," \
	"            l.lease_count, l.lease_epoch)" \
	LEASE_SQL_RECORD_EVENTS("$7") \
	" SELECT true, " LEASE_SQL_NOTIFY("$8") " FROM c"

static LeaseStatement request_one_stmt =
	LEASE_SCHEMA_STMT_ENTRY("request_handoff", REQUEST_ONE_SQL, 0, false,
						8, TEXTOID, TEXTOID, TEXTOID, TEXTOID, INTERVALOID, INTERVALOID,
						LEASE_EVENT_ARGTYPES);

/*
 * lease.renew_leases: renews every lease the owner holds in the stream;
 * handoff_to is set where a handoff has been requested, lease_epoch is the
 * fencing token of each.
 */
static Datum
renew_leases(FunctionCallInfo fcinfo, LeaseSchema schema)
{
	Datum		values[4];
	Datum		renew_every = (Datum) 0;
	bool		have_every = false;
	LeaseCaller caller;
	bool		flush_free = schema >= LEASE_SCHEMA_0_5 && lease_heartbeat_flush_free_begin();

	values[0] = lease_arg_ident(fcinfo, 0, "app_name");
	values[1] = lease_arg_ident(fcinfo, 1, "stream_name");
	values[2] = lease_arg_ident(fcinfo, 2, "owner");
	values[3] = lease_arg_duration(fcinfo, 3, "lease_duration");
	have_every = lease_arg_opt_duration(fcinfo, 4, "renew_every", &renew_every);

	InitMaterializedSRF(fcinfo, 0);
	lease_stream_begin(fcinfo, schema, values[0], values[1], &caller);
	lease_record_session(schema, values, have_every, renew_every, &values[3]);
	if (schema >= LEASE_SCHEMA_0_5)
		lease_check_holdings_current(values);
	lease_spi_run(&renew_list_stmt, values, NULL, 0);
	lease_spi_put_rows(fcinfo, 4);
	lease_heartbeat_flush_free_end(flush_free);
	lease_app_end(&caller);
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(lease_renew_leases_0_4);
/* lease.renew_leases as the 0.4.0 script binds it. */
Datum lease_renew_leases_0_4(PG_FUNCTION_ARGS) { return renew_leases(fcinfo, LEASE_SCHEMA_0_4); }

/* lease.renew_leases from 0.5.0 on: the placement check (src/leases/placement.h), the heartbeat row only its worker writes. */
PG_FUNCTION_INFO_V1(lease_renew_leases_0_5);
Datum lease_renew_leases_0_5(PG_FUNCTION_ARGS) { return renew_leases(fcinfo, LEASE_SCHEMA_0_5); }

/*
 * lease.request_handoff: true when the lease's holder has been asked to
 * hand it to to_owner (for operators and leaders).
 */
static Datum
request_handoff(FunctionCallInfo fcinfo, LeaseSchema schema)
{
	Datum		values[6 + LEASE_EVENT_NPARAMS];

	values[0] = lease_arg_ident(fcinfo, 0, "app_name");
	values[1] = lease_arg_ident(fcinfo, 1, "stream_name");
	values[2] = lease_arg_ident(fcinfo, 2, "shard_id");
	values[3] = lease_arg_ident(fcinfo, 3, "to_owner");
	values[4] = lease_interval_from_ms(lease_handoff_timeout_ms);
	values[5] = lease_interval_from_ms(lease_default_lease_duration_ms);
	lease_event_params(&values[6]);

	PG_RETURN_BOOL(lease_spi_exec_for_stream(fcinfo, schema, &request_one_stmt, values, NULL) > 0);
}

PG_FUNCTION_INFO_V1(lease_request_handoff_0_4);
/* lease.request_handoff as the 0.4.0 script binds it. */
Datum lease_request_handoff_0_4(PG_FUNCTION_ARGS) { return request_handoff(fcinfo, LEASE_SCHEMA_0_4); }

PG_FUNCTION_INFO_V1(lease_request_handoff_0_5);
/* lease.request_handoff from 0.5.0 on: with the placement check (src/leases/placement.h). */
Datum lease_request_handoff_0_5(PG_FUNCTION_ARGS) { return request_handoff(fcinfo, LEASE_SCHEMA_0_5); }
