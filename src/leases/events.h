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
 * A notification never fails the change.  PostgreSQL queues a
 * transaction's notifications at its commit and fails the commit ("too
 * many notifications in the NOTIFY queue") when the queue is full, and any
 * role that can connect may fill it (LISTEN in a transaction kept open,
 * then NOTIFY).  So each row's notification is sent only while
 * pg_notification_queue_usage() is below lease.notify_queue_limit (a
 * fraction, 0.5 by default: at that point PostgreSQL warns too); at or
 * above it the notification is skipped and counted in the sequence
 * lease.notifications_skipped (0.5.0; looked up by name, so a 0.4.0 schema
 * skips without counting), which lease.monitoring_notifications() reports.
 * Workers find freed leases by their rounds anyway; a notification only
 * makes that sooner.
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

/* The NOTIFY queue's fill above which notifications are skipped. */
#define LEASE_SQL_NOTIFY_QUEUE_FULL \
	"pg_catalog.pg_notification_queue_usage() OPERATOR(pg_catalog.>=)" \
	" CAST(pg_catalog.current_setting('lease.notify_queue_limit') AS pg_catalog.float8)"

/*
 * A select-list item (text, meaningless) announcing row `c` on channel
 * `chan` unless it is '', or, while the queue is too full, counting the
 * notification skipped instead.
 */
#define LEASE_SQL_NOTIFY(chan) \
	"CASE WHEN " chan " OPERATOR(pg_catalog.=) '' THEN NULL" \
	"     WHEN " LEASE_SQL_NOTIFY_QUEUE_FULL \
	"     THEN CAST(pg_catalog.nextval(pg_catalog.to_regclass('lease.notifications_skipped'))" \
	"               AS pg_catalog.text)" \
	"     ELSE CAST(pg_catalog.pg_notify(" chan "," \
	" CAST(pg_catalog.json_build_object('app', c.app_name, 'stream', c.stream_name," \
	"  'shard', c.shard_id, 'event', c.event, 'from', c.from_owner, 'to', c.to_owner," \
	"  'lease_count', c.lease_count, 'lease_epoch', c.lease_epoch) AS pg_catalog.text))" \
	"               AS pg_catalog.text) END"

/* How many parameters lease_event_params fills. */
#define LEASE_EVENT_NPARAMS 2

/* The parameter types, for a LeaseStatement's argtypes. */
#define LEASE_EVENT_ARGTYPES BOOLOID, TEXTOID

/* Fills values[0] (lease.record_events) and values[1] (lease.notify_channel). */
extern void lease_event_params(Datum *values);

#endif							/* LEASE_EVENTS_H */
