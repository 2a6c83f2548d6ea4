/*-------------------------------------------------------------------------
 *
 * src/leases/lineage.h
 *	  A stream's lineage as a graph, and the cycles in it.
 *
 * A lease's parents are the shards it was split or merged from; a child is
 * blocked until every parent still in the table has ended (lease_sql.h,
 * LEASE_SQL_BLOCKED).  A lineage that is a cycle blocks every lease on it
 * for good, so no write may make one: the trigger
 * lease.shard_leases_lineage_checked (0.5.0) checks every insert against
 * the leases already there, and the importers check an export before they
 * write (import/kcl_dynamodb.c).  Both build this graph: one node per shard id, an edge
 * from each child to each of its parents, and ask whether one of the nodes
 * they wrote lies on a cycle.  Linear in nodes and edges (Tarjan's strongly
 * connected components, iteratively), whatever the lineage's depth.
 *
 *-------------------------------------------------------------------------
 */
#ifndef LEASE_LINEAGE_H
#define LEASE_LINEAGE_H

#include "fmgr.h"

typedef struct LeaseLineage LeaseLineage;

/* An empty graph, in the current memory context. */
extern LeaseLineage *lease_lineage_create(void);

/* The node of shard_id (copied), made when it is new. */
extern int	lease_lineage_node(LeaseLineage *lineage, const char *shard_id);

/* The edge child -> parent (nodes of lease_lineage_node). */
extern void lease_lineage_edge(LeaseLineage *lineage, int child, int parent);

/*
 * The edges from child to each of its parents, a text[] (NULL elements
 * skipped); child's parents are then known.
 */
extern void lease_lineage_parents(LeaseLineage *lineage, int child, Datum parents);

/*
 * Adds the leases of the stream that the nodes whose parents are not known
 * yet descend from: each looked up once by primary key, breadth first,
 * until every node is known; a shard without a lease is a node without
 * parents.  SPI must be connected; reads what the caller's snapshot shows.
 */
extern void lease_lineage_read(LeaseLineage *lineage, Datum app_name, Datum stream_name);

/*
 * Marks a node as one the caller writes, its parents the edges the caller
 * gives it (never read from the table): lease_lineage_cycle reports only
 * cycles through marked nodes (a cycle already in the table before is
 * none of this write's doing).
 */
extern void lease_lineage_mark(LeaseLineage *lineage, int node);

/*
 * The first marked node, in the order they were made, that lies on a
 * cycle (a shard descending from itself, a self-parent included), or -1.
 * When found and path is not NULL, *path names the cycle from that node
 * back to it, following parents: "a" -> "b" -> "a".
 */
extern int	lease_lineage_cycle(LeaseLineage *lineage, char **path);

/* The shard id of a node. */
extern const char *lease_lineage_name(const LeaseLineage *lineage, int node);

#endif							/* LEASE_LINEAGE_H */
