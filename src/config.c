/*-------------------------------------------------------------------------
 *
 * config.c
 *	  Module entry point and the lease.* GUCs.
 *
 *-------------------------------------------------------------------------
 */
#include "pg_lease.h"

#include "fmgr.h"
#include "utils/guc.h"

#include "config.h"

PG_MODULE_MAGIC;

int			lease_default_lease_duration_ms = 10000;
int			lease_handoff_timeout_ms = 30000;
bool		lease_record_events = true;
char	   *lease_notify_channel = NULL;

void		_PG_init(void);

/* lease.notify_channel must be usable as a LISTEN channel name. */
static bool
check_notify_channel(char **newval, void **extra, GucSource source)
{
	if (*newval != NULL && strlen(*newval) >= NAMEDATALEN)
	{
		GUC_check_errcode(ERRCODE_INVALID_PARAMETER_VALUE);
		GUC_check_errdetail("A notification channel name is at most %d bytes.", NAMEDATALEN - 1);
		return false;
	}
	return true;
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

	DefineCustomIntVariable("lease.handoff_timeout",
							"Time a lease holder has to hand over a lease another worker asked for.",
							"After it, the requester's next take_leases or take_lease takes the lease.",
							&lease_handoff_timeout_ms,
							30000,
							1,
							LEASE_MAX_DURATION_MS,
							PGC_USERSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

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

	MarkGUCPrefixReserved("lease");
}

/* Module load: register the GUCs. */
void
_PG_init(void)
{
	lease_define_gucs();
}
