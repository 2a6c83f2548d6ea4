/*-------------------------------------------------------------------------
 *
 * src/leases/shard_sync.c
 *	  lease.sync_shards: shard discovery.  Makes a stream's leases match a
 *	  list of shards with their parents, as KCL's shard syncer does.
 *
 * The caller lists the stream's shards (and, optionally, each one's parents:
 * one per shard, or a row of up to LEASE_MAX_PARENTS for a merge).  The
 * missing leases are created with their lineage, in one INSERT ... ON
 * CONFLICT DO NOTHING whose rows go in shard_id order, so any number of
 * workers can run it at once: a worker that meets a lease another is
 * creating waits for that transaction and then leaves the row alone, and
 * two workers always meet in the same order (no deadlock).  Leases the
 * list does not name, and that have not ended, are reported, never ended:
 * a shard missing from one listing (a lister's hiccup, a listing taken
 * mid-reshard) must not end a lease someone is processing.
 *
 * The caller's access to the app is checked first, before anything is
 * made from the lists (a caller that may not act for the app is refused
 * whatever it passes, at no cost proportional to the lists); then every
 * argument, before any SQL of the function runs; and the lineage check
 * (statement 1, read only) runs before the insert (statement 2), so bad
 * input writes nothing.
 *
 *-------------------------------------------------------------------------
 */
#include "pg_lease.h"

#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "utils/tuplestore.h"

#include "common/args.h"
#include "common/spi_util.h"
#include "leases/lease_sql.h"
#include "leases/placement.h"
#include "leases/privileges.h"

/*
 * The listed shards with their parents: $3 the shard ids (in order), $4 and
 * $5 one row per (shard, parent) pair: the shard's position in $3 (from 1)
 * and the parent.  A shard without a pair has no parents.
 */
#define SYNC_SQL_LISTED \
	"WITH s AS (SELECT u.shard_id, u.i" \
	"             FROM pg_catalog.unnest($3) WITH ORDINALITY AS u(shard_id, i))," \
	"     p AS (SELECT q.i, pg_catalog.array_agg(q.parent ORDER BY q.j) AS parents" \
	"             FROM ROWS FROM (pg_catalog.unnest($4), pg_catalog.unnest($5))" \
	"                  WITH ORDINALITY AS q(i, parent, j)" \
	"            GROUP BY q.i)," \
	"     listed AS (SELECT s.shard_id," \
	"                       COALESCE(p.parents, CAST('{}' AS pg_catalog.text[])) AS parents" \
	"                  FROM s LEFT JOIN p ON p.i OPERATOR(pg_catalog.=) s.i)"

#define SYNC_ARGTYPES {TEXTOID, TEXTOID, TEXTARRAYOID, INT8ARRAYOID, TEXTARRAYOID}

/*
 * Statement 1: the first listed shard whose lease records parents other
 * than the listed ones (as sets).  A lease that records none (made by
 * create_lease without parents, or by import_kcl_ex) agrees with any list.
 */
static LeaseStatement sync_conflict_stmt = {
	.name = "sync_shards: check the lineage",
	.sql =
	SYNC_SQL_LISTED
	" SELECT x.shard_id, CAST(l.parent_shard_ids AS pg_catalog.text),"
	"        CAST(x.parents AS pg_catalog.text)"
	"   FROM listed AS x JOIN lease.shard_leases AS l"
	"     ON l.app_name OPERATOR(pg_catalog.=) $1"
	"    AND l.stream_name OPERATOR(pg_catalog.=) $2"
	"    AND l.shard_id OPERATOR(pg_catalog.=) x.shard_id"
	"  WHERE pg_catalog.cardinality(l.parent_shard_ids) OPERATOR(pg_catalog.>) 0"
	"    AND NOT (l.parent_shard_ids OPERATOR(pg_catalog.@>) x.parents"
	"             AND x.parents OPERATOR(pg_catalog.@>) l.parent_shard_ids)"
	"  ORDER BY x.shard_id COLLATE pg_catalog.\"C\""
	"  LIMIT 1",
	.nargs = 5,
	.argtypes = SYNC_ARGTYPES,
	.expected = SPI_OK_SELECT
};

/*
 * Statement 2: create the missing leases (in shard_id order: concurrent
 * syncs wait for each other's rows in the same order), then report them
 * and the leases of the stream that are not listed and not ended.  The
 * unlisted half reads the snapshot the statement started with; the rows it
 * creates are listed, so they are never among them.
 */
static LeaseStatement sync_stmt = {
	.name = "sync_shards",
	.sql =
	SYNC_SQL_LISTED ","
	"     created AS (INSERT INTO lease.shard_leases AS l"
	"                 (app_name, stream_name, shard_id, parent_shard_ids, checkpoint, lease_count)"
	"                 SELECT $1, $2, x.shard_id, x.parents, 'TRIM_HORIZON', 0"
	"                   FROM listed AS x"
	"                  WHERE NOT EXISTS (SELECT 1 FROM lease.shard_leases AS e"
	"                                     WHERE e.app_name OPERATOR(pg_catalog.=) $1"
	"                                       AND e.stream_name OPERATOR(pg_catalog.=) $2"
	"                                       AND e.shard_id OPERATOR(pg_catalog.=) x.shard_id)"
	"                  ORDER BY x.shard_id COLLATE pg_catalog.\"C\""
	"                 ON CONFLICT (app_name, stream_name, shard_id) DO NOTHING"
	"                 RETURNING l.shard_id)"
	" SELECT r.shard_id, r.action FROM ("
	"   SELECT c.shard_id, 'created' AS action FROM created AS c"
	"   UNION ALL"
	"   SELECT l.shard_id, 'unlisted' FROM lease.shard_leases AS l"
	"    WHERE " LEASE_STREAM_MATCHES
	"      AND " LEASE_SQL_NOT_ENDED("l")
	"      AND NOT EXISTS (SELECT 1 FROM s WHERE s.shard_id OPERATOR(pg_catalog.=) l.shard_id)"
	" ) AS r ORDER BY r.action COLLATE pg_catalog.\"C\", r.shard_id COLLATE pg_catalog.\"C\"",
	.nargs = 5,
	.argtypes = SYNC_ARGTYPES,
	.expected = SPI_OK_SELECT
};

/* A listed shard id in the duplicate check. */
typedef struct SyncShardEntry
{
	char		shard_id[LEASE_MAX_IDENT_BYTES + 1];	/* the hash key */
	int			index;			/* its position in shard_ids, from 0 */
} SyncShardEntry;

/* Raises 22023 for a parent_ids that does not fit shard_ids. */
static pg_attribute_noreturn() void
raise_parent_shape(const char *detail_fmt, int a, int b)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("parent_ids does not match shard_ids"),
			 errdetail_internal(detail_fmt, a, b),
			 errhint("Pass one parent per shard (NULL for none), or an array with one row per shard, padded with NULLs.")));
}

/*
 * Checks shard_ids (not null, one dimension, no NULL, blank, too long or
 * repeated element); returns its elements and their number, and in *listed
 * each shard id with its position (what the lineage check looks parents up
 * in).
 */
static Datum *
sync_shard_ids(FunctionCallInfo fcinfo, int *count, HTAB **listed)
{
	ArrayType  *array;
	Datum	   *elems;
	bool	   *nulls;
	HASHCTL		ctl;
	HTAB	   *seen;

	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("shard_ids must not be null"),
				 errhint("Pass every shard of the stream, '{}' for none.")));
	array = PG_GETARG_ARRAYTYPE_P(2);
	if (ARR_NDIM(array) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("shard_ids must be a one-dimensional array"),
				 errdetail("It has %d dimensions.", ARR_NDIM(array)),
				 errhint("Pass a flat list of shard ids, e.g. ARRAY['s-1', 's-2'].")));
	deconstruct_array(array, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, count);

	ctl.keysize = LEASE_MAX_IDENT_BYTES + 1;
	ctl.entrysize = sizeof(SyncShardEntry);
	ctl.hcxt = CurrentMemoryContext;
	seen = hash_create("sync_shards shard ids", Max(*count, 16), &ctl,
					   HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	for (int i = 0; i < *count; i++)
	{
		char	   *id;
		SyncShardEntry *entry;
		bool		found;

		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("shard_ids must not contain null elements"),
					 errdetail("Element %d is NULL.", i + 1),
					 errhint("Remove the NULL elements from shard_ids.")));
		lease_check_ident(DatumGetTextPP(elems[i]), "shard_ids");
		id = TextDatumGetCString(elems[i]);
		entry = hash_search(seen, id, HASH_ENTER, &found);
		if (found)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("shard_ids lists shard \"%s\" twice", id),
					 errdetail("Elements %d and %d are the same shard.", entry->index + 1, i + 1),
					 errhint("List each shard once.")));
		entry->index = i;
	}
	*listed = seen;
	return elems;
}

/*
 * Raises 22023 when the listed lineage is a cycle: every shard on it would
 * wait for another's end, its own included, and none would ever be taken.
 * pairs edges child[e] -> parent[e] (child: a position in shards); only the
 * parents that are listed shards can close a cycle.  Depth first, with the
 * grey path on a stack, so the cycle found is named in order.  (A shard
 * named as its own parent is refused before, with a message of its own.)
 */
static void
sync_check_cycles(Datum *shards, int n, HTAB *listed, const int *child, const Datum *parent,
				  int pairs)
{
	int		   *target = palloc(sizeof(int) * Max(pairs, 1));
	int		   *next = palloc(sizeof(int) * Max(pairs, 1));
	int		   *first = palloc(sizeof(int) * Max(n, 1));
	int		   *cursor = palloc(sizeof(int) * Max(n, 1));
	int		   *stack = palloc(sizeof(int) * Max(n, 1));
	char	   *colour = palloc0(Max(n, 1));	/* 0 unseen, 1 on the path, 2 done */

	for (int i = 0; i < n; i++)
		first[i] = -1;
	for (int e = 0; e < pairs; e++)
	{
		SyncShardEntry *entry = hash_search(listed, TextDatumGetCString(parent[e]),
											HASH_FIND, NULL);

		target[e] = entry ? entry->index : -1;
		if (target[e] < 0)
			continue;
		next[e] = first[child[e]];
		first[child[e]] = e;
	}

	for (int root = 0; root < n; root++)
	{
		int			depth = 0;

		if (colour[root] != 0)
			continue;
		stack[depth++] = root;
		colour[root] = 1;
		cursor[root] = first[root];
		while (depth > 0)
		{
			int			v = stack[depth - 1];
			int			e = cursor[v];
			int			w;

			if (e < 0)
			{
				colour[v] = 2;
				depth--;
				continue;
			}
			cursor[v] = next[e];
			w = target[e];
			if (colour[w] == 0)
			{
				colour[w] = 1;
				cursor[w] = first[w];
				stack[depth++] = w;
			}
			else if (colour[w] == 1)
			{
				StringInfoData path;
				int			from = depth - 1;

				while (stack[from] != w)
					from--;
				initStringInfo(&path);
				for (int k = from; k < depth; k++)
					appendStringInfo(&path, "\"%s\" -> ", TextDatumGetCString(shards[stack[k]]));
				appendStringInfo(&path, "\"%s\"", TextDatumGetCString(shards[w]));
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("parent_ids make shard \"%s\" descend from itself",
								TextDatumGetCString(shards[w])),
						 errdetail("Each shard is listed with the next as a parent: %s.", path.data),
						 errhint("A shard's parents are the shards it was split or merged from: fix the shard list.  Nothing was created.")));
			}
		}
	}
}

/*
 * Checks parent_ids against the n shard ids (listed: sync_shard_ids') and
 * fills the pairs of statement parameters $4 (the shard's position, from
 * 1) and $5 (the parent).  NULL parent_ids, or a NULL element, means no
 * parent.
 */
static void
sync_parent_pairs(FunctionCallInfo fcinfo, Datum *shards, int n, HTAB *listed, Datum *positions,
				  Datum *parents)
{
	ArrayType  *array;
	Datum	   *elems;
	bool	   *nulls;
	int			nelems;
	int			width = 1;
	Datum	   *pos_out;
	Datum	   *par_out;
	int		   *child;
	int			pairs = 0;

	if (PG_ARGISNULL(3))
	{
		*positions = PointerGetDatum(construct_empty_array(INT8OID));
		*parents = PointerGetDatum(construct_empty_array(TEXTOID));
		return;
	}
	array = PG_GETARG_ARRAYTYPE_P(3);
	if (ARR_NDIM(array) > 2)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("parent_ids must have one or two dimensions"),
				 errdetail("It has %d dimensions.", ARR_NDIM(array)),
				 errhint("Pass one parent per shard, or one row of parents per shard.")));
	if (ARR_NDIM(array) == 2)
	{
		if (ARR_DIMS(array)[0] != n)
			raise_parent_shape("parent_ids has %d rows; shard_ids has %d elements.",
							   ARR_DIMS(array)[0], n);
		width = ARR_DIMS(array)[1];
		if (width > LEASE_MAX_PARENTS)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("parent_ids has too many columns"),
					 errdetail("It has %d columns; a shard has at most %d parents.",
							   width, LEASE_MAX_PARENTS),
					 errhint("Pass only each shard's direct parents.")));
	}
	else if (ArrayGetNItems(ARR_NDIM(array), ARR_DIMS(array)) != n)
		raise_parent_shape("parent_ids has %d elements; shard_ids has %d.",
						   ArrayGetNItems(ARR_NDIM(array), ARR_DIMS(array)), n);

	deconstruct_array(array, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &nelems);
	pos_out = palloc(sizeof(Datum) * Max(nelems, 1));
	par_out = palloc(sizeof(Datum) * Max(nelems, 1));
	child = palloc(sizeof(int) * Max(nelems, 1));
	for (int i = 0; i < n; i++)
	{
		for (int j = 0; j < width; j++)
		{
			int			k = i * width + j;

			if (nulls[k])
				continue;
			lease_check_ident(DatumGetTextPP(elems[k]), "parent_ids");
			if (DatumGetBool(DirectFunctionCall2Coll(texteq, C_COLLATION_OID, elems[k], shards[i])))
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("shard \"%s\" cannot be its own parent",
								TextDatumGetCString(shards[i])),
						 errhint("Remove the shard from its row of parent_ids.")));
			for (int m = 0; m < j; m++)
			{
				if (!nulls[i * width + m] &&
					DatumGetBool(DirectFunctionCall2Coll(texteq, C_COLLATION_OID,
														 elems[i * width + m], elems[k])))
					ereport(ERROR,
							(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							 errmsg("parent_ids names parent \"%s\" of shard \"%s\" twice",
									TextDatumGetCString(elems[k]),
									TextDatumGetCString(shards[i])),
							 errhint("Name each parent once.")));
			}
			pos_out[pairs] = Int64GetDatum((int64) i + 1);
			par_out[pairs] = elems[k];
			child[pairs] = i;
			pairs++;
		}
	}
	sync_check_cycles(shards, n, listed, child, par_out, pairs);
	*positions = PointerGetDatum(construct_array(pos_out, pairs, INT8OID, sizeof(int64),
												 FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	*parents = PointerGetDatum(construct_array(par_out, pairs, TEXTOID, -1, false, TYPALIGN_INT));
}

/*
 * lease.sync_shards: creates the missing leases of the listed shards with
 * their lineage ('created') and reports the stream's leases that are not
 * listed and not ended ('unlisted'); ends nothing.
 */
static Datum
sync_shards(FunctionCallInfo fcinfo, LeaseSchema schema)
{
	Datum		values[5];
	Datum	   *shards;
	int			n;
	LeaseCaller caller;
	HTAB	   *listed;

	values[0] = lease_arg_ident(fcinfo, 0, "app_name");
	values[1] = lease_arg_ident(fcinfo, 1, "stream_name");
	InitMaterializedSRF(fcinfo, 0);
	lease_stream_begin(fcinfo, schema, values[0], values[1], &caller);

	/* the lists, in SPI's memory of this call */
	shards = sync_shard_ids(fcinfo, &n, &listed);
	values[2] = PointerGetDatum(PG_GETARG_ARRAYTYPE_P(2));
	sync_parent_pairs(fcinfo, shards, n, listed, &values[3], &values[4]);
	hash_destroy(listed);

	if (!PG_ARGISNULL(3) && lease_spi_run(&sync_conflict_stmt, values, NULL, 0) > 0)
	{
		bool		isnull;
		char	   *shard = TextDatumGetCString(lease_spi_value(0, 1, &isnull));
		char	   *recorded = TextDatumGetCString(lease_spi_value(0, 2, &isnull));
		char	   *listed = TextDatumGetCString(lease_spi_value(0, 3, &isnull));

		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("parent_ids of shard \"%s\" contradict its lease", shard),
				 errdetail("The lease records the parents %s; the list gives %s.", recorded, listed),
				 errhint("A shard's parents never change: fix the shard list, or delete the lease with lease.delete_lease() if its lineage is wrong.  Nothing was created.")));
	}
	lease_spi_run(&sync_stmt, values, NULL, 0);
	lease_spi_put_rows(fcinfo, 2);
	lease_app_end(&caller);
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(lease_sync_shards);
/* lease.sync_shards as the 0.4.0 script binds it. */
Datum lease_sync_shards(PG_FUNCTION_ARGS) { return sync_shards(fcinfo, LEASE_SCHEMA_0_4); }

PG_FUNCTION_INFO_V1(lease_sync_shards_0_5);
/* lease.sync_shards from 0.5.0 on: with the placement check (src/leases/placement.h). */
Datum lease_sync_shards_0_5(PG_FUNCTION_ARGS) { return sync_shards(fcinfo, LEASE_SCHEMA_0_5); }
