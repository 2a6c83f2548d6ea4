/*-------------------------------------------------------------------------
 *
 * src/common/durability.h
 *	  Lease writes commit durably whatever the session says.
 *
 * pg_lease runs in its caller's transaction, so a session's (an ORM's, a
 * pooler's, an operator's) synchronous_commit = off or local would decide
 * whether an acknowledged renewal or checkpoint survives a crash or a
 * failover.  Every lease function raises synchronous_commit to at least
 * lease.min_synchronous_commit (default on: with a synchronous standby
 * configured, the commit waits for its flush) for the rest of the
 * transaction, exactly as SET LOCAL would; a stronger setting (on,
 * remote_apply) is left alone.
 *
 * One exception: a transaction whose only writes are one heartbeat
 * (lease.heartbeat, renew_leases) commits without waiting for the WAL
 * flush (synchronous_commit = off for its commit), while lease.restart_grace
 * is on and lease.flush_heartbeats off.  A heartbeat lost in a crash or a
 * failover cannot hand a lease out early: the server that comes back is a
 * new incarnation, and for one lease duration after it a take extends the
 * leases it would take by expiry (src/leases/incarnation.h).  "Only writes"
 * is judged by the WAL: the transaction wrote none before the heartbeat and
 * none after it, so a caller's own writes in the same transaction keep the
 * durable commit (docs/worker-guide.md, "Heartbeats without a flush").
 *
 *-------------------------------------------------------------------------
 */
#ifndef LEASE_DURABILITY_H
#define LEASE_DURABILITY_H

/* Raises synchronous_commit for this transaction (see above). */
extern void lease_commit_durably(void);

/*
 * Called first thing by a heartbeat (before anything it does can write):
 * whether its transaction may become a heartbeat-only one.
 */
extern bool lease_heartbeat_flush_free_begin(void);

/*
 * Called by a heartbeat after its last write, with what
 * lease_heartbeat_flush_free_begin returned: if the transaction writes
 * nothing more, it commits without waiting for the WAL flush.
 */
extern void lease_heartbeat_flush_free_end(bool eligible);

#endif							/* LEASE_DURABILITY_H */
