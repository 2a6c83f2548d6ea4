/*-------------------------------------------------------------------------
 *
 * src/leases/lease_sql.h
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
#ifndef LEASE_LEASE_SQL_H
#define LEASE_LEASE_SQL_H

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

/*
 * From 0.4.0 on, a lease's effective expiry, for its own lease_expires_at
 * `le` (an SQL expression) and its holder's lease.stream_workers row `w`
 * (all NULL when there is none): the later of its own expiry (set by the
 * take, or by renew_lease) and the holder's heartbeat (renewed_until, set
 * by renew_leases for every lease the worker holds), cut short to the
 * liveness cutoff when the holder opted in with renew_every and its
 * session has ended in this server incarnation (lease.liveness_cutoff,
 * NULL otherwise; docs/worker-guide.md, "Fast failover").
 */
#define LEASE_SQL_EXPIRY_W(le, w, now) \
	"LEAST(GREATEST(" le ", " w ".renewed_until), " LEASE_SQL_CUTOFF(w, now) ")"

/*
 * The liveness cutoff of worker row `w` (NULL: none), called only once the
 * worker has missed a renewal (a CASE is evaluated lazily): a worker in the
 * mode that renews on time costs one comparison.
 */
#define LEASE_SQL_CUTOFF(w, now) \
	"CASE WHEN " now " OPERATOR(pg_catalog.>=) (" w ".renewed_at OPERATOR(pg_catalog.+) " w ".renew_every)" \
	" THEN lease.liveness_cutoff(" w ".session_pid, " w ".session_start, " w ".server_incarnation," \
	"                            " w ".renewed_at, " w ".renew_every, " now ") END"

/* The effective expiry of lease `a`, its holder's row read by its key. */
#define LEASE_SQL_EXPIRY(a, now) \
	"COALESCE((SELECT " LEASE_SQL_EXPIRY_W(a ".lease_expires_at", "hw", now) \
	"            FROM lease.stream_workers AS hw" \
	"           WHERE hw.app_name OPERATOR(pg_catalog.=) " a ".app_name" \
	"             AND hw.stream_name OPERATOR(pg_catalog.=) " a ".stream_name" \
	"             AND hw.worker OPERATOR(pg_catalog.=) " a ".lease_owner), " a ".lease_expires_at)"

/*
 * Why an owned lease whose effective expiry has passed is takeable: its
 * holder's session ended ('session_ended': without the liveness cutoff it
 * would still be live), or it expired ('expiry_takeover').
 */
#define LEASE_SQL_EXPIRED_BECAUSE(le, w, now) \
	"CASE WHEN GREATEST(" le ", " w ".renewed_until) OPERATOR(pg_catalog.>) " now \
	"     THEN 'session_ended' ELSE 'expiry_takeover' END"

/*
 * The CTE `wl` of a statement that may take leases from workers by expiry
 * (from 0.4.0 on): locks the lease.stream_workers rows of the holders
 * (column from_owner of CTE `cand`, whose rows are locked already) and of
 * the taker `taker`, in key order (the order LEASE_SQL_RECORD_LOADS locks
 * the bookkeeping rows in, which on 0.4.0 are these same rows), and returns
 * their committed liveness columns, so the expiry is judged on a heartbeat
 * no renewal can move until the statement commits (a renewal updates that
 * row).  Nothing is locked when `cand` holds no owned lease.  From 0.5.0 on
 * these are the only locks another worker takes on a worker's heartbeat
 * row: a worker's renewal waits for another worker's transaction only while
 * that transaction is taking one of its leases by expiry.
 */
#define LEASE_SQL_LOCK_WORKERS(taker, cand) \
	" wl AS (SELECT w.worker, w.renewed_until, w.session_pid, w.session_start," \
	"               w.server_incarnation, w.renewed_at, w.renew_every" \
	"          FROM lease.stream_workers AS w" \
	"         WHERE w.app_name OPERATOR(pg_catalog.=) $1" \
	"           AND w.stream_name OPERATOR(pg_catalog.=) $2" \
	"           AND ((w.worker OPERATOR(pg_catalog.=) " taker \
	"                 AND EXISTS (SELECT 1 FROM " cand " WHERE " cand ".from_owner IS NOT NULL))" \
	"                OR w.worker OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT " cand ".from_owner FROM " cand ")))" \
	"         ORDER BY w.worker COLLATE pg_catalog.\"C\"" \
	"           FOR NO KEY UPDATE OF w)"

/*
 * From 0.4.0 on, the CTE `o` of a take that may take leases by expiry: the
 * leases read and locked in `o0` (with from_owner and from_expires_at),
 * judged again on their holders' committed heartbeat with the workers'
 * rows locked (LEASE_SQL_LOCK_WORKERS, for taker `taker`): a lease a
 * renewal made live again is dropped unless `keep` (an SQL condition)
 * holds; `event` is the event column.  A renewal either committed first
 * (the lease is live again) or waits for the take and then no longer lists
 * the lease.
 */
#define LEASE_SQL_HELD_AGAIN \
	"(" LEASE_SQL_EXPIRY_W("o0.from_expires_at", "hw", LEASE_SQL_NOW) \
	" OPERATOR(pg_catalog.>) " LEASE_SQL_NOW ")"
#define LEASE_SQL_RECHECKED(taker, event, keep) \
	LEASE_SQL_LOCK_WORKERS(taker, "o0") "," \
	" o AS (SELECT o0.app_name, o0.stream_name, o0.shard_id, o0.from_owner, " event " AS event" \
	"         FROM o0 LEFT JOIN wl AS hw ON hw.worker OPERATOR(pg_catalog.=) o0.from_owner," \
	"              " LEASE_SQL_CLOCK \
	"        WHERE " keep " OR NOT " LEASE_SQL_HELD_AGAIN "),"

/* Owned and not expired, by the effective expiry. */
#define LEASE_SQL_LIVE(a, now) \
	"(" a ".lease_owner IS NOT NULL" \
	" AND " LEASE_SQL_EXPIRY(a, now) " OPERATOR(pg_catalog.>) " now ")"

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
 * never runs the subquery: a CASE evaluates its branches in order (AND
 * promises no order), and take_leases evaluates this for every lease of a
 * stream.
 */
#define LEASE_SQL_BLOCKED(a) \
	"(CASE WHEN pg_catalog.cardinality(" a ".parent_shard_ids) OPERATOR(pg_catalog.=) 0 THEN false" \
	" ELSE EXISTS (SELECT 1 FROM lease.shard_leases AS p" \
	" WHERE p.app_name OPERATOR(pg_catalog.=) " a ".app_name" \
	"   AND p.stream_name OPERATOR(pg_catalog.=) " a ".stream_name" \
	"   AND p.shard_id OPERATOR(pg_catalog.=) ANY (" a ".parent_shard_ids)" \
	"   AND p.checkpoint OPERATOR(pg_catalog.<>) " LEASE_SQL_SHARD_END ") END)"

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
 * LEASE_SQL_RECORD_LOADS_IN(table) keeps the bookkeeping exact: -1 for
 * every from_owner, +1 for every to_owner, and expires_min lowered to the
 * earliest new expiry (set to it when the worker held nothing before).  The
 * rows are upserted in key order, so two statements changing the same
 * workers lock their rows in the same order and cannot deadlock on them.
 * The table is lease.worker_holdings from 0.5.0 on (LEASE_SQL_RECORD_LOADS),
 * lease.stream_workers before (LEASE_SQL_RECORD_LOADS_0_4), where it shared
 * the row each worker's heartbeat writes: an ownership change locked the
 * heartbeat of the worker it brought a lease to.
 */
#define LEASE_SQL_RECORD_LOADS_IN(table) \
	", loads AS (INSERT INTO " table " AS w" \
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
#define LEASE_SQL_RECORD_LOADS_0_4	LEASE_SQL_RECORD_LOADS_IN("lease.stream_workers")
#define LEASE_SQL_RECORD_LOADS		LEASE_SQL_RECORD_LOADS_IN("lease.worker_holdings")

/* One prepared statement of a LEASE_SCHEMA_STMTS2 pair, or a statement alone. */
#define LEASE_SCHEMA_STMT_ENTRY(stmt_name, sql_, opts, jit_off, n, ...) \
	{ \
		.name = stmt_name, .sql = sql_, .nargs = n, \
		.argtypes = {__VA_ARGS__}, .expected = SPI_OK_SELECT, \
		.cursor_options = opts, \
		.setting = (jit_off) ? "jit" : NULL, .setting_value = "off" \
	}

/*
 * A statement in the two forms of the schemas the module serves
 * (common/version.h), indexed by LeaseSchema: [0] for 0.4.0 (the
 * bookkeeping in lease.stream_workers, beside the heartbeat), [1] from 0.5.0
 * on (the bookkeeping in lease.worker_holdings); opts their cursor_options;
 * jit_off: both run with JIT off (LEASE_STMT_JIT_OFF).
 */
#define LEASE_SCHEMA_STMTS2(stmt_name, sql_0_4, sql_0_5, opts, jit_off, n, ...) \
	{ \
		LEASE_SCHEMA_STMT_ENTRY(stmt_name " (0.4 schema)", sql_0_4, opts, jit_off, n, __VA_ARGS__), \
		LEASE_SCHEMA_STMT_ENTRY(stmt_name, sql_0_5, opts, jit_off, n, __VA_ARGS__) \
	}

/*
 * The common case: a statement that changes who holds a lease, with its
 * bookkeeping CTE.  `sql` is a macro taking that CTE.
 */
#define LEASE_OWNERSHIP_STMTS(stmt_name, sql, n, ...) \
	LEASE_SCHEMA_STMTS2(stmt_name, sql(LEASE_SQL_RECORD_LOADS_0_4), sql(LEASE_SQL_RECORD_LOADS), \
						0, false, n, __VA_ARGS__)

/* Which of a LEASE_SCHEMA_STMTS2 pair `schema` runs. */
#define LEASE_SCHEMA_STMT(stmts, schema) \
	(&(stmts)[(schema) == LEASE_SCHEMA_0_5 ? 1 : 0])

/*
 * From 0.5.0 on, the SET item with which a statement writing checkpoint
 * `ckpt` and sub-sequence `sub` (SQL expressions) to lease `a` moves its
 * checkpointed_at itself, when either changes (rewriting the same
 * checkpoint is not progress), instead of the BEFORE trigger
 * shard_leases_checkpointed (a PL/pgSQL call per row), which then does not
 * fire (its WHEN clause, src/leases/monitoring.sql).
 */
#define LEASE_SQL_SET_CHECKPOINTED(a, ckpt, sub) \
	"checkpointed_at = CASE WHEN " a ".checkpoint IS DISTINCT FROM " ckpt \
	"                         OR " a ".checkpoint_sub_sequence IS DISTINCT FROM " sub \
	"                       THEN pg_catalog.now() ELSE " a ".checkpointed_at END"

/*
 * The new work rate of lease `a` at a measured checkpoint: it moves
 * toward `work` (an SQL float8 expression, the work reported) over the
 * seconds since the previous checkpoint, `dt`, by 1 - exp(-dt / tau) of
 * the way (an exponentially decayed rate starting from 0; for a short dt
 * the step is about work / tau, so back-to-back checkpoints do not inflate
 * it; the exponent is capped where the factor is 1 to float8 precision).
 */
/*
 * The time constant, in seconds, of the exponentially decayed work rate
 * that update_checkpoint's records argument feeds (lease.shard_leases.
 * work_rate): a report `dt` seconds after the previous checkpoint moves the
 * rate by 1 - exp(-dt / LEASE_WORK_RATE_TAU_S) of the way to records / dt.
 */
#define LEASE_WORK_RATE_TAU_S "60"

#define LEASE_SQL_CHECKPOINT_DT(a) \
	"GREATEST(pg_catalog.date_part('epoch', pg_catalog.now() OPERATOR(pg_catalog.-) " a ".checkpointed_at), 0.001)"
#define LEASE_SQL_DECAYED_WORK_RATE(a, work) \
	"COALESCE(" a ".work_rate, 0) OPERATOR(pg_catalog.+)" \
	"  ((1 OPERATOR(pg_catalog.-) (1 OPERATOR(pg_catalog./)" \
	"      pg_catalog.exp(LEAST(" LEASE_SQL_CHECKPOINT_DT(a) " OPERATOR(pg_catalog./) " LEASE_WORK_RATE_TAU_S ", 600))))" \
	"   OPERATOR(pg_catalog.*)" \
	"   ((" work " OPERATOR(pg_catalog./) " LEASE_SQL_CHECKPOINT_DT(a) ")" \
	"    OPERATOR(pg_catalog.-) COALESCE(" a ".work_rate, 0)))"

#endif							/* LEASE_LEASE_SQL_H */
