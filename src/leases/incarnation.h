/*-------------------------------------------------------------------------
 *
 * src/leases/incarnation.h
 *	  Server incarnations and the restart grace (lease.server_incarnations).
 *
 * A server incarnation is one run of the server as a primary: a restart, a
 * crash reinitialisation and a promotion each begin a new one.  The first
 * pg_lease call of an incarnation records when it was first seen, in the
 * partition itself (lease.server_incarnations, 0.5.0).  Until one lease
 * duration after that, a take extends the stream's owned leases that would
 * otherwise expire before then (the restart grace, lease.restart_grace), so
 * an outage longer than a lease does not hand the fleet to whichever
 * worker is first back: every holder gets one full lease duration in the
 * new incarnation to renew (docs/worker-guide.md, "After a restart").
 *
 *-------------------------------------------------------------------------
 */
#ifndef LEASE_INCARNATION_H
#define LEASE_INCARNATION_H

#include "postgres.h"

/*
 * The server incarnation this session runs in, as text: the postmaster's
 * start time (a restart), the WAL timeline (a promotion) and the reset time
 * of the shared statistics, which PostgreSQL discards on a crash
 * reinitialisation (the postmaster and the timeline stay).  NULL on a
 * standby.
 */
extern text *lease_server_incarnation(void);

/*
 * Records `incarnation`, the current one (lease_server_incarnation(), as
 * the caller already has it for its session record; NULL on a standby: a
 * no-op), in lease.server_incarnations if it is not there yet (first seen
 * now).  SPI connected as the owner, 0.5.0 schema.  Looked up once per
 * session and incarnation (a take, lease_restart_grace, reads the row each
 * time).
 */
extern void lease_incarnation_note(text *incarnation);

/*
 * For a take in stream[0..1] with the taker's lease duration: notes the
 * incarnation, then, while the restart grace runs (an incarnation that
 * follows another, first seen less than `duration` ago, lease.restart_grace
 * on), extends every owned lease of the stream whose expiry (its own or
 * its holder's heartbeat) comes before first seen + duration to exactly
 * then, each with an event `restart_grace`.  So the take itself, run next,
 * finds them live.  `round`: a take_leases round, which skips the leases
 * another transaction holds (as its own statements do) instead of waiting
 * for them.  SPI connected as the owner, 0.5.0 schema.
 */
extern void lease_restart_grace(Datum *stream, Datum duration, bool round);

#endif							/* LEASE_INCARNATION_H */
