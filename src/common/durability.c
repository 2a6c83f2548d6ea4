/*-------------------------------------------------------------------------
 *
 * src/common/durability.c
 *	  Lease writes commit durably whatever the session says (durability.h).
 *
 *-------------------------------------------------------------------------
 */
#include "pg_lease.h"

#include "access/xact.h"
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
