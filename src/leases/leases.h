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
	a ".checkpoint OPERATOR(pg_catalog.<>) 'SHARD_END'"

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
	"   AND p.checkpoint OPERATOR(pg_catalog.<>) 'SHARD_END'))"

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

#endif							/* LEASE_LEASES_H */
