/*-------------------------------------------------------------------------
 *
 * src/common/version.c
 *	  The schema a plain (pre-0.4.0) entry point serves (version.h).
 *
 *-------------------------------------------------------------------------
 */
#include "pg_lease.h"

#include "catalog/namespace.h"
#include "utils/lsyscache.h"

#include "common/version.h"

/* version.h */
LeaseSchema
lease_schema_before_0_4(void)
{
	Oid			nsp = get_namespace_oid("lease", true);

	if (OidIsValid(nsp) && OidIsValid(get_relname_relid("stream_workers", nsp)))
		return LEASE_SCHEMA_0_3;
	return LEASE_SCHEMA_0_2;
}
