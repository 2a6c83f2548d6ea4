/*-------------------------------------------------------------------------
 *
 * src/bindings/rotation.c
 *	  Channel rotation and its post-commit compensator.
 *
 * rotate_channel moves a channel's binding from a conversation to a fresh
 * one.  In one internal subtransaction it
 *	 1. locks the old conversation FOR NO KEY UPDATE, scoped like
 *		find_channel_conversation, with lock_timeout set to
 *		lease.rotation_lock_timeout for exactly that statement (a GUC nest
 *		level, as for a function's SET clause: the caller's lock_timeout, be
 *		it a session SET, a SET LOCAL or the default, is back afterwards);
 *	 2. checks that it still holds the channel;
 *	 3. unbinds it;
 *	 4. runs admission (conversations.c) for the replacement, bound to the
 *		channel with rotated_from set; its wait for the admission lock is
 *		bounded by lease.admission_lock_timeout.
 * The row lock is taken before the admission lock, so the admission lock is
 * never held while waiting on a conversation.  Only `rotated` releases
 * (keeps) the subtransaction: `refused` and `binding_changed` roll it back,
 * undoing the unbind and any insert and releasing its locks, and a lock
 * timeout in step 1 or in admission's wait for its lock is caught as `busy`,
 * after the rollback released the old conversation's row lock.  The unbind
 * thus commits with the replacement, in the caller's transaction, or not at
 * all.
 *
 * restore_rotated_channel undoes a committed rotation whose replacement's
 * worker failed to start, only while the replacement still owns the channel,
 * and never unbinds the channel without binding it again: the target is the
 * previous conversation if it is live and unbound, else the nearest live,
 * unbound ancestor up the rotated_from chain across failed conversations;
 * with no target the replacement keeps the channel and the pair is queued.
 * Its work runs in a subtransaction too; any error there rolls the restore
 * back and is reported (WARNING) and recorded in lease.compensation_failures
 * after the rollback, so the record survives it; retry_failed_compensations
 * drains that queue.  A query cancel or statement_timeout is not the
 * restore's failure but the caller's: it is raised again, nothing recorded.
 *
 *-------------------------------------------------------------------------
 */
#include "pg_lease.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/tuplestore.h"

#include "common/args.h"
#include "common/config.h"
#include "bindings/conversations.h"
#include "bindings/rotation.h"
#include "common/spi_util.h"
#include "bindings/subxact.h"

/*
 * rotate_channel step 1: the conversation $6 in the caller's scope, locked,
 * and whether it still holds channel $5.  The primary key drives it; the
 * scope is a filter, so a NULL vault/environment can be compared as a value.
 */
static LeaseStatement rotate_lock_stmt = {
	.name = "lock the conversation to rotate",
	.sql =
	"SELECT COALESCE(c.channel_id OPERATOR(pg_catalog.=) $5, false)"
	"  FROM lease.conversations AS c"
	" WHERE c.id OPERATOR(pg_catalog.=) $6"
	"   AND " BINDING_SCOPE_USER_AGENT
	"   AND (c.vault_id OPERATOR(pg_catalog.=) $3 OR (c.vault_id IS NULL AND $3 IS NULL))"
	"   AND (c.environment_id OPERATOR(pg_catalog.=) $4"
	"        OR (c.environment_id IS NULL AND $4 IS NULL))"
	"   FOR NO KEY UPDATE OF c",
	.nargs = BINDING_SCOPE_NARGS,
	.argtypes = BINDING_SCOPE_ARGTYPES,
	.expected = SPI_OK_SELECT,
	LEASE_STMT_LOCK_TIMEOUT(lease_rotation_lock_timeout_ms)
};

/* rotate_channel step 3: unbind (a partial-index column: FOR NO KEY UPDATE). */
static LeaseStatement unbind_stmt = {
	.name = "unbind the rotated conversation",
	.sql =
	"UPDATE lease.conversations AS c"
	"   SET channel_id = NULL, updated_at = pg_catalog.now()"
	" WHERE c.id OPERATOR(pg_catalog.=) $1",
	.nargs = 1,
	.argtypes = {INT8OID},
	.expected = SPI_OK_UPDATE
};

/* restore: is $1 a rotation, and which channel does it hold (no lock). */
static LeaseStatement pair_stmt = {
	.name = "check the rotation pair",
	.sql =
	"SELECT c.rotated_from, c.channel_id FROM lease.conversations AS c"
	" WHERE c.id OPERATOR(pg_catalog.=) $1",
	.nargs = 1,
	.argtypes = {INT8OID},
	.expected = SPI_OK_SELECT
};

/* restore: one conversation of the pair, locked (old first, then new). */
static LeaseStatement restore_lock_stmt = {
	.name = "lock a conversation to restore",
	.sql =
	"SELECT c.status, c.channel_id FROM lease.conversations AS c"
	" WHERE c.id OPERATOR(pg_catalog.=) $1"
	"   FOR NO KEY UPDATE OF c",
	.nargs = 1,
	.argtypes = {INT8OID},
	.expected = SPI_OK_SELECT,
	LEASE_STMT_LOCK_TIMEOUT(lease_rotation_lock_timeout_ms)
};

/*
 * restore: where the rotation chain from $1 stops, read without locks: $1
 * itself unless it failed, else the first conversation up its rotated_from
 * chain that did not fail, or the chain's failed root.  A failed
 * conversation never changes again, so only that stop needs its lock and a
 * second look.  Each step follows the primary key; CYCLE ends a chain that
 * was edited into a loop.
 */
static LeaseStatement chain_stmt = {
	.name = "find the conversation to restore to",
	.sql =
	"WITH RECURSIVE chain (id, status, channel_id, rotated_from, depth) AS ("
	"  SELECT c.id, c.status, c.channel_id, c.rotated_from, 0"
	"    FROM lease.conversations AS c"
	"   WHERE c.id OPERATOR(pg_catalog.=) $1"
	"  UNION ALL"
	"  SELECT a.id, a.status, a.channel_id, a.rotated_from, chain.depth OPERATOR(pg_catalog.+) 1"
	"    FROM chain JOIN lease.conversations AS a"
	"      ON a.id OPERATOR(pg_catalog.=) chain.rotated_from"
	"   WHERE chain.status OPERATOR(pg_catalog.=) " LEASE_SQL_WORD(BINDING_STATUS_FAILED)
	") CYCLE id SET looped USING path"
	" SELECT chain.id, chain.status, chain.channel_id FROM chain"
	"  WHERE NOT chain.looped"
	"  ORDER BY chain.depth DESC LIMIT 1",
	.nargs = 1,
	.argtypes = {INT8OID},
	.expected = SPI_OK_SELECT
};

/*
 * restore: the pending replacement becomes failed and loses its binding (in
 * one update: a failed conversation never holds a channel); its sandbox
 * becomes failed unless it has already ended, so it stops counting against
 * the quotas.
 */
static LeaseStatement mark_failed_stmt = {
	.name = "mark the replacement failed",
	.sql =
	"WITH f AS (UPDATE lease.conversations AS c"
	"              SET status = " LEASE_SQL_WORD(BINDING_STATUS_FAILED) ", channel_id = NULL, updated_at = pg_catalog.now()"
	"            WHERE c.id OPERATOR(pg_catalog.=) $1"
	"              AND c.status OPERATOR(pg_catalog.=) " LEASE_SQL_WORD(BINDING_STATUS_PENDING)
	"            RETURNING c.sandbox_id)"
	" UPDATE lease.sandboxes AS s"
	"    SET status = " LEASE_SQL_WORD(BINDING_STATUS_FAILED) ", updated_at = pg_catalog.now()"
	"   FROM f"
	"  WHERE s.id OPERATOR(pg_catalog.=) f.sandbox_id"
	"    AND s.status OPERATOR(pg_catalog.=) ANY (" BINDING_ACTIVE_SANDBOX_STATUSES ")",
	.nargs = 1,
	.argtypes = {INT8OID},
	.expected = SPI_OK_UPDATE
};

/* restore: bind the target again (after the replacement lost the channel). */
static LeaseStatement rebind_stmt = {
	.name = "restore the previous binding",
	.sql =
	"UPDATE lease.conversations AS c"
	"   SET channel_id = $2, updated_at = pg_catalog.now()"
	" WHERE c.id OPERATOR(pg_catalog.=) $1",
	.nargs = 2,
	.argtypes = {INT8OID, TEXTOID},
	.expected = SPI_OK_UPDATE
};

/* restore: a pair that ended restored or superseded is no longer a failure. */
static LeaseStatement resolve_stmt = {
	.name = "resolve the recorded failure",
	.sql =
	"UPDATE lease.compensation_failures AS f"
	"   SET resolved_at = pg_catalog.now()"
	" WHERE f.previous_conversation_id OPERATOR(pg_catalog.=) $1"
	"   AND f.failed_conversation_id OPERATOR(pg_catalog.=) $2"
	"   AND f.resolved_at IS NULL",
	.nargs = 2,
	.argtypes = {INT8OID, INT8OID},
	.expected = SPI_OK_UPDATE
};

/*
 * restore failed: record it, or update the pair's unresolved record (one per
 * pair, compensation_failures_unresolved_key).
 */
static LeaseStatement record_stmt = {
	.name = "record the failed compensation",
	.sql =
	"INSERT INTO lease.compensation_failures AS f"
	"  (previous_conversation_id, failed_conversation_id, channel_id, reason, sqlstate)"
	" VALUES ($1, $2, $3, $4, $5)"
	" ON CONFLICT (previous_conversation_id, failed_conversation_id)"
	"   WHERE resolved_at IS NULL"
	" DO UPDATE SET channel_id = excluded.channel_id,"
	"               reason = excluded.reason,"
	"               sqlstate = excluded.sqlstate,"
	"               last_failed_at = pg_catalog.now(),"
	"               attempts = f.attempts OPERATOR(pg_catalog.+) 1",
	.nargs = 5,
	.argtypes = {INT8OID, INT8OID, TEXTOID, TEXTOID, TEXTOID},
	.expected = SPI_OK_INSERT
};

/*
 * retry: the unresolved failures, oldest first.  SKIP LOCKED: concurrent
 * retries share the queue instead of restoring the same pair twice.
 */
static LeaseStatement queue_stmt = {
	.name = "read the failed compensations",
	.sql =
	"SELECT f.previous_conversation_id, f.failed_conversation_id"
	"  FROM lease.compensation_failures AS f"
	" WHERE f.resolved_at IS NULL"
	" ORDER BY f.occurred_at, f.id"
	"   FOR UPDATE OF f SKIP LOCKED",
	.nargs = 0,
	.expected = SPI_OK_SELECT
};

/*
 * Runs a locking read whose statement sets lock_timeout =
 * lease.rotation_lock_timeout for exactly itself.  Call it only inside a
 * subtransaction: if the statement raises, it is the subtransaction's
 * rollback (AtEOSubXact_GUC) that restores lock_timeout.
 */
static uint64
run_bounded(LeaseStatement *stmt, Datum *values, const char *nulls)
{
	Assert(IsSubTransaction());
	return lease_spi_run(stmt, values, nulls, 1);
}

/* The outcomes of rotate_channel. */
typedef enum RotationOutcome
{
	ROTATION_ROTATED,
	ROTATION_BUSY,
	ROTATION_BINDING_CHANGED,
	ROTATION_REFUSED
} RotationOutcome;

typedef struct Rotation
{
	LeaseSchema schema;
	BindingScope scope;
	Datum		channel_id;
	int64		rotate_from;
	bool		in_locking_read;	/* true while step 1 runs */
	RotationOutcome outcome;
	BindingAdmission admission;
} Rotation;

/* Steps 1-4 of a rotation; true (keep) only when rotated. */
static bool
rotation_step(void *arg)
{
	Rotation   *r = (Rotation *) arg;
	Datum		values[BINDING_SCOPE_NARGS];
	char		nulls[BINDING_SCOPE_NARGS];
	Datum		old_id = Int64GetDatum(r->rotate_from);
	bool		holds = false;
	bool		isnull;

	binding_scope_params(&r->scope, true, r->channel_id, true, r->rotate_from, values, nulls);
	r->in_locking_read = true;
	if (run_bounded(&rotate_lock_stmt, values, nulls) > 0)
		holds = DatumGetBool(lease_spi_value(0, 1, &isnull));
	r->in_locking_read = false;

	if (!holds)
	{
		r->outcome = ROTATION_BINDING_CHANGED;
		return false;
	}

	lease_spi_run(&unbind_stmt, &old_id, NULL, 0);
	binding_admit(&r->scope, true, r->channel_id, true, r->rotate_from, &r->admission);

	switch (r->admission.outcome)
	{
		case BINDING_ADMIT_STARTED:
			r->outcome = ROTATION_ROTATED;
			return true;
		case BINDING_ADMIT_REFUSED:
			r->outcome = ROTATION_REFUSED;
			return false;
		case BINDING_ADMIT_ALREADY_BOUND:
			/* Cannot happen while we hold the old row; never bind twice. */
			r->outcome = ROTATION_BINDING_CHANGED;
			return false;
	}
	return false;
}

/* lease.rotate_channel: rotated, busy, binding_changed or refused. */
static Datum
rotate_channel(FunctionCallInfo fcinfo, LeaseSchema schema)
{
	Rotation	r;
	ErrorData  *error;
	Datum		values[4];
	bool		nulls[4] = {false, false, false, false};
	const char *outcome = NULL;
	const char *detail = NULL;

	memset(&r, 0, sizeof(r));
	r.schema = schema;
	binding_scope_args(fcinfo, &r.scope);
	r.channel_id = lease_arg_ident(fcinfo, 4, "channel_id");
	r.rotate_from = lease_arg_int64(fcinfo, 5, "rotate_from");

	lease_spi_connect();
	if (binding_subxact_run(rotation_step, &r, &error) == BINDING_SUBXACT_ERROR)
	{
		/* Only the lock timeouts of step 1 and of admission's lock are ours. */
		if (!((r.in_locking_read || r.admission.waiting_for_lock) &&
			  error->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE))
			ReThrowError(error);
		r.outcome = ROTATION_BUSY;
	}
	lease_spi_finish();

	switch (r.outcome)
	{
		case ROTATION_ROTATED:
			outcome = BINDING_OUTCOME_ROTATED;
			break;
		case ROTATION_BUSY:
			outcome = BINDING_OUTCOME_BUSY;
			detail = r.in_locking_read
				? "the previous conversation is busy; retry the rotation"
				: "admission is busy; retry the rotation";
			break;
		case ROTATION_BINDING_CHANGED:
			outcome = BINDING_OUTCOME_BINDING_CHANGED;
			detail = "the channel is no longer bound to conversation rotate_from;"
				" look up its conversation with lease.find_channel_conversation()"
				" and rotate from that one";
			break;
		case ROTATION_REFUSED:
			outcome = BINDING_OUTCOME_REFUSED;
			detail = binding_admission_refusal(&r.admission);
			break;
	}

	values[0] = CStringGetTextDatum(outcome);
	values[1] = Int64GetDatum(r.admission.conversation_id);
	nulls[1] = (r.outcome != ROTATION_ROTATED);
	values[2] = Int64GetDatum(r.rotate_from);
	values[3] = detail ? CStringGetTextDatum(detail) : (Datum) 0;
	nulls[3] = (detail == NULL);
	binding_return_row(fcinfo, values, nulls);
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(lease_rotate_channel_0_4);
/* lease.rotate_channel as the 0.4.0 script binds it. */
Datum lease_rotate_channel_0_4(PG_FUNCTION_ARGS) { return rotate_channel(fcinfo, LEASE_SCHEMA_0_4); }

/* The outcomes of restore_rotated_channel. */
typedef enum RestoreOutcome
{
	RESTORE_RESTORED,
	RESTORE_SUPERSEDED,
	RESTORE_FAILED
} RestoreOutcome;

static const char *const restore_outcome_names[] = {
	[RESTORE_RESTORED] = BINDING_OUTCOME_RESTORED,
	[RESTORE_SUPERSEDED] = BINDING_OUTCOME_SUPERSEDED,
	[RESTORE_FAILED] = BINDING_OUTCOME_FAILED,
};

typedef struct Restore
{
	int64		previous_id;
	int64		failed_id;
	RestoreOutcome outcome;
	char	   *channel_id;		/* failed without error: the channel kept */
	char	   *reason;			/* failed without error: why nothing took it */
} Restore;

/* Where a restore gives the channel back: a target, or the reason for none. */
typedef struct RestoreTarget
{
	bool		found;
	int64		id;
	char	   *reason;
} RestoreTarget;

/* Attempts of a restore whose chain changed between its look and its locks. */
#define RESTORE_ATTEMPTS 3

/* A locked conversation's status and channel (NULL when unbound). */
static void
lock_for_restore(int64 id, char **status, char **channel_id)
{
	Datum		value = Int64GetDatum(id);
	bool		isnull;
	Datum		channel;

	if (run_bounded(&restore_lock_stmt, &value, NULL) == 0)
		elog(ERROR, "pg_lease: conversation " INT64_FORMAT " disappeared", id);
	*status = TextDatumGetCString(lease_spi_value(0, 1, &isnull));
	channel = lease_spi_value(0, 2, &isnull);
	*channel_id = isnull ? NULL : TextDatumGetCString(channel);
}

/* True for pending, running and idle. */
static bool
is_live(const char *status)
{
	return strcmp(status, BINDING_STATUS_PENDING) == 0 || strcmp(status, BINDING_STATUS_RUNNING) == 0 ||
		strcmp(status, BINDING_STATUS_IDLE) == 0;
}

/*
 * The restore's target from the previous conversation (chain_stmt): where
 * the chain stops, if that conversation is live and unbound.  A live one
 * bound elsewhere, an ended one or a failed root stops it without a target.
 */
static void
find_target(int64 previous_id, RestoreTarget *target)
{
	Datum		value = Int64GetDatum(previous_id);
	bool		isnull;
	bool		unbound;
	int64		id;
	char	   *status;

	if (lease_spi_run(&chain_stmt, &value, NULL, 1) == 0)
		elog(ERROR, "pg_lease: conversation " INT64_FORMAT " disappeared", previous_id);
	id = DatumGetInt64(lease_spi_value(0, 1, &isnull));
	status = TextDatumGetCString(lease_spi_value(0, 2, &isnull));
	(void) lease_spi_value(0, 3, &unbound);

	target->found = (is_live(status) && unbound);
	target->id = id;
	if (target->found)
		target->reason = NULL;
	else if (is_live(status))
		target->reason = psprintf("conversation " INT64_FORMAT " is bound to another channel", id);
	else if (strcmp(status, BINDING_STATUS_FAILED) == 0)
		target->reason = psprintf("conversation " INT64_FORMAT " failed and was not rotated from another one", id);
	else
		target->reason = psprintf("conversation " INT64_FORMAT " was ended", id);
}

/*
 * One attempt of the restore, in a subtransaction of its own: true keeps it,
 * false rolls it back (releasing its locks) because the chain changed
 * between the look without locks and the locks; the caller tries again.
 */
static bool
restore_attempt(void *arg)
{
	Restore    *r = (Restore *) arg;
	RestoreTarget seen;
	RestoreTarget target;
	char	   *status;
	char	   *channel;
	char	   *failed_status;
	char	   *failed_channel;
	Datum		values[2];

	/*
	 * Lock order: old, then new (each wait bounded).  A target up the chain
	 * is older than the previous conversation, so it is locked first.
	 */
	find_target(r->previous_id, &seen);
	if (seen.found && seen.id != r->previous_id)
		lock_for_restore(seen.id, &status, &channel);
	lock_for_restore(r->previous_id, &status, &channel);
	lock_for_restore(r->failed_id, &failed_status, &failed_channel);

	/*
	 * One that is running or idle did start after all, one that was ended
	 * was ended on purpose, one already failed holds no channel: none is
	 * touched, nothing is restored.
	 */
	if (strcmp(failed_status, BINDING_STATUS_PENDING) != 0)
	{
		r->outcome = RESTORE_SUPERSEDED;
		return true;
	}

	/* A newer rotation took the channel: the replacement just failed. */
	values[0] = Int64GetDatum(r->failed_id);
	if (failed_channel == NULL)
	{
		lease_spi_run(&mark_failed_stmt, values, NULL, 0);
		r->outcome = RESTORE_SUPERSEDED;
		return true;
	}

	/* The chain again, under the locks: a different stop means start again. */
	find_target(r->previous_id, &target);
	if (target.found != seen.found || (target.found && target.id != seen.id))
		return false;

	/* No target: the replacement keeps the channel, untouched. */
	if (!target.found)
	{
		r->outcome = RESTORE_FAILED;
		r->channel_id = failed_channel;
		r->reason = target.reason;
		return true;
	}

	/*
	 * The replacement fails and the target takes the channel, in this one
	 * subtransaction: the replacement's binding is cleared first, so the
	 * channel is free in the scope (conversations_channel_binding_key).
	 */
	lease_spi_run(&mark_failed_stmt, values, NULL, 0);
	values[0] = Int64GetDatum(target.id);
	values[1] = CStringGetTextDatum(failed_channel);
	lease_spi_run(&rebind_stmt, values, NULL, 0);
	r->outcome = RESTORE_RESTORED;
	return true;
}

/* Queues a failed restore, or updates the pair's unresolved record. */
static void
queue_failure(int64 previous_id, int64 failed_id, const char *channel_id,
			  const char *reason, const char *sqlstate)
{
	Datum		values[5];
	char		nulls[5] = {' ', ' ', ' ', ' ', ' '};

	values[0] = Int64GetDatum(previous_id);
	values[1] = Int64GetDatum(failed_id);
	values[2] = channel_id ? CStringGetTextDatum(channel_id) : (Datum) 0;
	nulls[2] = channel_id ? ' ' : 'n';
	values[3] = CStringGetTextDatum(reason);
	values[4] = CStringGetTextDatum(sqlstate);
	lease_spi_run(&record_stmt, values, nulls, 0);
}

/*
 * The restore itself, in a subtransaction; always keeps its work.  Its
 * attempts run in subtransactions of their own, so one whose chain changed
 * under it leaves no lock behind (the next may need an older row first).
 * A restore without a target warns and queues the pair (55000).
 */
static bool
restore_step(void *arg)
{
	Restore    *r = (Restore *) arg;
	ErrorData  *error;
	Datum		values[2];
	int			attempts = 0;
	BindingSubxactResult result;

	do
	{
		if (++attempts > RESTORE_ATTEMPTS)
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("the rotation chain of conversation " INT64_FORMAT " changed during the restore",
							r->previous_id),
					 errdetail("It changed between finding and locking the conversation to restore to, %d times.",
							   RESTORE_ATTEMPTS)));
		result = binding_subxact_run(restore_attempt, r, &error);
		if (result == BINDING_SUBXACT_ERROR)
			ReThrowError(error);
	} while (result == BINDING_SUBXACT_UNDONE);

	if (r->outcome == RESTORE_FAILED)
	{
		ereport(WARNING,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("could not restore channel \"%s\" from failed conversation " INT64_FORMAT
						" to conversation " INT64_FORMAT, r->channel_id, r->failed_id, r->previous_id),
				 errdetail("No live conversation to give it back to: %s. Conversation " INT64_FORMAT
						   " keeps the channel; the pair was recorded in lease.compensation_failures.",
						   r->reason, r->failed_id),
				 errhint("lease.retry_failed_compensations() resolves it once conversation " INT64_FORMAT
						 " was rotated away from, started or ended.", r->failed_id)));
		queue_failure(r->previous_id, r->failed_id, r->channel_id,
					  psprintf("no live conversation to give the channel back to: %s", r->reason),
					  unpack_sql_state(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE));
		return true;
	}

	values[0] = Int64GetDatum(r->previous_id);
	values[1] = Int64GetDatum(r->failed_id);
	lease_spi_run(&resolve_stmt, values, NULL, 0);
	return true;
}

/*
 * Raises 22023 unless failed.rotated_from = previous; returns the channel
 * the failed conversation holds now (NULL: none), for the failure record.
 * confirm_rotation checks its pair with it too (lifecycle.c).
 */
char *
binding_check_rotation_pair(int64 previous_id, int64 failed_id)
{
	Datum		value = Int64GetDatum(failed_id);
	Datum		rotated_from;
	Datum		channel;
	bool		isnull;

	if (lease_spi_run(&pair_stmt, &value, NULL, 1) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("conversation " INT64_FORMAT " does not exist", failed_id),
				 errhint("Pass the conversation_id and previous_conversation_id that rotate_channel returned.")));
	rotated_from = lease_spi_value(0, 1, &isnull);
	if (isnull || DatumGetInt64(rotated_from) != previous_id)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("conversation " INT64_FORMAT " is not a rotation of conversation " INT64_FORMAT,
						failed_id, previous_id),
				 isnull ? errdetail("It was not started by a rotation.")
				 : errdetail("It was rotated from conversation " INT64_FORMAT ".",
							 DatumGetInt64(rotated_from)),
				 errhint("Pass the conversation_id and previous_conversation_id that rotate_channel returned.")));
	channel = lease_spi_value(0, 2, &isnull);
	return isnull ? NULL : TextDatumGetCString(channel);
}

/*
 * Reports a failed restore (WARNING: it reaches the server log whatever the
 * caller's transaction does next) and records it.  Runs after the restore's
 * subtransaction was rolled back, so the record is not rolled back with it.
 */
static void
record_failure(int64 previous_id, int64 failed_id, const char *channel_id, ErrorData *error)
{
	const char *sqlstate = unpack_sql_state(error->sqlerrcode);

	ereport(WARNING,
			(errcode(error->sqlerrcode),
			 channel_id
			 ? errmsg("could not restore channel \"%s\" from failed conversation " INT64_FORMAT
					  " to conversation " INT64_FORMAT, channel_id, failed_id, previous_id)
			 : errmsg("could not restore failed conversation " INT64_FORMAT
					  " to conversation " INT64_FORMAT " (it holds no channel)",
					  failed_id, previous_id),
			 errdetail("The restore failed with: %s (SQLSTATE %s). It was rolled back and recorded in lease.compensation_failures.",
					   error->message, sqlstate),
			 errhint("Call lease.retry_failed_compensations() once the cause is gone.")));

	queue_failure(previous_id, failed_id, channel_id, error->message, sqlstate);
}

/*
 * Restores one rotation pair (SPI connected).  Any error inside the restore
 * makes it `failed`, reported and recorded; never `superseded`.  Except a
 * query cancel or statement_timeout (and an assertion failure), which is
 * raised again: the restore is rolled back and nothing is recorded.
 */
static RestoreOutcome
restore_pair(int64 previous_id, int64 failed_id)
{
	Restore		r = {.previous_id = previous_id, .failed_id = failed_id};
	char	   *channel_id = binding_check_rotation_pair(previous_id, failed_id);
	ErrorData  *error;

	switch (binding_subxact_run(restore_step, &r, &error))
	{
		case BINDING_SUBXACT_KEPT:
			return r.outcome;
		case BINDING_SUBXACT_UNDONE:
			break;
		case BINDING_SUBXACT_ERROR:

			/*
			 * A cancel or statement_timeout (57014) is the caller's, not the
			 * restore's: it goes through, nothing recorded, as PL/pgSQL's
			 * WHEN OTHERS lets it (and an assertion failure) through.
			 */
			if (error->sqlerrcode == ERRCODE_QUERY_CANCELED ||
				error->sqlerrcode == ERRCODE_ASSERT_FAILURE)
				ReThrowError(error);
			record_failure(previous_id, failed_id, channel_id, error);
			FreeErrorData(error);
			return RESTORE_FAILED;
	}
	elog(ERROR, "pg_lease: the restore step asked for a rollback");
	return RESTORE_FAILED;		/* keep the compiler quiet */
}

PG_FUNCTION_INFO_V1(lease_restore_rotated_channel);

/* lease.restore_rotated_channel: restored, superseded or failed. */
Datum
lease_restore_rotated_channel(PG_FUNCTION_ARGS)
{
	int64		previous_id = lease_arg_int64(fcinfo, 0, "previous_conversation_id");
	int64		failed_id = lease_arg_int64(fcinfo, 1, "failed_conversation_id");
	RestoreOutcome outcome;

	lease_spi_connect();
	outcome = restore_pair(previous_id, failed_id);
	lease_spi_finish();

	PG_RETURN_TEXT_P(cstring_to_text(restore_outcome_names[outcome]));
}

PG_FUNCTION_INFO_V1(lease_retry_failed_compensations);

/* lease.retry_failed_compensations: one row per unresolved failure re-run. */
Datum
lease_retry_failed_compensations(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	MemoryContext callercxt = CurrentMemoryContext;
	int64	   *previous_ids;
	int64	   *failed_ids;
	RestoreOutcome *outcomes;
	uint64		n;
	bool		isnull;

	InitMaterializedSRF(fcinfo, 0);

	lease_spi_connect();
	n = lease_spi_run(&queue_stmt, NULL, NULL, 0);
	previous_ids = MemoryContextAlloc(callercxt, sizeof(int64) * Max(n, 1));
	failed_ids = MemoryContextAlloc(callercxt, sizeof(int64) * Max(n, 1));
	outcomes = MemoryContextAlloc(callercxt, sizeof(RestoreOutcome) * Max(n, 1));
	for (uint64 i = 0; i < n; i++)
	{
		previous_ids[i] = DatumGetInt64(lease_spi_value(i, 1, &isnull));
		failed_ids[i] = DatumGetInt64(lease_spi_value(i, 2, &isnull));
	}
	for (uint64 i = 0; i < n; i++)
	{
		/* A cancel between two pairs ends the call, as one inside a restore does. */
		CHECK_FOR_INTERRUPTS();
		outcomes[i] = restore_pair(previous_ids[i], failed_ids[i]);
	}
	lease_spi_finish();

	for (uint64 i = 0; i < n; i++)
	{
		Datum		values[3];
		bool		nulls[3] = {false, false, false};

		values[0] = Int64GetDatum(previous_ids[i]);
		values[1] = Int64GetDatum(failed_ids[i]);
		values[2] = CStringGetTextDatum(restore_outcome_names[outcomes[i]]);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
