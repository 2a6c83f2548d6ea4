/*-------------------------------------------------------------------------
 *
 * src/module.c
 *	  The module's entry point.
 *
 * pg_lease has two products sharing one extension and one schema:
 *	  src/leases/	shard leases for stream consumers (the lease table,
 *					the taker, lineage, events, the kcl_ex import, and
 *					per-application access)
 *	  src/bindings/	channel bindings for chat agents (admission,
 *					rotation, compensation)
 *	  src/common/	what both use: argument checks, the lease.* settings,
 *					SPI helpers
 * Each directory holds the C of its product and the SQL of its objects
 * (*.sql, concatenated into the install script by the Makefile).
 *
 *-------------------------------------------------------------------------
 */
#include "pg_lease.h"

#include "fmgr.h"

#include "common/config.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

/* Module load: register the lease.* settings. */
void
_PG_init(void)
{
	lease_define_gucs();
}
