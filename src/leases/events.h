/*-------------------------------------------------------------------------
 *
 * src/leases/events.h
 *	  Ownership events: lease.lease_events and pg_notify.
 *
 * Every statement that changes who owns a lease (or asks for a handoff) is
 * written as
 *
 *	 WITH ..., c AS (UPDATE ... RETURNING <LEASE_EVENT_COLUMNS>)
 *	 LEASE_SQL_RECORD_EVENTS("$n")
 *	 SELECT ..., LEASE_SQL_NOTIFY("$m") FROM c
 *
 * so the change, its event row and its notification are one statement: the
 * event is recorded if and only if the change commits, and the notification
 * is delivered at that commit.  $n is lease.record_events and $m
 * lease.notify_channel, filled in by lease_event_params().
 *
 *-------------------------------------------------------------------------
 */
#ifndef LEASE_EVENTS_H
#define LEASE_EVENTS_H

#include "fmgr.h"

/* The columns the changing CTE `c` returns, in lease.lease_events order. */
#define LEASE_EVENT_COLUMNS \
	"app_name, stream_name, shard_id, event, from_owner, to_owner, lease_count, lease_epoch"

/*
 * A data-modifying CTE recording every row of `c` when `rec` is true.  The
 * rows of one statement get their event ids in shard_id order: the order in
 * which an UPDATE returns its rows depends on the plan, which may change
 * with the table's statistics.
 */
#define LEASE_SQL_RECORD_EVENTS(rec) \
	", recorded AS (INSERT INTO lease.lease_events (" LEASE_EVENT_COLUMNS ")" \
	" SELECT " LEASE_EVENT_COLUMNS " FROM c WHERE " rec \
	" ORDER BY c.shard_id COLLATE pg_catalog.\"C\")"

/* A select-list item announcing row `c` on channel `chan` unless it is ''. */
#define LEASE_SQL_NOTIFY(chan) \
	"CASE WHEN " chan " OPERATOR(pg_catalog.<>) '' THEN pg_catalog.pg_notify(" chan "," \
	" CAST(pg_catalog.json_build_object('app', c.app_name, 'stream', c.stream_name," \
	"  'shard', c.shard_id, 'event', c.event, 'from', c.from_owner, 'to', c.to_owner," \
	"  'lease_count', c.lease_count, 'lease_epoch', c.lease_epoch) AS pg_catalog.text)) END"

/* How many parameters lease_event_params fills. */
#define LEASE_EVENT_NPARAMS 2

/* The parameter types, for a LeaseStatement's argtypes. */
#define LEASE_EVENT_ARGTYPES BOOLOID, TEXTOID

/* Fills values[0] (lease.record_events) and values[1] (lease.notify_channel). */
extern void lease_event_params(Datum *values);

#endif							/* LEASE_EVENTS_H */
