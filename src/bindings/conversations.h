/*-------------------------------------------------------------------------
 *
 * src/bindings/conversations.h
 *	  Conversations and their channel bindings: scopes, the binding lookup,
 *	  and admission (quota check + inserts under the admission lock), shared
 *	  by start_conversation and rotate_channel.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BINDING_CONVERSATIONS_H
#define BINDING_CONVERSATIONS_H

#include "fmgr.h"

#include "common/spi_util.h"
#include "common/version.h"

/*
 * Status lists as SQL array literals, for "status OPERATOR(pg_catalog.=) ANY
 * (...)".  Active sandboxes count against the quotas (the predicate of
 * sandboxes_active_user_idx is the same list); live conversations are the
 * only ones that may hold a channel (conversations_binding_live_check).
 */
#define BINDING_ACTIVE_SANDBOX_STATUSES	"ARRAY['pending', 'starting', 'ready']"
#define BINDING_LIVE_CONVERSATION_STATUSES "ARRAY['pending', 'running', 'idle']"

/*
 * The statuses pg_lease itself writes or tests one by one (the tables'
 * CHECK constraints list every status); LEASE_SQL_WORD (pg_lease.h) puts
 * one in statement text as a literal.
 */
#define BINDING_STATUS_PENDING		"pending"
#define BINDING_STATUS_RUNNING		"running"
#define BINDING_STATUS_IDLE			"idle"
#define BINDING_STATUS_FAILED		"failed"
#define BINDING_STATUS_TERMINATED	"terminated"
#define BINDING_STATUS_STARTING		"starting"
#define BINDING_STATUS_READY		"ready"
#define BINDING_STATUS_SUSPENDED	"suspended"

/*
 * A data-modifying CTE `s` terminating the sandboxes of the conversations
 * that CTE `ended` returns (column sandbox_id), unless already terminated or
 * failed: a conversation that ends frees its sandbox slot (end_conversation,
 * and a replacement's start ending what it replaced).
 */
#define BINDING_SQL_END_SANDBOXES(ended) \
	"     s AS (UPDATE lease.sandboxes AS s" \
	"              SET status = " LEASE_SQL_WORD(BINDING_STATUS_TERMINATED) ", updated_at = pg_catalog.now()" \
	"             FROM " ended \
	"            WHERE s.id OPERATOR(pg_catalog.=) " ended ".sandbox_id" \
	"              AND s.status OPERATOR(pg_catalog.<>) ALL (ARRAY[" LEASE_SQL_WORD(BINDING_STATUS_TERMINATED) ", " LEASE_SQL_WORD(BINDING_STATUS_FAILED) "]))"

/*
 * Outcomes, as start_conversation, rotate_channel and
 * restore_rotated_channel return them (docs/channel-bindings.md).
 */
#define BINDING_OUTCOME_STARTED			"started"
#define BINDING_OUTCOME_ALREADY_BOUND	"already_bound"
#define BINDING_OUTCOME_REFUSED			"refused"
#define BINDING_OUTCOME_ROTATED			"rotated"
#define BINDING_OUTCOME_BUSY			"busy"
#define BINDING_OUTCOME_BINDING_CHANGED	"binding_changed"
#define BINDING_OUTCOME_RESTORED		"restored"
#define BINDING_OUTCOME_SUPERSEDED		"superseded"
#define BINDING_OUTCOME_FAILED			"failed"

/*
 * A binding's scope: (user_id, agent_id, vault_id, environment_id).  A NULL
 * vault or environment is a value of its own (IS NULL), never "any".
 */
typedef struct BindingScope
{
	Datum		user_id;
	Datum		agent_id;
	Datum		vault_id;		/* meaningless when vault_null */
	Datum		environment_id; /* meaningless when environment_null */
	bool		vault_null;
	bool		environment_null;
} BindingScope;

/* Fills a scope from arguments 0..3 (user_id, agent_id, vault_id, environment_id). */
extern void binding_scope_args(FunctionCallInfo fcinfo, BindingScope *scope);

/*
 * The parameters every scoped statement takes: $1 user_id, $2 agent_id,
 * $3 vault_id, $4 environment_id, $5 channel_id (NULL when !has_channel),
 * $6 a conversation id (NULL when !has_id).
 */
#define BINDING_SCOPE_NARGS 6
#define BINDING_SCOPE_ARGTYPES {TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, INT8OID}

/* The (user_id, agent_id) part of a scoped statement's WHERE, table alias c. */
#define BINDING_SCOPE_USER_AGENT \
	"c.user_id OPERATOR(pg_catalog.=) $1 AND c.agent_id OPERATOR(pg_catalog.=) $2"
extern void binding_scope_params(const BindingScope *scope, bool has_channel, Datum channel_id,
							   bool has_id, int64 id, Datum *values, char *nulls);

typedef enum BindingAdmitOutcome
{
	BINDING_ADMIT_STARTED,		/* a sandbox and a conversation were inserted */
	BINDING_ADMIT_ALREADY_BOUND,	/* the channel is bound in the scope; nothing inserted */
	BINDING_ADMIT_REFUSED			/* a quota is full; nothing inserted */
} BindingAdmitOutcome;

typedef struct BindingAdmission
{
	BindingAdmitOutcome outcome;
	int64		conversation_id;	/* started: the new one; already_bound: the holder */
	bool		fleet_full;		/* refused: the fleet capacity (else the tenant limit) */
	int32		limit;			/* refused: the limit that was reached */
	bool		waiting_for_lock;	/* true while admission waits for its lock */
} BindingAdmission;

/*
 * Admission serializes on the one row of lease.admission_gate, FOR NO KEY
 * UPDATE, which only the extension's owner can lock: no role without
 * privileges on the table can hold admissions up.
 */

/*
 * Admission, the one routine behind start_conversation and rotate_channel.
 * SPI must be connected.  Takes the admission lock, held to the end
 * of the caller's transaction, waiting at most lease.admission_lock_timeout
 * (a timeout is 55P03 "admission is busy", raised while
 * result->waiting_for_lock is true); then, when a channel is given, looks
 * for its binding in the scope (already_bound); then counts active
 * sandboxes against lease.fleet_capacity and the tenant's limit (refused),
 * both reading every row committed before they run, at any isolation
 * level (lease_spi_run_latest);
 * then inserts a pending sandbox and a pending conversation bound to the
 * channel, rotated_from set when has_from (its id routable).
 */
extern void binding_admit(const BindingScope *scope, bool has_channel,
						Datum channel_id, bool has_from, int64 rotated_from,
						BindingAdmission *result);

/* The refused detail: which limit was reached. */
extern char *binding_admission_refusal(const BindingAdmission *admission);

/* Returns one row from a RETURNS TABLE function (materialize mode). */
extern void binding_return_row(FunctionCallInfo fcinfo, Datum *values, bool *nulls);

/*
 * Runs a locking read whose statement bounds its own wait by
 * lease.admission_lock_timeout (LEASE_STMT_LOCK_TIMEOUT); returns its row
 * count.  A lock timeout is raised again as 55P03 saying what is busy: the
 * conversation when `conversation` is given, else admission.  For the
 * locks of lifecycle.c and admit_turn.
 */
extern uint64 binding_run_bounded_or_busy(LeaseStatement *stmt, Datum *values,
										const int64 *conversation);

#endif							/* BINDING_CONVERSATIONS_H */
