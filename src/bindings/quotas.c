/*-------------------------------------------------------------------------
 *
 * src/bindings/quotas.c
 *	  Tenant quotas as functions: set_tenant_limit, clear_tenant_limit,
 *	  tenant_limit and list_tenant_limits.
 *
 * A tenant's own limit is its row of lease.tenant_limits; a tenant without
 * one gets lease.default_sandbox_limit (a PGC_SUSET setting: a function
 * cannot change it for other sessions, so the default is set with ALTER
 * SYSTEM or ALTER DATABASE, docs/operations.md).  Admission reads the limit
 * at each admission (conversations.c), so a change applies to the next one;
 * lowering a limit below the tenant's current use refuses new admissions
 * and ends nothing.  Tenants are not apps: these functions act on any
 * tenant, so they belong to the fleet operator (docs/security.md).
 *
 *-------------------------------------------------------------------------
 */
#include "pg_lease.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"

#include "common/args.h"
#include "common/config.h"
#include "common/spi_util.h"
#include "bindings/conversations.h"

/* The tenant's active sandboxes (sandboxes_active_user_idx), table alias t for the tenant. */
#define ACTIVE_SANDBOXES \
	"(SELECT pg_catalog.count(*) FROM lease.sandboxes AS s" \
	"  WHERE s.user_id OPERATOR(pg_catalog.=) t.user_id" \
	"    AND s.status OPERATOR(pg_catalog.=) ANY (" BINDING_ACTIVE_SANDBOX_STATUSES "))"

/* set_tenant_limit: the limit it replaces (no row: NULL), then the upsert. */
static LeaseStatement set_stmt = {
	.name = "set the tenant's limit",
	.sql =
	"WITH old AS (SELECT t.sandbox_limit FROM lease.tenant_limits AS t"
	"              WHERE t.user_id OPERATOR(pg_catalog.=) $1),"
	"     ins AS (INSERT INTO lease.tenant_limits AS t (user_id, sandbox_limit) VALUES ($1, $2)"
	"             ON CONFLICT (user_id) DO UPDATE SET sandbox_limit = excluded.sandbox_limit"
	"             RETURNING t.user_id)"
	" SELECT (SELECT o.sandbox_limit FROM old AS o), (SELECT pg_catalog.count(*) FROM ins)",
	.nargs = 2,
	.argtypes = {TEXTOID, INT4OID},
	.expected = SPI_OK_SELECT
};

/* clear_tenant_limit: the limit removed. */
static LeaseStatement clear_stmt = {
	.name = "clear the tenant's limit",
	.sql =
	"DELETE FROM lease.tenant_limits AS t"
	" WHERE t.user_id OPERATOR(pg_catalog.=) $1"
	" RETURNING t.sandbox_limit",
	.nargs = 1,
	.argtypes = {TEXTOID},
	.expected = SPI_OK_DELETE_RETURNING
};

/* tenant_limit: the limit in force ($2: the default), whether it is the tenant's own, its use. */
static LeaseStatement read_stmt = {
	.name = "read the tenant's limit",
	.sql =
	"SELECT COALESCE(l.sandbox_limit, $2), l.sandbox_limit IS NOT NULL, " ACTIVE_SANDBOXES
	"  FROM (SELECT $1 AS user_id) AS t"
	"  LEFT JOIN lease.tenant_limits AS l ON l.user_id OPERATOR(pg_catalog.=) t.user_id",
	.nargs = 2,
	.argtypes = {TEXTOID, INT4OID},
	.expected = SPI_OK_SELECT
};

/* list_tenant_limits: every tenant with a limit of its own. */
static LeaseStatement list_stmt = {
	.name = "list the tenants' limits",
	.sql =
	"SELECT t.user_id, t.sandbox_limit, " ACTIVE_SANDBOXES
	"  FROM lease.tenant_limits AS t"
	" ORDER BY t.user_id COLLATE pg_catalog.\"C\"",
	.nargs = 0,
	.expected = SPI_OK_SELECT
};

PG_FUNCTION_INFO_V1(lease_set_tenant_limit);

/* lease.set_tenant_limit: the tenant's previous own limit, NULL when it had none. */
Datum
lease_set_tenant_limit(PG_FUNCTION_ARGS)
{
	Datum		values[2];
	Datum		previous;
	bool		isnull;

	values[0] = lease_arg_ident(fcinfo, 0, "user_id");
	values[1] = Int32GetDatum(lease_arg_nonneg_int32(fcinfo, 1, "sandbox_limit"));

	lease_spi_connect();
	lease_spi_run(&set_stmt, values, NULL, 1);
	previous = lease_spi_value(0, 1, &isnull);
	lease_spi_finish();

	if (isnull)
		PG_RETURN_NULL();
	PG_RETURN_INT32(DatumGetInt32(previous));
}

PG_FUNCTION_INFO_V1(lease_clear_tenant_limit);

/* lease.clear_tenant_limit: the limit removed, NULL when the tenant had none. */
Datum
lease_clear_tenant_limit(PG_FUNCTION_ARGS)
{
	Datum		value = lease_arg_ident(fcinfo, 0, "user_id");
	int32		removed = 0;
	bool		found;
	bool		isnull;

	lease_spi_connect();
	found = lease_spi_run(&clear_stmt, &value, NULL, 0) > 0;
	if (found)
		removed = DatumGetInt32(lease_spi_value(0, 1, &isnull));
	lease_spi_finish();

	if (!found)
		PG_RETURN_NULL();
	PG_RETURN_INT32(removed);
}

PG_FUNCTION_INFO_V1(lease_tenant_limit);

/* lease.tenant_limit: one row, the limit in force for the tenant and its use. */
Datum
lease_tenant_limit(PG_FUNCTION_ARGS)
{
	Datum		args[2];
	Datum		values[3];
	bool		nulls[3];

	args[0] = lease_arg_ident(fcinfo, 0, "user_id");
	args[1] = Int32GetDatum(lease_default_sandbox_limit);

	lease_spi_connect();
	lease_spi_run(&read_stmt, args, NULL, 1);
	for (int col = 0; col < 3; col++)
		values[col] = lease_spi_value(0, col + 1, &nulls[col]);
	lease_spi_finish();

	/* Only by-value columns: they outlive SPI_finish. */
	binding_return_row(fcinfo, values, nulls);
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(lease_list_tenant_limits);

/* lease.list_tenant_limits: one row per tenant with a limit of its own. */
Datum
lease_list_tenant_limits(PG_FUNCTION_ARGS)
{

	InitMaterializedSRF(fcinfo, 0);
	lease_spi_connect();
	lease_spi_run(&list_stmt, NULL, NULL, 0);
	lease_spi_put_rows(fcinfo, 3);
	lease_spi_finish();
	return (Datum) 0;
}
