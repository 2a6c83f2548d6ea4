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

void		_PG_init(void);

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

	MarkGUCPrefixReserved("lease");
}

/* Module load: register the GUCs. */
void
_PG_init(void)
{
	lease_define_gucs();
}
