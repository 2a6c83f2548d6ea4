/*-------------------------------------------------------------------------
 *
 * src/leases/leases.h
 *	  SQL fragments shared by every statement that reads or changes a lease.
 *
 * Each macro expands to a piece of fixed SQL text about one row of
 * lease.shard_leases under the alias given (`a`), judged at the point in
 * time `now` (an SQL expression, usually the column of a one-row
 * `(SELECT pg_catalog.clock_timestamp() AS now) AS k`, so every test in one
 * statement sees the same instant).  They are string literals, so they are
 * pasted into the statements at compile time: no SQL is built at run time.
 *
 *-------------------------------------------------------------------------
 */
#ifndef LEASE_LEASES_H
#define LEASE_LEASES_H

#include "common/version.h"

/* The key predicate of every single-lease statement: alias l, $1..$3. */
#define LEASE_KEY_MATCHES \
	"l.app_name OPERATOR(pg_catalog.=) $1" \
	" AND l.stream_name OPERATOR(pg_catalog.=) $2" \
	" AND l.shard_id OPERATOR(pg_catalog.=) $3"

/* The stream predicate of every per-stream statement: alias l, $1..$2. */
#define LEASE_STREAM_MATCHES \
	"l.app_name OPERATOR(pg_catalog.=) $1" \
	" AND l.stream_name OPERATOR(pg_catalog.=) $2"

/* The database clock, once per statement: FROM-list item and its column. */
#define LEASE_SQL_CLOCK		"(SELECT pg_catalog.clock_timestamp() AS now) AS k"
#define LEASE_SQL_NOW		"k.now"

/* Owned and not expired. */
#define LEASE_SQL_LIVE(a, now) \
	"(" a ".lease_owner IS NOT NULL" \
	" AND " a ".lease_expires_at OPERATOR(pg_catalog.>) " now ")"

/*
 * A handoff is pending: requested and not lapsed (a request lapses one
 * requester's lease duration after its deadline).
 */
#define LEASE_SQL_HANDOFF_PENDING(a, now) \
	"(" a ".handoff_to IS NOT NULL" \
	" AND " now " OPERATOR(pg_catalog.<) (" a ".handoff_deadline" \
	"     OPERATOR(pg_catalog.+) " a ".handoff_lease_duration))"

/* Not ended. */
#define LEASE_SQL_NOT_ENDED(a) \
	a ".checkpoint OPERATOR(pg_catalog.<>) " LEASE_SQL_SHARD_END

/*
 * A parent shard that still exists in the table has not ended.  The
 * cardinality test comes first so that the common lease without parents
 * never runs the subquery (AND evaluates left to right and stops at false):
 * take_leases evaluates this for every lease of a stream.
 */
#define LEASE_SQL_BLOCKED(a) \
	"(pg_catalog.cardinality(" a ".parent_shard_ids) OPERATOR(pg_catalog.>) 0" \
	" AND EXISTS (SELECT 1 FROM lease.shard_leases AS p" \
	" WHERE p.app_name OPERATOR(pg_catalog.=) " a ".app_name" \
	"   AND p.stream_name OPERATOR(pg_catalog.=) " a ".stream_name" \
	"   AND p.shard_id OPERATOR(pg_catalog.=) ANY (" a ".parent_shard_ids)" \
	"   AND p.checkpoint OPERATOR(pg_catalog.<>) " LEASE_SQL_SHARD_END "))"

/* SET list items that forget a handoff request. */
#define LEASE_SQL_CLEAR_HANDOFF \
	"handoff_to = NULL, handoff_requested_at = NULL," \
	" handoff_deadline = NULL, handoff_lease_duration = NULL"

/*
 * SET list items for a new owner `owner` (an SQL expression) of lease `a`
 * holding it for `duration`: the count and the fencing epoch move on,
 * owner_switches_since_checkpoint counts a different owner, and any handoff
 * request is settled.
 */
#define LEASE_SQL_SET_NEW_OWNER(a, owner, duration, now) \
	"lease_owner = " owner "," \
	" lease_count = " a ".lease_count OPERATOR(pg_catalog.+) 1," \
	" lease_epoch = " a ".lease_epoch OPERATOR(pg_catalog.+) 1," \
	" lease_expires_at = " now " OPERATOR(pg_catalog.+) " duration "," \
	" owner_switches_since_checkpoint = " a ".owner_switches_since_checkpoint" \
	"     OPERATOR(pg_catalog.+) CASE WHEN " a ".lease_owner IS DISTINCT FROM " owner \
	"     THEN 1 ELSE 0 END," \
	" " LEASE_SQL_CLEAR_HANDOFF "," \
	" updated_at = pg_catalog.now()"

/* The key columns of `a` equal those of `o`. */
#define LEASE_SQL_SAME_KEY(a, o) \
	a ".app_name OPERATOR(pg_catalog.=) " o ".app_name" \
	" AND " a ".stream_name OPERATOR(pg_catalog.=) " o ".stream_name" \
	" AND " a ".shard_id OPERATOR(pg_catalog.=) " o ".shard_id"

/*
 * The changing CTE `c` of every take: the leases read and locked in `o`
 * (with their from_owner) go to `owner` for `duration`, recorded as
 * `event` (an SQL expression).
 */
#define LEASE_SQL_TAKE_LOCKED(owner, duration, event) \
	" c AS (UPDATE lease.shard_leases AS l" \
	"    SET " LEASE_SQL_SET_NEW_OWNER("l", owner, duration, LEASE_SQL_NOW) \
	"   FROM o, " LEASE_SQL_CLOCK \
	"  WHERE " LEASE_SQL_SAME_KEY("l", "o") \
	"  RETURNING l.app_name, l.stream_name, l.shard_id, " event " AS event, o.from_owner," \
	"            l.lease_owner AS to_owner, l.lease_count, l.lease_epoch," \
	"            l.lease_expires_at AS to_expires_at)"


/*
 * The bookkeeping CTE appended to every UPDATE that changes who holds a
 * lease (after LEASE_SQL_RECORD_EVENTS); inserts and deletes are counted by
 * the statement triggers of lease.shard_leases (leases.sql).  The changing CTE `c` returns one
 * row per changed lease with app_name, stream_name, from_owner (who held it,
 * or NULL), to_owner (who holds it now, or NULL) and to_expires_at (its new
 * lease_expires_at).
 *
 * LEASE_SQL_RECORD_LOADS keeps lease.stream_workers exact: -1 for every
 * from_owner, +1 for every to_owner, and expires_min lowered to the earliest
 * new expiry (set to it when the worker held nothing before).  The rows are
 * upserted in key order, so two statements changing the same workers lock
 * their rows in the same order and cannot deadlock on them.
 */
#define LEASE_SQL_RECORD_LOADS \
	", loads AS (INSERT INTO lease.stream_workers AS w" \
	"   (app_name, stream_name, worker, leases, expires_min)" \
	" SELECT d.app_name, d.stream_name, d.worker," \
	"        pg_catalog.sum(d.delta)::pg_catalog.int8, pg_catalog.min(d.expires_at)" \
	"   FROM (SELECT c.app_name, c.stream_name, c.to_owner AS worker, 1 AS delta," \
	"                c.to_expires_at AS expires_at" \
	"           FROM c WHERE c.to_owner IS NOT NULL" \
	"         UNION ALL" \
	"         SELECT c.app_name, c.stream_name, c.from_owner, -1," \
	"                CAST(NULL AS pg_catalog.timestamptz)" \
	"           FROM c WHERE c.from_owner IS NOT NULL) AS d" \
	"  GROUP BY d.app_name, d.stream_name, d.worker" \
	"  ORDER BY d.app_name COLLATE pg_catalog.\"C\", d.stream_name COLLATE pg_catalog.\"C\"," \
	"           d.worker COLLATE pg_catalog.\"C\"" \
	" ON CONFLICT (app_name, stream_name, worker) DO UPDATE" \
	"    SET leases = w.leases OPERATOR(pg_catalog.+) excluded.leases," \
	"        expires_min = CASE WHEN w.leases OPERATOR(pg_catalog.=) 0" \
	"                           THEN excluded.expires_min" \
	"                           ELSE LEAST(w.expires_min, excluded.expires_min) END," \
	"        version = w.version OPERATOR(pg_catalog.+) 1)"

/*
 * A statement in the two forms the schemas need (common/version.h): [0] for
 * 0.1.0/0.2.0 objects, which have no bookkeeping tables (lease.stream_workers
 * and the takeable cache), [1] from 0.3.0 on; opts_0_3 the second one's
 * cursor_options; jit_off: both run with JIT off (LEASE_STMT_JIT_OFF).
 */
#define LEASE_SCHEMA_STMTS(stmt_name, sql_0_2, sql_0_3, opts_0_3, jit_off, n, ...) \
	{ \
		{ \
			.name = stmt_name " (0.2 schema)", .sql = sql_0_2, .nargs = n, \
			.argtypes = {__VA_ARGS__}, .expected = SPI_OK_SELECT, \
			.setting = (jit_off) ? "jit" : NULL, .setting_value = "off" \
		}, \
		{ \
			.name = stmt_name, .sql = sql_0_3, .nargs = n, \
			.argtypes = {__VA_ARGS__}, .expected = SPI_OK_SELECT, \
			.cursor_options = opts_0_3, \
			.setting = (jit_off) ? "jit" : NULL, .setting_value = "off" \
		} \
	}

/*
 * The common case: a statement that changes who holds a lease, with the
 * bookkeeping CTE from 0.3.0 on.  `sql` is a macro taking that CTE.
 */
#define LEASE_OWNERSHIP_STMTS(stmt_name, sql, n, ...) \
	LEASE_SCHEMA_STMTS(stmt_name, sql(""), sql(LEASE_SQL_RECORD_LOADS), 0, false, n, __VA_ARGS__)

/* Which of a LEASE_SCHEMA_STMTS pair `schema` runs. */
#define LEASE_SCHEMA_STMT(stmts, schema) (&(stmts)[(schema) >= LEASE_SCHEMA_0_3 ? 1 : 0])

#endif							/* LEASE_LEASES_H */
