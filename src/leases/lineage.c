/*-------------------------------------------------------------------------
 *
 * src/leases/lineage.c
 *	  Shard lineage: a stream's lineage as a graph and its cycles
 *	  (lineage.h); the trigger that keeps every write free of them; removing
 *	  ended leases once their children have started, and deleting a lease
 *	  outright.
 *
 * Children of a split or merge are held back from take_lease/take_leases
 * while a parent still in the table has not ended (lease_sql.h,
 * LEASE_SQL_BLOCKED); an ended parent can be removed once every child has
 * started, i.e. checkpointed past TRIM_HORIZON / LATEST / AT_TIMESTAMP (the
 * starting positions KCL writes; an imported lease may hold any of them).
 *
 * No write may make a lineage that is a cycle: its leases would be blocked
 * for good.  From 0.5.0 the statement trigger shard_leases_lineage_checked
 * checks every INSERT into lease.shard_leases (create_lease, sync_shards,
 * the importers, an operator's own INSERT) against the leases already in
 * the table, after the rows are in: the statements that add leases with
 * parents to a stream take turns on the stream's row of
 * lease.stream_lineage (an upsert, so a first writer creates it), held to
 * the end of their transaction, and each then reads what is committed, so
 * of two transactions whose leases name each other the second finds the
 * first's.  Under READ COMMITTED the read after the lock is a new
 * statement, which sees every lineage committed before it; under
 * REPEATABLE READ or SERIALIZABLE the upsert of a row another lineage
 * write updated after the transaction's snapshot raises 40001, so a check
 * never reads an older lineage than the committed one.
 *
 *-------------------------------------------------------------------------
 */
#include "pg_lease.h"

#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "common/hashfn.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "nodes/parsenodes.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"

#include "common/args.h"
#include "leases/lease_sql.h"
#include "leases/lineage.h"
#include "leases/placement.h"
#include "leases/privileges.h"
#include "common/spi_util.h"

/* The graph of lineage.h. */
struct LeaseLineage
{
	HTAB	   *names;			/* shard id -> node (LineageEntry) */
	char	  **name;			/* per node: its shard id */
	bool	   *marked;			/* per node: written by the caller */
	bool	   *known;			/* per node: its parents are in the graph, or
								 * it was looked up (lease_lineage_read) */
	int			nnodes;
	int			maxnodes;
	int		   *child;			/* per edge */
	int		   *parent;
	int			nedges;
	int			maxedges;
};

/* A node's hash entry: the key is a pointer to the node's own copy of the id. */
typedef struct LineageEntry
{
	const char *key;
	int			node;
} LineageEntry;

/* Hashes the shard id a key points to (ids are not bounded in length). */
static uint32
lineage_hash(const void *key, Size keysize)
{
	const char *id = *(const char *const *) key;

	return hash_bytes((const unsigned char *) id, (int) strlen(id));
}

/* Compares the shard ids two keys point to. */
static int
lineage_match(const void *a, const void *b, Size keysize)
{
	return strcmp(*(const char *const *) a, *(const char *const *) b);
}

/* lineage.h */
LeaseLineage *
lease_lineage_create(void)
{
	LeaseLineage *lineage = palloc0(sizeof(LeaseLineage));
	HASHCTL		ctl;

	ctl.keysize = sizeof(char *);
	ctl.entrysize = sizeof(LineageEntry);
	ctl.hash = lineage_hash;
	ctl.match = lineage_match;
	ctl.hcxt = CurrentMemoryContext;
	lineage->names = hash_create("pg_lease lineage", 64, &ctl,
								 HASH_ELEM | HASH_FUNCTION | HASH_COMPARE | HASH_CONTEXT);
	lineage->maxnodes = 64;
	lineage->name = palloc(sizeof(char *) * lineage->maxnodes);
	lineage->marked = palloc(sizeof(bool) * lineage->maxnodes);
	lineage->known = palloc(sizeof(bool) * lineage->maxnodes);
	lineage->maxedges = 64;
	lineage->child = palloc(sizeof(int) * lineage->maxedges);
	lineage->parent = palloc(sizeof(int) * lineage->maxedges);
	return lineage;
}

/* lineage.h */
int
lease_lineage_node(LeaseLineage *lineage, const char *shard_id)
{
	LineageEntry *entry;
	bool		found;

	entry = hash_search(lineage->names, &shard_id, HASH_ENTER, &found);
	if (found)
		return entry->node;
	if (lineage->nnodes == lineage->maxnodes)
	{
		lineage->maxnodes *= 2;
		lineage->name = repalloc(lineage->name, sizeof(char *) * lineage->maxnodes);
		lineage->marked = repalloc(lineage->marked, sizeof(bool) * lineage->maxnodes);
		lineage->known = repalloc(lineage->known, sizeof(bool) * lineage->maxnodes);
	}
	entry->node = lineage->nnodes++;
	lineage->name[entry->node] = pstrdup(shard_id);
	lineage->marked[entry->node] = false;
	lineage->known[entry->node] = false;
	entry->key = lineage->name[entry->node];
	return entry->node;
}

/* lineage.h */
void
lease_lineage_edge(LeaseLineage *lineage, int child, int parent)
{
	if (lineage->nedges == lineage->maxedges)
	{
		lineage->maxedges *= 2;
		lineage->child = repalloc(lineage->child, sizeof(int) * lineage->maxedges);
		lineage->parent = repalloc(lineage->parent, sizeof(int) * lineage->maxedges);
	}
	lineage->child[lineage->nedges] = child;
	lineage->parent[lineage->nedges] = parent;
	lineage->nedges++;
}

/* lineage.h */
void
lease_lineage_mark(LeaseLineage *lineage, int node)
{
	lineage->marked[node] = true;
	lineage->known[node] = true;
}

/* lineage.h */
void
lease_lineage_parents(LeaseLineage *lineage, int child, Datum parents)
{
	ArrayType  *array = DatumGetArrayTypeP(parents);
	Datum	   *elems;
	bool	   *nulls;
	int			nelems;

	deconstruct_array(array, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &nelems);
	for (int i = 0; i < nelems; i++)
	{
		if (!nulls[i])
			lease_lineage_edge(lineage, child,
							   lease_lineage_node(lineage, TextDatumGetCString(elems[i])));
	}
	lineage->known[child] = true;
}

/*
 * lease_lineage_read: one lease, by primary key.  One statement per shard
 * id, not one per generation over an array of them: with = ANY (array) a
 * table without statistics (or analyzed while small) makes the planner
 * scan the whole stream and filter, which for a deep lineage (a chain of
 * splits) would make the read quadratic; a scalar key is always one index
 * probe.
 */
static LeaseStatement lineage_parents_stmt = {
	.name = "read a lease's parents",
	.sql =
	"SELECT l.parent_shard_ids FROM lease.shard_leases AS l"
	" WHERE l.app_name OPERATOR(pg_catalog.=) $1"
	"   AND l.stream_name OPERATOR(pg_catalog.=) $2"
	"   AND l.shard_id OPERATOR(pg_catalog.=) $3",
	.nargs = 3,
	.argtypes = {TEXTOID, TEXTOID, TEXTOID},
	.expected = SPI_OK_SELECT,
	.cursor_options = CURSOR_OPT_GENERIC_PLAN
};

/* lineage.h: breadth first; each node made is looked up once. */
void
lease_lineage_read(LeaseLineage *lineage, Datum app_name, Datum stream_name)
{
	Datum		values[3];

	values[0] = app_name;
	values[1] = stream_name;
	/* nodes made while reading are appended, so this loop reaches them too */
	for (int v = 0; v < lineage->nnodes; v++)
	{
		bool		isnull;

		if (lineage->known[v])
			continue;
		lineage->known[v] = true;	/* a shard without a lease has no parents */
		values[2] = CStringGetTextDatum(lineage->name[v]);
		if (lease_spi_run(&lineage_parents_stmt, values, NULL, 1) > 0)
			lease_lineage_parents(lineage, v, lease_spi_value(0, 1, &isnull));
	}
}

/* lineage.h */
const char *
lease_lineage_name(const LeaseLineage *lineage, int node)
{
	return lineage->name[node];
}

/*
 * A path from node `from` back to itself through nodes of its component
 * (breadth first, so a shortest one), as "a" -> "b" -> "a".
 */
static char *
lineage_cycle_path(const LeaseLineage *lineage, const int *start, const int *adj,
				   const int *component, int from)
{
	int			n = lineage->nnodes;
	int		   *prev = palloc(sizeof(int) * Max(n, 1));
	int		   *queue = palloc(sizeof(int) * Max(n, 1));
	int			head = 0;
	int			tail = 0;
	int			last = -1;
	int		   *chain;
	int			len = 0;
	StringInfoData path;

	for (int v = 0; v < n; v++)
		prev[v] = -2;			/* unseen */
	prev[from] = -1;
	queue[tail++] = from;
	while (head < tail && last < 0)
	{
		int			u = queue[head++];

		for (int e = start[u]; e < start[u + 1]; e++)
		{
			int			w = adj[e];

			if (w == from)
			{
				last = u;
				break;
			}
			if (component[w] == component[from] && prev[w] == -2)
			{
				prev[w] = u;
				queue[tail++] = w;
			}
		}
	}
	Assert(last >= 0);
	chain = palloc(sizeof(int) * (tail + 1));
	for (int v = last; v >= 0; v = prev[v])
		chain[len++] = v;
	initStringInfo(&path);
	for (int k = len - 1; k >= 0; k--)
		appendStringInfo(&path, "\"%s\" -> ", lineage->name[chain[k]]);
	appendStringInfo(&path, "\"%s\"", lineage->name[from]);
	return path.data;
}

/* lineage.h: Tarjan's strongly connected components, without recursion. */
int
lease_lineage_cycle(LeaseLineage *lineage, char **path)
{
	int			n = lineage->nnodes;
	int		   *start = palloc0(sizeof(int) * (n + 1));
	int		   *adj = palloc(sizeof(int) * Max(lineage->nedges, 1));
	int		   *fill = palloc(sizeof(int) * Max(n, 1));
	int		   *index = palloc(sizeof(int) * Max(n, 1));
	int		   *low = palloc(sizeof(int) * Max(n, 1));
	int		   *cursor = palloc(sizeof(int) * Max(n, 1));
	int		   *component = palloc(sizeof(int) * Max(n, 1));
	int		   *size = palloc0(sizeof(int) * Max(n, 1));
	bool	   *on_stack = palloc0(sizeof(bool) * Max(n, 1));
	bool	   *self = palloc0(sizeof(bool) * Max(n, 1));
	int		   *stack = palloc(sizeof(int) * Max(n, 1));
	int		   *calls = palloc(sizeof(int) * Max(n, 1));
	int			depth = 0;
	int			ncalls = 0;
	int			counter = 0;
	int			ncomponents = 0;

	/* the edges by child (compressed rows) */
	for (int e = 0; e < lineage->nedges; e++)
		start[lineage->child[e] + 1]++;
	for (int v = 0; v < n; v++)
		start[v + 1] += start[v];
	memcpy(fill, start, sizeof(int) * n);
	for (int e = 0; e < lineage->nedges; e++)
	{
		adj[fill[lineage->child[e]]++] = lineage->parent[e];
		self[lineage->child[e]] |= lineage->child[e] == lineage->parent[e];
	}

	for (int v = 0; v < n; v++)
		index[v] = -1;
	for (int root = 0; root < n; root++)
	{
		if (index[root] >= 0)
			continue;
		index[root] = low[root] = counter++;
		cursor[root] = start[root];
		stack[depth++] = root;
		on_stack[root] = true;
		calls[ncalls++] = root;
		while (ncalls > 0)
		{
			int			v = calls[ncalls - 1];

			if (cursor[v] < start[v + 1])
			{
				int			w = adj[cursor[v]++];

				if (index[w] < 0)
				{
					index[w] = low[w] = counter++;
					cursor[w] = start[w];
					stack[depth++] = w;
					on_stack[w] = true;
					calls[ncalls++] = w;
				}
				else if (on_stack[w])
					low[v] = Min(low[v], index[w]);
				continue;
			}
			ncalls--;
			if (ncalls > 0)
				low[calls[ncalls - 1]] = Min(low[calls[ncalls - 1]], low[v]);
			if (low[v] == index[v])
			{
				int			w;

				do
				{
					w = stack[--depth];
					on_stack[w] = false;
					component[w] = ncomponents;
					size[ncomponents]++;
				} while (w != v);
				ncomponents++;
			}
		}
	}

	for (int v = 0; v < n; v++)
	{
		if (lineage->marked[v] && (size[component[v]] > 1 || self[v]))
		{
			if (path != NULL)
				*path = lineage_cycle_path(lineage, start, adj, component, v);
			return v;
		}
	}
	return -1;
}

/*
 * shard_leases_lineage_checked, statement 1: the streams the statement's
 * rows add lineage to, locked in key order: their lease.stream_lineage
 * rows, made or updated (writes counts the statements), held to the end of
 * the transaction.
 */
static LeaseStatement lineage_lock_stmt = {
	.name = "lock the streams' lineage",
	.sql =
	"INSERT INTO lease.stream_lineage AS s (app_name, stream_name, writes)"
	" SELECT d.app_name, d.stream_name, 1"
	"   FROM (SELECT DISTINCT n.app_name, n.stream_name FROM new_rows AS n"
	"          WHERE pg_catalog.cardinality(n.parent_shard_ids) OPERATOR(pg_catalog.>) 0) AS d"
	"  ORDER BY d.app_name COLLATE pg_catalog.\"C\", d.stream_name COLLATE pg_catalog.\"C\""
	" ON CONFLICT (app_name, stream_name)"
	" DO UPDATE SET writes = s.writes OPERATOR(pg_catalog.+) 1"
	" RETURNING s.app_name",
	.nargs = 0,
	.expected = SPI_OK_INSERT_RETURNING
};

/*
 * Statement 2, under the locks: a row given more parents than a lease may
 * have (an operator's INSERT; the functions refuse it before), the first.
 */
static LeaseStatement lineage_width_stmt = {
	.name = "check the number of parents",
	.sql =
	"SELECT n.app_name, n.stream_name, n.shard_id, pg_catalog.cardinality(n.parent_shard_ids)"
	"  FROM new_rows AS n"
	" WHERE pg_catalog.cardinality(n.parent_shard_ids) OPERATOR(pg_catalog.>) " CppAsString2(LEASE_MAX_PARENTS)
	" ORDER BY n.app_name COLLATE pg_catalog.\"C\", n.stream_name COLLATE pg_catalog.\"C\","
	"          n.shard_id COLLATE pg_catalog.\"C\""
	" LIMIT 1",
	.nargs = 0,
	.expected = SPI_OK_SELECT
};

/*
 * Statement 3: the new rows, by stream, those without parents too: they
 * are nodes whose parents are known (none), so the lineage read below
 * never looks them up one by one (an import writes its parents with their
 * children).
 */
static LeaseStatement lineage_new_stmt = {
	.name = "read the new leases",
	.sql =
	"SELECT n.app_name, n.stream_name, n.shard_id, n.parent_shard_ids FROM new_rows AS n"
	" ORDER BY n.app_name COLLATE pg_catalog.\"C\", n.stream_name COLLATE pg_catalog.\"C\"",
	.nargs = 0,
	.expected = SPI_OK_SELECT
};

/* Text equality in the C collation. */
static bool
text_equal(Datum a, Datum b)
{
	return DatumGetBool(DirectFunctionCall2Coll(texteq, C_COLLATION_OID, a, b));
}

/*
 * Raises 22023 when the new leases, with the leases of the stream they
 * descend from, make a cycle through one of them.
 */
static void
check_stream_lineage(LeaseLineage *lineage, Datum app, Datum stream)
{
	char	   *path;
	int			node;

	lease_lineage_read(lineage, app, stream);
	node = lease_lineage_cycle(lineage, &path);
	if (node < 0)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("lineage would make shard \"%s\" descend from itself",
					lease_lineage_name(lineage, node)),
			 errdetail("In stream \"%s\" of app \"%s\", each shard has the next as a parent: %s.",
					   TextDatumGetCString(stream), TextDatumGetCString(app), path),
			 errhint("A shard's parents are the shards it was split or merged from, and a lease's parents never change: fix the parents given, or delete the lease whose lineage is wrong with lease.delete_lease().  Nothing was written.")));
}

PG_FUNCTION_INFO_V1(lease_shard_leases_lineage_checked);

/*
 * lease.shard_leases_lineage_checked: AFTER INSERT on lease.shard_leases,
 * FOR EACH STATEMENT, REFERENCING its rows AS new_rows (0.5.0): refuses a
 * row with more than LEASE_MAX_PARENTS parents, and rows whose lineage,
 * with the leases in the table, would be a cycle.
 */
Datum
lease_shard_leases_lineage_checked(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	uint64		rows;
	SPITupleTable *news;
	LeaseLineage *lineage = NULL;
	Datum		app = (Datum) 0;
	Datum		stream = (Datum) 0;
	bool		has_parents = false;	/* the stream's new rows: one with parents */

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_FOR_STATEMENT(trigdata->tg_event) ||
		!TRIGGER_FIRED_AFTER(trigdata->tg_event) || !TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
		elog(ERROR, "pg_lease: shard_leases_lineage_checked must fire AFTER INSERT, FOR EACH STATEMENT");

	lease_spi_connect();
	if (SPI_register_trigger_data(trigdata) != SPI_OK_TD_REGISTER)
		elog(ERROR, "pg_lease: could not register the transition table");
	if (lease_spi_run(&lineage_lock_stmt, NULL, NULL, 0) == 0)
	{
		/* no row with parents: nothing to check */
		lease_spi_finish();
		return PointerGetDatum(NULL);
	}
	if (lease_spi_run(&lineage_width_stmt, NULL, NULL, 1) > 0)
	{
		bool		isnull;

		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("shard \"%s\" would have %d parents",
						TextDatumGetCString(lease_spi_value(0, 3, &isnull)),
						DatumGetInt32(lease_spi_value(0, 4, &isnull))),
				 errdetail("In stream \"%s\" of app \"%s\"; a shard has at most %d parents.",
						   TextDatumGetCString(lease_spi_value(0, 2, &isnull)),
						   TextDatumGetCString(lease_spi_value(0, 1, &isnull)),
						   LEASE_MAX_PARENTS),
				 errhint("Give each lease only its direct parents.  Nothing was written.")));
	}

	/* the new rows, kept: the lookups below replace SPI's result; a
	 * stream none of whose new rows has parents needs no check */
	rows = lease_spi_run(&lineage_new_stmt, NULL, NULL, 0);
	news = SPI_tuptable;
	SPI_tuptable = NULL;
	for (uint64 row = 0; row < rows; row++)
	{
		bool		isnull;
		HeapTuple	tuple = news->vals[row];
		Datum		row_app = SPI_getbinval(tuple, news->tupdesc, 1, &isnull);
		Datum		row_stream = SPI_getbinval(tuple, news->tupdesc, 2, &isnull);
		char	   *shard = TextDatumGetCString(SPI_getbinval(tuple, news->tupdesc, 3, &isnull));
		int			child;

		Datum		parents = SPI_getbinval(tuple, news->tupdesc, 4, &isnull);

		if (lineage == NULL || !text_equal(row_app, app) || !text_equal(row_stream, stream))
		{
			if (lineage != NULL && has_parents)
				check_stream_lineage(lineage, app, stream);
			lineage = lease_lineage_create();
			app = row_app;
			stream = row_stream;
			has_parents = false;
		}
		child = lease_lineage_node(lineage, shard);
		lease_lineage_mark(lineage, child);
		lease_lineage_parents(lineage, child, parents);
		has_parents |= ArrayGetNItems(ARR_NDIM(DatumGetArrayTypeP(parents)),
									  ARR_DIMS(DatumGetArrayTypeP(parents))) > 0;
	}
	if (lineage != NULL && has_parents)
		check_stream_lineage(lineage, app, stream);
	lease_spi_finish();
	return PointerGetDatum(NULL);
}

/*
 * Delete the ended leases of a stream no unstarted child names as a parent.
 * The children that have not started are collected once (a hashed subplan),
 * so this is one pass over the stream, not one per ended lease.
 */
static LeaseStatement cleanup_stmt = {
	.name = "cleanup_ended",
	.sql =
	"DELETE FROM lease.shard_leases AS l"
	" WHERE " LEASE_STREAM_MATCHES
	"   AND l.checkpoint OPERATOR(pg_catalog.=) " LEASE_SQL_SHARD_END
	"   AND NOT (l.shard_id OPERATOR(pg_catalog.=) ANY ("
	"        SELECT pg_catalog.unnest(c.parent_shard_ids)"
	"          FROM lease.shard_leases AS c"
	"         WHERE c.app_name OPERATOR(pg_catalog.=) $1"
	"           AND c.stream_name OPERATOR(pg_catalog.=) $2"
	"           AND c.checkpoint OPERATOR(pg_catalog.=) ANY ('{TRIM_HORIZON,LATEST,AT_TIMESTAMP}'::pg_catalog.text[])))",
	.nargs = 2,
	.argtypes = {TEXTOID, TEXTOID},
	.expected = SPI_OK_DELETE
};

/* Delete one lease by key. */
static LeaseStatement delete_stmt = {
	.name = "delete_lease",
	.sql =
	"DELETE FROM lease.shard_leases AS l"
	" WHERE " LEASE_KEY_MATCHES,
	.nargs = 3,
	.argtypes = {TEXTOID, TEXTOID, TEXTOID},
	.expected = SPI_OK_DELETE
};

/* lease.cleanup_ended: how many ended leases were deleted. */
static Datum
cleanup_ended(FunctionCallInfo fcinfo, LeaseSchema schema)
{
	Datum		values[2];
	uint64		processed;

	values[0] = lease_arg_ident(fcinfo, 0, "app_name");
	values[1] = lease_arg_ident(fcinfo, 1, "stream_name");

	processed = lease_spi_exec_for_stream(fcinfo, schema, &cleanup_stmt, values, NULL);
	if (processed > PG_INT32_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("cleanup_ended deleted more leases than an integer can count"),
				 errdetail("It deleted " UINT64_FORMAT " leases; the error undoes that.", processed),
				 errhint("Delete them in smaller batches with lease.delete_lease().")));
	PG_RETURN_INT32((int32) processed);
}

PG_FUNCTION_INFO_V1(lease_cleanup_ended_0_4);
/* lease.cleanup_ended as the 0.4.0 script binds it. */
Datum lease_cleanup_ended_0_4(PG_FUNCTION_ARGS) { return cleanup_ended(fcinfo, LEASE_SCHEMA_0_4); }

PG_FUNCTION_INFO_V1(lease_cleanup_ended_0_5);
/* lease.cleanup_ended from 0.5.0 on: with the placement check (src/leases/placement.h). */
Datum lease_cleanup_ended_0_5(PG_FUNCTION_ARGS) { return cleanup_ended(fcinfo, LEASE_SCHEMA_0_5); }

/* lease.delete_lease: true when the lease existed and was deleted. */
static Datum
delete_lease(FunctionCallInfo fcinfo, LeaseSchema schema)
{
	Datum		values[3];

	values[0] = lease_arg_ident(fcinfo, 0, "app_name");
	values[1] = lease_arg_ident(fcinfo, 1, "stream_name");
	values[2] = lease_arg_ident(fcinfo, 2, "shard_id");

	PG_RETURN_BOOL(lease_spi_exec_for_stream(fcinfo, schema, &delete_stmt, values, NULL) > 0);
}

PG_FUNCTION_INFO_V1(lease_delete_lease_0_4);
/* lease.delete_lease as the 0.4.0 script binds it. */
Datum lease_delete_lease_0_4(PG_FUNCTION_ARGS) { return delete_lease(fcinfo, LEASE_SCHEMA_0_4); }

PG_FUNCTION_INFO_V1(lease_delete_lease_0_5);
/* lease.delete_lease from 0.5.0 on: with the placement check (src/leases/placement.h). */
Datum lease_delete_lease_0_5(PG_FUNCTION_ARGS) { return delete_lease(fcinfo, LEASE_SCHEMA_0_5); }
