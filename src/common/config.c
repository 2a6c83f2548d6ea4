/*-------------------------------------------------------------------------
 *
 * src/common/config.c
 *	  The lease.* settings (GUCs), defined when the module loads.
 *
 *-------------------------------------------------------------------------
 */
#include "pg_lease.h"

#include "access/xact.h"

#include <limits.h>

#include "fmgr.h"
#include "utils/guc.h"

#include "common/config.h"

int			lease_default_lease_duration_ms = 10000;
int			lease_default_sandbox_limit = 20;
int			lease_fleet_capacity = 1000;
int			lease_fleet_lock_namespace = 4315;
int			lease_sandbox_lock_namespace = 4316;
int			lease_rotation_lock_timeout_ms = 250;
int			lease_admission_lock_timeout_ms = 1000;
int			lease_handoff_timeout_ms = 30000;
int			lease_liveness_grace_ms = 1000;
bool		lease_restart_grace_on = true;
int			lease_min_synchronous_commit = SYNCHRONOUS_COMMIT_REMOTE_FLUSH;
bool		lease_flush_heartbeats = false;
int			lease_expected_sync_standbys = 0;
int			lease_move_lock_timeout_ms = 2000;
bool		lease_record_events = true;
char	   *lease_notify_channel = NULL;
double		lease_notify_queue_limit = 0.5;

/*
 * lease.min_synchronous_commit's values: synchronous_commit's, weakest
 * first (remote_apply is stronger than any lease write needs).
 */
static const struct config_enum_entry synchronous_commit_levels[] = {
	{"off", SYNCHRONOUS_COMMIT_OFF, false},
	{"local", SYNCHRONOUS_COMMIT_LOCAL_FLUSH, false},
	{"remote_write", SYNCHRONOUS_COMMIT_REMOTE_WRITE, false},
	{"on", SYNCHRONOUS_COMMIT_REMOTE_FLUSH, false},
	{NULL, 0, false}
};

/* See config.h. */
const char *
lease_synchronous_commit_name(int level)
{
	for (const struct config_enum_entry *e = synchronous_commit_levels; e->name; e++)
		if (e->val == level)
			return e->name;
	elog(ERROR, "pg_lease: no synchronous_commit level %d", level);
	return NULL;				/* keep the compiler quiet */
}

/* lease.notify_channel must be usable as a LISTEN channel name. */
static bool
check_notify_channel(char **newval, void **extra, GucSource source)
{
	if (*newval != NULL && strlen(*newval) >= NAMEDATALEN)
	{
		GUC_check_errcode(ERRCODE_INVALID_PARAMETER_VALUE);
		GUC_check_errdetail("A notification channel name is at most %d bytes.", NAMEDATALEN - 1);
		GUC_check_errhint("Choose a shorter channel name, or '' to send no notifications.");
		return false;
	}
	return true;
}

/* Defines the channel-binding GUCs: quotas, lock key spaces, lock waits. */
static void
define_binding_gucs(void)
{
	/*
	 * Quotas and lock key spaces are PGC_SUSET: a role that may only call the
	 * functions must not be able to raise its own quota, nor (on a schema
	 * older than 0.4.0) move its admissions to another advisory-lock key
	 * space and so escape the fleet lock that keeps the counts exact.
	 */
	DefineCustomIntVariable("lease.default_sandbox_limit",
							"Active sandboxes a tenant may have when lease.tenant_limits has no row for it.",
							NULL,
							&lease_default_sandbox_limit,
							20,
							0,
							INT_MAX,
							PGC_SUSET,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("lease.fleet_capacity",
							"Active sandboxes allowed across all tenants.",
							NULL,
							&lease_fleet_capacity,
							1000,
							0,
							INT_MAX,
							PGC_SUSET,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("lease.fleet_lock_namespace",
							"Unused since 0.5.0 (was the first key of the advisory admission locks of schemas 0.1.0 to 0.3.0).",
							NULL,
							&lease_fleet_lock_namespace,
							4315,
							INT_MIN,
							INT_MAX,
							PGC_SUSET,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("lease.sandbox_lock_namespace",
							"Unused since 0.4.0 (admit_turn took a transaction-scoped advisory lock per sandbox in this key space); kept so that configurations setting it stay valid.",
							NULL,
							&lease_sandbox_lock_namespace,
							4316,
							INT_MIN,
							INT_MAX,
							PGC_SUSET,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("lease.rotation_lock_timeout",
							"Longest wait of rotate_channel and restore_rotated_channel for a locked conversation row.",
							"It bounds exactly those locking reads; lock_timeout is back to the caller's value afterwards.",
							&lease_rotation_lock_timeout_ms,
							250,
							1,
							INT_MAX,
							PGC_USERSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("lease.admission_lock_timeout",
							"Longest wait of start_conversation and rotate_channel for the admission lock, and of admit_turn for its conversation.",
							"It bounds exactly those locking reads; lock_timeout is back to the caller's value afterwards.",
							&lease_admission_lock_timeout_ms,
							1000,
							1,
							INT_MAX,
							PGC_USERSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);
}

/* The GUCs of durability: the commit level, the heartbeats' flush and the standbys expected. */
static void
define_durability_gucs(void)
{
	/*
	 * PGC_SUSET: weaker commits give up the promise that no acknowledged
	 * renewal or checkpoint is lost; a worker must not choose that.
	 */
	DefineCustomEnumVariable("lease.min_synchronous_commit",
							 "Weakest synchronous_commit the transaction of a lease function commits with.",
							 "A session's weaker synchronous_commit is raised to it for the rest of the transaction; below on, an acknowledged lease write can be lost in a crash or a failover.",
							 &lease_min_synchronous_commit,
							 SYNCHRONOUS_COMMIT_REMOTE_FLUSH,
							 synchronous_commit_levels,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);

	/*
	 * PGC_SUSET: off (the default) relies on lease.restart_grace for the
	 * heartbeats a crash loses; the fleet's operator decides that, as the
	 * grace itself.
	 */
	DefineCustomBoolVariable("lease.flush_heartbeats",
							 "Makes a transaction that only sends a heartbeat wait for the WAL flush.",
							 "Off, a heartbeat-only transaction (lease.heartbeat, renew_leases) commits without waiting for the flush while lease.restart_grace is on; the grace covers a heartbeat lost in a crash or a failover.",
							 &lease_flush_heartbeats,
							 false,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);

	/*
	 * PGC_SUSET: a fact about the partition's topology (its formation's
	 * number_sync_standbys), set fleet-wide (ALTER SYSTEM); only the metric
	 * lease.monitoring_replication() and its alert read it, and a role that
	 * may only call the functions must not silence that alert.
	 */
	DefineCustomIntVariable("lease.expected_sync_standbys",
							"Synchronous standbys this server should have while it is a primary.",
							"lease.monitoring_replication() reports the shortfall, which the alert PgLeaseSyncStandbysMissing watches; 0 expects none.",
							&lease_expected_sync_standbys,
							0,
							0,
							64,
							PGC_SUSET,
							0,
							NULL, NULL, NULL);
}

/* The GUCs of the ownership events: recording and notifying. */
static void
define_event_gucs(void)
{
	DefineCustomBoolVariable("lease.record_events",
							 "Records every change of a lease's ownership in lease.lease_events.",
							 NULL,
							 &lease_record_events,
							 true,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);

	DefineCustomStringVariable("lease.notify_channel",
							   "pg_notify channel announcing every change of a lease's ownership; empty disables.",
							   NULL,
							   &lease_notify_channel,
							   "lease_events",
							   PGC_USERSET,
							   0,
							   check_notify_channel, NULL, NULL);

	/*
	 * PGC_SUSET: the count of skipped notifications is a fleet-wide metric,
	 * which a worker lowering the limit in its own session would inflate.
	 */
	DefineCustomRealVariable("lease.notify_queue_limit",
							 "Fill of PostgreSQL's NOTIFY queue (pg_notification_queue_usage) at which ownership changes skip their notification.",
							 "A full queue fails every committing transaction that notifies; skipping keeps the change. At 1 only a full queue skips.",
							 &lease_notify_queue_limit,
							 0.5,
							 0.0,
							 1.0,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);
}

/* Defines every lease.* GUC and reserves the prefix. */
void
lease_define_gucs(void)
{
	DefineCustomIntVariable("lease.default_lease_duration",
							"Lease duration used when a function's lease_duration argument is NULL.",
							NULL,
							&lease_default_lease_duration_ms,
							10000,
							1,
							LEASE_MAX_DURATION_MS,
							PGC_USERSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	define_binding_gucs();

	/*
	 * PGC_SUSET: the requester's session sets the deadline, so a worker
	 * that could set it to 1 ms would take a lease from its holder at once,
	 * skipping the graceful handoff the holder relies on.
	 */
	DefineCustomIntVariable("lease.handoff_timeout",
							"Time a lease holder has to hand over a lease another worker asked for.",
							"After it, the requester's next take_leases or take_lease takes the lease.",
							&lease_handoff_timeout_ms,
							30000,
							1,
							LEASE_MAX_DURATION_MS,
							PGC_SUSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("lease.liveness_grace",
							"Time after a missed renewal before the leases of a worker whose session ended may be taken.",
							"Only for workers that declared renew_every; it must be at least the margin their clients allow themselves.",
							&lease_liveness_grace_ms,
							1000,
							0,
							LEASE_MAX_DURATION_MS,
							PGC_SUSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("lease.move_lock_timeout",
							"Longest wait of a stream move's step for the transactions using the stream on its partition.",
							"Meanwhile the stream's new calls wait too; on timeout the step fails with 55P03 and changes nothing.",
							&lease_move_lock_timeout_ms,
							2000,
							1,
							INT_MAX,
							PGC_USERSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	/*
	 * PGC_SUSET: off, a restart that outlasts a lease hands every lease to
	 * the first taker back; a worker must not be able to choose that for
	 * the fleet.
	 */
	DefineCustomBoolVariable("lease.restart_grace",
							 "Gives every lease holder one lease duration to renew after a server restart, crash or promotion.",
							 "Until then a take extends the leases that would expire instead of taking them.",
							 &lease_restart_grace_on,
							 true,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);

	define_durability_gucs();
	define_event_gucs();

	MarkGUCPrefixReserved("lease");
}
