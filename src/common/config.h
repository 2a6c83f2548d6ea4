/*-------------------------------------------------------------------------
 *
 * src/common/config.h
 *	  pg_lease's GUCs (lease.*), defined in _PG_init.
 *
 *-------------------------------------------------------------------------
 */
#ifndef LEASE_CONFIG_H
#define LEASE_CONFIG_H

/* lease.default_lease_duration: milliseconds, used when lease_duration is NULL */
extern int	lease_default_lease_duration_ms;

/* lease.default_sandbox_limit: a tenant's active sandboxes without a tenant_limits row */
extern int	lease_default_sandbox_limit;

/* lease.fleet_capacity: active sandboxes across all tenants */
extern int	lease_fleet_capacity;

/* lease.fleet_lock_namespace: unused since 0.5.0 (was the advisory admission locks of schemas 0.1.0-0.3.0) */
extern int	lease_fleet_lock_namespace;

/* lease.sandbox_lock_namespace: unused since 0.4.0 (was admit_turn's per-sandbox advisory lock) */
extern int	lease_sandbox_lock_namespace;

/* lease.rotation_lock_timeout: milliseconds a rotation or restore waits for a conversation row */
extern int	lease_rotation_lock_timeout_ms;

/* lease.admission_lock_timeout: milliseconds an admission waits for its lock, admit_turn for its conversation */
extern int	lease_admission_lock_timeout_ms;
/* lease.handoff_timeout: milliseconds a holder has to hand a lease over */
extern int	lease_handoff_timeout_ms;

/* lease.liveness_grace: milliseconds after a missed renewal before a gone session's leases may be taken */
extern int	lease_liveness_grace_ms;

/* lease.move_lock_timeout: a stream move's longest wait for the stream's lock (ms). */
extern int	lease_move_lock_timeout_ms;

/* lease.restart_grace: a new server incarnation gives every holder one lease duration */
extern bool lease_restart_grace_on;

/*
 * lease.min_synchronous_commit: the weakest synchronous_commit a lease
 * function's transaction commits with (a SYNCHRONOUS_COMMIT_* level)
 */
extern int	lease_min_synchronous_commit;

/* lease.flush_heartbeats: heartbeat-only transactions wait for the WAL flush too */
extern bool lease_flush_heartbeats;

/* The synchronous_commit value of a SYNCHRONOUS_COMMIT_* level. */
extern const char *lease_synchronous_commit_name(int level);

/* lease.expected_sync_standbys: synchronous standbys the partition should have (monitoring) */
extern int	lease_expected_sync_standbys;

/* lease.record_events: write ownership changes to lease.lease_events */
extern bool lease_record_events;

/* lease.notify_channel: pg_notify channel for ownership changes; "" = off */
extern char *lease_notify_channel;

/* lease.notify_queue_limit: NOTIFY queue fill at which notifications are skipped */
extern double lease_notify_queue_limit;

extern void lease_define_gucs(void);

#endif							/* LEASE_CONFIG_H */
