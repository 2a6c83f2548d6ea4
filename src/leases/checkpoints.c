/*-------------------------------------------------------------------------
 *
 * src/leases/checkpoints.c
 *	  lease.update_checkpoints: the fenced checkpoints of many shards of one
 *	  stream and owner in one statement and one commit.
 *
 * A worker holding many shards finishes batches on several of them within
 * a few milliseconds; one call writes all of their checkpoints, so the
 * round trip and the commit (the WAL flush) are paid once.  Each shard is
 * judged exactly as the fenced lease.update_checkpoint (src/leases/leases.c)
 * judges it: written while `owner` holds it, it has not ended and its
 * lease_epoch equals the shard's fencing token; otherwise refused, with
 * the reason.  Refusing one shard never refuses another.
 *
 * Every argument is checked before any SQL runs (bad input writes
 * nothing).  shard_ids may not repeat: N single calls in a row on the same
 * shard would leave whichever came last, so the result would depend on
 * the order, and one UPDATE changes a row once.  With distinct shards the
 * result is that of N single calls in any order.
 *
 * Locks: the statement locks the leases it is going to write FOR NO KEY
 * UPDATE in shard_id order (COLLATE "C"), the order the taker and
 * sync_shards use, before it writes any; the measured shards' load
 * bookkeeping then locks the owner's lease.worker_holdings row (the
 * trigger shard_leases_load_changed), after every lease row, as every
 * ownership change does (leases first, then workers, each in key order).
 * So two batches, or a batch and a takeover, always meet in the same order
 * and cannot deadlock (test/specs/checkpoints_lock_order.spec).  Only the
 * leases that pass the guard are locked, as the single UPDATE locks only
 * a row its WHERE clause accepts: a shard that has moved on to another
 * owner, perhaps inside that owner's long hold_lease transaction, never
 * makes the batch wait.
 *
 *-------------------------------------------------------------------------
 */
#include "pg_lease.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "nodes/parsenodes.h"
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

/* The batch's arrays, by argument position. */
#define BATCH_SHARDS		3
#define BATCH_CHECKPOINTS	4
#define BATCH_SUBSEQS		5
#define BATCH_TOKENS		6
#define BATCH_WORK			7

/*
 * Why the shard's checkpoint was refused, judged on the row `s` as the
 * statement read it: the words of the single fenced update_checkpoint's
 * false (docs/shard-leases.md).  NULL when that row passes the guard: it
 * was changed by a transaction that committed while the batch waited for
 * its lock, and the reason is read again after the write
 * (reason_again_stmt).
 */
#define BATCH_REASON(s, token) \
	"CASE WHEN " s ".shard_id IS NULL THEN 'unknown'" \
	"     WHEN " s ".checkpoint OPERATOR(pg_catalog.=) " LEASE_SQL_SHARD_END " THEN 'ended'" \
	"     WHEN " s ".lease_owner IS DISTINCT FROM $3 THEN 'not_owner'" \
	"     WHEN " s ".lease_epoch OPERATOR(pg_catalog.<>) " token " THEN 'stale_token' END"

/* The guard of every shard, as the fenced update_checkpoint's WHERE clause. */
#define BATCH_GUARD(a) \
	a ".app_name OPERATOR(pg_catalog.=) $1" \
	" AND " a ".stream_name OPERATOR(pg_catalog.=) $2" \
	" AND " a ".shard_id OPERATOR(pg_catalog.=) b.shard_id" \
	" AND " a ".lease_owner OPERATOR(pg_catalog.=) $3" \
	" AND " LEASE_SQL_NOT_ENDED(a) \
	" AND " a ".lease_epoch OPERATOR(pg_catalog.=) b.token"

/*
 * The batch: `b` the shards in the caller's order, `o` those that pass the
 * guard, locked in shard_id order (the LockRows node sits above the sort,
 * and a row changed meanwhile is re-checked against the committed one),
 * `c` the write (the lease found again by its key, not by the tuple id `o`
 * saw: a row changed while `o` waited for it has a new one, and the
 * write's own re-check would refuse it; the fenced checkpoint's SET list,
 * checkpointed_at moved by the statement as from 0.5.0 on; a shard given
 * work also moves its work rate), then one row per shard in the caller's
 * order, matched by position; only a refused shard's lease is read again,
 * for its reason.
 * A generic plan (CURSOR_OPT_GENERIC_PLAN): every lease is found by its
 * primary key whatever the arrays hold, and a custom plan for each call
 * would cost about as much as writing six checkpoints (callgrind).
 */
static LeaseStatement batch_stmt = {
	.name = "update_checkpoints",
	.sql =
	"WITH b AS (SELECT u.shard_id, u.checkpoint, u.sub_sequence, u.token, u.work, u.ord"
	"             FROM ROWS FROM (pg_catalog.unnest($4), pg_catalog.unnest($5),"
	"                             pg_catalog.unnest($6), pg_catalog.unnest($7),"
	"                             pg_catalog.unnest($8))"
	"                  WITH ORDINALITY AS u(shard_id, checkpoint, sub_sequence, token, work, ord)),"
	" o AS (SELECT b.ord"
	"         FROM lease.shard_leases AS l JOIN b ON l.shard_id OPERATOR(pg_catalog.=) b.shard_id"
	"        WHERE " BATCH_GUARD("l")
	"        ORDER BY l.shard_id COLLATE pg_catalog.\"C\""
	"          FOR NO KEY UPDATE OF l),"
	" c AS (UPDATE lease.shard_leases AS l"
	"          SET checkpoint = b.checkpoint,"
	"              checkpoint_sub_sequence = b.sub_sequence,"
	"              pending_checkpoint = NULL,"
	"              owner_switches_since_checkpoint = 0,"
	"              " LEASE_SQL_SET_CHECKPOINTED("l", "b.checkpoint", "b.sub_sequence") ","
	"              updated_at = pg_catalog.now(),"
	"              work_rate = CASE WHEN b.work IS NULL THEN l.work_rate ELSE "
	LEASE_SQL_DECAYED_WORK_RATE("l", "b.work::pg_catalog.float8") " END"
	"         FROM o JOIN b ON b.ord OPERATOR(pg_catalog.=) o.ord"
	"        WHERE " BATCH_GUARD("l")
	"        RETURNING b.ord)"
	" SELECT b.shard_id, c.ord IS NOT NULL,"
	"        CASE WHEN c.ord IS NULL THEN"
	"          (SELECT " BATCH_REASON("s", "b.token")
	"             FROM (SELECT) AS one"
	"                  LEFT JOIN lease.shard_leases AS s"
	"                         ON s.app_name OPERATOR(pg_catalog.=) $1"
	"                        AND s.stream_name OPERATOR(pg_catalog.=) $2"
	"                        AND s.shard_id OPERATOR(pg_catalog.=) b.shard_id) END"
	"   FROM b LEFT JOIN c ON c.ord OPERATOR(pg_catalog.=) b.ord"
	"  ORDER BY b.ord",
	.nargs = 8,
	.argtypes = {TEXTOID, TEXTOID, TEXTOID, TEXTARRAYOID, TEXTARRAYOID, INT8ARRAYOID,
	INT8ARRAYOID, INT8ARRAYOID},
	.expected = SPI_OK_SELECT,
	.cursor_options = CURSOR_OPT_GENERIC_PLAN
};

/*
 * The reasons of the shards $4 (with their tokens $5) that passed the
 * guard as the batch read them but were refused once it held their locks,
 * read again in a new snapshot, after the transaction that changed them
 * committed.
 */
static LeaseStatement reason_again_stmt = {
	.name = "update_checkpoints (reasons)",
	.sql =
	"SELECT " BATCH_REASON("s", "b.token")
	"  FROM ROWS FROM (pg_catalog.unnest($4), pg_catalog.unnest($5)) WITH ORDINALITY"
	"       AS b(shard_id, token, ord)"
	"       LEFT JOIN lease.shard_leases AS s"
	"              ON s.app_name OPERATOR(pg_catalog.=) $1"
	"             AND s.stream_name OPERATOR(pg_catalog.=) $2"
	"             AND s.shard_id OPERATOR(pg_catalog.=) b.shard_id"
	" ORDER BY b.ord",
	.nargs = 5,
	.argtypes = {TEXTOID, TEXTOID, TEXTOID, TEXTARRAYOID, INT8ARRAYOID},
	.expected = SPI_OK_SELECT,
	.cursor_options = CURSOR_OPT_GENERIC_PLAN
};

/* One of the batch's arrays, deconstructed. */
typedef struct BatchArray
{
	const char *name;			/* the argument's name, for errors */
	Datum		array;
	Datum	   *elems;
	bool	   *nulls;
	int			n;
} BatchArray;

/* A shard id in the duplicate check. */
typedef struct BatchShardEntry
{
	char		shard_id[LEASE_MAX_IDENT_BYTES + 1];	/* the hash key */
	int			index;			/* its position in shard_ids, from 0 */
} BatchShardEntry;

/*
 * Deconstructs array argument `argno` into *a: not NULL (22004), one
 * dimension (22023).
 */
static void
batch_array(FunctionCallInfo fcinfo, int argno, const char *name, Oid elemtype,
			BatchArray *a)
{
	ArrayType  *array;
	int16		typlen;
	bool		byval;
	char		align;

	a->name = name;
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", name),
				 errhint("Pass one element per shard, '{}' for none.")));
	array = PG_GETARG_ARRAYTYPE_P(argno);
	if (ARR_NDIM(array) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a one-dimensional array", name),
				 errdetail("It has %d dimensions.", ARR_NDIM(array)),
				 errhint("Pass a flat list with one element per shard.")));
	get_typlenbyvalalign(elemtype, &typlen, &byval, &align);
	deconstruct_array(array, elemtype, typlen, byval, align, &a->elems, &a->nulls, &a->n);
	a->array = PointerGetDatum(array);
}

/* Raises 22004 when element i of a is NULL. */
static void
batch_require_element(const BatchArray *a, int i)
{
	if (a->nulls[i])
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not contain null elements", a->name),
				 errdetail("Element %d is NULL.", i + 1),
				 errhint("Pass a value for every shard.")));
}

/* Raises 22023 when element i of a (a bigint) is negative. */
static void
batch_require_nonneg(const BatchArray *a, int i)
{
	int64		value = DatumGetInt64(a->elems[i]);

	if (value < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not contain negative elements", a->name),
				 errdetail("Element %d is " INT64_FORMAT ".", i + 1, value),
				 errhint("Pass zero or more for every shard.")));
}

/*
 * Checks every element: shard ids are identifiers and distinct,
 * checkpoints are checkpoint values other than SHARD_END, sub-sequences
 * and tokens are given and not negative, work (NULL elements allowed: that
 * shard reports none) is not negative.
 */
static void
batch_check_elements(BatchArray *shards, BatchArray *checkpoints, BatchArray *subseqs,
					 BatchArray *tokens, BatchArray *work)
{
	HASHCTL		ctl;
	HTAB	   *seen;

	ctl.keysize = LEASE_MAX_IDENT_BYTES + 1;
	ctl.entrysize = sizeof(BatchShardEntry);
	ctl.hcxt = CurrentMemoryContext;
	seen = hash_create("update_checkpoints shard ids", Max(shards->n, 16), &ctl,
					   HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	for (int i = 0; i < shards->n; i++)
	{
		char	   *id;
		BatchShardEntry *entry;
		bool		found;

		batch_require_element(shards, i);
		lease_check_ident(DatumGetTextPP(shards->elems[i]), shards->name);
		id = TextDatumGetCString(shards->elems[i]);
		entry = hash_search(seen, id, HASH_ENTER, &found);
		if (found)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("shard_ids lists shard \"%s\" twice", id),
					 errdetail("Elements %d and %d are the same shard.", entry->index + 1, i + 1),
					 errhint("List each shard once, with its latest checkpoint.")));
		entry->index = i;

		batch_require_element(checkpoints, i);
		lease_check_checkpoint(DatumGetTextPP(checkpoints->elems[i]), checkpoints->name);
		lease_check_not_shard_end(checkpoints->elems[i]);
		batch_require_element(subseqs, i);
		batch_require_nonneg(subseqs, i);
		batch_require_element(tokens, i);
		batch_require_nonneg(tokens, i);
		if (work != NULL && !work->nulls[i])
			batch_require_nonneg(work, i);
	}
	hash_destroy(seen);
}

/*
 * Checks the arguments of update_checkpoints and fills its statement's
 * parameters values[0..7] (nulls: $8, the work, when not `measured`);
 * *shards and *tokens are the checked arrays the call reads again.
 */
static void
batch_args(FunctionCallInfo fcinfo, bool measured, Datum *values, char *nulls,
		   BatchArray *shards, BatchArray *tokens)
{
	BatchArray	checkpoints,
				subseqs,
				work;

	values[0] = lease_arg_ident(fcinfo, 0, "app_name");
	values[1] = lease_arg_ident(fcinfo, 1, "stream_name");
	values[2] = lease_arg_ident(fcinfo, 2, "owner");
	batch_array(fcinfo, BATCH_SHARDS, "shard_ids", TEXTOID, shards);
	batch_array(fcinfo, BATCH_CHECKPOINTS, "checkpoints", TEXTOID, &checkpoints);
	batch_array(fcinfo, BATCH_SUBSEQS, "sub_sequences", INT8OID, &subseqs);
	batch_array(fcinfo, BATCH_TOKENS, "fencing_tokens", INT8OID, tokens);
	if (measured)
		batch_array(fcinfo, BATCH_WORK, "work", INT8OID, &work);
	if (checkpoints.n != shards->n || subseqs.n != shards->n || tokens->n != shards->n ||
		(measured && work.n != shards->n))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the arrays of update_checkpoints must have the same length"),
				 measured ?
				 errdetail("shard_ids has %d elements, checkpoints %d, sub_sequences %d, fencing_tokens %d, work %d.",
						   shards->n, checkpoints.n, subseqs.n, tokens->n, work.n) :
				 errdetail("shard_ids has %d elements, checkpoints %d, sub_sequences %d, fencing_tokens %d.",
						   shards->n, checkpoints.n, subseqs.n, tokens->n),
				 errhint("Pass one element per shard in each array (element i of each is shard i's).")));
	batch_check_elements(shards, &checkpoints, &subseqs, tokens, measured ? &work : NULL);

	values[3] = shards->array;
	values[4] = checkpoints.array;
	values[5] = subseqs.array;
	values[6] = tokens->array;
	if (measured)
		values[7] = work.array;
	else
	{
		values[7] = (Datum) 0;
		nulls[7] = 'n';
	}
}

/*
 * lease.update_checkpoints: one row (shard_id, ok, reason) per shard, in
 * the caller's order; reason is 'not_owner', 'stale_token', 'ended' or
 * 'unknown' for a refused shard, NULL for a written one.
 */
PG_FUNCTION_INFO_V1(lease_update_checkpoints);
Datum
lease_update_checkpoints(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Datum		values[8];
	char		nulls[8] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
	BatchArray	shards,
				tokens;
	bool		measured = !PG_ARGISNULL(BATCH_WORK);
	LeaseCaller caller;
	uint64		rows;
	int			again = 0;
	Datum	   *again_shards;
	Datum	   *again_tokens;
	int		   *again_rows;
	Datum	   *out_shard;
	bool	   *out_ok;
	Datum	   *out_reason;

	batch_args(fcinfo, measured, values, nulls, &shards, &tokens);

	InitMaterializedSRF(fcinfo, 0);
	out_shard = palloc(sizeof(Datum) * Max(shards.n, 1));
	out_ok = palloc(sizeof(bool) * Max(shards.n, 1));
	out_reason = palloc(sizeof(Datum) * Max(shards.n, 1));
	again_shards = palloc(sizeof(Datum) * Max(shards.n, 1));
	again_tokens = palloc(sizeof(Datum) * Max(shards.n, 1));
	again_rows = palloc(sizeof(int) * Max(shards.n, 1));

	/* new in 0.5.0: the app check and the stream's placement check */
	lease_stream_begin(fcinfo, LEASE_SCHEMA_0_5, values[0], values[1], &caller);
	rows = lease_spi_run(&batch_stmt, values, nulls, 0);
	if (rows != (uint64) shards.n)
		elog(ERROR, "update_checkpoints returned " UINT64_FORMAT " rows for %d shards",
			 rows, shards.n);
	for (int i = 0; i < shards.n; i++)
	{
		bool		isnull;

		/* the shard id is the caller's; ok and reason are by value or copied */
		out_shard[i] = shards.elems[i];
		out_ok[i] = DatumGetBool(lease_spi_value(i, 2, &isnull));
		out_reason[i] = lease_spi_value(i, 3, &isnull);
		if (isnull)
			out_reason[i] = (Datum) 0;
		else
			out_reason[i] = SPI_datumTransfer(out_reason[i], false, -1);
		if (!out_ok[i] && isnull)
		{
			again_shards[again] = shards.elems[i];
			again_tokens[again] = tokens.elems[i];
			again_rows[again++] = i;
		}
	}
	if (again > 0)
	{
		Datum		again_values[5] = {values[0], values[1], values[2],
									   PointerGetDatum(construct_array(again_shards, again, TEXTOID, -1, false, TYPALIGN_INT)),
		PointerGetDatum(construct_array(again_tokens, again, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE))};

		if (lease_spi_run(&reason_again_stmt, again_values, NULL, 0) != (uint64) again)
			elog(ERROR, "update_checkpoints lost a shard reading its reason again");
		for (int j = 0; j < again; j++)
		{
			bool		isnull;
			Datum		reason = lease_spi_value(j, 1, &isnull);

			/*
			 * Passing the guard again means the shard left the owner and came
			 * back to it under a new epoch (an ownership change always moves
			 * the epoch): the caller's token is stale.
			 */
			out_reason[again_rows[j]] = isnull ? CStringGetTextDatum("stale_token")
				: SPI_datumTransfer(reason, false, -1);
		}
	}
	lease_app_end(&caller);

	for (int i = 0; i < shards.n; i++)
	{
		Datum		out[3] = {out_shard[i], BoolGetDatum(out_ok[i]), out_reason[i]};
		bool		out_nulls[3] = {false, false, out_reason[i] == (Datum) 0};

		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, out_nulls);
	}
	return (Datum) 0;
}
