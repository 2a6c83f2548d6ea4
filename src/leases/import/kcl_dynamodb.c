/*-------------------------------------------------------------------------
 *
 * src/leases/import/kcl_dynamodb.c
 *	  lease.import_kcl_dynamodb: import an export of the AWS KCL's DynamoDB
 *	  lease table.
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

/* One item's attributes with their DynamoDB types: the one key of the
 * value when that key holds what the type says, else NULL. */
#define KCL_ATTRS(it) \
	"SELECT a.key AS name, t.type " \
	"  FROM pg_catalog.jsonb_each(CASE WHEN pg_catalog.jsonb_typeof(" it ") OPERATOR(pg_catalog.=) 'object' THEN " it " " \
	"                                  ELSE '{}' END) AS a, " \
	"       LATERAL (SELECT pg_catalog.min(k) AS type, pg_catalog.count(*) AS n " \
	"                  FROM pg_catalog.jsonb_object_keys(CASE WHEN pg_catalog.jsonb_typeof(a.value) OPERATOR(pg_catalog.=) 'object' " \
	"                                                         THEN a.value ELSE '{}' END) AS k) AS c, " \
	"       LATERAL (SELECT CASE WHEN c.n OPERATOR(pg_catalog.=) 1 " \
	"                             AND pg_catalog.jsonb_typeof(a.value OPERATOR(pg_catalog.->) c.type) " \
	"                                 OPERATOR(pg_catalog.=) CASE WHEN c.type OPERATOR(pg_catalog.=) ANY ('{S,B}'::pg_catalog.text[]) THEN 'string' " \
	"                                        WHEN c.type OPERATOR(pg_catalog.=) ANY ('{BOOL,\"NULL\"}'::pg_catalog.text[]) THEN 'boolean' " \
	"                                        WHEN c.type OPERATOR(pg_catalog.=) 'M' THEN 'object' " \
	"                                        WHEN c.type OPERATOR(pg_catalog.=) ANY ('{SS,NS,BS,L}'::pg_catalog.text[]) THEN 'array' " \
	"                                        WHEN c.type OPERATOR(pg_catalog.=) 'N' THEN pg_catalog.jsonb_typeof(a.value OPERATOR(pg_catalog.->) 'N') END " \
	"                             AND (c.type OPERATOR(pg_catalog.<>) 'N' OR pg_catalog.jsonb_typeof(a.value OPERATOR(pg_catalog.->) 'N') " \
	"                                                  OPERATOR(pg_catalog.=) ANY ('{string,number}'::pg_catalog.text[])) " \
	"                            THEN c.type END AS type) AS t"

/* The shard ids of a lineage attribute (SS, or L of S; a NULL element for
 * one that is not a string), '{}' when absent. */
#define KCL_IDS(it, attr) \
	"ARRAY(SELECT CASE WHEN pg_catalog.jsonb_typeof(e) OPERATOR(pg_catalog.=) 'string' THEN e OPERATOR(pg_catalog.#>>) '{}' " \
	"                  WHEN pg_catalog.jsonb_typeof(e OPERATOR(pg_catalog.->) 'S') OPERATOR(pg_catalog.=) 'string' THEN e OPERATOR(pg_catalog.->>) 'S' END " \
	"        FROM pg_catalog.jsonb_array_elements(COALESCE(" it " OPERATOR(pg_catalog.->) " attr " OPERATOR(pg_catalog.->) 'SS', " \
	"                                                      " it " OPERATOR(pg_catalog.->) " attr " OPERATOR(pg_catalog.->) 'L', '[]')) AS e)"

/* What a row of kcl_ddb_read is (its kind column; NULL: a problem). */
#define KCL_DDB_LEASE			"lease"
#define KCL_DDB_OTHER_STREAM	"other_stream"
#define KCL_DDB_NOT_A_LEASE		"not_a_lease"

/* kcl_ddb_read's columns, from 1. */
enum
{
	KCL_COL_ITEM = 1, KCL_COL_LEASE_KEY, KCL_COL_SHARD, KCL_COL_KIND, KCL_COL_DETAIL,
	KCL_COL_PROBLEM, KCL_COL_IDENT, KCL_COL_OWNER, KCL_COL_COUNT, KCL_COL_CHECKPOINT,
	KCL_COL_SUB_SEQ, KCL_COL_SWITCHES, KCL_COL_PENDING, KCL_COL_PARENTS, KCL_COL_CHILDREN
};

static LeaseStatement kcl_ddb_read = {
	.name = "import_kcl_dynamodb: read the items",
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
	"), kinds AS ( "
	/* what each item is: a lease, a row KCL keeps for itself, or neither */
	"    SELECT i.item, i.it, i.it OPERATOR(pg_catalog.->) 'leaseKey' OPERATOR(pg_catalog.->>) 'S' AS lease_key, "
	"           f.untyped, f.types, "
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
	/* the item's attributes and their types, read from the item alone */
	"           LATERAL (SELECT pg_catalog.min(a.name) FILTER (WHERE a.type IS NULL) AS untyped, "
	"                           pg_catalog.jsonb_object_agg(a.name, a.type) AS types "
	"                      FROM (" KCL_ATTRS("i.it") ") AS a) AS f, "
	"           LATERAL (SELECT i.it OPERATOR(pg_catalog.->) 'entityType' OPERATOR(pg_catalog.->>) 'S' AS entity) AS e "
	"), leases AS ( "
	/* the well-formed lease items: their stream and shard */
	"    SELECT k.item, k.it, k.types, k.lease_key, m.r[1] AS ident, m.r[2] AS sname, "
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
	"           " KCL_IDS("l.it", "'parentShardId'") " AS parents, "
	"           " KCL_IDS("l.it", "'parentShardIds'") " AS parents_s, "
	"           " KCL_IDS("l.it", "'childShardIds'") " AS children "
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
	"                WHEN NOT ((o.checkpoint OPERATOR(pg_catalog.~) '^[0-9]+$' AND pg_catalog.octet_length(o.checkpoint) OPERATOR(pg_catalog.<=) 129) "
	"                          OR o.checkpoint OPERATOR(pg_catalog.=) ANY ('{TRIM_HORIZON,LATEST,SHARD_END,AT_TIMESTAMP}'::pg_catalog.text[])) "
	"                    THEN pg_catalog.format('checkpoint \"%s\" is neither a sequence number nor TRIM_HORIZON, LATEST, SHARD_END or AT_TIMESTAMP', "
	"                                           pg_catalog.left(o.checkpoint, 64)) "
	"                WHEN NOT ((o.pending OPERATOR(pg_catalog.~) '^[0-9]+$' AND pg_catalog.octet_length(o.pending) OPERATOR(pg_catalog.<=) 129) OR o.pending OPERATOR(pg_catalog.=) " LEASE_SQL_SHARD_END ") "
	"                    THEN pg_catalog.format('pendingCheckpoint \"%s\" is not a sequence number', pg_catalog.left(o.pending, 64)) "
	"                WHEN pg_catalog.octet_length(o.owner) OPERATOR(pg_catalog.>) " CppAsString2(LEASE_MAX_IDENT_BYTES) " "
	"                    THEN 'leaseOwner is longer than " CppAsString2(LEASE_MAX_IDENT_BYTES) " bytes' "
	"                WHEN p.bad IS NOT NULL THEN p.bad "
	"           END AS problem "
	"      FROM ours AS o "
	"      LEFT JOIN LATERAL ( "
	/* a known attribute of another type than KCL writes ({"NULL": true} counts as absent) */
	"           SELECT x.name, o.types OPERATOR(pg_catalog.->>) x.name AS type, "
	"                  pg_catalog.array_to_string(x.types, ' or ') AS expected "
	"             FROM (VALUES ('leaseKey', '{S}'::pg_catalog.text[]), ('leaseOwner', '{S,\"NULL\"}'), "
	"                          ('leaseCounter', '{N}'), ('ownerSwitchesSinceCheckpoint', '{N,\"NULL\"}'), "
	"                          ('checkpoint', '{S}'), ('checkpointSubSequenceNumber', '{N,\"NULL\"}'), "
	"                          ('pendingCheckpoint', '{S,\"NULL\"}'), ('pendingCheckpointSubSequenceNumber', '{N,\"NULL\"}'), "
	"                          ('pendingCheckpointState', '{B,N,\"NULL\"}'), ('parentShardId', '{SS,L,\"NULL\"}'), ('parentShardIds', '{SS,L,\"NULL\"}'), "
	"                          ('childShardIds', '{SS,L,\"NULL\"}'), ('startingHashKey', '{S,\"NULL\"}'), "
	"                          ('endingHashKey', '{S,\"NULL\"}'), ('throughputKBps', '{N,\"NULL\"}'), "
	"                          ('checkpointOwner', '{S,\"NULL\"}'), ('entityType', '{S}'), ('streamName', '{S}'), "
	"                          ('shardId', '{S}')) AS x(name, types) "
	"            WHERE NOT (o.types OPERATOR(pg_catalog.->>) x.name) OPERATOR(pg_catalog.=) ANY (x.types) "
	"            ORDER BY x.name LIMIT 1) AS w ON true "
	"      LEFT JOIN LATERAL ( "
	/* a counter that is not an integer pg_lease can keep */
	"           SELECT v.name, v.value "
	"             FROM (VALUES (1, 'leaseCounter', o.counter, " CppAsString2(LEASE_MAX_IMPORTED_COUNTER) "::pg_catalog.numeric), "
	"                          (2, 'ownerSwitchesSinceCheckpoint', o.switches, " CppAsString2(LEASE_MAX_IMPORTED_COUNTER) "), "
	"                          (3, 'checkpointSubSequenceNumber', o.sub_seq, 9223372036854775808), "
	"                          (4, 'pendingCheckpointSubSequenceNumber', o.pending_sub_seq, 9223372036854775808)) "
	"                  AS v(ord, name, value, bound) "
	"            WHERE v.value IS NOT NULL "
	"              AND NOT (v.value OPERATOR(pg_catalog.~) '^[0-9]+$' AND pg_catalog.octet_length(v.value) OPERATOR(pg_catalog.<=) 19 AND CAST(v.value AS pg_catalog.numeric) OPERATOR(pg_catalog.<) v.bound) "
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
	"             FROM (VALUES (1, 'parentShardId', o.parents), (2, 'parentShardIds', o.parents_s), "
	"                          (3, 'childShardIds', o.children)) AS s(ord, name, ids)) AS s "
	"            WHERE s.bad IS NOT NULL "
	"            ORDER BY s.ord LIMIT 1) AS p ON true "
	"), problems AS ( "
	/* what keeps an item that is no lease of the stream from being
	 * imported (a lease's own problem is on its row below) */
	"    SELECT k.item, k.lease_key, "
	"           CASE WHEN pg_catalog.jsonb_typeof(k.it) OPERATOR(pg_catalog.<>) 'object' THEN 'the item is not a JSON object' "
	"                WHEN k.untyped IS NOT NULL "
	"                    THEN pg_catalog.format('attribute %s is not a DynamoDB typed value such as {\"S\": \"...\"}', k.untyped) "
	"                WHEN k.not_a_lease IS NULL AND NOT k.it OPERATOR(pg_catalog.?) 'leaseKey' THEN 'there is no leaseKey' "
	"                WHEN k.not_a_lease IS NULL AND k.lease_key IS NULL THEN 'leaseKey is not of type S' END AS problem "
	"      FROM kinds AS k "
	"    UNION ALL "
	/* item 0: the export is one page of a scan; the problem names its marker */
	"    SELECT 0, NULL, CASE WHEN d.doc OPERATOR(pg_catalog.?) 'NextToken' THEN 'NextToken' ELSE 'LastEvaluatedKey' END "
	"      FROM docs AS d "
	"     WHERE pg_catalog.jsonb_typeof(d.doc) OPERATOR(pg_catalog.=) 'object' AND (d.doc OPERATOR(pg_catalog.?) 'NextToken' OR d.doc OPERATOR(pg_catalog.?) 'LastEvaluatedKey') "
	") "
	/* one row per item, by item (KCL_DDB_* columns); lineage is the C's */
	"SELECT x.* FROM ( "
	"    SELECT c.item, c.lease_key, c.shard, " LEASE_SQL_WORD(KCL_DDB_LEASE) " AS kind, "
	/* what pg_lease has no place for */
	"           (SELECT 'not imported: ' OPERATOR(pg_catalog.||) pg_catalog.string_agg(a.key, ', ' ORDER BY a.key) "
	"              FROM pg_catalog.jsonb_each_text(c.types) AS a "
	"             WHERE a.value OPERATOR(pg_catalog.<>) 'NULL' "
	"               AND (NOT a.key OPERATOR(pg_catalog.=) ANY ('{leaseKey,leaseOwner,leaseCounter,ownerSwitchesSinceCheckpoint,checkpoint,checkpointSubSequenceNumber,pendingCheckpoint,pendingCheckpointSubSequenceNumber,parentShardId,parentShardIds,childShardIds,entityType,streamName,shardId}'::pg_catalog.text[]) "
	"                    OR (a.key OPERATOR(pg_catalog.=) 'pendingCheckpoint' AND c.pending IS NOT NULL "
	"                        AND (c.checkpoint OPERATOR(pg_catalog.=) " LEASE_SQL_SHARD_END " OR c.pending OPERATOR(pg_catalog.=) " LEASE_SQL_SHARD_END ")) "
	"                    OR (a.key OPERATOR(pg_catalog.=) 'pendingCheckpointSubSequenceNumber' AND NOT c.pending_sub_seq OPERATOR(pg_catalog.~) '^0+$') "
	/* an ended lease is nobody's: its owner is not kept */
	"                    OR (a.key OPERATOR(pg_catalog.=) 'leaseOwner' AND c.owner IS NOT NULL "
	"                        AND c.checkpoint OPERATOR(pg_catalog.=) " LEASE_SQL_SHARD_END "))) AS detail, "
	"           c.problem, c.ident, "
	"           CASE WHEN c.checkpoint OPERATOR(pg_catalog.<>) " LEASE_SQL_SHARD_END " THEN c.owner END AS owner, "
	"           CASE WHEN c.problem IS NULL THEN CAST(c.counter AS pg_catalog.int8) END AS lease_count, "
	"           c.checkpoint, "
	"           CASE WHEN c.problem IS NULL THEN CAST(COALESCE(c.sub_seq, '0') AS pg_catalog.int8) END AS sub_seq, "
	"           CASE WHEN c.problem IS NULL THEN CAST(COALESCE(c.switches, '0') AS pg_catalog.int8) END AS switches, "
	"           CASE WHEN c.checkpoint OPERATOR(pg_catalog.<>) " LEASE_SQL_SHARD_END " AND c.pending OPERATOR(pg_catalog.~) '^[0-9]+$' THEN c.pending END AS pending, "
	"           c.parents OPERATOR(pg_catalog.||) c.parents_s AS parents, c.children "
	"      FROM checked AS c "
	"    UNION ALL "
	"    SELECT l.item, l.lease_key, l.shard, " LEASE_SQL_WORD(KCL_DDB_OTHER_STREAM) ", pg_catalog.format('stream %s', l.ident), "
	"           NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL "
	"      FROM leases AS l "
	"     WHERE l.sname OPERATOR(pg_catalog.<>) $3 "
	"    UNION ALL "
	"    SELECT k.item, k.lease_key, NULL, " LEASE_SQL_WORD(KCL_DDB_NOT_A_LEASE) ", k.not_a_lease, "
	"           NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL "
	"      FROM kinds AS k "
	"     WHERE k.not_a_lease IS NOT NULL "
	"    UNION ALL "
	"    SELECT p.item, p.lease_key, NULL, NULL, NULL, p.problem, "
	"           NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL "
	"      FROM problems AS p "
	"     WHERE p.problem IS NOT NULL) AS x "
	" ORDER BY x.item",
	.nargs = 3,
	.argtypes = {JSONBARRAYOID, TEXTOID, TEXTOID},
	.expected = SPI_OK_SELECT,
	.read_only = true,			/* it reads nothing but its parameters */
	/*
	 * The planner prices each function over the export at its default
	 * hundreds of rows and every subplan as run for each, so a few items
	 * cross jit_above_cost, and compiling took seconds for a statement that
	 * runs in milliseconds.
	 */
	LEASE_STMT_JIT_OFF
};

/*
 * import_kcl_dynamodb's write: one row per lease, as arrays in the order of
 * the leases; a lease's parents are a text[] in its text form.  In shard_id
 * order, so that two imports of overlapping exports meet in the same order
 * (the second waits for the first's uncommitted lease, then leaves it
 * alone).  Returns the leases written.
 */
static LeaseStatement kcl_ddb_insert = {
	.name = "import_kcl_dynamodb: insert the leases",
	.sql =
	"INSERT INTO lease.shard_leases AS l "
	"       (app_name, stream_name, shard_id, lease_owner, lease_expires_at, lease_count, checkpoint, "
	"        checkpoint_sub_sequence, parent_shard_ids, owner_switches_since_checkpoint, pending_checkpoint) "
	"SELECT $1, $2, r.shard, r.owner, CASE WHEN r.owner IS NOT NULL THEN pg_catalog.clock_timestamp() END, "
	"       r.lease_count, r.checkpoint, r.sub_seq, CAST(r.parents AS pg_catalog.text[]), r.switches, r.pending "
	"  FROM ROWS FROM (pg_catalog.unnest($3), pg_catalog.unnest($4), pg_catalog.unnest($5), pg_catalog.unnest($6), "
	"                  pg_catalog.unnest($7), pg_catalog.unnest($8), pg_catalog.unnest($9), pg_catalog.unnest($10)) "
	"       AS r(shard, owner, lease_count, checkpoint, sub_seq, switches, pending, parents) "
	" ORDER BY r.shard COLLATE pg_catalog.\"C\" "
	"ON CONFLICT (app_name, stream_name, shard_id) DO NOTHING "
	"RETURNING l.shard_id",
	.nargs = 10,
	.argtypes = {TEXTOID, TEXTOID, TEXTARRAYOID, TEXTARRAYOID, INT8ARRAYOID, TEXTARRAYOID,
				 INT8ARRAYOID, INT8ARRAYOID, TEXTARRAYOID, TEXTARRAYOID},
	.expected = SPI_OK_INSERT_RETURNING
};

/* import_kcl_dynamodb's result columns. */
#define KCL_DDB_COLUMNS 5

/*
 * One row of import_kcl_dynamodb's result; for a lease of the stream (read
 * or created from childShardIds), what it writes.
 */
typedef struct KclRow
{
	int64		item;
	char	   *lease_key;		/* NULL: none */
	char	   *shard;			/* NULL: none */
	const char *action;			/* imported, created, other_stream, not_a_lease */
	char	   *detail;
	bool		writes;			/* a lease: */
	bool		written;		/* the insert wrote it (else it exists) */
	char	   *ident;			/* multi-stream: account:stream:epoch */
	char	   *owner;
	int64		lease_count;
	char	   *checkpoint;
	int64		sub_seq;
	int64		switches;
	char	   *pending;
	Datum		children;		/* text[] of a lease read, else 0 */
	int			nparents;		/* its parents (the first LEASE_MAX_PARENTS + 1 kept) */
	char	   *parents[LEASE_MAX_PARENTS + 1];
} KclRow;

/* A problem of an item, found after the read: lineage. */
typedef struct KclProblem
{
	int64		item;
	char	   *lease_key;
	char	   *problem;
} KclProblem;

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
	int			max = 16;
	bool		blank = true;

	for (int i = 0; i < len && blank; i++)
		blank = scanner_isspace(data[i]);
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
	/* grown with the documents found, never sized by a count of lines */
	docs = palloc(sizeof(Datum) * max);
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
			if (n == max)
			{
				max *= 2;
				docs = repalloc(docs, sizeof(Datum) * max);
			}
			docs[n++] = kcl_ddb_jsonb(data + start, end - start);
			error_context_stack = callback.previous;
		}
		start = end + 1;
	}
	*count = n;
	return docs;
}

/* A text value of the read, copied, or NULL. */
static char *
kcl_text(uint64 row, int col)
{
	bool		isnull;
	Datum		value = lease_spi_value(row, col, &isnull);

	return isnull ? NULL : TextDatumGetCString(value);
}

/* A bigint value of the read, 0 when NULL. */
static int64
kcl_int8(uint64 row, int col)
{
	bool		isnull;
	Datum		value = lease_spi_value(row, col, &isnull);

	return isnull ? 0 : DatumGetInt64(value);
}

/* Compares shard ids as the database's default collation sorts text. */
static int
kcl_id_cmp(const char *a, const char *b)
{
	return varstr_cmp(a, strlen(a), b, strlen(b), DEFAULT_COLLATION_OID);
}

/* qsort: parent ids. */
static int
kcl_id_qsort(const void *a, const void *b)
{
	return kcl_id_cmp(*(char *const *) a, *(char *const *) b);
}

/* qsort: result rows by item, then shard id (none last). */
static int
kcl_row_qsort(const void *a, const void *b)
{
	const KclRow *x = *(const KclRow *const *) a;
	const KclRow *y = *(const KclRow *const *) b;

	if (x->item != y->item)
		return x->item < y->item ? -1 : 1;
	if (x->shard == NULL || y->shard == NULL)
		return (x->shard == NULL) - (y->shard == NULL);
	return kcl_id_cmp(x->shard, y->shard);
}

/* Adds a parent to a lease unless it has it (counting past the limit). */
static void
kcl_add_parent(KclRow *row, char *parent)
{
	for (int i = 0; i < Min(row->nparents, LEASE_MAX_PARENTS + 1); i++)
	{
		if (strcmp(row->parents[i], parent) == 0)
			return;
	}
	if (row->nparents <= LEASE_MAX_PARENTS)
		row->parents[row->nparents] = parent;
	row->nparents++;
}

/* The non-NULL elements of a text[] (NULL: none), as C strings. */
static char **
kcl_ids(Datum array, int *count)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	char	  **ids;

	*count = 0;
	if (array == (Datum) 0)
		return NULL;
	deconstruct_array(DatumGetArrayTypeP(array), TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	ids = palloc(sizeof(char *) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		if (!nulls[i])
			ids[(*count)++] = TextDatumGetCString(elems[i]);
	}
	return ids;
}

/* Records a lineage problem of a lease (problems has room for every row). */
static void
kcl_lineage_problem(KclProblem *problems, int *nproblems, const KclRow *row, char *problem)
{
	KclProblem *p = &problems[(*nproblems)++];

	p->item = row->item;
	p->lease_key = row->lease_key;
	p->problem = problem;
}

/* Raises 22023 for the items of the export that cannot be imported. */
static pg_attribute_noreturn() void
kcl_refuse(uint64 refused, int64 item, const char *lease_key, const char *problem)
{
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
			 lease_key == NULL ? errdetail("Item " INT64_FORMAT ": %s.", item, problem)
			 : errdetail("Item " INT64_FORMAT " (leaseKey \"%s\"): %s.", item, lease_key, problem),
			 errhint("Nothing was imported: fix those items, or leave them out, and run it again.")));
}

/*
 * The lineage of the leases read (rows 0..nleases-1, by item): each lease's
 * parents are its parentShardId (and parentShardIds) and every lease whose
 * childShardIds names it; a child named there with no lease in the export
 * is created (appended to *rows, with the item of the first lease naming
 * it).  Then the checks the read could not make, each lease alone: at most
 * LEASE_MAX_PARENTS parents, and no lease that would descend from itself,
 * through the export or the leases of the stream already in the table.
 * Returns the problems' number; *problems holds them.  *by_node maps each
 * node of the lineage to the lease it is (NULL: a shard not in the export).
 */
static int
kcl_ddb_lineage(KclRow ***rows, int *nrows, int nleases, Datum app, Datum stream,
				LeaseLineage *lineage, KclProblem **problems, KclRow ***by_node_out)
{
	int			nproblems = 0;
	int			maxrows = *nrows + 16;
	KclRow	  **by_node;
	int			max_nodes = Max(*nrows * 2, 64);
	char	   *path;
	int			cycle;

	*rows = repalloc(*rows, sizeof(KclRow *) * maxrows);
	by_node = palloc0(sizeof(KclRow *) * max_nodes);

	/* every lease read is a node of its own; its own parents first */
	for (int i = 0; i < nleases; i++)
	{
		KclRow	   *row = (*rows)[i];
		int			node = lease_lineage_node(lineage, row->shard);

		if (node >= max_nodes)
		{
			by_node = repalloc(by_node, sizeof(KclRow *) * max_nodes * 2);
			memset(by_node + max_nodes, 0, sizeof(KclRow *) * max_nodes);
			max_nodes *= 2;
		}
		by_node[node] = row;
		lease_lineage_mark(lineage, node);
	}
	/* the children a lease names: a parent of theirs, or a lease to create */
	for (int i = 0; i < nleases; i++)
	{
		KclRow	   *row = (*rows)[i];
		int			nchildren;
		char	  **children = kcl_ids(row->children, &nchildren);

		for (int c = 0; c < nchildren; c++)
		{
			int			node = lease_lineage_node(lineage, children[c]);
			KclRow	   *child;

			if (node >= max_nodes)
			{
				by_node = repalloc(by_node, sizeof(KclRow *) * max_nodes * 2);
				memset(by_node + max_nodes, 0, sizeof(KclRow *) * max_nodes);
				max_nodes *= 2;
			}
			child = by_node[node];
			if (child == NULL)
			{
				/* created as KCL creates it: TRIM_HORIZON, nobody's */
				child = palloc0(sizeof(KclRow));
				child->item = row->item;
				child->shard = children[c];
				child->lease_key = row->ident ? psprintf("%s:%s", row->ident, children[c]) : children[c];
				child->action = "created";
				child->writes = true;
				child->checkpoint = LEASE_CHECKPOINT_TRIM_HORIZON;
				by_node[node] = child;
				lease_lineage_mark(lineage, node);
				if (*nrows == maxrows)
				{
					maxrows *= 2;
					*rows = repalloc(*rows, sizeof(KclRow *) * maxrows);
				}
				(*rows)[(*nrows)++] = child;
			}
			kcl_add_parent(child, row->shard);
		}
	}

	/* the edges, each lease's parents sorted; the parent limit */
	*problems = palloc(sizeof(KclProblem) * (*nrows + 1));
	for (int i = 0; i < *nrows; i++)
	{
		KclRow	   *row = (*rows)[i];
		int			node;

		if (!row->writes)
			continue;
		if (row->nparents > LEASE_MAX_PARENTS)
		{
			kcl_lineage_problem(*problems, &nproblems, row,
								psprintf("its lineage gives shard %s %d parents (its parentShardId and the leases whose childShardIds name it); a shard has at most %d",
										 row->shard, row->nparents, LEASE_MAX_PARENTS));
			continue;
		}
		qsort(row->parents, row->nparents, sizeof(char *), kcl_id_qsort);
		node = lease_lineage_node(lineage, row->shard);
		for (int k = 0; k < row->nparents; k++)
			lease_lineage_edge(lineage, node, lease_lineage_node(lineage, row->parents[k]));
		if (strcmp(row->action, "created") == 0)
		{
			StringInfoData names;

			initStringInfo(&names);
			for (int k = 0; k < row->nparents; k++)
				appendStringInfo(&names, "%s%s", k > 0 ? ", " : "", row->parents[k]);
			row->detail = psprintf("named in childShardIds of %s", names.data);
		}
	}
	*by_node_out = by_node;
	if (nproblems > 0)
		return nproblems;

	/* the leases of the stream in the table that the export descends from */
	lease_lineage_read(lineage, app, stream);
	cycle = lease_lineage_cycle(lineage, &path);
	if (cycle >= 0)
	{
		KclRow	   *row = by_node[cycle];

		kcl_lineage_problem(*problems, &nproblems, row,
							psprintf("its lineage would make shard %s descend from itself: %s",
									 row->shard, path));
	}
	return nproblems;
}

/* Raises 22023 for the lineage problems of the export, naming the first item's. */
static pg_attribute_noreturn() void
kcl_refuse_lineage(const KclProblem *problems, int nproblems)
{
	const KclProblem *first = &problems[0];

	for (int k = 1; k < nproblems; k++)
	{
		if (problems[k].item < first->item)
			first = &problems[k];
	}
	kcl_refuse(nproblems, first->item, first->lease_key, first->problem);
}

/* Fills the lease columns of `row` from row `r` of kcl_ddb_read. */
static void
kcl_ddb_lease_row(uint64 r, KclRow *row)
{
	bool		isnull;
	int			nparents;
	char	  **parents;

	row->action = "imported";
	row->writes = true;
	row->ident = kcl_text(r, KCL_COL_IDENT);
	row->owner = kcl_text(r, KCL_COL_OWNER);
	row->lease_count = kcl_int8(r, KCL_COL_COUNT);
	row->checkpoint = kcl_text(r, KCL_COL_CHECKPOINT);
	row->sub_seq = kcl_int8(r, KCL_COL_SUB_SEQ);
	row->switches = kcl_int8(r, KCL_COL_SWITCHES);
	row->pending = kcl_text(r, KCL_COL_PENDING);
	parents = kcl_ids(lease_spi_value(r, KCL_COL_PARENTS, &isnull), &nparents);
	for (int k = 0; k < nparents; k++)
		kcl_add_parent(row, parents[k]);
	row->children = lease_spi_value(r, KCL_COL_CHILDREN, &isnull);
}

/*
 * The parameters of kcl_ddb_insert (insert[0..9]): app, stream, and one
 * array per column of the rows that write a lease.
 */
static void
kcl_ddb_insert_params(KclRow **rows, int nrows, Datum app, Datum stream, Datum *insert)
{
	Datum	   *cols[8];
	int			nwrites = 0;
	bool	   *owner_nulls = palloc(sizeof(bool) * Max(nrows, 1));
	bool	   *pending_nulls = palloc(sizeof(bool) * Max(nrows, 1));
	int			dims[1];
	int			lbs[1] = {1};
	FmgrInfo	array_out;

	for (int c = 0; c < 8; c++)
		cols[c] = palloc(sizeof(Datum) * Max(nrows, 1));
	fmgr_info(F_ARRAY_OUT, &array_out);
	for (int i = 0; i < nrows; i++)
	{
		KclRow	   *row = rows[i];
		Datum	   *parents;

		if (!row->writes)
			continue;
		parents = palloc(sizeof(Datum) * Max(row->nparents, 1));
		for (int k = 0; k < row->nparents; k++)
			parents[k] = CStringGetTextDatum(row->parents[k]);
		cols[0][nwrites] = CStringGetTextDatum(row->shard);
		owner_nulls[nwrites] = row->owner == NULL;
		cols[1][nwrites] = row->owner ? CStringGetTextDatum(row->owner) : (Datum) 0;
		cols[2][nwrites] = Int64GetDatum(row->lease_count);
		cols[3][nwrites] = CStringGetTextDatum(row->checkpoint);
		cols[4][nwrites] = Int64GetDatum(row->sub_seq);
		cols[5][nwrites] = Int64GetDatum(row->switches);
		pending_nulls[nwrites] = row->pending == NULL;
		cols[6][nwrites] = row->pending ? CStringGetTextDatum(row->pending) : (Datum) 0;
		cols[7][nwrites] = CStringGetTextDatum(OutputFunctionCall(&array_out,
																   PointerGetDatum(construct_array(parents, row->nparents, TEXTOID, -1, false, TYPALIGN_INT))));
		nwrites++;
	}
	dims[0] = nwrites;
	insert[0] = app;
	insert[1] = stream;
	insert[2] = PointerGetDatum(construct_array(cols[0], nwrites, TEXTOID, -1, false, TYPALIGN_INT));
	insert[3] = PointerGetDatum(construct_md_array(cols[1], owner_nulls, 1, dims, lbs, TEXTOID, -1, false, TYPALIGN_INT));
	insert[4] = PointerGetDatum(construct_array(cols[2], nwrites, INT8OID, sizeof(int64), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	insert[5] = PointerGetDatum(construct_array(cols[3], nwrites, TEXTOID, -1, false, TYPALIGN_INT));
	insert[6] = PointerGetDatum(construct_array(cols[4], nwrites, INT8OID, sizeof(int64), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	insert[7] = PointerGetDatum(construct_array(cols[5], nwrites, INT8OID, sizeof(int64), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	insert[8] = PointerGetDatum(construct_md_array(cols[6], pending_nulls, 1, dims, lbs, TEXTOID, -1, false, TYPALIGN_INT));
	insert[9] = PointerGetDatum(construct_array(cols[7], nwrites, TEXTOID, -1, false, TYPALIGN_INT));
}

/* The rows of import_kcl_dynamodb's result, by item. */
static void
kcl_ddb_report(FunctionCallInfo fcinfo, KclRow **rows, int nrows)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	qsort(rows, nrows, sizeof(KclRow *), kcl_row_qsort);
	for (int i = 0; i < nrows; i++)
	{
		KclRow	   *row = rows[i];
		Datum		values[KCL_DDB_COLUMNS];
		bool		nulls[KCL_DDB_COLUMNS] = {false, false, false, false, false};

		values[0] = Int64GetDatum(row->item);
		nulls[1] = row->lease_key == NULL;
		values[1] = row->lease_key ? CStringGetTextDatum(row->lease_key) : (Datum) 0;
		nulls[2] = row->shard == NULL;
		values[2] = row->shard ? CStringGetTextDatum(row->shard) : (Datum) 0;
		values[3] = CStringGetTextDatum(row->writes && !row->written ? "exists" : row->action);
		nulls[4] = row->detail == NULL;
		values[4] = row->detail ? CStringGetTextDatum(row->detail) : (Datum) 0;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
}

PG_FUNCTION_INFO_V1(lease_import_kcl_dynamodb);

/*
 * lease.import_kcl_dynamodb: the leases of a KCL DynamoDB lease table's
 * export, one row per item saying what became of it.
 */
Datum
lease_import_kcl_dynamodb(PG_FUNCTION_ARGS)
{
	Datum		args[3];
	Datum	   *docs;
	int			ndocs;
	uint64		nread;
	uint64		refused = 0;
	int64		first_item = 0;
	char	   *first_key = NULL;
	char	   *first_problem = NULL;
	KclRow	  **rows;
	int			nrows = 0;
	int			nleases = 0;
	KclProblem *problems = NULL;
	int			nproblems;
	LeaseLineage *lineage;
	KclRow	  **by_node = NULL;
	Datum		insert[10];
	uint64		written;

	args[1] = lease_arg_ident(fcinfo, 0, "app_name");
	args[2] = lease_arg_ident(fcinfo, 1, "stream_name");
	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("export must not be null"),
				 errhint("Pass the export of the KCL lease table as text, e.g. the output of aws dynamodb scan --output json.")));
	/* a caller that may not import for the app is refused before the export is read */
	lease_import_check_leases_privileges("import_kcl_dynamodb");
	lease_app_check(fcinfo, LEASE_SCHEMA_0_4, args[1]);
	docs = kcl_ddb_documents(PG_GETARG_TEXT_PP(2), &ndocs);
	args[0] = PointerGetDatum(construct_array(docs, ndocs, JSONBOID, -1, false, TYPALIGN_INT));

	InitMaterializedSRF(fcinfo, 0);
	lease_spi_connect();

	/* 1. the items, each on its own, by item; the first problem */
	nread = lease_spi_run(&kcl_ddb_read, args, NULL, 0);
	rows = palloc(sizeof(KclRow *) * Max(nread, 1));
	for (uint64 r = 0; r < nread; r++)
	{
		char	   *problem = kcl_text(r, KCL_COL_PROBLEM);
		char	   *kind = kcl_text(r, KCL_COL_KIND);
		KclRow	   *row;

		if (problem != NULL)
		{
			if (refused++ == 0)
			{
				first_item = kcl_int8(r, KCL_COL_ITEM);
				first_key = kcl_text(r, KCL_COL_LEASE_KEY);
				first_problem = problem;
			}
			continue;
		}
		if (refused > 0)
			continue;
		row = palloc0(sizeof(KclRow));
		row->item = kcl_int8(r, KCL_COL_ITEM);
		row->lease_key = kcl_text(r, KCL_COL_LEASE_KEY);
		row->shard = kcl_text(r, KCL_COL_SHARD);
		row->detail = kcl_text(r, KCL_COL_DETAIL);
		if (strcmp(kind, KCL_DDB_LEASE) == 0)
		{
			kcl_ddb_lease_row(r, row);
			/* the leases first, in item order, for the lineage */
			if (nrows > nleases)
				rows[nrows] = rows[nleases];
			nrows++;
			rows[nleases++] = row;
		}
		else
		{
			row->action = pstrdup(kind);
			rows[nrows++] = row;
		}
	}
	if (refused > 0)
		kcl_refuse(refused, first_item, first_key, first_problem);

	/* 2. the lineage, and what only it can refuse */
	lineage = lease_lineage_create();
	nproblems = kcl_ddb_lineage(&rows, &nrows, nleases, args[1], args[2], lineage, &problems, &by_node);
	if (nproblems > 0)
		kcl_refuse_lineage(problems, nproblems);

	/* 3. the write: every lease read and created, one statement */
	kcl_ddb_insert_params(rows, nrows, args[1], args[2], insert);
	written = lease_spi_run(&kcl_ddb_insert, insert, NULL, 0);
	for (uint64 w = 0; w < written; w++)
		by_node[lease_lineage_node(lineage, kcl_text(w, 1))]->written = true;

	/* 4. the report, by item */
	kcl_ddb_report(fcinfo, rows, nrows);
	lease_spi_finish();
	return (Datum) 0;
}
