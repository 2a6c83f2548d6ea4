/*-------------------------------------------------------------------------
 *
 * src/leases/import/kcl_ex.c
 *	  lease.import_kcl_ex: copy the leases of the Elixir kcl_ex Ecto
 *	  adapter's shard_lease table into lease.shard_leases.
 *
 * This is the one function whose SQL names a relation chosen by the caller,
 * so it is built at run time, with care:
 *	 - the function is SECURITY INVOKER (pg_lease--0.1.0.sql): it reads the
 *	   source with the caller's own privileges, so it cannot be used to read
 *	   a table the caller could not read itself, and it writes
 *	   lease.shard_leases only if the caller may (an operator);
 *	 - the relation reaches the SQL text only as the quoted, schema-qualified
 *	   name resolved from the catalog (quote_qualified_identifier), never as
 *	   text the caller typed; column names are fixed;
 *	 - every required column must exist with a compatible type before any
 *	   SQL runs (42703, 22023), and every row must be importable (22023)
 *	   before anything is written.
 *
 *
 *-------------------------------------------------------------------------
 */
#include "pg_lease.h"

#include "catalog/pg_class.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "catalog/namespace.h"
#include "common/jsonapi.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "parser/scansup.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/tuplestore.h"
#include "utils/varlena.h"

#include "common/args.h"
#include "common/spi_util.h"
#include "leases/lineage.h"
#include "leases/privileges.h"
#include "leases/import/import.h"

/* A required column of the source and the types it may have. */
typedef struct KclColumn
{
	const char *name;
	Oid			types[3];		/* InvalidOid-terminated */
	const char *expected;		/* for the error message */
} KclColumn;

static const KclColumn kcl_columns[] = {
	{"shard_id", {TEXTOID, VARCHAROID, InvalidOid}, "text or varchar"},
	{"app_name", {TEXTOID, VARCHAROID, InvalidOid}, "text or varchar"},
	{"stream_name", {TEXTOID, VARCHAROID, InvalidOid}, "text or varchar"},
	{"checkpoint", {TEXTOID, VARCHAROID, InvalidOid}, "text or varchar"},
	{"lease_owner", {TEXTOID, VARCHAROID, InvalidOid}, "text or varchar"},
	{"lease_count", {INT4OID, INT8OID, INT2OID}, "smallint, integer or bigint"},
	{"completed", {BOOLOID, InvalidOid}, "boolean"},
};

/* White space as lease_check_ident sees it (the vertical tab via chr(11)). */
#define KCL_BLANK(x) \
	"(pg_catalog.btrim(" x ", E' \\t\\n\\r\\f' OPERATOR(pg_catalog.||) pg_catalog.chr(11))" \
	" OPERATOR(pg_catalog.=) '')"

/* An identifier column: present, not blank, at most LEASE_MAX_IDENT_BYTES. */
#define KCL_IDENT_OK(x) \
	"(" x " IS NOT NULL AND NOT " KCL_BLANK(x) \
	" AND pg_catalog.octet_length(" x ") OPERATOR(pg_catalog.<=) " CppAsString2(LEASE_MAX_IDENT_BYTES) ")"

/* The source row, normalised: text columns, blank owner/checkpoint as NULL. */
#define KCL_SOURCE(src) \
	"SELECT CAST(s.app_name AS pg_catalog.text) AS app_name," \
	"       CAST(s.stream_name AS pg_catalog.text) AS stream_name," \
	"       CAST(s.shard_id AS pg_catalog.text) AS shard_id," \
	"       CASE WHEN NOT " KCL_BLANK("s.lease_owner") \
	"            THEN CAST(s.lease_owner AS pg_catalog.text) END AS lease_owner," \
	"       CASE WHEN NOT " KCL_BLANK("s.checkpoint") \
	"            THEN CAST(s.checkpoint AS pg_catalog.text) END AS checkpoint," \
	"       CAST(COALESCE(s.lease_count, 0) AS pg_catalog.int8) AS lease_count," \
	"       COALESCE(s.completed, false) AS completed" \
	"  FROM " src " AS s"

/*
 * import_kcl_ex_rows' source: its seven arrays, one element per lease, as
 * the rows of a kcl_ex table (the arrays have the same length).
 */
#define KCL_ROWS \
	"(SELECT u.app_name, u.stream_name, u.shard_id, u.checkpoint, u.lease_owner," \
	"        u.lease_count, u.completed" \
	"   FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2), pg_catalog.unnest($3)," \
	"                   pg_catalog.unnest($4), pg_catalog.unnest($5), pg_catalog.unnest($6)," \
	"                   pg_catalog.unnest($7))" \
	"        AS u(app_name, stream_name, shard_id, checkpoint, lease_owner, lease_count, completed))"

/* Rows that cannot become leases. */
#define KCL_CHECK_SQL(src) \
"SELECT pg_catalog.count(*) FROM (" KCL_SOURCE(src) ") AS r" \
" WHERE (" KCL_IDENT_OK("r.app_name") " AND " KCL_IDENT_OK("r.stream_name") \
"        AND " KCL_IDENT_OK("r.shard_id") \
"        AND (r.lease_owner IS NULL OR pg_catalog.octet_length(r.lease_owner)" \
"             OPERATOR(pg_catalog.<=) " CppAsString2(LEASE_MAX_IDENT_BYTES) ")" \
"        AND (r.checkpoint IS NULL OR pg_catalog.octet_length(r.checkpoint)" \
"             OPERATOR(pg_catalog.<=) " CppAsString2(LEASE_MAX_CHECKPOINT_BYTES) ")" \
"        AND r.lease_count OPERATOR(pg_catalog.>=) 0" \
"        AND r.lease_count OPERATOR(pg_catalog.<) " CppAsString2(LEASE_MAX_IMPORTED_COUNTER) ") IS NOT TRUE"

/*
 * The import: completed shards become SHARD_END; a lease keeps its owner of
 * record but expires at once (the old fleet is stopped), so any worker can
 * take it and the same worker name re-taking it is not an owner switch.
 * An ended lease is nobody's: its owner is not kept (a worker started under
 * that name would otherwise find it among its own, ended for good).
 * Existing leases are never touched, so running it again changes nothing.
 */
#define KCL_ENDED "COALESCE(r.completed OR r.checkpoint OPERATOR(pg_catalog.=) " LEASE_SQL_SHARD_END ", false)"
#define KCL_INSERT_SQL(src) \
"INSERT INTO lease.shard_leases AS l" \
" (app_name, stream_name, shard_id, lease_owner, lease_expires_at, lease_count, checkpoint)" \
" SELECT r.app_name, r.stream_name, r.shard_id, CASE WHEN NOT " KCL_ENDED " THEN r.lease_owner END," \
"        CASE WHEN r.lease_owner IS NOT NULL AND NOT " KCL_ENDED " THEN pg_catalog.clock_timestamp() END," \
"        r.lease_count," \
"        CASE WHEN r.completed THEN " LEASE_SQL_SHARD_END \
"             ELSE COALESCE(r.checkpoint, 'TRIM_HORIZON') END" \
"   FROM (" KCL_SOURCE(src) ") AS r" \
" ON CONFLICT (app_name, stream_name, shard_id) DO NOTHING"

/* import_kcl_ex: the relation is quoted into %s at run time. */
static const char *kcl_check_sql = KCL_CHECK_SQL("%s");
static const char *kcl_insert_sql = KCL_INSERT_SQL("%s");

/* import_kcl_ex_rows: fixed text, the arrays as parameters. */
#define KCL_ROWS_ARGTYPES {TEXTARRAYOID, TEXTARRAYOID, TEXTARRAYOID, TEXTARRAYOID, \
						   TEXTARRAYOID, INT8ARRAYOID, BOOLARRAYOID}
static LeaseStatement kcl_rows_check = {
	.name = "import_kcl_ex_rows: check the rows",
	.sql = KCL_CHECK_SQL(KCL_ROWS),
	.nargs = 7,
	.argtypes = KCL_ROWS_ARGTYPES,
	.expected = SPI_OK_SELECT,
	.read_only = true			/* import_kcl_ex_rows checks before it writes */
};
static LeaseStatement kcl_rows_insert = {
	.name = "import_kcl_ex_rows: insert the leases",
	.sql = KCL_INSERT_SQL(KCL_ROWS),
	.nargs = 7,
	.argtypes = KCL_ROWS_ARGTYPES,
	.expected = SPI_OK_INSERT
};

/* Raises 42703 / 22023 unless every required column is there with a usable type. */
static void
check_kcl_columns(Oid relid, const char *relname)
{
	for (size_t i = 0; i < lengthof(kcl_columns); i++)
	{
		const KclColumn *col = &kcl_columns[i];
		AttrNumber	attnum = get_attnum(relid, col->name);
		Oid			type;
		bool		ok = false;

		if (attnum == InvalidAttrNumber)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("column \"%s\" of relation %s does not exist", col->name, relname),
					 errdetail("A kcl_ex shard_lease table has the columns shard_id, app_name, stream_name, checkpoint, lease_owner, lease_count and completed."),
					 errhint("Import from a view that supplies the missing columns.")));
		type = get_atttype(relid, attnum);
		for (size_t t = 0; t < lengthof(col->types) && OidIsValid(col->types[t]); t++)
			ok = ok || type == col->types[t];
		if (!ok)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("column \"%s\" of relation %s has type %s", col->name, relname,
							format_type_be(type)),
					 errdetail("import_kcl_ex expects %s.", col->expected),
					 errhint("Import from a view that casts the column.")));
	}
}

/*
 * Raises 42501 unless the caller may read the required columns of the
 * source.  Checked before any SQL runs, so the error names what to grant
 * rather than quoting the import's SQL.
 */
static void
check_source_privileges(Oid relid, const char *relname)
{
	Oid			userid = GetUserId();

	if (pg_class_aclcheck(relid, userid, ACL_SELECT) != ACLCHECK_OK)
	{
		for (size_t i = 0; i < lengthof(kcl_columns); i++)
		{
			AttrNumber	attnum = get_attnum(relid, kcl_columns[i].name);

			if (pg_attribute_aclcheck(relid, attnum, userid, ACL_SELECT) != ACLCHECK_OK)
				ereport(ERROR,
						(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
						 errmsg("permission denied for table %s", get_rel_name(relid)),
						 errdetail("import_kcl_ex reads %s with the caller's privileges.", relname),
						 errhint("Grant the importing role SELECT on %s, or import as a role that may read it.",
								 relname)));
		}
	}
}


/* Runs the import's SQL; its text never reaches an error's CONTEXT. */
static uint64
run_import_sql(const char *name, const char *sql, bool read_only, int expected)
{
	MemoryContext cxt = CurrentMemoryContext;
	volatile int rc = 0;

	PG_TRY();
	{
		rc = SPI_execute(sql, read_only, 0);
	}
	PG_CATCH();
	{
		lease_spi_rethrow_without_sql(name, sql, cxt);
	}
	PG_END_TRY();
	if (rc != expected)
		elog(ERROR, "pg_lease: %s returned %s", name, SPI_result_code_string(rc));
	return SPI_processed;
}

PG_FUNCTION_INFO_V1(lease_import_kcl_ex);

/* lease.import_kcl_ex: how many leases were imported (0 when run again). */
Datum
lease_import_kcl_ex(PG_FUNCTION_ARGS)
{
	Oid			relid;
	char		relkind;
	char	   *nspname;
	char	   *relname;
	const char *qualified;
	StringInfoData sql;
	bool		isnull;
	int64		bad;
	uint64		imported;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("source must not be null"),
				 errhint("Pass the kcl_ex shard_lease table, e.g. 'public.shard_lease'.")));
	relid = PG_GETARG_OID(0);
	relkind = get_rel_relkind(relid);
	if (relkind == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", relid),
				 errhint("Pass the kcl_ex shard_lease table by name, e.g. 'public.shard_lease'.")));
	if (relkind != RELKIND_RELATION && relkind != RELKIND_PARTITIONED_TABLE &&
		relkind != RELKIND_VIEW && relkind != RELKIND_MATVIEW &&
		relkind != RELKIND_FOREIGN_TABLE)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is not a table, view or foreign table", get_rel_name(relid)),
				 errhint("Pass the kcl_ex shard_lease table, or a view over it.")));

	nspname = get_namespace_name(get_rel_namespace(relid));
	relname = get_rel_name(relid);
	if (nspname == NULL || relname == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", relid),
				 errhint("Pass the kcl_ex shard_lease table by name, e.g. 'public.shard_lease'.")));
	/* the only way the relation reaches the SQL text */
	qualified = quote_qualified_identifier(nspname, relname);
	check_kcl_columns(relid, qualified);
	check_source_privileges(relid, qualified);
	lease_import_check_leases_privileges("import_kcl_ex");

	lease_spi_connect();

	initStringInfo(&sql);
	appendStringInfo(&sql, kcl_check_sql, qualified);
	run_import_sql("import_kcl_ex: check the rows", sql.data, true, SPI_OK_SELECT);
	bad = DatumGetInt64(lease_spi_value(0, 1, &isnull));
	if (bad > 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg(INT64_FORMAT " rows of %s cannot be imported", bad, qualified),
				 errdetail("Every row needs a non-blank shard_id, app_name and stream_name of at most %d bytes, a lease_owner of at most %d bytes, a checkpoint of at most %d bytes and a lease_count from 0 to 2^61 - 1 (room for the takes after it).",
						   LEASE_MAX_IDENT_BYTES, LEASE_MAX_IDENT_BYTES, LEASE_MAX_CHECKPOINT_BYTES),
				 errhint("Nothing was imported: fix those rows, or import from a view that leaves them out, and run it again.")));

	resetStringInfo(&sql);
	appendStringInfo(&sql, kcl_insert_sql, qualified);
	imported = run_import_sql("import_kcl_ex: insert the leases", sql.data, false, SPI_OK_INSERT);

	lease_spi_finish();
	PG_RETURN_INT64((int64) imported);
}

/* The names of import_kcl_ex_rows' arguments, for its errors. */
static const char *const kcl_rows_args[] = {
	"app_names", "stream_names", "shard_ids", "checkpoints", "lease_owners",
	"lease_counts", "completed"
};

PG_FUNCTION_INFO_V1(lease_import_kcl_ex_rows);

/*
 * lease.import_kcl_ex_rows: import_kcl_ex of rows passed as seven arrays,
 * one element per lease (what pg_lease_router sends each partition, split
 * by stream); how many leases were imported.
 */
Datum
lease_import_kcl_ex_rows(PG_FUNCTION_ARGS)
{
	Datum		values[lengthof(kcl_rows_args)];
	int			rows = -1;
	bool		isnull;
	int64		bad;
	uint64		imported;

	StaticAssertStmt(lengthof(kcl_rows_args) == 7, "import_kcl_ex_rows takes seven arrays");
	lease_import_check_leases_privileges("import_kcl_ex_rows");
	for (int i = 0; i < (int) lengthof(kcl_rows_args); i++)
	{
		ArrayType  *array;
		int			n;

		if (PG_ARGISNULL(i))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("%s must not be null", kcl_rows_args[i]),
					 errhint("Pass an array with one element per lease, '{}' for none.")));
		array = PG_GETARG_ARRAYTYPE_P(i);
		if (ARR_NDIM(array) > 1)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("%s must be a one-dimensional array", kcl_rows_args[i]),
					 errhint("Pass one element per lease.")));
		n = ArrayGetNItems(ARR_NDIM(array), ARR_DIMS(array));
		if (rows >= 0 && n != rows)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("%s has %d elements, %s has %d", kcl_rows_args[i], n,
							kcl_rows_args[0], rows),
					 errdetail("Element i of every array is a column of lease i."),
					 errhint("Pass seven arrays of the same length.")));
		rows = n;
		values[i] = PointerGetDatum(array);
	}

	lease_spi_connect();
	lease_spi_run(&kcl_rows_check, values, NULL, 0);
	bad = DatumGetInt64(lease_spi_value(0, 1, &isnull));
	if (bad > 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg(INT64_FORMAT " rows cannot be imported", bad),
				 errdetail("Every row needs a non-blank shard_id, app_name and stream_name of at most %d bytes, a lease_owner of at most %d bytes, a checkpoint of at most %d bytes and a lease_count from 0 to 2^61 - 1 (room for the takes after it).",
						   LEASE_MAX_IDENT_BYTES, LEASE_MAX_IDENT_BYTES, LEASE_MAX_CHECKPOINT_BYTES),
				 errhint("Nothing was imported: fix those rows, or leave them out, and run it again.")));
	imported = lease_spi_run(&kcl_rows_insert, values, NULL, 0);
	lease_spi_finish();
	PG_RETURN_INT64((int64) imported);
}

/*
 * import_kcl_dynamodb reads the export in one statement over the items
 * (kcl_ddb_read: $1 the export's JSON documents, jsonb[], $2 the app, $3 the
 * stream), computes the lineage from what it read (kcl_ddb_lineage), and
 * writes the leases in a second (kcl_ddb_insert).  Every value is checked
 * before it is cast.  The read looks at each item alone (its attributes,
 * their types, its problems), plus window functions and one-row aggregates
 * over all of them: no item is compared with every other, so it is linear
 * in the export (a correlated look-up from each item into the others made
 * 0.4.0's import quadratic: 8,000 items took 86 s).
 */
