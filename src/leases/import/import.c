/*-------------------------------------------------------------------------
 *
 * src/leases/import/import.c
 *	  What the importers share (import.h).
 *
 *-------------------------------------------------------------------------
 */
#include "pg_lease.h"

#include "catalog/namespace.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/lsyscache.h"

#include "leases/import/import.h"

/* import.h */
void
lease_import_check_leases_privileges(const char *fname)
{
	Oid			userid = GetUserId();
	Oid			leases = get_relname_relid("shard_leases", get_namespace_oid("lease", false));

	if (!OidIsValid(leases))
		elog(ERROR, "pg_lease: table lease.shard_leases does not exist");
	if (pg_class_aclcheck(leases, userid, ACL_SELECT) != ACLCHECK_OK ||
		pg_class_aclcheck(leases, userid, ACL_INSERT) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for table shard_leases"),
				 errdetail("%s writes lease.shard_leases with the caller's privileges.", fname),
				 errhint("Grant the importing role SELECT and INSERT on lease.shard_leases (the operator recipe), or import as the extension owner.")));
}
