/*-------------------------------------------------------------------------
 *
 * src/bindings/lifecycle.h
 *	  The lifecycle of a rotation (0.4.0): the previous conversation ends,
 *	  and its sandbox slot is freed, exactly when the replacement starts
 *	  (its first turn, or confirm_rotation); the tenant's quotas as
 *	  functions; the conversations of a tenant as the application sees them.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BINDING_LIFECYCLE_H
#define BINDING_LIFECYCLE_H

#include "fmgr.h"
#include "common/spi_util.h"

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
 * Before the conversation's own lock (SPI connected): finds, without locks,
 * the live, unbound ancestors up the rotated_from chain of a pending
 * conversation (across failed ones; the walk stops at a conversation that
 * holds a channel or has ended) and locks them FOR NO KEY UPDATE, oldest
 * first, the wait bounded by lease.admission_lock_timeout (55P03
 * "conversation N is busy").  Oldest first is restore_rotated_channel's
 * order, so the two never wait on each other in a cycle.
 */
extern void binding_lock_rotated_ancestors(int64 conversation_id, BindingAncestors *ancestors);

/*
 * Under the conversation's lock, once it is known to be pending: ends the
 * locked ancestors that the chain, walked again, still reaches (a
 * conversation and its sandbox become terminated, as end_conversation
 * does); returns how many ended.
 */
extern int64 binding_end_rotated_ancestors(int64 conversation_id, const BindingAncestors *ancestors);

/*
 * Raises 22023 unless conversation `id` exists and was rotated from
 * `previous_id` (restore_rotated_channel's check, rotation.c); returns the
 * channel it holds (NULL: none).
 */
extern char *binding_check_rotation_pair(int64 previous_id, int64 id);

/*
 * admit_turn's lock on the conversation and the statement that runs it,
 * with its bounded wait (conversations.c).
 */
extern uint64 binding_run_bounded_or_busy(LeaseStatement *stmt, Datum *values,
										const int64 *conversation);

#endif							/* BINDING_LIFECYCLE_H */
