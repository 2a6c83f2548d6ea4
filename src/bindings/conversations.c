/*-------------------------------------------------------------------------
 *
 * src/bindings/conversations.c
 *	  Conversations and their channel bindings: start_conversation,
 *	  find_channel_conversation, admit_turn, end_conversation, and the
 *	  admission routine rotate_channel shares with start_conversation.
 *
 * Admission is serialized by two transaction-scoped advisory locks, the
 * fleet lock (lease.fleet_lock_namespace, 0) and then the tenant's lock
 * (lease.fleet_lock_namespace, hashtext(user_id)).  Counting active sandboxes
 * and inserting the new one happen under them, and they are held until the
 * caller's transaction ends, so the next admission's count (a new statement,
 * hence a new READ COMMITTED snapshot, taken after it got the locks) sees
 * every sandbox admitted before it: quota counts are exact.  That is why
 * these functions are meant to be called in their own short transaction.
 *
 * No admission ever waits for a row lock while it holds the fleet lock: the
 * binding check and the quota count are plain reads, and the inserts cannot
 * conflict with an uncommitted binding (a binding is only inserted under the
 * fleet lock, and a restore only moves a channel that a locked row holds).
 *
 *-------------------------------------------------------------------------
 */
#include "pg_lease.h"

#include "catalog/namespace.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/lsyscache.h"
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
	" WHERE " LEASE_SCOPE_USER_AGENT " AND " vault " AND " env \
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
		.nargs = LEASE_SCOPE_NARGS, .argtypes = LEASE_SCOPE_ARGTYPES, .expected = SPI_OK_SELECT
	},
	{
		.name = "find the channel's conversation (no vault)",
		.sql = BINDING_LOOKUP(VAULT_IS_NULL, ENV_IS_VALUE),
		.nargs = LEASE_SCOPE_NARGS, .argtypes = LEASE_SCOPE_ARGTYPES, .expected = SPI_OK_SELECT
	},
	{
		.name = "find the channel's conversation (no environment)",
		.sql = BINDING_LOOKUP(VAULT_IS_VALUE, ENV_IS_NULL),
		.nargs = LEASE_SCOPE_NARGS, .argtypes = LEASE_SCOPE_ARGTYPES, .expected = SPI_OK_SELECT
	},
	{
		.name = "find the channel's conversation (no vault, no environment)",
		.sql = BINDING_LOOKUP(VAULT_IS_NULL, ENV_IS_NULL),
		.nargs = LEASE_SCOPE_NARGS, .argtypes = LEASE_SCOPE_ARGTYPES, .expected = SPI_OK_SELECT
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
	"         WHERE s.status OPERATOR(pg_catalog.=) ANY (" LEASE_ACTIVE_SANDBOX_STATUSES ")),"
	"       (SELECT pg_catalog.count(*) FROM lease.sandboxes AS s"
	"         WHERE s.user_id OPERATOR(pg_catalog.=) $1"
	"           AND s.status OPERATOR(pg_catalog.=) ANY (" LEASE_ACTIVE_SANDBOX_STATUSES ")),"
	"       (SELECT t.sandbox_limit FROM lease.tenant_limits AS t"
	"         WHERE t.user_id OPERATOR(pg_catalog.=) $1)",
	.nargs = 1,
	.argtypes = {TEXTOID},
	.expected = SPI_OK_SELECT
};

/* A pending sandbox and a pending conversation on it, bound to $5 (or unbound). */
#define LEASE_ADMIT_SANDBOX \
	"WITH s AS (INSERT INTO lease.sandboxes (user_id, status) VALUES ($1, " LEASE_SQL_WORD(LEASE_STATUS_PENDING) ")" \
	"           RETURNING id)"

static LeaseStatement admit_stmt = {
	.name = "insert the sandbox and the conversation",
	.sql =
	LEASE_ADMIT_SANDBOX
	" INSERT INTO lease.conversations"
	"   (user_id, agent_id, vault_id, environment_id, channel_id, sandbox_id, status, rotated_from)"
	" SELECT $1, $2, $3, $4, $5, s.id, " LEASE_SQL_WORD(LEASE_STATUS_PENDING) ", $6 FROM s"
	" RETURNING id",
	.nargs = LEASE_SCOPE_NARGS,
	.argtypes = LEASE_SCOPE_ARGTYPES,
	.expected = SPI_OK_INSERT_RETURNING
};

/*
 * The same, from 0.3.0 on (lease.conversation_id_partition exists): the id
 * is the identity sequence's next value n, or n * id_stride + id_offset when
 * the table holds its row (a partition behind the pg_lease_router router:
 * its ids are then unique across partitions and name the partition that
 * made them).  Either way a new id is at least n, so it is above every id
 * made before.
 */
static LeaseStatement admit_routable_stmt = {
	.name = "insert the sandbox and the conversation with a routable id",
	.sql =
	LEASE_ADMIT_SANDBOX
	" INSERT INTO lease.conversations"
	"   (id, user_id, agent_id, vault_id, environment_id, channel_id, sandbox_id, status, rotated_from)"
	" OVERRIDING SYSTEM VALUE"
	" SELECT COALESCE((SELECT n.v OPERATOR(pg_catalog.*) CAST(p.id_stride AS pg_catalog.int8)"
	"                         OPERATOR(pg_catalog.+) p.id_offset"
	"                    FROM lease.conversation_id_partition AS p), n.v),"
	"        $1, $2, $3, $4, $5, s.id, " LEASE_SQL_WORD(LEASE_STATUS_PENDING) ", $6"
	"   FROM s, LATERAL (SELECT pg_catalog.nextval(CAST('lease.conversations_id_seq' AS pg_catalog.regclass)) AS v) AS n"
	" RETURNING id",
	.nargs = LEASE_SCOPE_NARGS,
	.argtypes = LEASE_SCOPE_ARGTYPES,
	.expected = SPI_OK_INSERT_RETURNING
};

/*
 * True when the installed schema has lease.conversation_id_partition (0.3.0
 * and later); a database still at an older version until ALTER EXTENSION
 * UPDATE keeps plain ids.
 */
static bool
has_id_partition_table(void)
{
	Oid			nsp = get_namespace_oid("lease", true);

	return OidIsValid(nsp) &&
		OidIsValid(get_relname_relid("conversation_id_partition", nsp));
}

/* admit_turn: the conversation's sandbox, read without a lock (it never changes). */
static LeaseStatement turn_target_stmt = {
	.name = "find the conversation's sandbox",
	.sql =
	"SELECT c.sandbox_id FROM lease.conversations AS c"
	" WHERE c.id OPERATOR(pg_catalog.=) $1",
	.nargs = 1,
	.argtypes = {INT8OID},
	.expected = SPI_OK_SELECT
};

/* admit_turn: the conversation, locked FOR UPDATE (what a rotation waits on). */
static LeaseStatement turn_lock_stmt = {
	.name = "lock the conversation for a turn",
	.sql =
	"SELECT c.status FROM lease.conversations AS c"
	" WHERE c.id OPERATOR(pg_catalog.=) $1"
	" FOR UPDATE OF c",
	.nargs = 1,
	.argtypes = {INT8OID},
	.expected = SPI_OK_SELECT
};

/* admit_turn: insert the turn; a pending conversation becomes running. */
static LeaseStatement turn_insert_stmt = {
	.name = "insert the turn",
	.sql =
	"WITH t AS (INSERT INTO lease.turns (conversation_id) VALUES ($1) RETURNING id),"
	"     u AS (UPDATE lease.conversations AS c"
	"              SET status = " LEASE_SQL_WORD(LEASE_STATUS_RUNNING) ", updated_at = pg_catalog.now()"
	"            WHERE c.id OPERATOR(pg_catalog.=) $1"
	"              AND c.status OPERATOR(pg_catalog.=) " LEASE_SQL_WORD(LEASE_STATUS_PENDING) ")"
	" SELECT t.id FROM t",
	.nargs = 1,
	.argtypes = {INT8OID},
	.expected = SPI_OK_SELECT
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
	"              SET status = " LEASE_SQL_WORD(LEASE_STATUS_TERMINATED) ", channel_id = NULL, updated_at = pg_catalog.now()"
	"            WHERE c.id OPERATOR(pg_catalog.=) $1"
	"              AND c.status OPERATOR(pg_catalog.=) ANY (" LEASE_LIVE_CONVERSATION_STATUSES ")"
	"            RETURNING c.sandbox_id),"
	"     s AS (UPDATE lease.sandboxes AS s"
	"              SET status = " LEASE_SQL_WORD(LEASE_STATUS_TERMINATED) ", updated_at = pg_catalog.now()"
	"             FROM c"
	"            WHERE s.id OPERATOR(pg_catalog.=) c.sandbox_id"
	"              AND s.status OPERATOR(pg_catalog.<>) ALL (ARRAY[" LEASE_SQL_WORD(LEASE_STATUS_TERMINATED) ", " LEASE_SQL_WORD(LEASE_STATUS_FAILED) "]))"
	" SELECT true FROM c",
	.nargs = 1,
	.argtypes = {INT8OID},
	.expected = SPI_OK_SELECT
};

/* Fills a scope from arguments 0..3. */
void
lease_scope_args(FunctionCallInfo fcinfo, LeaseScope *scope)
{
	scope->user_id = lease_arg_ident(fcinfo, 0, "user_id");
	scope->agent_id = lease_arg_ident(fcinfo, 1, "agent_id");
	scope->vault_null = !lease_arg_opt_ident(fcinfo, 2, "vault_id", &scope->vault_id);
	scope->environment_null = !lease_arg_opt_ident(fcinfo, 3, "environment_id",
												   &scope->environment_id);
}

/* Fills the six parameters of a scoped statement. */
void
lease_scope_params(const LeaseScope *scope, bool has_channel, Datum channel_id,
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
binding_variant(const LeaseScope *scope)
{
	return (scope->vault_null ? 1 : 0) | (scope->environment_null ? 2 : 0);
}

/* The conversation bound to the channel in the scope; false when none. */
static bool
find_binding(const LeaseScope *scope, Datum channel_id, int64 *conversation_id)
{
	Datum		values[LEASE_SCOPE_NARGS];
	char		nulls[LEASE_SCOPE_NARGS];
	bool		isnull;

	lease_scope_params(scope, true, channel_id, false, 0, values, nulls);
	if (lease_spi_run(&binding_stmts[binding_variant(scope)], values, nulls, 1) == 0)
		return false;
	*conversation_id = DatumGetInt64(lease_spi_value(0, 1, &isnull));
	return true;
}

/* Takes the fleet and then the tenant admission lock, both transaction-scoped. */
static void
lock_admission(Datum user_id)
{
	int32		tenant_key;

	tenant_key = DatumGetInt32(DirectFunctionCall1Coll(hashtext, C_COLLATION_OID, user_id));
	DirectFunctionCall2(pg_advisory_xact_lock_int4,
						Int32GetDatum(lease_fleet_lock_namespace), Int32GetDatum(0));
	DirectFunctionCall2(pg_advisory_xact_lock_int4,
						Int32GetDatum(lease_fleet_lock_namespace), Int32GetDatum(tenant_key));
}

/* Admission: see conversations.h. */
void
lease_admit(const LeaseScope *scope, bool has_channel, Datum channel_id,
			bool has_from, int64 rotated_from, LeaseAdmission *result)
{
	Datum		values[LEASE_SCOPE_NARGS];
	char		nulls[LEASE_SCOPE_NARGS];
	int64		fleet_active;
	int64		tenant_active;
	int32		tenant_limit;
	bool		isnull;

	memset(result, 0, sizeof(*result));
	lock_admission(scope->user_id);

	if (has_channel && find_binding(scope, channel_id, &result->conversation_id))
	{
		result->outcome = LEASE_ADMIT_ALREADY_BOUND;
		return;
	}

	values[0] = scope->user_id;
	lease_spi_run(&quota_stmt, values, NULL, 1);
	fleet_active = DatumGetInt64(lease_spi_value(0, 1, &isnull));
	tenant_active = DatumGetInt64(lease_spi_value(0, 2, &isnull));
	tenant_limit = DatumGetInt32(lease_spi_value(0, 3, &isnull));
	if (isnull)
		tenant_limit = lease_default_sandbox_limit;

	if (fleet_active >= lease_fleet_capacity)
	{
		result->outcome = LEASE_ADMIT_REFUSED;
		result->fleet_full = true;
		result->limit = lease_fleet_capacity;
		return;
	}
	if (tenant_active >= tenant_limit)
	{
		result->outcome = LEASE_ADMIT_REFUSED;
		result->fleet_full = false;
		result->limit = tenant_limit;
		return;
	}

	lease_scope_params(scope, has_channel, channel_id, has_from, rotated_from, values, nulls);
	if (lease_spi_run(has_id_partition_table() ? &admit_routable_stmt : &admit_stmt,
					  values, nulls, 0) != 1)
		elog(ERROR, "pg_lease: admission inserted no conversation");
	result->outcome = LEASE_ADMIT_STARTED;
	result->conversation_id = DatumGetInt64(lease_spi_value(0, 1, &isnull));
}

/* The refused detail. */
char *
lease_admission_refusal(const LeaseAdmission *admission)
{
	Assert(admission->outcome == LEASE_ADMIT_REFUSED);
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
lease_return_row(FunctionCallInfo fcinfo, Datum *values, bool *nulls)
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

PG_FUNCTION_INFO_V1(lease_start_conversation);

/* lease.start_conversation: started, already_bound or refused. */
Datum
lease_start_conversation(PG_FUNCTION_ARGS)
{
	LeaseScope	scope;
	Datum		channel_id = (Datum) 0;
	bool		has_channel;
	LeaseAdmission admission;
	Datum		values[3];
	bool		nulls[3] = {false, false, false};
	const char *outcome = NULL;
	char	   *detail = NULL;

	lease_scope_args(fcinfo, &scope);
	has_channel = lease_arg_opt_ident(fcinfo, 4, "channel_id", &channel_id);

	lease_spi_connect();
	lease_admit(&scope, has_channel, channel_id, false, 0, &admission);
	lease_spi_finish();

	switch (admission.outcome)
	{
		case LEASE_ADMIT_STARTED:
			outcome = LEASE_OUTCOME_STARTED;
			break;
		case LEASE_ADMIT_ALREADY_BOUND:
			outcome = LEASE_OUTCOME_ALREADY_BOUND;
			detail = "the channel is already bound in this scope to the conversation returned;"
				" use that one, or replace it with lease.rotate_channel()";
			break;
		case LEASE_ADMIT_REFUSED:
			outcome = LEASE_OUTCOME_REFUSED;
			detail = lease_admission_refusal(&admission);
			break;
	}

	set_text(&values[0], &nulls[0], outcome);
	values[1] = Int64GetDatum(admission.conversation_id);
	nulls[1] = (admission.outcome == LEASE_ADMIT_REFUSED);
	set_text(&values[2], &nulls[2], detail);
	lease_return_row(fcinfo, values, nulls);
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(lease_find_channel_conversation);

/* lease.find_channel_conversation: the bound conversation, or NULL. */
Datum
lease_find_channel_conversation(PG_FUNCTION_ARGS)
{
	LeaseScope	scope;
	Datum		channel_id;
	int64		conversation_id;
	bool		found;

	lease_scope_args(fcinfo, &scope);
	channel_id = lease_arg_ident(fcinfo, 4, "channel_id");

	lease_spi_connect();
	found = find_binding(&scope, channel_id, &conversation_id);
	lease_spi_finish();

	if (!found)
		PG_RETURN_NULL();
	PG_RETURN_INT64(conversation_id);
}

PG_FUNCTION_INFO_V1(lease_admit_turn);

/* lease.admit_turn: the new turn's id. */
Datum
lease_admit_turn(PG_FUNCTION_ARGS)
{
	int64		conversation_id = lease_arg_int64(fcinfo, 0, "conversation_id");
	Datum		id = Int64GetDatum(conversation_id);
	Datum		sandbox_id;
	char	   *status;
	int64		turn_id;
	bool		isnull;

	lease_spi_connect();

	if (lease_spi_run(&turn_target_stmt, &id, NULL, 1) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("conversation " INT64_FORMAT " does not exist", conversation_id),
				 errhint("Look the conversation up with lease.find_channel_conversation().")));
	sandbox_id = lease_spi_value(0, 1, &isnull);
	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("conversation " INT64_FORMAT " has no sandbox", conversation_id),
				 errdetail("Turns are admitted one at a time per sandbox, so a conversation needs one."),
				 errhint("Start conversations with lease.start_conversation() or lease.rotate_channel(), which give them a sandbox.")));

	/* Turns of one sandbox are admitted one at a time. */
	DirectFunctionCall2(pg_advisory_xact_lock_int4,
						Int32GetDatum(lease_sandbox_lock_namespace),
						DirectFunctionCall1(hashint8, sandbox_id));

	if (lease_spi_run(&turn_lock_stmt, &id, NULL, 1) == 0)
		elog(ERROR, "pg_lease: conversation " INT64_FORMAT " disappeared", conversation_id);
	status = TextDatumGetCString(lease_spi_value(0, 1, &isnull));
	if (strcmp(status, LEASE_STATUS_FAILED) == 0 || strcmp(status, LEASE_STATUS_TERMINATED) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("conversation " INT64_FORMAT " has ended", conversation_id),
				 errdetail("Its status is \"%s\".", status),
				 errhint("Start a new conversation.")));

	lease_spi_run(&turn_insert_stmt, &id, NULL, 1);
	turn_id = DatumGetInt64(lease_spi_value(0, 1, &isnull));
	lease_spi_finish();

	PG_RETURN_INT64(turn_id);
}

PG_FUNCTION_INFO_V1(lease_end_conversation);

/* lease.end_conversation: true when it ended a live conversation. */
Datum
lease_end_conversation(PG_FUNCTION_ARGS)
{
	Datum		id = Int64GetDatum(lease_arg_int64(fcinfo, 0, "conversation_id"));

	PG_RETURN_BOOL(lease_spi_exec(&end_stmt, &id, NULL) > 0);
}
