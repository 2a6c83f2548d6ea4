/*-------------------------------------------------------------------------
 *
 * src/leases/import.c
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
 * lease.import_kcl_dynamodb copies the leases of an export of the AWS
 * Kinesis Client Library's DynamoDB lease table (docs/shard-leases.md,
 * "Switching from AWS KCL"): the export is text, parsed here, and the
 * mapping, the checks and the insert are one statement with the items as
 * parameters; it writes only when no item is refused.
 *
 *-------------------------------------------------------------------------
 */
#include "pg_lease.h"

#include "catalog/pg_class.h"
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
#include "utils/lsyscache.h"

#include "common/args.h"
#include "common/spi_util.h"
#include "leases/privileges.h"

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
"        AND r.lease_count OPERATOR(pg_catalog.<) 4611686018427387904) IS NOT TRUE"

/*
 * The import: completed shards become SHARD_END; a lease keeps its owner of
 * record but expires at once (the old fleet is stopped), so any worker can
 * take it and the same worker name re-taking it is not an owner switch.
 * Existing leases are never touched, so running it again changes nothing.
 */
#define KCL_INSERT_SQL(src) \
"INSERT INTO lease.shard_leases AS l" \
" (app_name, stream_name, shard_id, lease_owner, lease_expires_at, lease_count, checkpoint)" \
" SELECT r.app_name, r.stream_name, r.shard_id, r.lease_owner," \
"        CASE WHEN r.lease_owner IS NOT NULL THEN pg_catalog.clock_timestamp() END," \
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

/*
 * Raises 42501 unless the caller may insert into lease.shard_leases
 * (INSERT ... ON CONFLICT, which needs SELECT too).  Row-level security on
 * lease.shard_leases (the operator's own apps) is applied by the insert.
 */
static void
check_leases_privileges(const char *fname)
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
	check_leases_privileges("import_kcl_ex");

	lease_spi_connect();

	initStringInfo(&sql);
	appendStringInfo(&sql, kcl_check_sql, qualified);
	run_import_sql("import_kcl_ex: check the rows", sql.data, true, SPI_OK_SELECT);
	bad = DatumGetInt64(lease_spi_value(0, 1, &isnull));
	if (bad > 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg(INT64_FORMAT " rows of %s cannot be imported", bad, qualified),
				 errdetail("Every row needs a non-blank shard_id, app_name and stream_name of at most %d bytes, a lease_owner of at most %d bytes, a checkpoint of at most %d bytes and a non-negative lease_count.",
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
	check_leases_privileges("import_kcl_ex_rows");
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
				 errdetail("Every row needs a non-blank shard_id, app_name and stream_name of at most %d bytes, a lease_owner of at most %d bytes, a checkpoint of at most %d bytes and a non-negative lease_count.",
						   LEASE_MAX_IDENT_BYTES, LEASE_MAX_IDENT_BYTES, LEASE_MAX_CHECKPOINT_BYTES),
				 errhint("Nothing was imported: fix those rows, or leave them out, and run it again.")));
	imported = lease_spi_run(&kcl_rows_insert, values, NULL, 0);
	lease_spi_finish();
	PG_RETURN_INT64((int64) imported);
}

/*
 * import_kcl_dynamodb: $1 the export's JSON documents (jsonb[]), $2 the
 * app, $3 the stream.  One row per item (and per child lease created from
 * childShardIds): item, lease_key, shard_id, action, detail, and problem,
 * set on the rows of items that cannot be imported; the insert runs only
 * when there is none.  Every value is checked before it is cast.
 */
static LeaseStatement kcl_ddb_import = {
	.name = "import_kcl_dynamodb: import the items",
	.sql =
	"WITH docs AS ( "
	"    SELECT d.doc, d.ord "
	"      FROM pg_catalog.unnest(CAST($1 AS pg_catalog.jsonb[])) WITH ORDINALITY AS d(doc, ord) "
	"), items AS ( "
	/* the items in the order of the export: the elements of a scan's
	 * "Items" (or of an array), else the document itself; an S3 export
	 * line {"Item": {...}} is unwrapped */
	"    SELECT pg_catalog.row_number() OVER (ORDER BY d.ord, e.pos) AS item, "
	"           CASE WHEN pg_catalog.jsonb_typeof(e.it) OPERATOR(pg_catalog.<>) 'object' THEN e.it "
	"                WHEN pg_catalog.jsonb_typeof(e.it OPERATOR(pg_catalog.->) 'Item') IS DISTINCT FROM 'object' THEN e.it "
	"                WHEN (SELECT pg_catalog.count(*) FROM pg_catalog.jsonb_object_keys(e.it) AS k) OPERATOR(pg_catalog.=) 1 "
	"                THEN e.it OPERATOR(pg_catalog.->) 'Item' ELSE e.it END AS it "
	"      FROM docs AS d, "
	"           LATERAL pg_catalog.jsonb_array_elements( "
	"               CASE WHEN pg_catalog.jsonb_typeof(d.doc) OPERATOR(pg_catalog.=) 'array' THEN d.doc "
	"                    WHEN pg_catalog.jsonb_typeof(d.doc OPERATOR(pg_catalog.->) 'Items') OPERATOR(pg_catalog.=) 'array' THEN d.doc OPERATOR(pg_catalog.->) 'Items' "
	"                    ELSE pg_catalog.jsonb_build_array(d.doc) END) WITH ORDINALITY AS e(it, pos) "
	"), attrs AS ( "
	/* every attribute of every item, with its DynamoDB type: the one key
	 * of its value when that key holds what the type says, else NULL */
	"    SELECT i.item, a.key AS name, a.value AS av, t.type "
	"      FROM items AS i, "
	"           LATERAL pg_catalog.jsonb_each(CASE WHEN pg_catalog.jsonb_typeof(i.it) OPERATOR(pg_catalog.=) 'object' THEN i.it "
	"                                             ELSE '{}' END) AS a, "
	"           LATERAL (SELECT pg_catalog.min(k) AS type, pg_catalog.count(*) AS n "
	"                      FROM pg_catalog.jsonb_object_keys(CASE WHEN pg_catalog.jsonb_typeof(a.value) OPERATOR(pg_catalog.=) 'object' "
	"                                                             THEN a.value ELSE '{}' END) AS k) AS c, "
	"           LATERAL (SELECT CASE WHEN c.n OPERATOR(pg_catalog.=) 1 "
	"                                 AND pg_catalog.jsonb_typeof(a.value OPERATOR(pg_catalog.->) c.type) "
	"                                     OPERATOR(pg_catalog.=) CASE WHEN c.type OPERATOR(pg_catalog.=) ANY ('{S,B}'::pg_catalog.text[]) THEN 'string' "
	"                                            WHEN c.type OPERATOR(pg_catalog.=) ANY ('{BOOL,\"NULL\"}'::pg_catalog.text[]) THEN 'boolean' "
	"                                            WHEN c.type OPERATOR(pg_catalog.=) 'M' THEN 'object' "
	"                                            WHEN c.type OPERATOR(pg_catalog.=) ANY ('{SS,NS,BS,L}'::pg_catalog.text[]) THEN 'array' "
	"                                            WHEN c.type OPERATOR(pg_catalog.=) 'N' THEN pg_catalog.jsonb_typeof(a.value OPERATOR(pg_catalog.->) 'N') END "
	"                                 AND (c.type OPERATOR(pg_catalog.<>) 'N' OR pg_catalog.jsonb_typeof(a.value OPERATOR(pg_catalog.->) 'N') "
	"                                                      OPERATOR(pg_catalog.=) ANY ('{string,number}'::pg_catalog.text[])) "
	"                                THEN c.type END AS type) AS t "
	"), kinds AS ( "
	/* what each item is: a lease, a row KCL keeps for itself, or neither */
	"    SELECT i.item, i.it, i.it OPERATOR(pg_catalog.->) 'leaseKey' OPERATOR(pg_catalog.->>) 'S' AS lease_key, "
	"           (SELECT pg_catalog.min(a.name) FROM attrs AS a "
	"             WHERE a.item OPERATOR(pg_catalog.=) i.item AND a.type IS NULL) AS untyped, "
	"           CASE WHEN e.entity OPERATOR(pg_catalog.=) 'LEASE' THEN NULL "
	"                WHEN e.entity OPERATOR(pg_catalog.=) 'LEADER' THEN 'KCL leader lock' "
	"                WHEN e.entity OPERATOR(pg_catalog.=) 'WORKER_METRIC_STATS' THEN 'KCL worker metrics' "
	"                WHEN e.entity OPERATOR(pg_catalog.=) 'STREAM' THEN 'KCL stream info' "
	"                WHEN e.entity OPERATOR(pg_catalog.=) 'CLIENT_VERSION_MIGRATION' THEN 'KCL client version migration state' "
	"                WHEN e.entity OPERATOR(pg_catalog.=) 'TABLE_MIGRATION' THEN 'KCL table migration state' "
	"                WHEN e.entity IS NOT NULL THEN pg_catalog.format('KCL entityType %s', e.entity) "
	"                WHEN i.it OPERATOR(pg_catalog.->) 'leaseKey' OPERATOR(pg_catalog.->>) 'S' OPERATOR(pg_catalog.=) 'Leader' THEN 'KCL leader lock' "
	"                WHEN i.it OPERATOR(pg_catalog.->) 'leaseKey' OPERATOR(pg_catalog.->>) 'S' OPERATOR(pg_catalog.=) 'Migration3.0' THEN 'KCL client version migration state' "
	"                WHEN i.it OPERATOR(pg_catalog.->) 'leaseKey' OPERATOR(pg_catalog.->>) 'S' OPERATOR(pg_catalog.=) 'TableMigration3.5' THEN 'KCL table migration state' "
	"                WHEN i.it OPERATOR(pg_catalog.?) 'leaseKey' THEN NULL "
	"                WHEN pg_catalog.jsonb_typeof(i.it OPERATOR(pg_catalog.->) 'wid' OPERATOR(pg_catalog.->) 'S') OPERATOR(pg_catalog.=) 'string' "
	"                    THEN 'KCL worker metrics (WorkerMetricStats table)' "
	"                WHEN pg_catalog.jsonb_typeof(i.it OPERATOR(pg_catalog.->) 'key' OPERATOR(pg_catalog.->) 'S') OPERATOR(pg_catalog.=) 'string' "
	"                    THEN 'KCL coordinator state (CoordinatorState table)' "
	"           END AS not_a_lease "
	"      FROM items AS i, "
	"           LATERAL (SELECT i.it OPERATOR(pg_catalog.->) 'entityType' OPERATOR(pg_catalog.->>) 'S' AS entity) AS e "
	"), leases AS ( "
	/* the well-formed lease items: their stream and shard */
	"    SELECT k.item, k.it, k.lease_key, m.r[1] AS ident, m.r[2] AS sname, "
	"           CASE WHEN m.multi THEN m.r[3] ELSE k.lease_key END AS shard, m.multi, "
	"           k.it OPERATOR(pg_catalog.->) 'streamName' OPERATOR(pg_catalog.->>) 'S' AS stream_attr, k.it OPERATOR(pg_catalog.->) 'shardId' OPERATOR(pg_catalog.->>) 'S' AS shard_attr "
	"      FROM kinds AS k, "
	"           LATERAL (SELECT pg_catalog.regexp_match(k.lease_key, '^([0-9]+:([^:]+):[0-9]+):(.+)$') AS r, "
	"                           pg_catalog.strpos(k.lease_key, ':') OPERATOR(pg_catalog.>) 0 OR k.it OPERATOR(pg_catalog.?) 'streamName' AS multi) AS m "
	"     WHERE k.lease_key IS NOT NULL AND k.not_a_lease IS NULL AND k.untyped IS NULL "
	"), ours AS ( "
	/* the leases of the stream imported (all of a single-stream export),
	 * their values as text, NULL when absent */
	"    SELECT l.*, "
	"           pg_catalog.row_number() OVER (PARTITION BY l.shard ORDER BY l.item) AS nth, "
	"           NULLIF(l.it OPERATOR(pg_catalog.->) 'leaseOwner' OPERATOR(pg_catalog.->>) 'S', '') AS owner, "
	"           l.it OPERATOR(pg_catalog.->) 'leaseCounter' OPERATOR(pg_catalog.->>) 'N' AS counter, "
	"           l.it OPERATOR(pg_catalog.->) 'ownerSwitchesSinceCheckpoint' OPERATOR(pg_catalog.->>) 'N' AS switches, "
	"           l.it OPERATOR(pg_catalog.->) 'checkpoint' OPERATOR(pg_catalog.->>) 'S' AS checkpoint, "
	"           l.it OPERATOR(pg_catalog.->) 'checkpointSubSequenceNumber' OPERATOR(pg_catalog.->>) 'N' AS sub_seq, "
	"           NULLIF(l.it OPERATOR(pg_catalog.->) 'pendingCheckpoint' OPERATOR(pg_catalog.->>) 'S', '') AS pending, "
	"           l.it OPERATOR(pg_catalog.->) 'pendingCheckpointSubSequenceNumber' OPERATOR(pg_catalog.->>) 'N' AS pending_sub_seq, "
	"           ARRAY(SELECT CASE WHEN pg_catalog.jsonb_typeof(e) OPERATOR(pg_catalog.=) 'string' THEN e OPERATOR(pg_catalog.#>>) '{}' "
	"                             WHEN pg_catalog.jsonb_typeof(e OPERATOR(pg_catalog.->) 'S') OPERATOR(pg_catalog.=) 'string' THEN e OPERATOR(pg_catalog.->>) 'S' END "
	"                   FROM pg_catalog.jsonb_array_elements(COALESCE(l.it OPERATOR(pg_catalog.->) 'parentShardId' OPERATOR(pg_catalog.->) 'SS', "
	"                                                                 l.it OPERATOR(pg_catalog.->) 'parentShardId' OPERATOR(pg_catalog.->) 'L', '[]')) AS e) AS parents, "
	"           ARRAY(SELECT CASE WHEN pg_catalog.jsonb_typeof(e) OPERATOR(pg_catalog.=) 'string' THEN e OPERATOR(pg_catalog.#>>) '{}' "
	"                             WHEN pg_catalog.jsonb_typeof(e OPERATOR(pg_catalog.->) 'S') OPERATOR(pg_catalog.=) 'string' THEN e OPERATOR(pg_catalog.->>) 'S' END "
	"                   FROM pg_catalog.jsonb_array_elements(COALESCE(l.it OPERATOR(pg_catalog.->) 'childShardIds' OPERATOR(pg_catalog.->) 'SS', "
	"                                                                 l.it OPERATOR(pg_catalog.->) 'childShardIds' OPERATOR(pg_catalog.->) 'L', '[]')) AS e) AS children "
	"      FROM leases AS l "
	"     WHERE NOT l.multi OR l.sname OPERATOR(pg_catalog.=) $3 OR l.sname IS NULL "
	"), checked AS ( "
	/* each lease of the stream, with what keeps it from being imported */
	"    SELECT o.*, "
	"           CASE WHEN o.multi AND o.ident IS NULL "
	"                    THEN 'leaseKey is not account:stream:creationEpoch:shardId, as a multi-stream lease''s is' "
	"                WHEN o.multi AND o.stream_attr IS NOT NULL AND o.stream_attr OPERATOR(pg_catalog.<>) o.ident "
	"                    THEN pg_catalog.format('leaseKey names stream %s but streamName is %s', o.ident, o.stream_attr) "
	"                WHEN o.multi AND o.shard_attr IS NOT NULL AND o.shard_attr OPERATOR(pg_catalog.<>) o.shard "
	"                    THEN pg_catalog.format('leaseKey names shard %s but shardId is %s', o.shard, o.shard_attr) "
	"                WHEN NOT o.multi AND (SELECT pg_catalog.bool_or(l.multi) FROM leases AS l) "
	"                    THEN 'a single-stream leaseKey in an export of multi-stream leases belongs to no stream' "
	"                WHEN o.multi AND (SELECT pg_catalog.count(DISTINCT c.ident) FROM ours AS c WHERE c.multi) OPERATOR(pg_catalog.>) 1 "
	"                    THEN pg_catalog.format('stream %s has leases under more than one stream identifier (%s)', $3, "
	"                             (SELECT pg_catalog.string_agg(DISTINCT c.ident, ', ') FROM ours AS c WHERE c.multi)) "
	"                WHEN pg_catalog.btrim(o.shard, E' \\t\\n\\r\\f' OPERATOR(pg_catalog.||) pg_catalog.chr(11)) OPERATOR(pg_catalog.=) '' "
	"                    THEN 'the shard id is blank' "
	"                WHEN pg_catalog.octet_length(o.shard) OPERATOR(pg_catalog.>) " CppAsString2(LEASE_MAX_IDENT_BYTES) " "
	"                    THEN 'the shard id is longer than " CppAsString2(LEASE_MAX_IDENT_BYTES) " bytes' "
	"                WHEN o.nth OPERATOR(pg_catalog.>) 1 "
	"                    THEN pg_catalog.format('shard %s appears more than once', o.shard) "
	"                WHEN w.name IS NOT NULL "
	"                    THEN pg_catalog.format('%s is of type %s where %s is expected', w.name, w.type, w.expected) "
	"                WHEN o.counter IS NULL THEN 'there is no leaseCounter' "
	"                WHEN o.checkpoint IS NULL THEN 'there is no checkpoint' "
	"                WHEN n.name IS NOT NULL "
	"                    THEN pg_catalog.format('%s %s is %s', n.name, n.value, "
	"                             CASE WHEN n.value OPERATOR(pg_catalog.~) '^-[0-9]+$' THEN 'negative' "
	"                                  WHEN n.value OPERATOR(pg_catalog.~) '^[0-9]+$' THEN 'too large' "
	"                                  ELSE 'not an integer' END) "
	"                WHEN NOT (o.checkpoint OPERATOR(pg_catalog.~) '^[0-9]{1,129}$' "
	"                          OR o.checkpoint OPERATOR(pg_catalog.=) ANY ('{TRIM_HORIZON,LATEST,SHARD_END,AT_TIMESTAMP}'::pg_catalog.text[])) "
	"                    THEN pg_catalog.format('checkpoint \"%s\" is neither a sequence number nor TRIM_HORIZON, LATEST, SHARD_END or AT_TIMESTAMP', "
	"                                           pg_catalog.left(o.checkpoint, 64)) "
	"                WHEN NOT (o.pending OPERATOR(pg_catalog.~) '^[0-9]{1,129}$' OR o.pending OPERATOR(pg_catalog.=) " LEASE_SQL_SHARD_END ") "
	"                    THEN pg_catalog.format('pendingCheckpoint \"%s\" is not a sequence number', pg_catalog.left(o.pending, 64)) "
	"                WHEN pg_catalog.octet_length(o.owner) OPERATOR(pg_catalog.>) " CppAsString2(LEASE_MAX_IDENT_BYTES) " "
	"                    THEN 'leaseOwner is longer than " CppAsString2(LEASE_MAX_IDENT_BYTES) " bytes' "
	"                WHEN p.bad IS NOT NULL THEN p.bad "
	"           END AS problem "
	"      FROM ours AS o "
	"      LEFT JOIN LATERAL ( "
	/* a known attribute of another type than KCL writes ({"NULL": true} counts as absent) */
	"           SELECT a.name, a.type, pg_catalog.array_to_string(x.types, ' or ') AS expected "
	"             FROM attrs AS a "
	"             JOIN (VALUES ('leaseKey', '{S}'::pg_catalog.text[]), ('leaseOwner', '{S,\"NULL\"}'), "
	"                          ('leaseCounter', '{N}'), ('ownerSwitchesSinceCheckpoint', '{N,\"NULL\"}'), "
	"                          ('checkpoint', '{S}'), ('checkpointSubSequenceNumber', '{N,\"NULL\"}'), "
	"                          ('pendingCheckpoint', '{S,\"NULL\"}'), ('pendingCheckpointSubSequenceNumber', '{N,\"NULL\"}'), "
	"                          ('pendingCheckpointState', '{B,N,\"NULL\"}'), ('parentShardId', '{SS,L,\"NULL\"}'), "
	"                          ('childShardIds', '{SS,L,\"NULL\"}'), ('startingHashKey', '{S,\"NULL\"}'), "
	"                          ('endingHashKey', '{S,\"NULL\"}'), ('throughputKBps', '{N,\"NULL\"}'), "
	"                          ('checkpointOwner', '{S,\"NULL\"}'), ('entityType', '{S}'), ('streamName', '{S}'), "
	"                          ('shardId', '{S}')) AS x(name, types) "
	"               ON x.name OPERATOR(pg_catalog.=) a.name "
	"            WHERE a.item OPERATOR(pg_catalog.=) o.item AND NOT a.type OPERATOR(pg_catalog.=) ANY (x.types) "
	"            ORDER BY a.name LIMIT 1) AS w ON true "
	"      LEFT JOIN LATERAL ( "
	/* a counter that is not an integer pg_lease can keep */
	"           SELECT v.name, v.value "
	"             FROM (VALUES (1, 'leaseCounter', o.counter, 4611686018427387904::pg_catalog.numeric), "
	"                          (2, 'ownerSwitchesSinceCheckpoint', o.switches, 4611686018427387904), "
	"                          (3, 'checkpointSubSequenceNumber', o.sub_seq, 9223372036854775808), "
	"                          (4, 'pendingCheckpointSubSequenceNumber', o.pending_sub_seq, 9223372036854775808)) "
	"                  AS v(ord, name, value, bound) "
	"            WHERE v.value IS NOT NULL "
	"              AND NOT (v.value OPERATOR(pg_catalog.~) '^[0-9]{1,19}$' AND CAST(v.value AS pg_catalog.numeric) OPERATOR(pg_catalog.<) v.bound) "
	"            ORDER BY v.ord LIMIT 1) AS n ON true "
	"      LEFT JOIN LATERAL ( "
	/* lineage pg_lease cannot keep */
	"           SELECT s.bad FROM (SELECT s.ord, CASE WHEN pg_catalog.array_position(s.ids, NULL) IS NOT NULL "
	"                           THEN pg_catalog.format('%s has an element that is not a string', s.name) "
	"                       WHEN EXISTS (SELECT 1 FROM pg_catalog.unnest(s.ids) AS id "
	"                                     WHERE pg_catalog.btrim(id, E' \\t\\n\\r\\f' OPERATOR(pg_catalog.||) pg_catalog.chr(11)) OPERATOR(pg_catalog.=) '' "
	"                                        OR pg_catalog.octet_length(id) OPERATOR(pg_catalog.>) " CppAsString2(LEASE_MAX_IDENT_BYTES) ") "
	"                           THEN pg_catalog.format('%s has a blank shard id or one longer than " CppAsString2(LEASE_MAX_IDENT_BYTES) " bytes', s.name) "
	"                       WHEN pg_catalog.cardinality(s.ids) OPERATOR(pg_catalog.>) " CppAsString2(LEASE_MAX_PARENTS) " "
	"                           THEN pg_catalog.format('%s names more than " CppAsString2(LEASE_MAX_PARENTS) " shards', s.name) "
	"                       WHEN o.shard OPERATOR(pg_catalog.=) ANY (s.ids) "
	"                           THEN pg_catalog.format('%s names the shard itself', s.name) END AS bad "
	"             FROM (VALUES (1, 'parentShardId', o.parents), (2, 'childShardIds', o.children)) AS s(ord, name, ids)) AS s "
	"            WHERE s.bad IS NOT NULL "
	"            ORDER BY s.ord LIMIT 1) AS p ON true "
	"), problems AS ( "
	/* everything that keeps the export from being imported, by item */
	"    SELECT k.item, k.lease_key, "
	"           CASE WHEN pg_catalog.jsonb_typeof(k.it) OPERATOR(pg_catalog.<>) 'object' THEN 'the item is not a JSON object' "
	"                WHEN k.untyped IS NOT NULL "
	"                    THEN pg_catalog.format('attribute %s is not a DynamoDB typed value such as {\"S\": \"...\"}', k.untyped) "
	"                WHEN k.not_a_lease IS NULL AND NOT k.it OPERATOR(pg_catalog.?) 'leaseKey' THEN 'there is no leaseKey' "
	"                WHEN k.not_a_lease IS NULL AND k.lease_key IS NULL THEN 'leaseKey is not of type S' END AS problem "
	"      FROM kinds AS k "
	"    UNION ALL "
	"    SELECT c.item, c.lease_key, c.problem FROM checked AS c "
	"    UNION ALL "
	/* item 0: the export is one page of a scan; the problem names its marker */
	"    SELECT 0, NULL, CASE WHEN d.doc OPERATOR(pg_catalog.?) 'NextToken' THEN 'NextToken' ELSE 'LastEvaluatedKey' END "
	"      FROM docs AS d "
	"     WHERE pg_catalog.jsonb_typeof(d.doc) OPERATOR(pg_catalog.=) 'object' AND (d.doc OPERATOR(pg_catalog.?) 'NextToken' OR d.doc OPERATOR(pg_catalog.?) 'LastEvaluatedKey') "
	"), children AS ( "
	/* a child named in childShardIds with no lease in the export: created
	 * as KCL creates it (TRIM_HORIZON, the shards naming it as parents) */
	"    SELECT pg_catalog.min(c.item) AS item, ch.id AS shard, pg_catalog.min(c.ident) AS ident, "
	"           pg_catalog.array_agg(DISTINCT c.shard) AS parents "
	"      FROM checked AS c, LATERAL pg_catalog.unnest(c.children) AS ch(id) "
	"     WHERE NOT EXISTS (SELECT 1 FROM checked AS e WHERE e.shard OPERATOR(pg_catalog.=) ch.id) "
	"     GROUP BY ch.id "
	"), rows AS ( "
	/* the leases to write, with what pg_lease keeps of them */
	"    SELECT c.item, c.lease_key, c.shard, 'imported' AS made, c.owner, "
	"           CASE WHEN c.problem IS NULL THEN CAST(c.counter AS pg_catalog.int8) END AS lease_count, "
	"           c.checkpoint, "
	"           CASE WHEN c.problem IS NULL THEN CAST(COALESCE(c.sub_seq, '0') AS pg_catalog.int8) END AS sub_seq, "
	/* its parentShardId, and the leases whose childShardIds name it */
	"           ARRAY(SELECT u.id FROM (SELECT pg_catalog.unnest(c.parents) "
	"                                   UNION SELECT p.shard FROM checked AS p WHERE c.shard OPERATOR(pg_catalog.=) ANY (p.children)) AS u(id) "
	"                  ORDER BY u.id) AS parents, "
	"           CASE WHEN c.problem IS NULL THEN CAST(COALESCE(c.switches, '0') AS pg_catalog.int8) END AS switches, "
	"           CASE WHEN c.checkpoint OPERATOR(pg_catalog.<>) " LEASE_SQL_SHARD_END " AND c.pending OPERATOR(pg_catalog.~) '^[0-9]+$' THEN c.pending END AS pending, "
	/* what pg_lease has no place for */
	"           (SELECT 'not imported: ' OPERATOR(pg_catalog.||) pg_catalog.string_agg(a.name, ', ' ORDER BY a.name) "
	"              FROM attrs AS a "
	"             WHERE a.item OPERATOR(pg_catalog.=) c.item AND a.type OPERATOR(pg_catalog.<>) 'NULL' "
	"               AND (NOT a.name OPERATOR(pg_catalog.=) ANY ('{leaseKey,leaseOwner,leaseCounter,ownerSwitchesSinceCheckpoint,checkpoint,checkpointSubSequenceNumber,pendingCheckpoint,pendingCheckpointSubSequenceNumber,parentShardId,childShardIds,entityType,streamName,shardId}'::pg_catalog.text[]) "
	"                    OR (a.name OPERATOR(pg_catalog.=) 'pendingCheckpoint' AND c.pending IS NOT NULL "
	"                        AND (c.checkpoint OPERATOR(pg_catalog.=) " LEASE_SQL_SHARD_END " OR c.pending OPERATOR(pg_catalog.=) " LEASE_SQL_SHARD_END ")) "
	"                    OR (a.name OPERATOR(pg_catalog.=) 'pendingCheckpointSubSequenceNumber' AND NOT c.pending_sub_seq OPERATOR(pg_catalog.~) '^0+$'))) AS detail "
	"      FROM checked AS c "
	"    UNION ALL "
	"    SELECT ch.item, COALESCE(ch.ident OPERATOR(pg_catalog.||) ':', '') OPERATOR(pg_catalog.||) ch.shard, ch.shard, 'created', NULL, 0, " LEASE_SQL_WORD(LEASE_CHECKPOINT_TRIM_HORIZON) ", 0, "
	"           ch.parents, 0, NULL, "
	"           pg_catalog.format('named in childShardIds of %s', pg_catalog.array_to_string(ch.parents, ', ')) "
	"      FROM children AS ch "
	"), ins AS ( "
	"    INSERT INTO lease.shard_leases AS l "
	"           (app_name, stream_name, shard_id, lease_owner, lease_expires_at, lease_count, checkpoint, "
	"            checkpoint_sub_sequence, parent_shard_ids, owner_switches_since_checkpoint, pending_checkpoint) "
	"    SELECT $2, $3, r.shard, r.owner, CASE WHEN r.owner IS NOT NULL THEN pg_catalog.clock_timestamp() END, "
	"           r.lease_count, r.checkpoint, r.sub_seq, r.parents, r.switches, r.pending "
	"      FROM rows AS r "
	"     WHERE NOT EXISTS (SELECT 1 FROM problems AS p WHERE p.problem IS NOT NULL) "
	"    ON CONFLICT (app_name, stream_name, shard_id) DO NOTHING "
	"    RETURNING l.shard_id "
	") "
	"SELECT x.item, x.lease_key, x.shard_id, x.action, x.detail, x.problem "
	"  FROM (SELECT r.item, r.lease_key, r.shard AS shard_id, "
	"               CASE WHEN EXISTS (SELECT 1 FROM ins WHERE ins.shard_id OPERATOR(pg_catalog.=) r.shard) THEN r.made ELSE 'exists' END AS action, "
	"               r.detail, NULL AS problem "
	"          FROM rows AS r "
	"        UNION ALL "
	"        SELECT l.item, l.lease_key, l.shard, 'other_stream', pg_catalog.format('stream %s', l.ident), NULL "
	"          FROM leases AS l "
	"         WHERE l.sname OPERATOR(pg_catalog.<>) $3 "
	"        UNION ALL "
	"        SELECT k.item, k.lease_key, NULL, 'not_a_lease', k.not_a_lease, NULL "
	"          FROM kinds AS k "
	"         WHERE k.not_a_lease IS NOT NULL "
	"        UNION ALL "
	"        SELECT p.item, p.lease_key, NULL, NULL, NULL, p.problem "
	"          FROM problems AS p "
	"         WHERE p.problem IS NOT NULL) AS x "
	" ORDER BY x.item, x.shard_id ",
	.nargs = 3,
	.argtypes = {JSONBARRAYOID, TEXTOID, TEXTOID},
	.expected = SPI_OK_SELECT,
	/*
	 * The planner prices each function over the export at its default
	 * hundreds of rows and every subplan as run for each, so a few items
	 * cross jit_above_cost, and compiling took seconds for a statement that
	 * runs in milliseconds.
	 */
	LEASE_STMT_JIT_OFF
};

/* The columns of import_kcl_dynamodb's rows, then the problem column. */
#define KCL_DDB_COLUMNS 5
#define KCL_DDB_PROBLEM (KCL_DDB_COLUMNS + 1)

/* The line of the export being parsed, for the error's context. */
typedef struct KclDdbLine
{
	int			number;
} KclDdbLine;

/* Error context: which line of the export was being parsed. */
static void
kcl_ddb_line_context(void *arg)
{
	errcontext("line %d of the export", ((KclDdbLine *) arg)->number);
}

/* Whether the bytes are JSON; on failure *detail says why. */
static bool
kcl_ddb_is_json(char *json, int len, char **detail)
{
	JsonLexContext *lex = makeJsonLexContextCstringLen(json, len, GetDatabaseEncoding(), false);
	JsonParseErrorType error = pg_parse_json(lex, &nullSemAction);

	if (error == JSON_SUCCESS)
		return true;
	if (detail != NULL)
		*detail = json_errdetail(error, lex);
	return false;
}

/* jsonb of a JSON text already validated. */
static Datum
kcl_ddb_jsonb(const char *json, int len)
{
	return DirectFunctionCall1(jsonb_in, CStringGetDatum(pnstrdup(json, len)));
}

/*
 * The export's JSON documents: the whole text when it is one (a scan's
 * output, pretty-printed over many lines), else each non-blank line (JSON
 * Lines: an export to S3).  Raises 22P02 naming the first line that is not
 * JSON.  *count is 0 for an export of white space only.
 */
static Datum *
kcl_ddb_documents(text *export, int *count)
{
	char	   *data = VARDATA_ANY(export);
	int			len = VARSIZE_ANY_EXHDR(export);
	Datum	   *docs;
	int			n = 0;
	int			lines = 1;
	bool		blank = true;

	for (int i = 0; i < len; i++)
	{
		blank = blank && scanner_isspace(data[i]);
		lines += data[i] == '\n';
	}
	*count = 0;
	if (blank)
		return NULL;
	if (kcl_ddb_is_json(data, len, NULL))
	{
		docs = palloc(sizeof(Datum));
		docs[0] = kcl_ddb_jsonb(data, len);
		*count = 1;
		return docs;
	}
	docs = palloc(sizeof(Datum) * lines);
	for (int start = 0, number = 1; start < len; number++)
	{
		const char *eol = memchr(data + start, '\n', len - start);
		int			end = eol != NULL ? (int) (eol - data) : len;
		char	   *detail = NULL;
		bool		line_blank = true;

		for (int i = start; i < end; i++)
			line_blank = line_blank && scanner_isspace(data[i]);
		if (!line_blank)
		{
			KclDdbLine	line = {.number = number};
			ErrorContextCallback callback = {
				.callback = kcl_ddb_line_context, .arg = &line, .previous = error_context_stack
			};

			if (!kcl_ddb_is_json(data + start, end - start, &detail))
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
						 errmsg("line %d of the export is not JSON", number),
						 errdetail("%s", detail),
						 errhint("The export is read as one JSON document (the output of aws dynamodb scan --output json) or, when it is not one, as one item per line (an export to S3 in DynamoDB JSON format).")));
			/* what jsonb refuses and JSON allows (\u0000) names the line too */
			error_context_stack = &callback;
			docs[n++] = kcl_ddb_jsonb(data + start, end - start);
			error_context_stack = callback.previous;
		}
		start = end + 1;
	}
	*count = n;
	return docs;
}

PG_FUNCTION_INFO_V1(lease_import_kcl_dynamodb);

/*
 * lease.import_kcl_dynamodb: the leases of a KCL DynamoDB lease table's
 * export, one row per item saying what became of it.
 */
Datum
lease_import_kcl_dynamodb(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Datum		args[3];
	Datum	   *docs;
	int			ndocs;
	uint64		rows;
	uint64		refused = 0;
	uint64		first = 0;

	args[1] = lease_arg_ident(fcinfo, 0, "app_name");
	args[2] = lease_arg_ident(fcinfo, 1, "stream_name");
	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("export must not be null"),
				 errhint("Pass the export of the KCL lease table as text, e.g. the output of aws dynamodb scan --output json.")));
	/* a caller that may not import for the app is refused before the export is read */
	check_leases_privileges("import_kcl_dynamodb");
	lease_app_check(fcinfo, LEASE_SCHEMA_0_4, args[1]);
	docs = kcl_ddb_documents(PG_GETARG_TEXT_PP(2), &ndocs);
	args[0] = PointerGetDatum(construct_array(docs, ndocs, JSONBOID, -1, false, TYPALIGN_INT));

	InitMaterializedSRF(fcinfo, 0);
	lease_spi_connect();
	rows = lease_spi_run(&kcl_ddb_import, args, NULL, 0);
	for (uint64 i = 0; i < rows; i++)
	{
		bool		isnull;

		(void) lease_spi_value(i, KCL_DDB_PROBLEM, &isnull);
		if (!isnull && refused++ == 0)
			first = i;
	}
	if (refused > 0)
	{
		bool		item_null;
		bool		key_null;
		bool		isnull;
		int64		item = DatumGetInt64(lease_spi_value(first, 1, &item_null));
		Datum		key = lease_spi_value(first, 2, &key_null);
		char	   *problem = TextDatumGetCString(lease_spi_value(first, KCL_DDB_PROBLEM, &isnull));

		if (item == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("the export is one page of a scan, not the whole lease table"),
					 errdetail("It has %s, which a scan prints when there are more items to read.", problem),
					 errhint("Nothing was imported: export the whole table (aws dynamodb scan without --max-items or --no-paginate, or an export to S3) and run it again.")));
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg_plural(UINT64_FORMAT " item of the export cannot be imported",
							   UINT64_FORMAT " items of the export cannot be imported",
							   refused, refused),
				 key_null ? errdetail("Item " INT64_FORMAT ": %s.", item, problem)
				 : errdetail("Item " INT64_FORMAT " (leaseKey \"%s\"): %s.", item,
							 TextDatumGetCString(key), problem),
				 errhint("Nothing was imported: fix those items, or leave them out, and run it again.")));
	}
	for (uint64 i = 0; i < rows; i++)
	{
		Datum		values[KCL_DDB_COLUMNS];
		bool		nulls[KCL_DDB_COLUMNS];

		for (int col = 0; col < KCL_DDB_COLUMNS; col++)
			values[col] = lease_spi_value(i, col + 1, &nulls[col]);
		/* tuplestore_putvalues copies the values out of SPI's memory. */
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	lease_spi_finish();
	return (Datum) 0;
}
