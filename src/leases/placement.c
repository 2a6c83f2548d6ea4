/*-------------------------------------------------------------------------
 *
 * src/leases/placement.c
 *	  Moving a stream between partitions: the placement check every stream
 *	  function makes (placement.h), the trigger that applies it to new
 *	  leases, and the steps of a move (lease.move_stream_*), which
 *	  lease_router.move_stream calls on the source and the target
 *	  (docs/scale-out.md, "Moving a stream").
 *
 * A stream's placement lock is an advisory lock of its own class (pg_locks:
 * locktype advisory, objsubid 19525; SQL's advisory functions use 1 and 2,
 * so no application lock can collide with it), keyed by a 64-bit hash of
 * the app and stream names: two streams that share a hash only wait for
 * each other's moves.
 *
 *-------------------------------------------------------------------------
 */
#include "pg_lease.h"

#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "common/hashfn.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/jsonb.h"

#include "common/args.h"
#include "common/config.h"
#include "leases/placement.h"
#include "leases/privileges.h"
#include "common/spi_util.h"

/* The advisory lock class of placement locks (LOCKTAG field 4). */
#define PLACEMENT_LOCK_CLASS	19525

/* This partition's row for stream ($1, $2), read after the lock was taken. */
static LeaseStatement state_stmt = {
	.name = "the stream's placement",
	.sql =
	"SELECT p.state, p.partition_index, p.peer_partition, p.generation"
	"  FROM lease.stream_placements AS p"
	" WHERE p.app_name OPERATOR(pg_catalog.=) $1"
	"   AND p.stream_name OPERATOR(pg_catalog.=) $2",
	.nargs = 2,
	.argtypes = {TEXTOID, TEXTOID},
	.expected = SPI_OK_SELECT,
	.latest_snapshot = true
};

/* Sets the stream's row. */
static LeaseStatement set_state_stmt = {
	.name = "set the stream's placement",
	.sql =
	"INSERT INTO lease.stream_placements AS p"
	"       (app_name, stream_name, state, partition_index, peer_partition, generation)"
	" VALUES ($1, $2, $3, $4, $5, $6)"
	" ON CONFLICT (app_name, stream_name) DO UPDATE"
	"    SET state = excluded.state, partition_index = excluded.partition_index,"
	"        peer_partition = excluded.peer_partition, generation = excluded.generation,"
	"        changed_at = pg_catalog.now()",
	.nargs = 6,
	.argtypes = {TEXTOID, TEXTOID, TEXTOID, INT4OID, INT4OID, INT8OID},
	.expected = SPI_OK_INSERT
};

/* Every row (lease.move_stream_placements). */
static LeaseStatement placements_stmt = {
	.name = "move_stream_placements",
	.sql =
	"SELECT p.app_name, p.stream_name, p.state, p.partition_index, p.peer_partition, p.generation"
	"  FROM lease.stream_placements AS p"
	" ORDER BY p.app_name, p.stream_name",
	.nargs = 0,
	.expected = SPI_OK_SELECT
};

/* The distinct streams of the inserted leases (shard_leases_placed). */
static LeaseStatement placed_streams_stmt = {
	.name = "the streams of the new leases",
	.sql = "SELECT DISTINCT n.app_name, n.stream_name FROM placed_rows AS n",
	.nargs = 0,
	.expected = SPI_OK_SELECT
};

/*
 * The frozen stream as one document.  A lease's times that rule who may
 * take it travel as what is left of them (the effective expiry, the
 * handoff's request and deadline, by this server's clock), so the target
 * counts them from its own clock: later by the time the move took, never
 * earlier, whatever the two clocks say.
 */
static LeaseStatement export_stmt = {
	.name = "move_stream_export",
	.sql =
	"SELECT pg_catalog.jsonb_build_object("
	"  'leases', (SELECT COALESCE(pg_catalog.jsonb_agg(pg_catalog.to_jsonb(l)"
	"                 OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object("
	"                   'expires_in', GREATEST(l.lease_expires_at, w.renewed_until)"
	"                                 OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp(),"
	"                   'handoff_requested_in', l.handoff_requested_at OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp(),"
	"                   'handoff_deadline_in', l.handoff_deadline OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp())"
	"                 ORDER BY l.shard_id), '[]')"
	"                FROM lease.shard_leases AS l"
	"                LEFT JOIN lease.stream_workers AS w"
	"                  ON w.app_name OPERATOR(pg_catalog.=) l.app_name"
	"                 AND w.stream_name OPERATOR(pg_catalog.=) l.stream_name"
	"                 AND w.worker OPERATOR(pg_catalog.=) l.lease_owner"
	"               WHERE l.app_name OPERATOR(pg_catalog.=) $1 AND l.stream_name OPERATOR(pg_catalog.=) $2),"
	"  'max_epoch', (SELECT pg_catalog.max(l.lease_epoch) FROM lease.shard_leases AS l"
	"                 WHERE l.app_name OPERATOR(pg_catalog.=) $1 AND l.stream_name OPERATOR(pg_catalog.=) $2),"
	"  'events', (SELECT COALESCE(pg_catalog.jsonb_agg(pg_catalog.to_jsonb(e) ORDER BY e.event_id), '[]')"
	"               FROM lease.lease_events AS e"
	"              WHERE e.app_name OPERATOR(pg_catalog.=) $1 AND e.stream_name OPERATOR(pg_catalog.=) $2),"
	"  'totals', (SELECT COALESCE(pg_catalog.jsonb_agg(pg_catalog.to_jsonb(t)), '[]')"
	"               FROM lease.lease_event_totals AS t"
	"              WHERE t.app_name OPERATOR(pg_catalog.=) $1 AND t.stream_name OPERATOR(pg_catalog.=) $2),"
	"  'capacities', (SELECT COALESCE(pg_catalog.jsonb_agg(pg_catalog.to_jsonb(c)), '[]')"
	"                   FROM lease.worker_capacities AS c"
	"                  WHERE c.app_name OPERATOR(pg_catalog.=) $1 AND c.stream_name OPERATOR(pg_catalog.=) $2),"
	"  'balancing', (SELECT COALESCE(pg_catalog.jsonb_agg(pg_catalog.to_jsonb(b)), '[]')"
	"                  FROM lease.stream_balancing AS b"
	"                 WHERE b.app_name OPERATOR(pg_catalog.=) $1 AND b.stream_name OPERATOR(pg_catalog.=) $2),"
	"  'workers', (SELECT COALESCE(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object("
	"                                'worker', w.worker, 'version', w.version)), '[]')"
	"                FROM lease.worker_holdings AS w"
	"               WHERE w.app_name OPERATOR(pg_catalog.=) $1 AND w.stream_name OPERATOR(pg_catalog.=) $2))",
	.nargs = 2,
	.argtypes = {TEXTOID, TEXTOID},
	.expected = SPI_OK_SELECT,
	LEASE_STMT_JIT_OFF
};

/*
 * The document's rows that are not of stream ($1, $2), per array (a missing
 * array is an empty one), and its worker rows without a name or version: a
 * document is imported whole or not at all.
 */
static LeaseStatement check_document_stmt = {
	.name = "check the moved stream's document",
	.sql =
	"WITH a AS ("
	"  SELECT k.key, CASE WHEN pg_catalog.jsonb_typeof($3 OPERATOR(pg_catalog.->) k.key) OPERATOR(pg_catalog.=) 'array'"
	"                     THEN $3 OPERATOR(pg_catalog.->) k.key"
	"                     WHEN ($3 OPERATOR(pg_catalog.->) k.key) IS NULL THEN '[]'"
	"                     ELSE '[null]' END AS rows"
	"    FROM (VALUES ('leases'), ('events'), ('totals'), ('capacities'), ('balancing'), ('workers')) AS k(key))"
	" SELECT pg_catalog.count(*)"
	"   FROM a, pg_catalog.jsonb_array_elements(a.rows) AS r(row)"
	"  WHERE pg_catalog.jsonb_typeof(r.row) IS DISTINCT FROM 'object'"
	"     OR (a.key OPERATOR(pg_catalog.<>) 'workers'"
	"         AND ((r.row OPERATOR(pg_catalog.->>) 'app_name') IS DISTINCT FROM $1"
	"              OR (r.row OPERATOR(pg_catalog.->>) 'stream_name') IS DISTINCT FROM $2))"
	"     OR (a.key OPERATOR(pg_catalog.=) 'workers'"
	"         AND ((r.row OPERATOR(pg_catalog.->>) 'worker') IS NULL"
	"              OR pg_catalog.jsonb_typeof(r.row OPERATOR(pg_catalog.->) 'version') IS DISTINCT FROM 'number'))",
	.nargs = 3,
	.argtypes = {TEXTOID, TEXTOID, JSONBOID},
	.expected = SPI_OK_SELECT
};

/* How many leases of stream ($1, $2) this partition holds. */
static LeaseStatement count_leases_stmt = {
	.name = "count the stream's leases",
	.sql =
	"SELECT pg_catalog.count(*) FROM lease.shard_leases AS l"
	" WHERE l.app_name OPERATOR(pg_catalog.=) $1 AND l.stream_name OPERATOR(pg_catalog.=) $2",
	.nargs = 2,
	.argtypes = {TEXTOID, TEXTOID},
	.expected = SPI_OK_SELECT
};

/*
 * The document's rows, here.  Every lease gets the fencing token $4 (one
 * above the highest of the stream on the source), so every epoch the target
 * issues is above every one the source acknowledged; events get new ids in
 * their order.
 */
static LeaseStatement import_stmt = {
	.name = "move_stream_import",
	.sql =
	"WITH leases AS ("
	"  INSERT INTO lease.shard_leases"
	"  SELECT p.* FROM pg_catalog.jsonb_array_elements($3 OPERATOR(pg_catalog.->) 'leases') AS r(row),"
	"       LATERAL pg_catalog.jsonb_populate_record(CAST(NULL AS lease.shard_leases),"
	"         r.row OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object("
	"           'lease_epoch', $4,"
	"           'lease_expires_at', pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+)"
	"                               CAST(r.row OPERATOR(pg_catalog.->>) 'expires_in' AS pg_catalog.interval),"
	"           'handoff_requested_at', pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+)"
	"                               CAST(r.row OPERATOR(pg_catalog.->>) 'handoff_requested_in' AS pg_catalog.interval),"
	"           'handoff_deadline', pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+)"
	"                               CAST(r.row OPERATOR(pg_catalog.->>) 'handoff_deadline_in' AS pg_catalog.interval))) AS p"
	"  RETURNING 1),"
	" events AS ("
	"  INSERT INTO lease.lease_events"
	"  SELECT p.* FROM (SELECT r.row FROM pg_catalog.jsonb_array_elements($3 OPERATOR(pg_catalog.->) 'events')"
	"                                WITH ORDINALITY AS r(row, n) ORDER BY r.n) AS e,"
	"       LATERAL pg_catalog.jsonb_populate_record(CAST(NULL AS lease.lease_events),"
	"         e.row OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object("
	"           'event_id', pg_catalog.nextval(CAST('lease.lease_events_event_id_seq' AS pg_catalog.regclass)))) AS p),"
	" totals AS ("
	"  INSERT INTO lease.lease_event_totals AS t"
	"  SELECT p.* FROM pg_catalog.jsonb_populate_recordset(CAST(NULL AS lease.lease_event_totals),"
	"                                                      $3 OPERATOR(pg_catalog.->) 'totals') AS p"
	"  ON CONFLICT (app_name, stream_name, event)"
	"  DO UPDATE SET pruned = t.pruned OPERATOR(pg_catalog.+) excluded.pruned),"
	" capacities AS ("
	"  INSERT INTO lease.worker_capacities AS c"
	"  SELECT p.* FROM pg_catalog.jsonb_populate_recordset(CAST(NULL AS lease.worker_capacities),"
	"                                                      $3 OPERATOR(pg_catalog.->) 'capacities') AS p"
	"  ON CONFLICT (app_name, stream_name, worker) DO UPDATE SET capacity = excluded.capacity),"
	" balancing AS ("
	"  INSERT INTO lease.stream_balancing AS b"
	"  SELECT p.* FROM pg_catalog.jsonb_populate_recordset(CAST(NULL AS lease.stream_balancing),"
	"                                                      $3 OPERATOR(pg_catalog.->) 'balancing') AS p"
	"  ON CONFLICT (app_name, stream_name) DO UPDATE SET tolerance = excluded.tolerance)"
	" SELECT pg_catalog.count(*) FROM leases",
	.nargs = 4,
	.argtypes = {TEXTOID, TEXTOID, JSONBOID, INT8OID},
	.expected = SPI_OK_SELECT,
	LEASE_STMT_JIT_OFF
};

/*
 * After the import's triggers made the workers' rows
 * (lease.worker_holdings): each worker's
 * leases_version moves past the one it had on the source, so a worker that
 * renews with lease.heartbeat lists its leases again (and finds their new
 * epoch).
 */
static LeaseStatement import_versions_stmt = {
	.name = "move_stream_import: worker versions",
	.sql =
	"UPDATE lease.worker_holdings AS w"
	"   SET version = w.version OPERATOR(pg_catalog.+) v.version"
	"  FROM pg_catalog.jsonb_to_recordset($3 OPERATOR(pg_catalog.->) 'workers')"
	"       AS v(worker pg_catalog.text, version pg_catalog.int8)"
	" WHERE w.app_name OPERATOR(pg_catalog.=) $1 AND w.stream_name OPERATOR(pg_catalog.=) $2"
	"   AND w.worker OPERATOR(pg_catalog.=) v.worker",
	.nargs = 3,
	.argtypes = {TEXTOID, TEXTOID, JSONBOID},
	.expected = SPI_OK_UPDATE
};

/* The stream's rows that go with its leases (a finished move's source, a discarded copy). */
static LeaseStatement remove_stmt = {
	.name = "remove the moved stream's rows",
	.sql =
	"WITH leases AS ("
	"  DELETE FROM lease.shard_leases AS l"
	"   WHERE l.app_name OPERATOR(pg_catalog.=) $1 AND l.stream_name OPERATOR(pg_catalog.=) $2 RETURNING 1),"
	" events AS ("
	"  DELETE FROM lease.lease_events AS e"
	"   WHERE e.app_name OPERATOR(pg_catalog.=) $1 AND e.stream_name OPERATOR(pg_catalog.=) $2),"
	" capacities AS ("
	"  DELETE FROM lease.worker_capacities AS c"
	"   WHERE c.app_name OPERATOR(pg_catalog.=) $1 AND c.stream_name OPERATOR(pg_catalog.=) $2),"
	" balancing AS ("
	"  DELETE FROM lease.stream_balancing AS b"
	"   WHERE b.app_name OPERATOR(pg_catalog.=) $1 AND b.stream_name OPERATOR(pg_catalog.=) $2)"
	" SELECT pg_catalog.count(*) FROM leases",
	.nargs = 2,
	.argtypes = {TEXTOID, TEXTOID},
	.expected = SPI_OK_SELECT
};

/*
 * What the triggers of that removal left: the counters of the events it
 * deleted (lease_events_deleted adds them) and the bookkeeping rows.
 */
static LeaseStatement remove_derived_stmt = {
	.name = "remove the moved stream's bookkeeping",
	.sql =
	"WITH totals AS ("
	"  DELETE FROM lease.lease_event_totals AS t"
	"   WHERE t.app_name OPERATOR(pg_catalog.=) $1 AND t.stream_name OPERATOR(pg_catalog.=) $2),"
	" workers AS ("
	"  DELETE FROM lease.stream_workers AS w"
	"   WHERE w.app_name OPERATOR(pg_catalog.=) $1 AND w.stream_name OPERATOR(pg_catalog.=) $2),"
	" holdings AS ("
	"  DELETE FROM lease.worker_holdings AS h"
	"   WHERE h.app_name OPERATOR(pg_catalog.=) $1 AND h.stream_name OPERATOR(pg_catalog.=) $2),"
	" takeable AS ("
	"  DELETE FROM lease.stream_takeable AS s"
	"   WHERE s.app_name OPERATOR(pg_catalog.=) $1 AND s.stream_name OPERATOR(pg_catalog.=) $2)"
	" DELETE FROM lease.lineage_changes AS c"
	"  WHERE c.app_name OPERATOR(pg_catalog.=) $1 AND c.stream_name OPERATOR(pg_catalog.=) $2",
	.nargs = 2,
	.argtypes = {TEXTOID, TEXTOID},
	.expected = SPI_OK_DELETE
};

/*
 * True while move_stream_import inserts the leases it carries: the stream
 * is arriving, and the placement trigger lets them in.
 */
static bool importing = false;

/* The placement lock of stream (app, stream). */
static void
placement_locktag(LOCKTAG *tag, Datum app_name, Datum stream_name)
{
	text	   *app = DatumGetTextPP(app_name);
	text	   *stream = DatumGetTextPP(stream_name);
	uint64		h;

	h = hash_bytes_extended((const unsigned char *) VARDATA_ANY(app), VARSIZE_ANY_EXHDR(app), 0);
	h = hash_bytes_extended((const unsigned char *) VARDATA_ANY(stream), VARSIZE_ANY_EXHDR(stream), h);
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) (h >> 32), (uint32) h, PLACEMENT_LOCK_CLASS);
}

/*
 * A move's step: the stream's placement lock in exclusive mode until the
 * transaction ends, waiting at most lease.move_lock_timeout for the
 * transactions that use the stream (55P03 then, from the lock wait).
 */
static void
lock_for_move(Datum app_name, Datum stream_name)
{
	LOCKTAG		tag;
	char		ms[32];
	int			level = NewGUCNestLevel();

	placement_locktag(&tag, app_name, stream_name);
	snprintf(ms, sizeof(ms), "%d", lease_move_lock_timeout_ms);
	(void) set_config_option("lock_timeout", ms, PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true,
							 0, false);
	(void) LockAcquire(&tag, ExclusiveLock, false, false);
	AtEOXact_GUC(true, level);
}

/* A stream's row of lease.stream_placements, as read by read_placement. */
typedef struct Placement
{
	bool		found;
	char		state[16];
	int32		partition_index;
	int32		peer;			/* -1 when NULL */
	int64		generation;
} Placement;

/* Reads the stream's row (in SPI, after the lock). */
static Placement
read_placement(Datum app_name, Datum stream_name)
{
	Datum		values[2] = {app_name, stream_name};
	Placement	p = {0};
	bool		isnull;

	if (lease_spi_run(&state_stmt, values, NULL, 1) == 0)
		return p;
	p.found = true;
	text_to_cstring_buffer(DatumGetTextPP(lease_spi_value(0, 1, &isnull)), p.state, sizeof(p.state));
	p.partition_index = DatumGetInt32(lease_spi_value(0, 2, &isnull));
	p.peer = DatumGetInt32(lease_spi_value(0, 3, &isnull));
	if (isnull)
		p.peer = -1;
	p.generation = DatumGetInt64(lease_spi_value(0, 4, &isnull));
	return p;
}

/* Writes the stream's row. */
static void
write_placement(Datum app_name, Datum stream_name, const char *state, int32 partition_index,
				int32 peer, int64 generation)
{
	Datum		values[6];
	char		nulls[6] = "      ";

	values[0] = app_name;
	values[1] = stream_name;
	values[2] = CStringGetTextDatum(state);
	values[3] = Int32GetDatum(partition_index);
	values[4] = Int32GetDatum(peer);
	if (peer < 0)
		nulls[4] = 'n';
	values[5] = Int64GetDatum(generation);
	lease_spi_run(&set_state_stmt, values, nulls, 0);
}

/* True when the stream has a row in that state. */
static bool
is_state(const Placement *p, const char *state)
{
	return p->found && strcmp(p->state, state) == 0;
}

/* Refuses a call for a stream this partition does not serve (40L01). */
static void
refuse_unplaced(Datum app_name, Datum stream_name, const Placement *p)
{
	char	   *app = TextDatumGetCString(app_name);
	char	   *stream = TextDatumGetCString(stream_name);

	if (strcmp(p->state, "moved_out") == 0)
		ereport(ERROR,
				(errcode(ERRCODE_LEASE_STREAM_MOVED),
				 errmsg("stream \"%s/%s\" has moved to partition %d", app, stream, p->peer),
				 errdetail("Partition %d keeps only the record of the move (generation " INT64_FORMAT ").",
						   p->partition_index, p->generation),
				 errhint("Retry the call: the router sends it to partition %d. A direct connection must go to that partition (lease_router.stream_conninfo).",
						 p->peer)));
	if (strcmp(p->state, "moving_out") == 0)
		ereport(ERROR,
				(errcode(ERRCODE_LEASE_STREAM_MOVED),
				 errmsg("stream \"%s/%s\" is moving to partition %d", app, stream, p->peer),
				 errdetail("A move (generation " INT64_FORMAT ") is copying its leases from partition %d; no partition serves the stream until it is done.",
						   p->generation, p->partition_index),
				 errhint("Retry the call: once the move is done the router sends it to partition %d.",
						 p->peer)));
	ereport(ERROR,
			(errcode(ERRCODE_LEASE_STREAM_MOVED),
			 errmsg("stream \"%s/%s\" is arriving on partition %d from partition %d", app, stream,
					p->partition_index, p->peer),
			 errdetail("A move (generation " INT64_FORMAT ") has copied its leases here; they are served once partition %d has let them go.",
					   p->generation, p->peer),
			 errhint("Retry the call: once the move is done the router sends it to partition %d.",
					 p->partition_index)));
}

/*
 * The placement check (in SPI): the share lock, then the stream's row; a
 * stream served here (no row, or "here") passes.
 */
static void
check_placement(Datum app_name, Datum stream_name)
{
	LOCKTAG		tag;
	Placement	p;

	placement_locktag(&tag, app_name, stream_name);
	(void) LockAcquire(&tag, ShareLock, false, false);
	p = read_placement(app_name, stream_name);
	if (p.found && !is_state(&p, "here"))
		refuse_unplaced(app_name, stream_name, &p);
}

/* See placement.h. */
void
lease_stream_begin(FunctionCallInfo fcinfo, LeaseSchema schema, Datum app_name, Datum stream_name,
				   LeaseCaller *caller)
{
	lease_app_begin(fcinfo, schema, app_name, caller);
	if (schema >= LEASE_SCHEMA_0_5)
		check_placement(app_name, stream_name);
}

/* See placement.h. */
uint64
lease_spi_exec_for_stream(FunctionCallInfo fcinfo, LeaseSchema schema, LeaseStatement *stmt,
						  Datum *values, const char *nulls)
{
	LeaseCaller caller;
	uint64		processed;

	lease_stream_begin(fcinfo, schema, values[0], values[1], &caller);
	processed = lease_spi_run(stmt, values, nulls, 0);
	lease_app_end(&caller);
	return processed;
}

PG_FUNCTION_INFO_V1(lease_shard_leases_placed);

/*
 * lease.shard_leases_placed: AFTER INSERT on lease.shard_leases, FOR EACH
 * STATEMENT, REFERENCING its rows AS placed_rows: the placement check of
 * every stream the statement added leases to.
 */
Datum
lease_shard_leases_placed(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	uint64		rows;
	Datum	   *apps;
	Datum	   *streams;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_FOR_STATEMENT(trigdata->tg_event) ||
		!TRIGGER_FIRED_AFTER(trigdata->tg_event) || !TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
		elog(ERROR, "pg_lease: shard_leases_placed must fire AFTER INSERT, FOR EACH STATEMENT");
	if (importing)
		return PointerGetDatum(NULL);

	lease_spi_connect();
	if (SPI_register_trigger_data(trigdata) != SPI_OK_TD_REGISTER)
		elog(ERROR, "pg_lease: could not register the transition table");
	rows = lease_spi_run(&placed_streams_stmt, NULL, NULL, 0);
	apps = palloc(sizeof(Datum) * Max(rows, 1));
	streams = palloc(sizeof(Datum) * Max(rows, 1));
	for (uint64 row = 0; row < rows; row++)
	{
		bool		isnull;

		apps[row] = lease_spi_value(row, 1, &isnull);
		streams[row] = lease_spi_value(row, 2, &isnull);
	}
	for (uint64 row = 0; row < rows; row++)
		check_placement(apps[row], streams[row]);
	lease_spi_finish();
	return PointerGetDatum(NULL);
}

/* A partition number argument: required, not negative. */
static int32
partition_arg(FunctionCallInfo fcinfo, int argno, const char *name)
{
	return lease_arg_nonneg_int32(fcinfo, argno, name);
}

/* A generation argument: required, positive. */
static int64
generation_arg(FunctionCallInfo fcinfo, int argno)
{
	int64		g = lease_arg_int64(fcinfo, argno, "generation");

	if (g < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("generation must be positive"),
				 errdetail("The value given is " INT64_FORMAT ".", g),
				 errhint("Pass the generation move_stream_freeze returned.")));
	return g;
}

/* A step called for a move this partition is not at (55000). */
static void
not_at_step(Datum app_name, Datum stream_name, const char *step, int64 generation,
			const Placement *p)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("stream \"%s/%s\" has no move of generation " INT64_FORMAT " to %s here",
					TextDatumGetCString(app_name), TextDatumGetCString(stream_name), generation, step),
			 p->found ?
			 errdetail("This partition records the stream as %s (generation " INT64_FORMAT ").",
					   p->state, p->generation) :
			 errdetail("This partition has no record of a move of the stream."),
			 errhint("Let lease_router.move_stream or lease_router.undo_move call the steps.")));
}

PG_FUNCTION_INFO_V1(lease_move_stream_state);

/* lease.move_stream_state: this partition's record of the stream (no row: none). */
Datum
lease_move_stream_state(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Datum		app = lease_arg_ident(fcinfo, 0, "app_name");
	Datum		stream = lease_arg_ident(fcinfo, 1, "stream_name");
	LeaseCaller caller;
	Placement	p;

	InitMaterializedSRF(fcinfo, 0);
	lease_app_begin(fcinfo, LEASE_SCHEMA_0_5, app, &caller);
	p = read_placement(app, stream);
	if (p.found)
	{
		Datum		out[4];
		bool		nulls[4] = {false, false, p.peer < 0, false};

		out[0] = CStringGetTextDatum(p.state);
		out[1] = Int32GetDatum(p.partition_index);
		out[2] = Int32GetDatum(p.peer);
		out[3] = Int64GetDatum(p.generation);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, nulls);
	}
	lease_app_end(&caller);
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(lease_move_stream_placements);

/* lease.move_stream_placements: every record of this partition (SECURITY DEFINER). */
Datum
lease_move_stream_placements(PG_FUNCTION_ARGS)
{

	InitMaterializedSRF(fcinfo, 0);
	lease_spi_connect();
	lease_spi_run(&placements_stmt, NULL, NULL, 0);
	lease_spi_put_rows(fcinfo, 6);
	lease_spi_finish();
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(lease_move_stream_freeze);

/*
 * lease.move_stream_freeze, step 1 on the source: from its commit on, the
 * stream's calls here are refused.  Returns the move's generation; called
 * again for the same move (the same target), returns it again.
 */
Datum
lease_move_stream_freeze(PG_FUNCTION_ARGS)
{
	Datum		app = lease_arg_ident(fcinfo, 0, "app_name");
	Datum		stream = lease_arg_ident(fcinfo, 1, "stream_name");
	int32		here = partition_arg(fcinfo, 2, "this_partition");
	int32		to = partition_arg(fcinfo, 3, "to_partition");
	LeaseCaller caller;
	Placement	p;
	int64		generation;

	if (to == here)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("to_partition is this partition"),
				 errdetail("Both are partition %d.", here),
				 errhint("A stream moves to another partition.")));
	lease_app_begin(fcinfo, LEASE_SCHEMA_0_5, app, &caller);
	lock_for_move(app, stream);
	p = read_placement(app, stream);
	if (p.found && p.partition_index != here)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("this partition recorded itself as partition %d, not %d", p.partition_index, here),
				 errdetail("A move of stream \"%s/%s\" (generation " INT64_FORMAT ") numbered the partitions differently.",
						   TextDatumGetCString(app), TextDatumGetCString(stream), p.generation),
				 errhint("Every router must list the partitions in the same order.")));
	if (is_state(&p, "moving_out") && p.peer == to)
		generation = p.generation;
	else if (is_state(&p, "moving_out"))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("stream \"%s/%s\" is being moved to partition %d",
						TextDatumGetCString(app), TextDatumGetCString(stream), p.peer),
				 errhint("Finish that move (lease_router.move_stream to partition %d) or undo it (lease_router.undo_move) first.",
						 p.peer)));
	else if (p.found && !is_state(&p, "here"))
		refuse_unplaced(app, stream, &p);
	else
	{
		generation = p.found ? p.generation + 1 : 1;
		write_placement(app, stream, "moving_out", here, to, generation);
	}
	lease_app_end(&caller);
	PG_RETURN_INT64(generation);
}

PG_FUNCTION_INFO_V1(lease_move_stream_export);

/* lease.move_stream_export, step 2 on the source: the frozen stream as a document. */
Datum
lease_move_stream_export(PG_FUNCTION_ARGS)
{
	Datum		app = lease_arg_ident(fcinfo, 0, "app_name");
	Datum		stream = lease_arg_ident(fcinfo, 1, "stream_name");
	int64		generation = generation_arg(fcinfo, 2);
	Datum		values[2] = {app, stream};
	LeaseCaller caller;
	Placement	p;
	bool		isnull;
	Datum		doc;

	lease_app_begin(fcinfo, LEASE_SCHEMA_0_5, app, &caller);
	lock_for_move(app, stream);
	p = read_placement(app, stream);
	if (!is_state(&p, "moving_out") || p.generation != generation)
		not_at_step(app, stream, "export", generation, &p);
	lease_spi_run(&export_stmt, values, NULL, 1);
	doc = SPI_datumTransfer(lease_spi_value(0, 1, &isnull), false, -1);
	lease_app_end(&caller);
	PG_RETURN_DATUM(doc);
}

/* The max_epoch of a move_stream_export document; 0 when it has none. */
static int64
document_max_epoch(Datum doc)
{
	Jsonb	   *jb = DatumGetJsonbP(doc);
	JsonbValue	key = {.type = jbvString, .val.string = {.len = 9, .val = "max_epoch"}};
	JsonbValue *v = findJsonbValueFromContainer(&jb->root, JB_FOBJECT, &key);

	if (v != NULL && v->type == jbvNumeric)
		return DatumGetInt64(DirectFunctionCall1(numeric_int8, NumericGetDatum(v->val.numeric)));
	return 0;
}

PG_FUNCTION_INFO_V1(lease_move_stream_import);

/*
 * lease.move_stream_import, step 3 on the target: the document's rows, the
 * stream arriving (refused here until step 5).  Returns the leases added;
 * 0 when this move's copy is here already.  A copy of an older, undone
 * move is replaced.
 */
Datum
lease_move_stream_import(PG_FUNCTION_ARGS)
{
	Datum		app = lease_arg_ident(fcinfo, 0, "app_name");
	Datum		stream = lease_arg_ident(fcinfo, 1, "stream_name");
	int32		here = partition_arg(fcinfo, 2, "this_partition");
	int32		from = partition_arg(fcinfo, 3, "from_partition");
	int64		generation = generation_arg(fcinfo, 4);
	Datum		doc;
	Datum		values[4];
	LeaseCaller caller;
	Placement	p;
	bool		isnull;
	int64		added;
	uint64		rows;

	if (PG_ARGISNULL(5))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("stream must not be null"),
				 errhint("Pass the document move_stream_export returned.")));
	doc = PG_GETARG_DATUM(5);
	if (from == here)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("from_partition is this partition"),
				 errdetail("Both are partition %d.", here),
				 errhint("A stream moves from another partition.")));
	values[0] = app;
	values[1] = stream;
	values[2] = doc;

	lease_app_begin(fcinfo, LEASE_SCHEMA_0_5, app, &caller);
	lock_for_move(app, stream);
	p = read_placement(app, stream);
	if (is_state(&p, "arriving") && p.generation == generation)
	{
		lease_app_end(&caller);
		PG_RETURN_INT64(0);
	}
	if (p.found && p.generation >= generation)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("stream \"%s/%s\" has a newer placement here than the move of generation " INT64_FORMAT,
						TextDatumGetCString(app), TextDatumGetCString(stream), generation),
				 errdetail("This partition records the stream as %s (generation " INT64_FORMAT ").",
						   p.state, p.generation),
				 errhint("Let lease_router.move_stream call the steps.")));
	if (p.found && !is_state(&p, "moved_out") && !is_state(&p, "arriving"))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("stream \"%s/%s\" is served by this partition",
						TextDatumGetCString(app), TextDatumGetCString(stream)),
				 errdetail("This partition records the stream as %s (generation " INT64_FORMAT ").",
						   p.state, p.generation),
				 errhint("Move it from here instead.")));
	/* the copy of an undone move whose target could not be told */
	if (is_state(&p, "arriving"))
	{
		lease_spi_run(&remove_stmt, values, NULL, 0);
		lease_spi_run(&remove_derived_stmt, values, NULL, 0);
	}
	lease_spi_run(&count_leases_stmt, values, NULL, 0);
	if (DatumGetInt64(lease_spi_value(0, 1, &isnull)) > 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("partition %d already holds leases of stream \"%s/%s\"", here,
						TextDatumGetCString(app), TextDatumGetCString(stream)),
				 errdetail("They were created here directly, not by a move."),
				 errhint("Delete them, or move the stream to another partition.")));
	rows = lease_spi_run(&check_document_stmt, values, NULL, 0);
	for (uint64 row = 0; row < rows; row++)
		if (DatumGetInt64(lease_spi_value(row, 1, &isnull)) > 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("stream is not a document of stream \"%s/%s\"",
							TextDatumGetCString(app), TextDatumGetCString(stream)),
					 errdetail("Its arrays of rows must hold objects of that stream only."),
					 errhint("Pass the document move_stream_export returned.")));
	values[3] = Int64GetDatum(document_max_epoch(doc) + 1);
	write_placement(app, stream, "arriving", here, from, generation);
	importing = true;
	PG_TRY();
	{
		lease_spi_run(&import_stmt, values, NULL, 0);
	}
	PG_FINALLY();
	{
		importing = false;
	}
	PG_END_TRY();
	added = DatumGetInt64(lease_spi_value(0, 1, &isnull));
	lease_spi_run(&import_versions_stmt, values, NULL, 0);
	lease_app_end(&caller);
	PG_RETURN_INT64(added);
}

PG_FUNCTION_INFO_V1(lease_move_stream_complete);

/*
 * lease.move_stream_complete: on the source of move `generation` (step 4,
 * the move's commit point) its rows go and the tombstone stays; on its
 * target (step 5) the stream is served.  Returns the state left; repeated,
 * does nothing more.
 */
Datum
lease_move_stream_complete(PG_FUNCTION_ARGS)
{
	Datum		app = lease_arg_ident(fcinfo, 0, "app_name");
	Datum		stream = lease_arg_ident(fcinfo, 1, "stream_name");
	int64		generation = generation_arg(fcinfo, 2);
	Datum		values[2] = {app, stream};
	LeaseCaller caller;
	Placement	p;
	const char *left;

	lease_app_begin(fcinfo, LEASE_SCHEMA_0_5, app, &caller);
	lock_for_move(app, stream);
	p = read_placement(app, stream);
	if (!p.found || p.generation != generation)
		not_at_step(app, stream, "complete", generation, &p);
	if (is_state(&p, "moving_out"))
	{
		lease_spi_run(&remove_stmt, values, NULL, 0);
		lease_spi_run(&remove_derived_stmt, values, NULL, 0);
		write_placement(app, stream, "moved_out", p.partition_index, p.peer, generation);
		left = "moved_out";
	}
	else if (is_state(&p, "arriving"))
	{
		write_placement(app, stream, "here", p.partition_index, -1, generation);
		left = "here";
	}
	else
		left = p.state;
	lease_app_end(&caller);
	PG_RETURN_TEXT_P(cstring_to_text(left));
}

PG_FUNCTION_INFO_V1(lease_move_stream_undo);

/*
 * lease.move_stream_undo, before step 4: on the source of move `generation`
 * the stream is served again; on its target the copy goes (a tombstone
 * naming the source stays).  The generation is used up either way.
 * Returns the state left.
 */
Datum
lease_move_stream_undo(PG_FUNCTION_ARGS)
{
	Datum		app = lease_arg_ident(fcinfo, 0, "app_name");
	Datum		stream = lease_arg_ident(fcinfo, 1, "stream_name");
	int64		generation = generation_arg(fcinfo, 2);
	Datum		values[2] = {app, stream};
	LeaseCaller caller;
	Placement	p;
	const char *left;

	lease_app_begin(fcinfo, LEASE_SCHEMA_0_5, app, &caller);
	lock_for_move(app, stream);
	p = read_placement(app, stream);
	if (!p.found || p.generation != generation)
		not_at_step(app, stream, "undo", generation, &p);
	if (is_state(&p, "moving_out"))
	{
		write_placement(app, stream, "here", p.partition_index, -1, generation);
		left = "here";
	}
	else if (is_state(&p, "arriving"))
	{
		lease_spi_run(&remove_stmt, values, NULL, 0);
		lease_spi_run(&remove_derived_stmt, values, NULL, 0);
		write_placement(app, stream, "moved_out", p.partition_index, p.peer, generation);
		left = "moved_out";
	}
	else if (is_state(&p, "here"))
		left = "here";
	else
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the move of stream \"%s/%s\" to partition %d is done",
						TextDatumGetCString(app), TextDatumGetCString(stream), p.peer),
				 errdetail("Its source let the leases go (generation " INT64_FORMAT ").", generation),
				 errhint("Move the stream back with lease_router.move_stream.")));
	lease_app_end(&caller);
	PG_RETURN_TEXT_P(cstring_to_text(left));
}
