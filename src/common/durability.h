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
 *-------------------------------------------------------------------------
 */
#ifndef LEASE_DURABILITY_H
#define LEASE_DURABILITY_H

/* Raises synchronous_commit for this transaction (see above). */
extern void lease_commit_durably(void);

#endif							/* LEASE_DURABILITY_H */
