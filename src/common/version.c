/*-------------------------------------------------------------------------
 *
 * src/common/version.c
 *	  The entry points of the schemas this module no longer serves.
 *
 * The released 0.1.0 to 0.3.0 install scripts bind these plain symbols
 * (version.h).  They must exist for those scripts to install, so that
 * ALTER EXTENSION pg_lease UPDATE can take a database from any release to
 * the current one, but a call through one raises 55000 with the hint to
 * update: the module serves the current and the previous release's schema
 * only (docs/operations.md, "Upgrades").
 *
 *-------------------------------------------------------------------------
 */
#include "pg_lease.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/indexing.h"
#include "catalog/pg_extension.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"

#include "common/version.h"

/* The installed pg_lease's extversion, or NULL when there is none. */
static char *
installed_version(void)
{
	Relation	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tuple;
	char	   *version = NULL;

	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber, F_NAMEEQ,
				CStringGetDatum("pg_lease"));
	scan = systable_beginscan(rel, ExtensionNameIndexId, true, NULL, 1, &key);
	tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple))
	{
		bool		isnull;
		Datum		value = heap_getattr(tuple, Anum_pg_extension_extversion,
										 RelationGetDescr(rel), &isnull);

		if (!isnull)
			version = text_to_cstring(DatumGetTextPP(value));
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return version;
}

/* version.h */
void
lease_schema_too_old(void)
{
	char	   *version = installed_version();

	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("pg_lease schema version %s is too old for this module",
					version ? version : "before 0.4.0"),
			 errdetail("This module serves the schemas of pg_lease 0.4.0 and 0.5.0."),
			 errhint("Update the extension with ALTER EXTENSION pg_lease UPDATE.")));
}

PG_FUNCTION_INFO_V1(lease_rotate_channel);
/* lease.rotate_channel as the 0.1.0 to 0.3.0 scripts bind it: too old. */
Datum
lease_rotate_channel(PG_FUNCTION_ARGS)
{
	lease_schema_too_old();
}

PG_FUNCTION_INFO_V1(lease_start_conversation);
/* lease.start_conversation as the 0.1.0 to 0.3.0 scripts bind it: too old. */
Datum
lease_start_conversation(PG_FUNCTION_ARGS)
{
	lease_schema_too_old();
}

PG_FUNCTION_INFO_V1(lease_admit_turn);
/* lease.admit_turn as the 0.1.0 to 0.3.0 scripts bind it: too old. */
Datum
lease_admit_turn(PG_FUNCTION_ARGS)
{
	lease_schema_too_old();
}

PG_FUNCTION_INFO_V1(lease_cleanup_ended);
/* lease.cleanup_ended as the 0.1.0 to 0.3.0 scripts bind it: too old. */
Datum
lease_cleanup_ended(PG_FUNCTION_ARGS)
{
	lease_schema_too_old();
}

PG_FUNCTION_INFO_V1(lease_delete_lease);
/* lease.delete_lease as the 0.1.0 to 0.3.0 scripts bind it: too old. */
Datum
lease_delete_lease(PG_FUNCTION_ARGS)
{
	lease_schema_too_old();
}

PG_FUNCTION_INFO_V1(lease_my_leases);
/* lease.my_leases as the 0.1.0 to 0.3.0 scripts bind it: too old. */
Datum
lease_my_leases(PG_FUNCTION_ARGS)
{
	lease_schema_too_old();
}

PG_FUNCTION_INFO_V1(lease_take_leases);
/* lease.take_leases as the 0.1.0 to 0.3.0 scripts bind it: too old. */
Datum
lease_take_leases(PG_FUNCTION_ARGS)
{
	lease_schema_too_old();
}

PG_FUNCTION_INFO_V1(lease_renew_leases);
/* lease.renew_leases as the 0.1.0 to 0.3.0 scripts bind it: too old. */
Datum
lease_renew_leases(PG_FUNCTION_ARGS)
{
	lease_schema_too_old();
}

PG_FUNCTION_INFO_V1(lease_request_handoff);
/* lease.request_handoff as the 0.1.0 to 0.3.0 scripts bind it: too old. */
Datum
lease_request_handoff(PG_FUNCTION_ARGS)
{
	lease_schema_too_old();
}

PG_FUNCTION_INFO_V1(lease_create_lease);
/* lease.create_lease as the 0.1.0 to 0.3.0 scripts bind it: too old. */
Datum
lease_create_lease(PG_FUNCTION_ARGS)
{
	lease_schema_too_old();
}

PG_FUNCTION_INFO_V1(lease_take_lease);
/* lease.take_lease as the 0.1.0 to 0.3.0 scripts bind it: too old. */
Datum
lease_take_lease(PG_FUNCTION_ARGS)
{
	lease_schema_too_old();
}

PG_FUNCTION_INFO_V1(lease_renew_lease);
/* lease.renew_lease as the 0.1.0 to 0.3.0 scripts bind it: too old. */
Datum
lease_renew_lease(PG_FUNCTION_ARGS)
{
	lease_schema_too_old();
}

PG_FUNCTION_INFO_V1(lease_update_checkpoint);
/* lease.update_checkpoint as the 0.1.0 to 0.3.0 scripts bind it: too old. */
Datum
lease_update_checkpoint(PG_FUNCTION_ARGS)
{
	lease_schema_too_old();
}

PG_FUNCTION_INFO_V1(lease_update_checkpoint_fenced);
/* lease.update_checkpoint_fenced as the 0.1.0 to 0.3.0 scripts bind it: too old. */
Datum
lease_update_checkpoint_fenced(PG_FUNCTION_ARGS)
{
	lease_schema_too_old();
}

PG_FUNCTION_INFO_V1(lease_prepare_checkpoint);
/* lease.prepare_checkpoint as the 0.1.0 to 0.3.0 scripts bind it: too old. */
Datum
lease_prepare_checkpoint(PG_FUNCTION_ARGS)
{
	lease_schema_too_old();
}

PG_FUNCTION_INFO_V1(lease_release_lease);
/* lease.release_lease as the 0.1.0 to 0.3.0 scripts bind it: too old. */
Datum
lease_release_lease(PG_FUNCTION_ARGS)
{
	lease_schema_too_old();
}

PG_FUNCTION_INFO_V1(lease_close_shard);
/* lease.close_shard as the 0.1.0 to 0.3.0 scripts bind it: too old. */
Datum
lease_close_shard(PG_FUNCTION_ARGS)
{
	lease_schema_too_old();
}

PG_FUNCTION_INFO_V1(lease_has_app_access);
/* lease.has_app_access as the 0.1.0 to 0.3.0 scripts bind it: too old. */
Datum
lease_has_app_access(PG_FUNCTION_ARGS)
{
	lease_schema_too_old();
}

PG_FUNCTION_INFO_V1(lease_grant_app);
/* lease.grant_app as the 0.1.0 to 0.3.0 scripts bind it: too old. */
Datum
lease_grant_app(PG_FUNCTION_ARGS)
{
	lease_schema_too_old();
}

PG_FUNCTION_INFO_V1(lease_revoke_app);
/* lease.revoke_app as the 0.1.0 to 0.3.0 scripts bind it: too old. */
Datum
lease_revoke_app(PG_FUNCTION_ARGS)
{
	lease_schema_too_old();
}
