/*-------------------------------------------------------------------------
 *
 * src/bindings/conversations.c
 *	  Conversations and their channel bindings: start_conversation,
 *	  find_channel_conversation, admit_turn, end_conversation, and the
 *	  admission routine rotate_channel shares with start_conversation.
 *
 * Admission is serialized by one lock held until the caller's transaction
 * ends: the one row of lease.admission_gate, locked FOR NO KEY UPDATE (the weakest row lock that conflicts with itself; nothing
 * references the table, so FOR UPDATE would exclude nothing more).  Only the
 * extension's owner can lock that row: no other role has any privilege on
 * the table, so no stranger can take or hold the lock.  The wait for it is
 * bounded by lease.admission_lock_timeout
 * (55P03 "admission is busy").  Counting active sandboxes and inserting the
 * new one happen under the lock, and the binding check and the count read
 * what is committed when they run, whatever the caller's isolation level
 * (lease_spi_run_latest: under REPEATABLE READ or SERIALIZABLE a snapshot
 * taken for that one statement, after the lock was granted, not the
 * transaction's older one), so the next admission sees every sandbox
 * admitted before it: quota counts are exact at every isolation level.
 * The lock is held to the end of the caller's transaction, which is why
 * these functions are meant to be called in their own short transaction.
 *
 * No admission ever waits for a row lock while it holds the admission lock:
 * the binding check and the quota count are plain reads, and the inserts
 * cannot conflict with an uncommitted binding (a binding is only inserted
 * under the admission lock, and a restore only moves a channel that a
 * locked row holds).
 *
 * admit_turn serializes the turns of a conversation with the conversation's
 * row lock (FOR UPDATE), its wait bounded by lease.admission_lock_timeout
 * too.  That also serializes the turns of a sandbox: admission gives every
 * conversation a sandbox of its own, and nothing changes sandbox_id.
 *
 *-------------------------------------------------------------------------
 */
#include "pg_lease.h"

#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/tuplestore.h"

#include "common/args.h"
#include "common/config.h"
#include "bindings/conversations.h"
#include "common/spi_util.h"

/* Scope predicates; NULL vault/environment is "IS NULL", so it stays indexable. */
#define VAULT_IS_VALUE	"c.vault_id OPERATOR(pg_catalog.=) $3"
#define VAULT_IS_NULL	"c.vault_id IS NULL"
#define ENV_IS_VALUE	"c.environment_id OPERATOR(pg_catalog.=) $4"
#define ENV_IS_NULL		"c.environment_id IS NULL"

/* The conversation bound to channel $5 in the scope: an exact index lookup. */
#define BINDING_LOOKUP(vault, env) \
	"SELECT c.id FROM lease.conversations AS c" \
	" WHERE " BINDING_SCOPE_USER_AGENT " AND " vault " AND " env \
	"   AND c.channel_id OPERATOR(pg_catalog.=) $5"

/*
 * IS NOT DISTINCT FROM is not indexable, so there is one statement per
 * NULL-ness of (vault, environment), each an equality or IS NULL on every
 * column of conversations_channel_binding_key.  Indexed by
 * binding_variant().
 */
static LeaseStatement binding_stmts[4] = {
	{
		.name = "find the channel's conversation",
		.sql = BINDING_LOOKUP(VAULT_IS_VALUE, ENV_IS_VALUE),
		.nargs = BINDING_SCOPE_NARGS, .argtypes = BINDING_SCOPE_ARGTYPES, .expected = SPI_OK_SELECT
	},
	{
		.name = "find the channel's conversation (no vault)",
		.sql = BINDING_LOOKUP(VAULT_IS_NULL, ENV_IS_VALUE),
		.nargs = BINDING_SCOPE_NARGS, .argtypes = BINDING_SCOPE_ARGTYPES, .expected = SPI_OK_SELECT
	},
	{
		.name = "find the channel's conversation (no environment)",
		.sql = BINDING_LOOKUP(VAULT_IS_VALUE, ENV_IS_NULL),
		.nargs = BINDING_SCOPE_NARGS, .argtypes = BINDING_SCOPE_ARGTYPES, .expected = SPI_OK_SELECT
	},
	{
		.name = "find the channel's conversation (no vault, no environment)",
		.sql = BINDING_LOOKUP(VAULT_IS_NULL, ENV_IS_NULL),
		.nargs = BINDING_SCOPE_NARGS, .argtypes = BINDING_SCOPE_ARGTYPES, .expected = SPI_OK_SELECT
	},
};

/*
 * Active sandboxes fleet-wide and of tenant $1, and the tenant's own limit
 * (NULL: none).  Both counts are served by sandboxes_active_user_idx.
 */
static LeaseStatement quota_stmt = {
	.name = "count active sandboxes",
	.sql =
	"SELECT (SELECT pg_catalog.count(*) FROM lease.sandboxes AS s"
	"         WHERE s.status OPERATOR(pg_catalog.=) ANY (" BINDING_ACTIVE_SANDBOX_STATUSES ")),"
	"       (SELECT pg_catalog.count(*) FROM lease.sandboxes AS s"
	"         WHERE s.user_id OPERATOR(pg_catalog.=) $1"
	"           AND s.status OPERATOR(pg_catalog.=) ANY (" BINDING_ACTIVE_SANDBOX_STATUSES ")),"
	"       (SELECT t.sandbox_limit FROM lease.tenant_limits AS t"
	"         WHERE t.user_id OPERATOR(pg_catalog.=) $1)",
	.nargs = 1,
	.argtypes = {TEXTOID},
	.expected = SPI_OK_SELECT
};

/* A pending sandbox and a pending conversation on it, bound to $5 (or unbound). */
#define BINDING_ADMIT_SANDBOX \
	"WITH s AS (INSERT INTO lease.sandboxes (user_id, status) VALUES ($1, " LEASE_SQL_WORD(BINDING_STATUS_PENDING) ")" \
	"           RETURNING id)"

/*
 * The sandbox's conversation (with lease.conversation_id_partition): the id
 * is the identity sequence's next value n, or n * id_stride + id_offset when
 * the table holds its row (a partition behind the pg_lease_router router:
 * its ids are then unique across partitions and name the partition that
 * made them).  Either way a new id is at least n, so it is above every id
 * made before.
 */
static LeaseStatement admit_routable_stmt = {
	.name = "insert the sandbox and the conversation with a routable id",
	.sql =
	BINDING_ADMIT_SANDBOX
	" INSERT INTO lease.conversations"
	"   (id, user_id, agent_id, vault_id, environment_id, channel_id, sandbox_id, status, rotated_from)"
	" OVERRIDING SYSTEM VALUE"
	" SELECT COALESCE((SELECT n.v OPERATOR(pg_catalog.*) CAST(p.id_stride AS pg_catalog.int8)"
	"                         OPERATOR(pg_catalog.+) p.id_offset"
	"                    FROM lease.conversation_id_partition AS p), n.v),"
	"        $1, $2, $3, $4, $5, s.id, " LEASE_SQL_WORD(BINDING_STATUS_PENDING) ", $6"
	"   FROM s, LATERAL (SELECT pg_catalog.nextval(CAST('lease.conversations_id_seq' AS pg_catalog.regclass)) AS v) AS n"
	" RETURNING id",
	.nargs = BINDING_SCOPE_NARGS,
	.argtypes = BINDING_SCOPE_ARGTYPES,
	.expected = SPI_OK_INSERT_RETURNING
};

/*
 * end_conversation: terminate a live conversation, clear its binding, and
 * terminate its sandbox unless that has already ended.  Returns one row when
 * the conversation was live.
 */
static LeaseStatement end_stmt = {
	.name = "end the conversation",
	.sql =
	"WITH c AS (UPDATE lease.conversations AS c"
	"              SET status = " LEASE_SQL_WORD(BINDING_STATUS_TERMINATED) ", channel_id = NULL, updated_at = pg_catalog.now()"
	"            WHERE c.id OPERATOR(pg_catalog.=) $1"
	"              AND c.status OPERATOR(pg_catalog.=) ANY (" BINDING_LIVE_CONVERSATION_STATUSES ")"
	"            RETURNING c.sandbox_id),"
	BINDING_SQL_END_SANDBOXES("c")
	" SELECT true FROM c",
	.nargs = 1,
	.argtypes = {INT8OID},
	.expected = SPI_OK_SELECT
};

/* Fills a scope from arguments 0..3. */
void
binding_scope_args(FunctionCallInfo fcinfo, BindingScope *scope)
{
	scope->user_id = lease_arg_ident(fcinfo, 0, "user_id");
	scope->agent_id = lease_arg_ident(fcinfo, 1, "agent_id");
	scope->vault_null = !lease_arg_opt_ident(fcinfo, 2, "vault_id", &scope->vault_id);
	scope->environment_null = !lease_arg_opt_ident(fcinfo, 3, "environment_id",
												   &scope->environment_id);
}

/* Fills the six parameters of a scoped statement. */
void
binding_scope_params(const BindingScope *scope, bool has_channel, Datum channel_id,
				   bool has_id, int64 id, Datum *values, char *nulls)
{
	values[0] = scope->user_id;
	values[1] = scope->agent_id;
	values[2] = scope->vault_null ? (Datum) 0 : scope->vault_id;
	values[3] = scope->environment_null ? (Datum) 0 : scope->environment_id;
	values[4] = has_channel ? channel_id : (Datum) 0;
	values[5] = has_id ? Int64GetDatum(id) : (Datum) 0;
	nulls[0] = ' ';
	nulls[1] = ' ';
	nulls[2] = scope->vault_null ? 'n' : ' ';
	nulls[3] = scope->environment_null ? 'n' : ' ';
	nulls[4] = has_channel ? ' ' : 'n';
	nulls[5] = has_id ? ' ' : 'n';
}

/* Which of binding_stmts matches the scope's NULL-ness. */
static int
binding_variant(const BindingScope *scope)
{
	return (scope->vault_null ? 1 : 0) | (scope->environment_null ? 2 : 0);
}

/*
 * The conversation bound to the channel in the scope; false when none.
 * latest: admission's look, which sees every binding committed before it
 * whatever the caller's isolation level (lease_spi_run_latest).
 */
static bool
find_binding(const BindingScope *scope, Datum channel_id, bool latest, int64 *conversation_id)
{
	Datum		values[BINDING_SCOPE_NARGS];
	char		nulls[BINDING_SCOPE_NARGS];
	LeaseStatement *stmt = &binding_stmts[binding_variant(scope)];
	bool		isnull;
	uint64		found;

	binding_scope_params(scope, true, channel_id, false, 0, values, nulls);
	found = latest ? lease_spi_run_latest(stmt, values, nulls, 1) : lease_spi_run(stmt, values, nulls, 1);
	if (found == 0)
		return false;
	*conversation_id = DatumGetInt64(lease_spi_value(0, 1, &isnull));
	return true;
}

/* The admission lock: the gate's one row (lease.admission_gate). */
static LeaseStatement gate_stmt = {
	.name = "lock the admission gate",
	.sql =
	"SELECT g.only_row FROM lease.admission_gate AS g"
	" FOR NO KEY UPDATE OF g",
	.nargs = 0,
	.expected = SPI_OK_SELECT,
	LEASE_STMT_LOCK_TIMEOUT(lease_admission_lock_timeout_ms)
};

/*
 * Runs a locking read whose statement sets lock_timeout =
 * lease.admission_lock_timeout for exactly itself; returns its row count.
 * Its lock timeout is raised again as 55P03 saying what is busy: the
 * conversation when `conversation` is given, else admission.  Any other error goes through unchanged.  The
 * caller's lock_timeout is back afterwards, or after the rollback of the
 * (sub)transaction that the error aborts.
 */
static uint64
run_bounded_or_busy(LeaseStatement *stmt, Datum *values, const int64 *conversation)
{
	MemoryContext cxt = CurrentMemoryContext;
	volatile uint64 processed = 0;

	PG_TRY();
	{
		processed = lease_spi_run(stmt, values, NULL, 1);
	}
	PG_CATCH();
	{
		ErrorData  *error;

		MemoryContextSwitchTo(cxt);
		error = CopyErrorData();
		if (error->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
			PG_RE_THROW();
		FlushErrorState();
		if (conversation != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
					 errmsg("conversation " INT64_FORMAT " is busy", *conversation),
					 errdetail("Another transaction held the conversation for longer than lease.admission_lock_timeout (%d ms): a turn being admitted on it, a rotation, a restore or an end.",
							   lease_admission_lock_timeout_ms),
					 errhint("Retry the call.")));
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("admission is busy"),
				 errdetail("Another admission held the admission lock for longer than lease.admission_lock_timeout (%d ms).",
						   lease_admission_lock_timeout_ms),
				 errhint("Retry the call. Admissions take turns: call each one in its own short transaction.")));
	}
	PG_END_TRY();
	return processed;
}

/* Takes the admission lock (conversations.h), its wait bounded. */
static void
lock_admission(BindingAdmission *result)
{
	result->waiting_for_lock = true;
	if (run_bounded_or_busy(&gate_stmt, NULL, NULL) != 1)
		elog(ERROR, "pg_lease: lease.admission_gate does not hold its one row");
	result->waiting_for_lock = false;
}

/* Admission: see conversations.h. */
void
binding_admit(const BindingScope *scope, bool has_channel,
			Datum channel_id, bool has_from, int64 rotated_from, BindingAdmission *result)
{
	Datum		values[BINDING_SCOPE_NARGS];
	char		nulls[BINDING_SCOPE_NARGS];
	int64		fleet_active;
	int64		tenant_active;
	int32		tenant_limit;
	bool		isnull;

	memset(result, 0, sizeof(*result));
	lock_admission(result);

	if (has_channel && find_binding(scope, channel_id, true, &result->conversation_id))
	{
		result->outcome = BINDING_ADMIT_ALREADY_BOUND;
		return;
	}

	values[0] = scope->user_id;
	lease_spi_run_latest(&quota_stmt, values, NULL, 1);
	fleet_active = DatumGetInt64(lease_spi_value(0, 1, &isnull));
	tenant_active = DatumGetInt64(lease_spi_value(0, 2, &isnull));
	tenant_limit = DatumGetInt32(lease_spi_value(0, 3, &isnull));
	if (isnull)
		tenant_limit = lease_default_sandbox_limit;

	if (fleet_active >= lease_fleet_capacity)
	{
		result->outcome = BINDING_ADMIT_REFUSED;
		result->fleet_full = true;
		result->limit = lease_fleet_capacity;
		return;
	}
	if (tenant_active >= tenant_limit)
	{
		result->outcome = BINDING_ADMIT_REFUSED;
		result->fleet_full = false;
		result->limit = tenant_limit;
		return;
	}

	binding_scope_params(scope, has_channel, channel_id, has_from, rotated_from, values, nulls);
	if (lease_spi_run(&admit_routable_stmt, values, nulls, 0) != 1)
		elog(ERROR, "pg_lease: admission inserted no conversation");
	result->outcome = BINDING_ADMIT_STARTED;
	result->conversation_id = DatumGetInt64(lease_spi_value(0, 1, &isnull));
}

/* The refused detail. */
char *
binding_admission_refusal(const BindingAdmission *admission)
{
	Assert(admission->outcome == BINDING_ADMIT_REFUSED);
	if (admission->fleet_full)
		return psprintf("fleet capacity of %d active sandboxes reached;"
						" retry once conversations have ended (lease.end_conversation)",
						admission->limit);
	return psprintf("tenant limit of %d active sandboxes reached;"
					" end one of the tenant's conversations (lease.end_conversation) and retry",
					admission->limit);
}

/* Returns one row from a RETURNS TABLE function. */
void
binding_return_row(FunctionCallInfo fcinfo, Datum *values, bool *nulls)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	InitMaterializedSRF(fcinfo, 0);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/* A text Datum, or NULL. */
static void
set_text(Datum *value, bool *isnull, const char *text)
{
	*isnull = (text == NULL);
	*value = text ? CStringGetTextDatum(text) : (Datum) 0;
}

/* lease.start_conversation: started, already_bound or refused. */
static Datum
start_conversation(FunctionCallInfo fcinfo, LeaseSchema schema)
{
	BindingScope scope;
	Datum		channel_id = (Datum) 0;
	bool		has_channel;
	BindingAdmission admission;
	Datum		values[3];
	bool		nulls[3] = {false, false, false};
	const char *outcome = NULL;
	char	   *detail = NULL;

	binding_scope_args(fcinfo, &scope);
	has_channel = lease_arg_opt_ident(fcinfo, 4, "channel_id", &channel_id);

	lease_spi_connect();
	binding_admit(&scope, has_channel, channel_id, false, 0, &admission);
	lease_spi_finish();

	switch (admission.outcome)
	{
		case BINDING_ADMIT_STARTED:
			outcome = BINDING_OUTCOME_STARTED;
			break;
		case BINDING_ADMIT_ALREADY_BOUND:
			outcome = BINDING_OUTCOME_ALREADY_BOUND;
			detail = "the channel is already bound in this scope to the conversation returned;"
				" use that one, or replace it with lease.rotate_channel()";
			break;
		case BINDING_ADMIT_REFUSED:
			outcome = BINDING_OUTCOME_REFUSED;
			detail = binding_admission_refusal(&admission);
			break;
	}

	set_text(&values[0], &nulls[0], outcome);
	values[1] = Int64GetDatum(admission.conversation_id);
	nulls[1] = (admission.outcome == BINDING_ADMIT_REFUSED);
	set_text(&values[2], &nulls[2], detail);
	binding_return_row(fcinfo, values, nulls);
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(lease_start_conversation_0_4);
/* lease.start_conversation as the 0.4.0 script binds it. */
Datum lease_start_conversation_0_4(PG_FUNCTION_ARGS) { return start_conversation(fcinfo, LEASE_SCHEMA_0_4); }

PG_FUNCTION_INFO_V1(lease_find_channel_conversation);

/* lease.find_channel_conversation: the bound conversation, or NULL. */
Datum
lease_find_channel_conversation(PG_FUNCTION_ARGS)
{
	BindingScope scope;
	Datum		channel_id;
	int64		conversation_id;
	bool		found;

	binding_scope_args(fcinfo, &scope);
	channel_id = lease_arg_ident(fcinfo, 4, "channel_id");

	lease_spi_connect();
	found = find_binding(&scope, channel_id, false, &conversation_id);
	lease_spi_finish();

	if (!found)
		PG_RETURN_NULL();
	PG_RETURN_INT64(conversation_id);
}

/* conversations.h */
uint64
binding_run_bounded_or_busy(LeaseStatement *stmt, Datum *values, const int64 *conversation)
{
	return run_bounded_or_busy(stmt, values, conversation);
}

PG_FUNCTION_INFO_V1(lease_end_conversation);

/* lease.end_conversation: true when it ended a live conversation. */
Datum
lease_end_conversation(PG_FUNCTION_ARGS)
{
	Datum		id = Int64GetDatum(lease_arg_int64(fcinfo, 0, "conversation_id"));

	PG_RETURN_BOOL(lease_spi_exec(&end_stmt, &id, NULL) > 0);
}
