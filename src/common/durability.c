/*-------------------------------------------------------------------------
 *
 * src/common/durability.c
 *	  Lease writes commit durably whatever the session says (durability.h).
 *
 *-------------------------------------------------------------------------
 */
#include "pg_lease.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "utils/guc.h"

#include "common/config.h"
#include "common/durability.h"

/* See durability.h. */
void
lease_commit_durably(void)
{
	if (synchronous_commit >= lease_min_synchronous_commit)
		return;
	/*
	 * SET LOCAL: ends with the transaction, and a subtransaction that rolls
	 * back takes it back with its writes.
	 */
	(void) set_config_option("synchronous_commit",
							 lease_synchronous_commit_name(lease_min_synchronous_commit),
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_LOCAL, true, 0, false);
}

/*
 * The heartbeat-only transaction, if this one may be: its top-level xid and
 * the end of its WAL when the heartbeat was done.  A commit that finds both
 * unchanged wrote nothing but the heartbeat.
 */
static TransactionId flush_free_xid = InvalidTransactionId;
static XLogRecPtr flush_free_wal_end = InvalidXLogRecPtr;
static bool flush_free_registered = false;

/*
 * At commit: a heartbeat-only transaction commits with synchronous_commit =
 * off (SET LOCAL, undone with the transaction).  Any other end forgets it.
 */
static void
flush_free_xact_callback(XactEvent event, void *arg)
{
	bool		heartbeat_only;

	(void) arg;
	if (!TransactionIdIsValid(flush_free_xid))
		return;
	heartbeat_only = event == XACT_EVENT_PRE_COMMIT
		&& TransactionIdEquals(GetTopTransactionIdIfAny(), flush_free_xid)
		&& XactLastRecEnd == flush_free_wal_end;
	flush_free_xid = InvalidTransactionId;
	flush_free_wal_end = InvalidXLogRecPtr;
	if (heartbeat_only)
		(void) set_config_option("synchronous_commit", "off",
								 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_LOCAL, true, 0, false);
}

/* See durability.h. */
bool
lease_heartbeat_flush_free_begin(void)
{
	/*
	 * XactLastRecEnd is reset at every transaction's end and moves with
	 * every WAL record the transaction writes, so 0 means nothing written
	 * yet (a read that pruned a page wrote WAL too: conservative).
	 */
	return lease_restart_grace_on && !lease_flush_heartbeats
		&& XactLastRecEnd == InvalidXLogRecPtr;
}

/* See durability.h. */
void
lease_heartbeat_flush_free_end(bool eligible)
{
	if (!eligible || !TransactionIdIsValid(GetTopTransactionIdIfAny()))
		return;
	if (!flush_free_registered)
	{
		RegisterXactCallback(flush_free_xact_callback, NULL);
		flush_free_registered = true;
	}
	flush_free_xid = GetTopTransactionIdIfAny();
	flush_free_wal_end = XactLastRecEnd;
}
