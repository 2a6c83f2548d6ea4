/*-------------------------------------------------------------------------
 *
 * src/bindings/lifecycle.c
 *	  The lifecycle of a rotation: confirm_rotation and the ending of the
 *	  previous conversation that admit_turn's first turn on a replacement
 *	  does; list_conversations, what the application sees of a tenant;
 *	  set_sandbox_status and set_conversation_status, the statuses the
 *	  platform moves on its own.
 *
 * A rotation leaves the previous conversation live and unbound, so that
 * restore_rotated_channel can give the channel back while the replacement
 * is pending.  A restore is meaningful only then: once the replacement runs
 * it answers `superseded`.  So the previous conversation is ended, and its
 * sandbox slot freed, exactly when the replacement starts: the replacement's
 * first turn (admit_turn moving it from pending to running) or
 * confirm_rotation, in the same transaction, ends the live, unbound
 * conversations up its rotated_from chain (pending ones that were rotated
 * away from before they ran, across failed ones; the walk stops at a
 * conversation that holds a channel or has ended, and never ends one that
 * holds a channel).
 *
 * Locks: the ancestors to end are found without locks, then locked FOR NO
 * KEY UPDATE oldest first (ids ascend up the chain: every id is made under
 * the admission lock, after the id it was rotated from), then the
 * replacement itself: the order of restore_rotated_channel, so the two never
 * wait on each other in a cycle.  Every wait is bounded by
 * lease.admission_lock_timeout (55P03 "conversation N is busy", as a turn's
 * own wait).  Under the locks the chain is walked again and only the locked
 * conversations it still reaches are ended: a locked one cannot change, a
 * failed one never changes, so what is ended is exactly what the chain rule
 * says at that moment.
 *
 * The platform's own statuses (docs/channel-bindings.md): a sandbox's
 * `starting`, `ready` and `suspended` (the worker infrastructure's), a
 * conversation's `idle`.  set_sandbox_status and set_conversation_status
 * change them under the conversation's lock, as a turn takes it (FOR
 * UPDATE, bounded by lease.admission_lock_timeout: 55P03 "conversation N
 * is busy"), and only along the lifecycle: an active sandbox becomes
 * starting, ready or suspended, never back to active from suspended (that
 * would take a quota slot without admission; start a conversation
 * instead), and an ended one never changes; a running conversation
 * becomes idle and back, a pending one only starts by its first turn or
 * confirm_rotation (which end what it replaced), an ended one never.
 *
 *-------------------------------------------------------------------------
 */
#include "pg_lease.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"

#include "common/args.h"
#include "common/config.h"
#include "common/spi_util.h"
#include "bindings/conversations.h"
#include "bindings/rotation.h"

/* confirm_rotation's outcomes (docs/channel-bindings.md). */
#define BINDING_OUTCOME_CONFIRMED			"confirmed"
#define BINDING_OUTCOME_ALREADY_RUNNING	"already_running"
#define BINDING_OUTCOME_ENDED				"ended"

/*
 * The ancestors a replacement's start ends, locked.  `count` ids, oldest
 * first; empty unless the conversation was pending with rotated_from set
 * when looked at.
 */
typedef struct BindingAncestors
{
	int			count;
	Datum		ids;			/* a bigint[] Datum; meaningless when count is 0 */
} BindingAncestors;

/*
 * The live, unbound conversations up the rotated_from chain of $1 while $1
 * is pending, across failed and live-unbound ones; each step follows the
 * primary key, CYCLE ends a chain that was edited into a loop.
 */
#define ANCESTORS_CHAIN \
	"WITH RECURSIVE up (id, status, channel_id, rotated_from) AS (" \
	"  SELECT a.id, a.status, a.channel_id, a.rotated_from" \
	"    FROM lease.conversations AS c JOIN lease.conversations AS a" \
	"      ON a.id OPERATOR(pg_catalog.=) c.rotated_from" \
	"   WHERE c.id OPERATOR(pg_catalog.=) $1" \
	"     AND c.status OPERATOR(pg_catalog.=) " LEASE_SQL_WORD(BINDING_STATUS_PENDING) \
	"  UNION ALL" \
	"  SELECT a.id, a.status, a.channel_id, a.rotated_from" \
	"    FROM up JOIN lease.conversations AS a" \
	"      ON a.id OPERATOR(pg_catalog.=) up.rotated_from" \
	"   WHERE up.status OPERATOR(pg_catalog.=) " LEASE_SQL_WORD(BINDING_STATUS_FAILED) \
	"      OR (up.status OPERATOR(pg_catalog.=) ANY (" BINDING_LIVE_CONVERSATION_STATUSES ")" \
	"          AND up.channel_id IS NULL)" \
	") CYCLE id SET looped USING path"

/* The live, unbound ones of the chain. */
#define ANCESTORS_TO_END \
	" NOT up.looped" \
	" AND up.status OPERATOR(pg_catalog.=) ANY (" BINDING_LIVE_CONVERSATION_STATUSES ")" \
	" AND up.channel_id IS NULL"

/*
 * admit_turn: the conversation, locked FOR UPDATE (what a rotation waits
 * on), whether it has a sandbox, and its status.
 */
static LeaseStatement turn_lock_stmt = {
	.name = "lock the conversation for a turn",
	.sql =
	"SELECT c.sandbox_id IS NOT NULL, c.status FROM lease.conversations AS c"
	" WHERE c.id OPERATOR(pg_catalog.=) $1"
	" FOR UPDATE OF c",
	.nargs = 1,
	.argtypes = {INT8OID},
	.expected = SPI_OK_SELECT,
	LEASE_STMT_LOCK_TIMEOUT(lease_admission_lock_timeout_ms)
};

/* admit_turn: insert the turn; a pending conversation becomes running. */
static LeaseStatement turn_insert_stmt = {
	.name = "insert the turn",
	.sql =
	"WITH t AS (INSERT INTO lease.turns (conversation_id) VALUES ($1) RETURNING id),"
	"     u AS (UPDATE lease.conversations AS c"
	"              SET status = " LEASE_SQL_WORD(BINDING_STATUS_RUNNING) ", updated_at = pg_catalog.now()"
	"            WHERE c.id OPERATOR(pg_catalog.=) $1"
	"              AND c.status OPERATOR(pg_catalog.=) " LEASE_SQL_WORD(BINDING_STATUS_PENDING) ")"
	" SELECT t.id FROM t",
	.nargs = 1,
	.argtypes = {INT8OID},
	.expected = SPI_OK_SELECT
};

/* The ancestors to end, without locks: a bigint[] ascending (NULL: none). */
static LeaseStatement ancestors_stmt = {
	.name = "find the conversations the replacement's start ends",
	.sql =
	ANCESTORS_CHAIN
	" SELECT pg_catalog.array_agg(up.id ORDER BY up.id) FROM up WHERE" ANCESTORS_TO_END,
	.nargs = 1,
	.argtypes = {INT8OID},
	.expected = SPI_OK_SELECT
};

/* Locks the conversations $1, oldest (lowest id) first: ORDER BY is applied before the locks. */
static LeaseStatement ancestors_lock_stmt = {
	.name = "lock the conversations the replacement's start ends",
	.sql =
	"SELECT a.id FROM lease.conversations AS a"
	" WHERE a.id OPERATOR(pg_catalog.=) ANY ($1)"
	" ORDER BY a.id"
	"   FOR NO KEY UPDATE OF a",
	.nargs = 1,
	.argtypes = {INT8ARRAYOID},
	.expected = SPI_OK_SELECT,
	LEASE_STMT_LOCK_TIMEOUT(lease_admission_lock_timeout_ms)
};

/*
 * Under the locks: ends those of the locked conversations $2 that the chain
 * of $1 still reaches, and their sandboxes (BINDING_SQL_END_SANDBOXES, as
 * end_conversation does); returns how many conversations ended.
 */
static LeaseStatement ancestors_end_stmt = {
	.name = "end the conversations the replacement's start ends",
	.sql =
	ANCESTORS_CHAIN ","
	"     e AS (UPDATE lease.conversations AS c"
	"              SET status = " LEASE_SQL_WORD(BINDING_STATUS_TERMINATED) ", updated_at = pg_catalog.now()"
	"             FROM up"
	"            WHERE c.id OPERATOR(pg_catalog.=) up.id AND" ANCESTORS_TO_END
	"              AND c.id OPERATOR(pg_catalog.=) ANY ($2)"
	"            RETURNING c.sandbox_id),"
	BINDING_SQL_END_SANDBOXES("e")
	" SELECT pg_catalog.count(*) FROM e",
	.nargs = 2,
	.argtypes = {INT8OID, INT8ARRAYOID},
	.expected = SPI_OK_SELECT
};

/*
 * Before the conversation's own lock (SPI connected): finds, without locks,
 * the live, unbound ancestors up the rotated_from chain of a pending
 * conversation (across failed ones; the walk stops at a conversation that
 * holds a channel or has ended) and locks them FOR NO KEY UPDATE, oldest
 * first, the wait bounded by lease.admission_lock_timeout (55P03
 * "conversation N is busy").  Oldest first is restore_rotated_channel's
 * order, so the two never wait on each other in a cycle.
 */
static void
binding_lock_rotated_ancestors(int64 conversation_id, BindingAncestors *ancestors)
{
	Datum		value = Int64GetDatum(conversation_id);
	Datum		ids;
	bool		isnull;

	ancestors->count = 0;
	ancestors->ids = (Datum) 0;
	lease_spi_run(&ancestors_stmt, &value, NULL, 1);
	ids = lease_spi_value(0, 1, &isnull);
	if (isnull)
		return;
	/* The array outlives the next statement (SPI frees its tuple table). */
	ancestors->ids = SPI_datumTransfer(ids, false, -1);
	binding_run_bounded_or_busy(&ancestors_lock_stmt, &ancestors->ids, &conversation_id);
	ancestors->count = (int) SPI_processed;
}

/*
 * Under the conversation's lock, once it is known to be pending: ends the
 * locked ancestors that the chain, walked again, still reaches (a
 * conversation and its sandbox become terminated, as end_conversation
 * does); returns how many ended.
 */
static int64
binding_end_rotated_ancestors(int64 conversation_id, const BindingAncestors *ancestors)
{
	Datum		values[2];
	bool		isnull;

	if (ancestors->count == 0)
		return 0;
	values[0] = Int64GetDatum(conversation_id);
	values[1] = ancestors->ids;
	lease_spi_run(&ancestors_end_stmt, values, NULL, 1);
	return DatumGetInt64(lease_spi_value(0, 1, &isnull));
}

/* confirm_rotation: the replacement, locked as a turn locks it. */
static LeaseStatement confirm_lock_stmt = {
	.name = "lock the replacement to confirm",
	.sql =
	"SELECT c.status FROM lease.conversations AS c"
	" WHERE c.id OPERATOR(pg_catalog.=) $1"
	"   FOR UPDATE OF c",
	.nargs = 1,
	.argtypes = {INT8OID},
	.expected = SPI_OK_SELECT,
	LEASE_STMT_LOCK_TIMEOUT(lease_admission_lock_timeout_ms)
};

/* confirm_rotation: the pending replacement runs (what its first turn does). */
static LeaseStatement confirm_run_stmt = {
	.name = "mark the replacement running",
	.sql =
	"UPDATE lease.conversations AS c"
	"   SET status = " LEASE_SQL_WORD(BINDING_STATUS_RUNNING) ", updated_at = pg_catalog.now()"
	" WHERE c.id OPERATOR(pg_catalog.=) $1"
	"   AND c.status OPERATOR(pg_catalog.=) " LEASE_SQL_WORD(BINDING_STATUS_PENDING),
	.nargs = 1,
	.argtypes = {INT8OID},
	.expected = SPI_OK_UPDATE
};

PG_FUNCTION_INFO_V1(lease_confirm_rotation);

/* lease.confirm_rotation: confirmed, already_running or ended. */
Datum
lease_confirm_rotation(PG_FUNCTION_ARGS)
{
	int64		previous_id = lease_arg_int64(fcinfo, 0, "previous_conversation_id");
	int64		conversation_id = lease_arg_int64(fcinfo, 1, "conversation_id");
	Datum		id = Int64GetDatum(conversation_id);
	BindingAncestors ancestors;
	const char *outcome;
	char	   *status;
	bool		isnull;

	lease_spi_connect();
	(void) binding_check_rotation_pair(previous_id, conversation_id);

	/* Oldest first: the ancestors, then the replacement. */
	binding_lock_rotated_ancestors(conversation_id, &ancestors);
	if (binding_run_bounded_or_busy(&confirm_lock_stmt, &id, &conversation_id) != 1)
		elog(ERROR, "pg_lease: conversation " INT64_FORMAT " disappeared", conversation_id);
	status = TextDatumGetCString(lease_spi_value(0, 1, &isnull));

	if (strcmp(status, BINDING_STATUS_PENDING) == 0)
	{
		binding_end_rotated_ancestors(conversation_id, &ancestors);
		lease_spi_run(&confirm_run_stmt, &id, NULL, 0);
		outcome = BINDING_OUTCOME_CONFIRMED;
	}
	else if (strcmp(status, BINDING_STATUS_RUNNING) == 0 || strcmp(status, BINDING_STATUS_IDLE) == 0)
		outcome = BINDING_OUTCOME_ALREADY_RUNNING;
	else
		outcome = BINDING_OUTCOME_ENDED;
	lease_spi_finish();

	PG_RETURN_TEXT_P(cstring_to_text(outcome));
}

/*
 * list_conversations: the live conversations of tenant $1, of agent $2,
 * vault $3 and environment $4 when given (NULL: every one), with their
 * sandboxes.  Served by conversations_live_user_idx.
 */
static LeaseStatement list_stmt = {
	.name = "list the tenant's conversations",
	.sql =
	"SELECT c.id, c.agent_id, c.vault_id, c.environment_id, c.channel_id, c.status,"
	"       c.sandbox_id, s.status, c.rotated_from, c.created_at,"
	"       pg_catalog.now() OPERATOR(pg_catalog.-) c.created_at"
	"  FROM lease.conversations AS c"
	"  LEFT JOIN lease.sandboxes AS s ON s.id OPERATOR(pg_catalog.=) c.sandbox_id"
	" WHERE c.user_id OPERATOR(pg_catalog.=) $1"
	"   AND c.status OPERATOR(pg_catalog.=) ANY (" BINDING_LIVE_CONVERSATION_STATUSES ")"
	"   AND ($2 IS NULL OR c.agent_id OPERATOR(pg_catalog.=) $2)"
	"   AND ($3 IS NULL OR c.vault_id OPERATOR(pg_catalog.=) $3)"
	"   AND ($4 IS NULL OR c.environment_id OPERATOR(pg_catalog.=) $4)"
	" ORDER BY c.id",
	.nargs = 4,
	.argtypes = {TEXTOID, TEXTOID, TEXTOID, TEXTOID},
	.expected = SPI_OK_SELECT
};

#define LIST_COLUMNS 11

PG_FUNCTION_INFO_V1(lease_list_conversations);

/* lease.list_conversations: one row per live conversation in the scope. */
Datum
lease_list_conversations(PG_FUNCTION_ARGS)
{
	Datum		args[4];
	char		argnulls[4] = {' ', ' ', ' ', ' '};

	args[0] = lease_arg_ident(fcinfo, 0, "user_id");
	if (!lease_arg_opt_ident(fcinfo, 1, "agent_id", &args[1]))
		argnulls[1] = 'n';
	if (!lease_arg_opt_ident(fcinfo, 2, "vault_id", &args[2]))
		argnulls[2] = 'n';
	if (!lease_arg_opt_ident(fcinfo, 3, "environment_id", &args[3]))
		argnulls[3] = 'n';

	InitMaterializedSRF(fcinfo, 0);
	lease_spi_connect();
	lease_spi_run(&list_stmt, args, argnulls, 0);
	lease_spi_put_rows(fcinfo, LIST_COLUMNS);
	lease_spi_finish();
	return (Datum) 0;
}

/*
 * set_sandbox_status and set_conversation_status: the conversation $1,
 * locked as a turn locks it, its status, and its sandbox's (NULL: none).
 */
static LeaseStatement status_lock_stmt = {
	.name = "lock the conversation to set a status",
	.sql =
	"SELECT c.status, s.status FROM lease.conversations AS c"
	"  LEFT JOIN lease.sandboxes AS s ON s.id OPERATOR(pg_catalog.=) c.sandbox_id"
	" WHERE c.id OPERATOR(pg_catalog.=) $1"
	"   FOR UPDATE OF c",
	.nargs = 1,
	.argtypes = {INT8OID},
	.expected = SPI_OK_SELECT,
	LEASE_STMT_LOCK_TIMEOUT(lease_admission_lock_timeout_ms)
};

/* set_sandbox_status: the conversation $1's sandbox gets status $2. */
static LeaseStatement sandbox_status_stmt = {
	.name = "set the sandbox's status",
	.sql =
	"UPDATE lease.sandboxes AS s"
	"   SET status = $2, updated_at = pg_catalog.now()"
	"  FROM lease.conversations AS c"
	" WHERE c.id OPERATOR(pg_catalog.=) $1"
	"   AND s.id OPERATOR(pg_catalog.=) c.sandbox_id"
	"   AND s.status OPERATOR(pg_catalog.<>) $2",
	.nargs = 2,
	.argtypes = {INT8OID, TEXTOID},
	.expected = SPI_OK_UPDATE
};

/* set_conversation_status: the conversation $1 gets status $2. */
static LeaseStatement conversation_status_stmt = {
	.name = "set the conversation's status",
	.sql =
	"UPDATE lease.conversations AS c"
	"   SET status = $2, updated_at = pg_catalog.now()"
	" WHERE c.id OPERATOR(pg_catalog.=) $1"
	"   AND c.status OPERATOR(pg_catalog.<>) $2",
	.nargs = 2,
	.argtypes = {INT8OID, TEXTOID},
	.expected = SPI_OK_UPDATE
};

/* A status argument that is one of `allowed` (a NULL-terminated list). */
static Datum
status_arg(FunctionCallInfo fcinfo, int argno, const char *const *allowed, const char *list)
{
	char	   *status;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("status must not be null"),
				 errhint("Pass %s.", list)));
	status = TextDatumGetCString(PG_GETARG_DATUM(argno));
	for (const char *const *a = allowed; *a != NULL; a++)
	{
		if (strcmp(status, *a) == 0)
			return PG_GETARG_DATUM(argno);
	}
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("status must be %s", list),
			 errdetail("The value given is \"%s\".", status),
			 errhint("pg_lease itself writes the other statuses: admission, restore_rotated_channel and end_conversation.")));
	return (Datum) 0;			/* not reached */
}

/*
 * Locks the conversation (SPI connected); raises 22023 when it does not
 * exist.  Sets its status and its sandbox's (NULL when it has none).
 */
static void
lock_for_status(int64 conversation_id, char **status, char **sandbox_status)
{
	Datum		id = Int64GetDatum(conversation_id);
	bool		isnull;
	Datum		sandbox;

	if (binding_run_bounded_or_busy(&status_lock_stmt, &id, &conversation_id) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("conversation " INT64_FORMAT " does not exist", conversation_id),
				 errhint("Look the conversation up with lease.find_channel_conversation().")));
	*status = TextDatumGetCString(lease_spi_value(0, 1, &isnull));
	sandbox = lease_spi_value(0, 2, &isnull);
	*sandbox_status = isnull ? NULL : TextDatumGetCString(sandbox);
}

PG_FUNCTION_INFO_V1(lease_set_sandbox_status);

/*
 * lease.set_sandbox_status: the conversation's sandbox becomes starting,
 * ready or suspended; true when that changed its status.
 */
Datum
lease_set_sandbox_status(PG_FUNCTION_ARGS)
{
	static const char *const allowed[] = {
		BINDING_STATUS_STARTING, BINDING_STATUS_READY, BINDING_STATUS_SUSPENDED, NULL
	};
	int64		conversation_id = lease_arg_int64(fcinfo, 0, "conversation_id");
	Datum		values[2];
	char	   *status;
	char	   *sandbox_status;
	uint64		changed;

	values[0] = Int64GetDatum(conversation_id);
	values[1] = status_arg(fcinfo, 1, allowed, "starting, ready or suspended");

	lease_spi_connect();
	lock_for_status(conversation_id, &status, &sandbox_status);
	if (sandbox_status == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("conversation " INT64_FORMAT " has no sandbox", conversation_id),
				 errhint("Start conversations with lease.start_conversation() or lease.rotate_channel(), which give them a sandbox.")));
	if (strcmp(sandbox_status, BINDING_STATUS_TERMINATED) == 0 ||
		strcmp(sandbox_status, BINDING_STATUS_FAILED) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the sandbox of conversation " INT64_FORMAT " has ended", conversation_id),
				 errdetail("Its status is \"%s\", which never changes again.", sandbox_status),
				 errhint("Start a new conversation.")));
	if (strcmp(sandbox_status, BINDING_STATUS_SUSPENDED) == 0 &&
		strcmp(TextDatumGetCString(values[1]), BINDING_STATUS_SUSPENDED) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the sandbox of conversation " INT64_FORMAT " is suspended", conversation_id),
				 errdetail("A suspended sandbox does not count against the quotas; making it active again would take a slot without admission."),
				 errhint("End the conversation (lease.end_conversation) and start a new one, which admission counts.")));
	changed = lease_spi_run(&sandbox_status_stmt, values, NULL, 0);
	lease_spi_finish();
	PG_RETURN_BOOL(changed > 0);
}

PG_FUNCTION_INFO_V1(lease_set_conversation_status);

/*
 * lease.set_conversation_status: a started conversation becomes idle or
 * running; true when that changed its status.
 */
Datum
lease_set_conversation_status(PG_FUNCTION_ARGS)
{
	static const char *const allowed[] = {BINDING_STATUS_RUNNING, BINDING_STATUS_IDLE, NULL};
	int64		conversation_id = lease_arg_int64(fcinfo, 0, "conversation_id");
	Datum		values[2];
	char	   *status;
	char	   *sandbox_status;
	uint64		changed;

	values[0] = Int64GetDatum(conversation_id);
	values[1] = status_arg(fcinfo, 1, allowed, "running or idle");

	lease_spi_connect();
	lock_for_status(conversation_id, &status, &sandbox_status);
	if (strcmp(status, BINDING_STATUS_PENDING) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("conversation " INT64_FORMAT " has not started", conversation_id),
				 errdetail("It is \"pending\": its first turn or confirm_rotation starts it, and ends what it replaced."),
				 errhint("Admit its first turn with lease.admit_turn(), or confirm a rotation with lease.confirm_rotation().")));
	if (strcmp(status, BINDING_STATUS_FAILED) == 0 || strcmp(status, BINDING_STATUS_TERMINATED) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("conversation " INT64_FORMAT " has ended", conversation_id),
				 errdetail("Its status is \"%s\".", status),
				 errhint("Start a new conversation.")));
	changed = lease_spi_run(&conversation_status_stmt, values, NULL, 0);
	lease_spi_finish();
	PG_RETURN_BOOL(changed > 0);
}

/*
 * lease.admit_turn: the new turn's id.  The first turn of a replacement
 * also ends the conversations it was rotated away from, their locks taken
 * first (oldest first).
 */
static Datum
admit_turn(FunctionCallInfo fcinfo, LeaseSchema schema)
{
	int64		conversation_id = lease_arg_int64(fcinfo, 0, "conversation_id");
	Datum		id = Int64GetDatum(conversation_id);
	char	   *status;
	int64		turn_id;
	bool		isnull;
	BindingAncestors ancestors = {0};

	lease_spi_connect();
	binding_lock_rotated_ancestors(conversation_id, &ancestors);

	/* Turns of a conversation, hence of its sandbox, are admitted one at a time. */
	if (binding_run_bounded_or_busy(&turn_lock_stmt, &id, &conversation_id) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("conversation " INT64_FORMAT " does not exist", conversation_id),
				 errhint("Look the conversation up with lease.find_channel_conversation().")));
	if (!DatumGetBool(lease_spi_value(0, 1, &isnull)))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("conversation " INT64_FORMAT " has no sandbox", conversation_id),
				 errdetail("Turns are admitted one at a time per sandbox, so a conversation needs one."),
				 errhint("Start conversations with lease.start_conversation() or lease.rotate_channel(), which give them a sandbox.")));
	status = TextDatumGetCString(lease_spi_value(0, 2, &isnull));
	if (strcmp(status, BINDING_STATUS_FAILED) == 0 || strcmp(status, BINDING_STATUS_TERMINATED) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("conversation " INT64_FORMAT " has ended", conversation_id),
				 errdetail("Its status is \"%s\".", status),
				 errhint("Start a new conversation.")));

	if (strcmp(status, BINDING_STATUS_PENDING) == 0)
		binding_end_rotated_ancestors(conversation_id, &ancestors);

	lease_spi_run(&turn_insert_stmt, &id, NULL, 1);
	turn_id = DatumGetInt64(lease_spi_value(0, 1, &isnull));
	lease_spi_finish();

	PG_RETURN_INT64(turn_id);
}

PG_FUNCTION_INFO_V1(lease_admit_turn_0_4);
/* lease.admit_turn as the 0.4.0 script binds it. */
Datum lease_admit_turn_0_4(PG_FUNCTION_ARGS) { return admit_turn(fcinfo, LEASE_SCHEMA_0_4); }
