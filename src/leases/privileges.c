/*-------------------------------------------------------------------------
 *
 * src/leases/privileges.c
 *	  Per-application access (lease.app_grants): the check every lease
 *	  function makes, lease.has_app_access, lease.grant_app and
 *	  lease.revoke_app.
 *
 *-------------------------------------------------------------------------
 */
#include "pg_lease.h"

#include "catalog/pg_authid.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/syscache.h"

#include "common/args.h"
#include "common/durability.h"
#include "leases/privileges.h"
#include "common/spi_util.h"

/*
 * The roles granted app $1 whose grants still belong to them: the role with
 * the OID has the name it was granted by (app_grants.grantee_name), so a
 * role given a dropped grantee's OID is not its grantee.
 */
#define GRANTEES_SQL \
	"SELECT g.grantee FROM lease.app_grants AS g" \
	" WHERE g.app_name OPERATOR(pg_catalog.=) $1" \
	"   AND pg_catalog.pg_get_userbyid(g.grantee) OPERATOR(pg_catalog.=) g.grantee_name"

/* Indexed by read-only (has_app_access is STABLE). */
static LeaseStatement grantees_stmts[2] = {
	{
		.name = "app grantees", .sql = GRANTEES_SQL,
		.nargs = 1, .argtypes = {TEXTOID}, .expected = SPI_OK_SELECT
	},
	{
		.name = "app grantees (read only)", .sql = GRANTEES_SQL,
		.nargs = 1, .argtypes = {TEXTOID}, .expected = SPI_OK_SELECT, .read_only = true
	},
};

/*
 * Grant an app to a role unless it already is.  A grant left by a role that
 * was renamed or dropped since is renewed for the role that now has the
 * OID, which the trigger app_grants_grantee_name records.
 */
static LeaseStatement grant_stmt = {
	.name = "grant_app",
	.sql =
	"INSERT INTO lease.app_grants AS g (app_name, grantee, granted_by)"
	" VALUES ($1, $2, $3)"
	" ON CONFLICT (app_name, grantee) DO UPDATE"
	"    SET granted_by = excluded.granted_by, granted_at = excluded.granted_at"
	"  WHERE NOT (pg_catalog.pg_get_userbyid(g.grantee) OPERATOR(pg_catalog.=) g.grantee_name)"
	" RETURNING true",
	.nargs = 3, .argtypes = {TEXTOID, REGROLEOID, REGROLEOID},
	.expected = SPI_OK_INSERT_RETURNING
};

/* Revoke an app from a role. */
static LeaseStatement revoke_stmt = {
	.name = "revoke_app",
	.sql =
	"DELETE FROM lease.app_grants AS g"
	" WHERE g.app_name OPERATOR(pg_catalog.=) $1"
	"   AND g.grantee OPERATOR(pg_catalog.=) $2",
	.nargs = 2,
	.argtypes = {TEXTOID, REGROLEOID},
	.expected = SPI_OK_DELETE
};

/*
 * True when `caller` may act for the app: it has the owner's privileges,
 * or those of a role granted the app.  Runs as the owner, connected to SPI
 * (it reads lease.app_grants).  A grantee role that was dropped or renamed
 * matches nobody, nor does a role that was given a dropped grantee's OID.  read_only: called from the STABLE has_app_access.
 */
static bool
caller_may_act_for(Oid caller, Oid owner, LeaseSchema schema, Datum app_name, bool read_only)
{
	uint64		rows;

	if (has_privs_of_role(caller, owner))
		return true;

	rows = lease_spi_run(&grantees_stmts[read_only ? 1 : 0], &app_name,
						 NULL, 0);
	for (uint64 row = 0; row < rows; row++)
	{
		bool		isnull;
		Oid			grantee = DatumGetObjectId(lease_spi_value(row, 1, &isnull));

		if (!isnull && has_privs_of_role(caller, grantee))
			return true;
	}
	return false;
}

/*
 * Switches to the function's owner and connects to SPI; true when the
 * caller may act for the app.
 */
static bool
become_owner_for_app(FunctionCallInfo fcinfo, LeaseSchema schema, Datum app_name,
					 LeaseCaller *caller, bool read_only)
{
	lease_spi_connect_as_owner(fcinfo, caller);
	return caller_may_act_for(caller->userid, caller->owner, schema, app_name, read_only);
}

/* Leaves SPI and switches back to the caller saved by lease_app_begin. */
void
lease_app_end(const LeaseCaller *caller)
{
	lease_spi_finish_as_caller(caller);
}

/* Runs as the owner, in SPI, once the caller's access to the app is checked. */
void
lease_app_begin(FunctionCallInfo fcinfo, LeaseSchema schema, Datum app_name,
				LeaseCaller *caller)
{
	if (!become_owner_for_app(fcinfo, schema, app_name, caller, false))
	{
		lease_app_end(caller);
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for app \"%s\"", TextDatumGetCString(app_name)),
				 errdetail("Role \"%s\" has not been granted the app.",
						   GetUserNameFromId(caller->userid, false)),
				 errhint("An operator of the app grants it with lease.grant_app().")));
	}
	lease_commit_durably();
}

/* Raises 42501 unless the caller may act for the app (privileges.h). */
void
lease_app_check(FunctionCallInfo fcinfo, LeaseSchema schema, Datum app_name)
{
	LeaseCaller caller;

	lease_app_begin(fcinfo, schema, app_name, &caller);
	lease_app_end(&caller);
}

/* Runs one statement for the app in values[0], as the owner. */
uint64
lease_spi_exec_for_app(FunctionCallInfo fcinfo, LeaseSchema schema, LeaseStatement *stmt,
					   Datum *values, const char *nulls)
{
	LeaseCaller caller;
	uint64		processed;

	lease_app_begin(fcinfo, schema, values[0], &caller);
	processed = lease_spi_run(stmt, values, nulls, 0);
	lease_app_end(&caller);
	return processed;
}

/*
 * The last answer of has_app_access in one query (flinfo->fn_extra): a
 * view or policy calls it once per row, mostly with the same app.
 */
typedef struct AppAccessCache
{
	Oid			userid;
	text	   *app_name;
	bool		allowed;
} AppAccessCache;

/* lease.has_app_access: true when the current user may act for the app. */
static Datum
has_app_access(FunctionCallInfo fcinfo, LeaseSchema schema)
{
	Datum		app = lease_arg_ident(fcinfo, 0, "app_name");
	AppAccessCache *cache = (AppAccessCache *) fcinfo->flinfo->fn_extra;
	LeaseCaller caller;
	bool		allowed;

	if (cache != NULL && cache->userid == GetUserId() &&
		DatumGetBool(DirectFunctionCall2Coll(texteq, C_COLLATION_OID, app,
											 PointerGetDatum(cache->app_name))))
		PG_RETURN_BOOL(cache->allowed);

	allowed = become_owner_for_app(fcinfo, schema, app, &caller, true);
	lease_app_end(&caller);

	if (cache == NULL)
		cache = fcinfo->flinfo->fn_extra =
			MemoryContextAllocZero(fcinfo->flinfo->fn_mcxt, sizeof(AppAccessCache));
	else
		pfree(cache->app_name);
	cache->userid = caller.userid;
	cache->app_name = (text *) MemoryContextAlloc(fcinfo->flinfo->fn_mcxt, VARSIZE_ANY(DatumGetPointer(app)));
	memcpy(cache->app_name, DatumGetPointer(app), VARSIZE_ANY(DatumGetPointer(app)));
	cache->allowed = allowed;
	PG_RETURN_BOOL(allowed);
}

PG_FUNCTION_INFO_V1(lease_has_app_access_0_4);
/* lease.has_app_access as the 0.4.0 script binds it. */
Datum lease_has_app_access_0_4(PG_FUNCTION_ARGS) { return has_app_access(fcinfo, LEASE_SCHEMA_0_4); }

/* A required role argument that names an existing role (22004, 42704). */
static Oid
role_arg(FunctionCallInfo fcinfo, int argno, const char *name)
{
	Oid			role = lease_arg_oid(fcinfo, argno, name);

	if (!SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(role)))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("role with OID %u does not exist", role),
				 errhint("Pass the role by name, e.g. 'stream_worker'::regrole.")));
	return role;
}

/*
 * lease.grant_app: lets grantee (and the roles that have its privileges)
 * act for the app; true when added, false when it already could.  The
 * caller must itself be able to act for the app.
 */
static Datum
grant_app(FunctionCallInfo fcinfo, LeaseSchema schema)
{
	Datum		values[3];

	values[0] = lease_arg_ident(fcinfo, 0, "app_name");
	values[1] = ObjectIdGetDatum(role_arg(fcinfo, 1, "grantee"));
	values[2] = ObjectIdGetDatum(GetUserId());

	PG_RETURN_BOOL(lease_spi_exec_for_app(fcinfo, schema, &grant_stmt,
										  values, NULL) > 0);
}

PG_FUNCTION_INFO_V1(lease_grant_app_0_4);
/* lease.grant_app as the 0.4.0 script binds it. */
Datum lease_grant_app_0_4(PG_FUNCTION_ARGS) { return grant_app(fcinfo, LEASE_SCHEMA_0_4); }

/*
 * lease.revoke_app: removes a grant made by grant_app; true when there was
 * one.  The caller must itself be able to act for the app.
 */
static Datum
revoke_app(FunctionCallInfo fcinfo, LeaseSchema schema)
{
	Datum		values[2];

	values[0] = lease_arg_ident(fcinfo, 0, "app_name");
	/* a dropped role's grant can still be revoked (by OID) */
	values[1] = ObjectIdGetDatum(lease_arg_oid(fcinfo, 1, "grantee"));

	PG_RETURN_BOOL(lease_spi_exec_for_app(fcinfo, schema, &revoke_stmt, values, NULL) > 0);
}

PG_FUNCTION_INFO_V1(lease_revoke_app_0_4);
/* lease.revoke_app as the 0.4.0 script binds it. */
Datum lease_revoke_app_0_4(PG_FUNCTION_ARGS) { return revoke_app(fcinfo, LEASE_SCHEMA_0_4); }
