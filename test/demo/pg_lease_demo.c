/*-------------------------------------------------------------------------
 *
 * pg_lease_demo.c
 *	  The main job: a fleet of stream consumers sharing one stream through
 *	  pg_lease, one of them crashing and another joining, while a chat
 *	  platform rotates channels with turns running; then a report that says
 *	  nothing was lost and nothing was done twice.
 *
 * A libpq client, not part of the server module.  Every worker is a forked
 * process with two connections, like a Kinesis Client Library worker: a
 * renewer thread (lease.renew_leases every lease_duration/3) and a record
 * processor (lease.take_leases each balancing round, then batches of
 * simulated records per owned shard, each followed by a fenced checkpoint:
 * lease.update_checkpoint with the lease_epoch its take_leases or
 * renew_leases last reported, so a worker that lost a lease, even one it
 * then got back under the same name, can never write over the checkpoint of
 * the ownership that came in between).  What
 * the processors do is logged into shared memory, so the report is the
 * clients' own view: which record ranges each worker processed and which of
 * them a checkpoint acknowledged.
 *
 * By default (--no-legacy-checkpoints turns it off; --public-only, --router
 * and --omit-hold do too) the same fleet runs twice: with
 * lease.update_checkpoint and with the client-side read-then-conditional-write
 * checkpoint guarded on lease_count, which a renewal between the read and the
 * write makes fail although the worker owns the lease; the two are printed
 * side by side.
 *
 * After the fleet the compensation queue is shown at work: a restore that
 * fails because a turn holds the previous conversation (answer failed, the
 * pair queued in lease.compensation_failures, the replacement keeping the
 * channel), a retry while the turn still runs (failed again), and one after
 * it committed (restored, the queue empty).
 *
 * --public-only runs the same fleet and chat side through pg_lease's public
 * functions and views only (lease.my_leases, lease.lease_status,
 * lease.worker_loads, lease.find_channel_conversation,
 * lease.monitoring_compensation_failures; no table reads or writes, no
 * CREATE EXTENSION), so it runs unchanged against the pg_lease_router
 * router, and follows the client rules of docs/client-rules.md and
 * docs/scale-out.md: a lost connection is re-made and the call repeated
 * when it is safe to (XX000 from PL/Proxy is a connection lost mid-call:
 * ambiguous), an unanswered fenced checkpoint is repeated before anything
 * else on its shard, and each shard has a local deadline (send time of the
 * last acknowledged take or renewal + lease duration - a fifth of it), past
 * which the worker stops processing it.  --router (implies --public-only)
 * puts one stream and one tenant on each partition of the router
 * (lease_router.stream_partition, lease_router.user_partition).
 * --fast-failover MS (with --public-only; --fast-failover-workers N,M,...
 * for some workers only) runs workers in the fast-failover mode
 * (docs/worker-guide.md): renew_every MS declared to take_leases and
 * renew_leases, a renewal every MS on a connection with an MS statement and
 * TCP user timeout, and client rule 6 (docs/client-rules.md): a shard is
 * processed only while the call that last acknowledged it was sent less than
 * MS + min(lease / 5, MS / 2) ago.  A worker-1 in the mode is killed right
 * after one of its renewals.  make scale runs workers 1, 3 and 5 so.
 * --history DIR (with --public-only) makes every process record what the
 * server acknowledged to it (takes and renewals with their lease_epoch and
 * local deadline, positions read, checkpoints acknowledged, errors) and runs
 * a Jepsen-style checker over those records after the run: acknowledged
 * checkpoints lost, leases owned by two workers at once, channels left
 * unbound, handoffs, the longest write gap per partition (make scale,
 * test/scale/run.sh).  --spread-hosts rotates a multi-host DSN's hosts by
 * each process's place in the fleet, so the processes start spread over
 * several routers and fall back to the next ones (libpq tries them in
 * turn); the histories then record which router each connection reached,
 * and the checker reports how long the clients of a router killed mid-run
 * (DIR/faults) took to be answered through another.
 *
 * --exactly-once also runs a fleet in transactional mode
 * (docs/exactly-once.md): each batch writes one row per record into
 * public.pg_lease_demo_output (no unique constraint, so a record written
 * twice shows) in one transaction with lease.hold_lease and the fenced
 * checkpoint, committed without looking at the checkpoint's answer (the
 * forgotten check hold_lease makes harmless).  On top of the crash, the
 * join and its handoffs, the driver steals leases from live workers for a
 * thief that never renews them (expiry takeovers follow) and terminates
 * workers' backends mid-transaction (and, with --restart-cmd, runs an
 * immediate stop and start of the server; the workers commit with
 * synchronous_commit on); the report sets "records written
 * exactly once: N of N, 0 duplicates, 0 gaps" next to the normal fleet's
 * "records processed more than once".  --omit-hold (or
 * PG_LEASE_DEMO_OMIT_HOLD=1) leaves hold_lease out: a stale owner's careless
 * commit then lands its output, and the check must find duplicates.
 *
 * Exit status: 0 when every invariant held, 1 when one broke, 2 on a usage
 * or connection error.
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "libpq-fe.h"

#define MAX_WORKERS		16
#define MAX_SHARDS		256
#define MAX_RANGES		(1 << 20)
#define MAX_SAMPLES		14400	/* a sample every 500 ms for --duration's longest */
#define MAX_CHANNELS	16
#define APP_NAME		"pg_lease_demo"
#define STREAM_NAME		"orders"
#define FINITE_RECORDS	120			/* records in a shard that ends (split/merge parents) */
#define MAX_STREAMS		8

/* ---------------------------------------------------------------------- */
/* Options */

typedef struct Options
{
	const char *dsn;
	int			workers;
	int			shards;
	int			duration;		/* seconds per fleet run */
	unsigned	seed;
	bool		legacy;
	int			legacy_set;		/* 1 --legacy-checkpoints, 0 --no-legacy-checkpoints, -1 neither */
	bool		quiet;
	int			lease_ms;		/* lease duration */
	int			batch;			/* records per batch */
	int			work_ms;		/* simulated processing time per batch */
	int			channels;		/* per tenant */
	int			fail_pct;		/* replacement starts that fail */
	bool		public_only;	/* public functions and views only; the client rules */
	bool		router;			/* the DSN is a pg_lease_router router */
	int			partitions;		/* the router's partition count */
	const char *history;		/* directory for the histories and the checker */
	bool		exactly_once;	/* also a fleet in transactional mode */
	bool		omit_hold;		/* ... without hold_lease (must find duplicates) */
	const char *restart_cmd;	/* ... and this command (an immediate restart of the server) mid-run */
	int			renew_every_ms; /* --fast-failover: the renew_every its workers declare (0: off) */
	unsigned	ff_workers;		/* ... which workers (bit i: worker-(i+1)); all by default */
	bool		spread_hosts;	/* each process starts at another host of a multi-host DSN */
} Options;

/* The fleet now running is the --exactly-once one (set before its workers fork). */
static bool eo_fleet;

static Options opt = {
	.dsn = NULL,
	.workers = 4,
	.shards = 32,
	.duration = 24,
	.seed = 0,
	.legacy = false,
	.legacy_set = -1,
	.quiet = false,
	.lease_ms = 3000,
	.batch = 10,
	.work_ms = 15,
	.channels = 3,
	.fail_pct = 25,
	.public_only = false,
	.router = false,
	.partitions = 2,
	.history = NULL,
	.renew_every_ms = 0,
	.ff_workers = ~0u,
};

/* Whether worker index i (worker-(i+1)) runs in the fast-failover mode (--fast-failover). */
static bool
ff_worker(int i)
{
	return opt.renew_every_ms > 0 && i >= 0 && i < 32 && ((opt.ff_workers >> i) & 1u) != 0;
}

/* Rule 6's margin in ms (docs/client-rules.md): min(lease / 5, renew_every / 2). */
static double
ff_margin_ms(void)
{
	double		m = opt.lease_ms / 5.0;

	return opt.renew_every_ms / 2.0 < m ? opt.renew_every_ms / 2.0 : m;
}

/* ---------------------------------------------------------------------- */
/* Shared memory: counters and the processing log */

typedef struct Range
{
	int32_t		shard;
	int32_t		worker;
	int64_t		first;
	int64_t		last;
	int32_t		acked;			/* 1 once a checkpoint covering it succeeded */
	int32_t		why;			/* for unacked ranges: WHY_* */
} Range;

enum
{
	WHY_NONE = 0,
	WHY_LOST = 1,				/* checkpoint refused: lease no longer ours */
	WHY_SPURIOUS = 2,			/* checkpoint refused although still the owner */
	WHY_CRASH = 3,				/* worker killed before the checkpoint */
	WHY_UNANSWERED = 4,			/* the checkpoint was never answered (lost connections) */
	WHY_PENDING = 5				/* not answered yet: repeated at the next visit */
};
#define NWHY 5

typedef struct WorkerStats
{
	int			pid;
	int			started;		/* sample index when started */
	int			crashed;		/* sample index of the kill, or -1 */
	int			stopped;		/* sample index of the graceful stop, or -1 */
	long		batches;
	long		checkpoints;
	long		ckpt_lost;
	long		ckpt_spurious;
	long		taken;
	long		handoffs_requested;
	long		handoffs_honoured;
	long		closes;
	long		releases_at_stop;
	long		renew_rounds;
	long		errors;
	long		tx_rolled_back;	/* --exactly-once: batches whose transaction did not commit */
	long		tx_unknown;		/* ... whose COMMIT went unanswered (resolved from my_leases) */
	long		tx_not_held;	/* ... refused by hold_lease (55000) */
	long		deadline_drops; /* shards it stopped processing at their local deadline */
} WorkerStats;

typedef struct ChannelStats
{
	long		rotations[6];	/* rotated, busy, binding_changed, refused, other, error */
	long		restores[4];	/* restored, superseded, failed, error */
	long		starts;
	long		ends;
	long		turns;
	long		turn_errors;
	long		unbound_seen;	/* a channel found bound to nothing mid-run */
	long		quota_samples;
	long		quota_exceeded;
	long		max_active[2];
	long		retried;
	double		busy_ms_max;
	long		ambiguous;		/* rotations lost with the connection that moved the channel */
	long		repeated;		/* calls repeated after a lost connection or a conflict */
} ChannelStats;

typedef struct Shared
{
	volatile int stop_workers;
	volatile int stop_channels;
	volatile int sample;		/* current sample index (1 per 500 ms) */
	WorkerStats w[MAX_WORKERS];
	ChannelStats ch;
	int16_t		load[MAX_SAMPLES][MAX_WORKERS];	/* live leases per worker per sample */
	long		nranges;
	Range		ranges[MAX_RANGES];
} Shared;

static Shared *shm;

/* ---------------------------------------------------------------------- */
/* Small helpers */

/* Monotonic clock in milliseconds. */
static double
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000.0 + ts.tv_nsec / 1e6;
}

/* Sleeps ms milliseconds (through signals). */
static void
sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long) (ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* Prints an error and exits with status 2 (usage, connection or setup error). */
static void
die(const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	fprintf(stderr, "pg_lease_demo: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(2);
}

/* This process's history (--history), line buffered so a killed process loses nothing written. */
static FILE *hist;

/* Opens this process's history file NAME.log in --history DIR (no-op without it). */
static void
hist_open(const char *name)
{
	char		path[1024];

	if (opt.history == NULL)
		return;
	snprintf(path, sizeof(path), "%s/%s.log", opt.history, name);
	hist = fopen(path, "w");
	if (hist == NULL)
		die("cannot write %s: %s", path, strerror(errno));
	setvbuf(hist, NULL, _IOLBF, 0);
}

static void
hist_printf(const char *fmt,...) __attribute__((format(printf, 1, 2)));

/* Appends a line to this process's history (no-op without --history). */
static void
hist_printf(const char *fmt,...)
{
	va_list		ap;

	if (hist == NULL)
		return;
	va_start(ap, fmt);
	vfprintf(hist, fmt, ap);
	va_end(ap);
}

/* Notices (PL/Proxy's "dropping stale conn" after a failover) are not errors. */
static void
quiet_notices(void *arg, const char *message)
{
	(void) arg;
	(void) message;
}

/* Settings for the connections made from now on ("-c name=value ..."), kept by PQreset; or NULL. */
static const char *conn_options;

/* The TCP user timeout (ms) of the connections made from now on, kept by PQreset; or NULL. */
static const char *conn_tcp_timeout;

/* This process's place in the fleet (main 0, worker-N N, rotator-N 5 + N, turns 8): --spread-hosts. */
static int	spread_slot;

/* Appends keyword='value' (libpq's quoting) to buf. */
static void
conninfo_append(char *buf, size_t len, const char *keyword, const char *value)
{
	size_t		n = strlen(buf);

	n += (size_t) snprintf(buf + n, n < len ? len - n : 0, "%s%s='", n > 0 ? " " : "", keyword);
	for (const char *c = value; *c != '\0' && n + 3 < len; c++)
	{
		if (*c == '\'' || *c == '\\')
			buf[n++] = '\\';
		buf[n++] = *c;
	}
	if (n + 2 > len)
		die("connection string too long");
	buf[n++] = '\'';
	buf[n] = '\0';
}

/* The comma-separated list value rotated left by k of its n elements, into out. */
static void
rotate_list(const char *value, int k, char *out, size_t len)
{
	const char *items[64];
	char		copy[2048];
	char	   *save = NULL;
	int			n = 0;

	snprintf(copy, sizeof(copy), "%s", value);
	for (char *tok = strtok_r(copy, ",", &save); tok != NULL && n < 64; tok = strtok_r(NULL, ",", &save))
		items[n++] = tok;
	out[0] = '\0';
	for (int i = 0; i < n; i++)
	{
		size_t		used = strlen(out);

		snprintf(out + used, len - used, "%s%s", i > 0 ? "," : "", items[(i + k) % n]);
	}
}

/* How many elements a comma-separated list has (1 for none). */
static int
list_length(const char *value)
{
	int			n = 1;

	for (const char *c = value; c != NULL && *c != '\0'; c++)
		n += *c == ',';
	return n;
}

/*
 * --spread-hosts: the DSN with its lists of hosts (host, hostaddr, and port
 * when it lists one per host) rotated by this process's slot, so the
 * processes start spread over the hosts (routers) and each still falls
 * back to the next ones, in order, when its own is away (libpq tries the
 * hosts of a multi-host string in turn).  Otherwise the DSN as given.
 */
static const char *
process_dsn(void)
{
	static char buf[4096];
	PQconninfoOption *opts, *o;
	char	   *err = NULL;
	int			hosts = 1;

	if (!opt.spread_hosts || opt.dsn == NULL)
		return opt.dsn;
	opts = PQconninfoParse(opt.dsn, &err);
	if (opts == NULL)
		die("--dsn: %s", err ? err : "cannot parse");
	for (o = opts; o->keyword != NULL; o++)
		if (o->val != NULL && (strcmp(o->keyword, "host") == 0 || strcmp(o->keyword, "hostaddr") == 0))
			hosts = list_length(o->val);
	buf[0] = '\0';
	for (o = opts; o->keyword != NULL; o++)
	{
		char		rotated[2048];

		if (o->val == NULL)
			continue;
		if (hosts > 1 && list_length(o->val) == hosts &&
			(strcmp(o->keyword, "host") == 0 || strcmp(o->keyword, "hostaddr") == 0 ||
			 strcmp(o->keyword, "port") == 0))
		{
			rotate_list(o->val, spread_slot % hosts, rotated, sizeof(rotated));
			conninfo_append(buf, sizeof(buf), o->keyword, rotated);
		}
		else
			conninfo_append(buf, sizeof(buf), o->keyword, o->val);
	}
	PQconninfoFree(opts);
	return buf;
}

/* Records which server (by port) connection conn reached (--history: the checker's router moves). */
static void
hist_connected(PGconn *conn, const char *what)
{
	hist_printf("%s %.1f %s %p\n", what, now_ms(), PQport(conn), (void *) conn);
}

/* Connects under an application name; --public-only waits up to 30 s for the server. */
static PGconn *
connect_db(const char *appname)
{
	const char *keys[5] = {"dbname", "application_name"};
	const char *vals[5] = {process_dsn(), appname};
	int			n = 2;
	PGconn	   *conn;

	if (conn_options)
	{
		keys[n] = "options";
		vals[n++] = conn_options;
	}
	if (conn_tcp_timeout)
	{
		keys[n] = "tcp_user_timeout";
		vals[n++] = conn_tcp_timeout;
	}
	keys[n] = vals[n] = NULL;
	conn = PQconnectdbParams(keys, vals, 1);

	/* --public-only follows the client rules: a server that is away is waited for (30 s) */
	for (int i = 0; opt.public_only && PQstatus(conn) != CONNECTION_OK && i < 150; i++)
	{
		hist_printf("error %.1f 08006 %.160s\n", now_ms(), PQerrorMessage(conn));
		PQfinish(conn);
		sleep_ms(200);
		conn = PQconnectdbParams(keys, vals, 1);
	}
	if (PQstatus(conn) != CONNECTION_OK)
		die("cannot connect: %s", PQerrorMessage(conn));
	if (opt.public_only)
		PQsetNoticeProcessor(conn, quiet_notices, NULL);
	hist_connected(conn, "conn");
	return conn;
}

/*
 * What the last failed call of this thread means, by the client rules
 * (docs/client-rules.md, docs/scale-out.md "Client rules").
 */
enum
{
	CALL_OK = 0,
	CALL_ANSWER,				/* an answer (22xxx, 42xxx, 55000, ...): do not repeat */
	CALL_RETRY,					/* nothing happened (a conflict, a standby, a refused connection): repeat */
	CALL_AMBIGUOUS				/* the connection was lost mid-call: it may have committed */
};
static __thread int last_call;
static __thread char last_sqlstate[6];	/* of the last failed call, "" for none */
static __thread bool conn_broken;	/* this thread's connection broke; no call answered since */

/* What an error means by the client rules: an answer, worth a repeat, or ambiguous (CALL_*). */
static int
classify(const char *state, const char *msg, bool conn_bad)
{
	if (state == NULL || conn_bad || strncmp(state, "08", 2) == 0 ||
		strcmp(state, "57P01") == 0 || strcmp(state, "57P02") == 0)
		return CALL_AMBIGUOUS;
	/* PL/Proxy: the partition connection was lost (a failover) */
	if (strcmp(state, "XX000") == 0 && msg != NULL && strstr(msg, "PL/Proxy") != NULL &&
		(strstr(msg, "PQconnectPoll") || strstr(msg, "PQconsumeInput") ||
		 strstr(msg, "server closed the connection") || strstr(msg, "connection")))
		return CALL_AMBIGUOUS;
	if (strcmp(state, "40001") == 0 || strcmp(state, "40P01") == 0 || strcmp(state, "40L01") == 0 ||
		strcmp(state, "55P03") == 0 || strcmp(state, "57014") == 0 ||
		strcmp(state, "57P03") == 0 || strcmp(state, "53300") == 0 ||
		strcmp(state, "25006") == 0)
		return CALL_RETRY;
	return CALL_ANSWER;
}

/*
 * Runs a parameterised statement; returns the result or NULL (error counted
 * by caller; last_call says what the error means).  A broken connection is
 * made again (PQreset); after an error worth repeating the caller is held
 * back 100-250 ms, so that a retry loop backs off.
 */
static PGresult *
run(PGconn *conn, const char *sql, int n, const char *const *params)
{
	PGresult   *res = PQexecParams(conn, sql, n, NULL, params, NULL, NULL, 0);
	ExecStatusType st = PQresultStatus(res);
	const char *state;
	const char *msg;

	if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)
	{
		last_call = CALL_OK;
		if (conn_broken)
		{
			/* the first call answered since the connection broke: the client is back */
			hist_connected(conn, "back");
			conn_broken = false;
		}
		return res;
	}
	state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
	snprintf(last_sqlstate, sizeof(last_sqlstate), "%s", state ? state : "");
	last_call = classify(state, msg, PQstatus(conn) != CONNECTION_OK);
	hist_printf("error %.1f %s %.160s\n", now_ms(), state ? state : "08006",
				msg ? msg : PQerrorMessage(conn));
	PQclear(res);
	if (PQstatus(conn) != CONNECTION_OK)
	{
		conn_broken = true;
		PQreset(conn);
		if (PQstatus(conn) == CONNECTION_OK)
			hist_connected(conn, "conn");
	}
	if (last_call == CALL_RETRY || last_call == CALL_AMBIGUOUS)
		sleep_ms(100 + (int) ((long) now_ms() % 150));
	return NULL;
}

/* run(), repeated while the error says "repeat" (--public-only), for up to ms milliseconds. */
static PGresult *
run_repeat(PGconn *conn, int ms, long *repeats, const char *sql, int n, const char *const *params)
{
	double		until = now_ms() + ms;
	PGresult   *res;

	while ((res = run(conn, sql, n, params)) == NULL && opt.public_only &&
		   last_call != CALL_ANSWER && now_ms() < until)
		if (repeats != NULL)
			(*repeats)++;
	return res;
}

/* Runs a statement that must succeed (setup and report). */
static PGresult *
must(PGconn *conn, const char *sql, int n, const char *const *params)
{
	PGresult   *res = PQexecParams(conn, sql, n, NULL, params, NULL, NULL, 0);
	ExecStatusType st = PQresultStatus(res);

	if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK)
		die("statement failed: %s\n  %s", PQresultErrorMessage(res), sql);
	return res;
}

/* A read that must succeed, repeated through lost connections for up to a minute (--public-only). */
static PGresult *
must_repeat(PGconn *conn, const char *sql, int n, const char *const *params)
{
	PGresult   *res = run_repeat(conn, 60000, NULL, sql, n, params);

	if (res == NULL)
		die("statement failed: %s\n  %s", PQerrorMessage(conn), sql);
	return res;
}

/* Runs a statement without parameters that must succeed. */
static void
must_exec(PGconn *conn, const char *sql)
{
	PQclear(must(conn, sql, 0, NULL));
}

/* ---------------------------------------------------------------------- */
/* The stream: shards, lineage, finite parents */

typedef struct ShardDef
{
	int			stream;			/* index in stream_names */
	char		id[32];
	char		parents[64];	/* text[] literal */
	int64_t		end;			/* last record of an ending shard, or 0 */
} ShardDef;

static ShardDef shard_defs[MAX_SHARDS];
static int	nshards;

/*
 * The streams: "orders"; with --router one per partition (stream k lives on
 * partition k), so every failover meets the fleet.
 */
static char stream_names[MAX_STREAMS][48] = {STREAM_NAME};
static int	nstreams = 1;

/* Adds a shard to the stream definition. */
static void
add_shard(int stream, const char *id, const char *parents, int64_t end)
{
	ShardDef   *d = &shard_defs[nshards++];

	d->stream = stream;
	snprintf(d->id, sizeof(d->id), "%s", id);
	snprintf(d->parents, sizeof(d->parents), "%s", parents);
	d->end = end;
}

/* Each stream has a split (split-parent -> split-a, split-b) and a merge (merge-a + merge-b -> merge-child). */
static void
define_shards(void)
{
	nshards = 0;
	for (int st = 0; st < nstreams; st++)
	{
		for (int i = 0; i < opt.shards - 6; i++)
		{
			char		id[32];

			snprintf(id, sizeof(id), "shard-%03d", i);
			add_shard(st, id, "{}", 0);
		}
		add_shard(st, "split-parent", "{}", FINITE_RECORDS);
		add_shard(st, "split-a", "{split-parent}", 0);
		add_shard(st, "split-b", "{split-parent}", 0);
		add_shard(st, "merge-a", "{}", FINITE_RECORDS);
		add_shard(st, "merge-b", "{}", FINITE_RECORDS + 40);
		add_shard(st, "merge-child", "{merge-a,merge-b}", 0);
	}
}

/* The index of a stream's shard by its id, -1 when unknown. */
static int
shard_index(int stream, const char *id)
{
	for (int i = 0; i < nshards; i++)
		if (shard_defs[i].stream == stream && strcmp(shard_defs[i].id, id) == 0)
			return i;
	return -1;
}

/* The stream name of shard s. */
static const char *
stream_of(int s)
{
	return stream_names[shard_defs[s].stream];
}

/* ---------------------------------------------------------------------- */
/* A worker: renewer thread + record processor */

typedef struct Held
{
	int			owned;			/* per the last renewal or take */
	int			handoff;		/* a handoff was requested */
	int			pos_valid;		/* pos read from the lease since we got it */
	int64_t		pos;			/* last record checkpointed */
	int64_t		epoch;			/* the fencing token take_leases / renew_leases reported */
	int64_t		pos_epoch;		/* the token pos was read under: every checkpoint is fenced with it */
	/* the client rules (enforced with --public-only) */
	double		deadline;		/* send time of the last acknowledged take or renewal + lease - margin */
	int			own_open;		/* an ownership interval is open (recorded in the history) */
	int64_t		own_epoch;		/* its lease_epoch */
	int			pending;		/* a checkpoint was sent and not answered: repeated first */
	int64_t		pending_last;
	int64_t		pending_epoch;
	long		pending_slot;
	double		dropped_at;		/* when this worker last stopped processing it */
	int64_t		dropped_epoch;	/* under which epoch */
} Held;

static Held held[MAX_SHARDS];
static pthread_mutex_t held_mu = PTHREAD_MUTEX_INITIALIZER;
static int	me;
static char me_name[32];
static const char *app_name;
static char lease_interval[32];
static volatile sig_atomic_t got_term;

/*
 * --fast-failover, in a worker in the mode: the renew_every it declares to
 * take_leases and renew_leases (NULL for a worker not in it), and rule 6's
 * margin in ms.
 */
static const char *renew_every;
static char renew_every_buf[32];
static double ff_margin;

/* SIGTERM: the worker stops after its current batch. */
static void
on_term(int sig)
{
	(void) sig;
	got_term = 1;
}

/* Whether this worker should go on (not told to stop). */
static bool
worker_running(void)
{
	return !got_term && !shm->stop_workers;
}

/*
 * The local deadline of a lease acknowledged by a take or renewal sent at
 * `sent`: rule 3's, the lease duration less a fifth of it
 * (docs/client-rules.md); in the fast-failover mode rule 6's when it comes
 * first, renew_every + a margin of min(lease / 5, renew_every / 2), which
 * lease.liveness_grace (1 s by default) covers.  Per lease, from the call
 * that acknowledged that lease: never later than rule 6's deadline from the
 * stream's last acknowledged renewal.
 */
static double
deadline_after(double sent)
{
	double		rule3 = opt.lease_ms - opt.lease_ms / 5.0;

	if (renew_every != NULL && opt.renew_every_ms + ff_margin < rule3)
		return sent + opt.renew_every_ms + ff_margin;
	return sent + rule3;
}

/*
 * Ends this worker's ownership interval of shard s (held_mu held): it stopped
 * processing now, or at its local deadline if that came first.
 */
static void
own_end(int s, const char *why)
{
	Held	   *h = &held[s];
	double		t = now_ms();

	if (!h->own_open)
		return;
	hist_printf("drop %d %" PRId64 " %.1f %s\n", s, h->own_epoch, t < h->deadline ? t : h->deadline, why);
	h->own_open = 0;
}

/* Starts an ownership interval (held_mu held): acknowledged at `since`, valid to `deadline`. */
static void
own_begin(int s, const char *how, int64_t epoch, double since, double deadline)
{
	Held	   *h = &held[s];

	own_end(s, "retaken");
	h->own_open = 1;
	h->own_epoch = epoch;
	h->deadline = deadline;
	hist_printf("%s %d %" PRId64 " %.1f %.1f\n", how, s, epoch, since, deadline);
}

/*
 * The legacy fleet renews as a KCL-style client does besides: each lease
 * renew_leases listed is renewed again by lease.renew_lease, guarded on the
 * lease_count just listed, which bumps lease_count (what a read-then-write
 * checkpoint guarded on that counter then trips over).  Ownership is still
 * judged from renew_leases' list; a NULL from renew_lease (the lease moved
 * meanwhile) shows up in the next list.
 */
static bool legacy_renewals;

static void
counter_renewals(PGconn *conn, int st, PGresult *list)
{
	for (int r = 0; r < PQntuples(list); r++)
	{
		const char *params[6] = {app_name, stream_names[st], PQgetvalue(list, r, 0), me_name,
		PQgetvalue(list, r, 1), lease_interval};
		PGresult   *res = run(conn, "SELECT lease.renew_lease($1, $2, $3, $4, $5::bigint, $6::interval)",
							  6, params);

		if (res == NULL)
			__atomic_fetch_add(&shm->w[me].errors, 1, __ATOMIC_RELAXED);
		else
			PQclear(res);
	}
}

/* Renewer thread: renew everything held, every lease_duration / 3. */
static void *
renewer_main(void *arg)
{
	PGconn	   *conn = (PGconn *) arg;

	while (worker_running())
	{
		bool		failed = false;
		double		round_sent = now_ms();

		for (int st = 0; st < nstreams; st++)
		{
			const char *params[5] = {app_name, stream_names[st], me_name, lease_interval, renew_every};
			double		sent = now_ms();
			PGresult   *res = run(conn,
								  "SELECT shard_id, lease_count, handoff_to, lease_epoch"
								  "  FROM lease.renew_leases($1, $2, $3, $4::interval, $5::interval)",
								  5, params);
			int			seen[MAX_SHARDS] = {0};
			double		ack = now_ms();

			if (res == NULL)
			{
				/* not acknowledged: the local deadlines do not move */
				__atomic_fetch_add(&shm->w[me].errors, 1, __ATOMIC_RELAXED);
				failed = true;
				continue;
			}
			pthread_mutex_lock(&held_mu);
			for (int r = 0; r < PQntuples(res); r++)
			{
				int			s = shard_index(st, PQgetvalue(res, r, 0));
				int64_t		epoch = strtoll(PQgetvalue(res, r, 3), NULL, 10);

				if (s < 0)
					continue;
				seen[s] = 1;
				/*
				 * A renewal sent before this worker let the lease go (a
				 * release for a handoff, the local deadline) says nothing
				 * about it any more: the next one does.
				 */
				if (!held[s].owned && epoch == held[s].dropped_epoch && sent < held[s].dropped_at)
					continue;
				/*
				 * A lease that is new to us (a transfer from its holder's
				 * release_lease arrives this way) or held under another
				 * epoch than we knew (lost and got back in between): its
				 * position must be read again.
				 */
				if (!held[s].owned || held[s].epoch != epoch)
				{
					held[s].pos_valid = 0;
					own_begin(s, "adopt", epoch, ack, deadline_after(sent));
				}
				else
				{
					if (!held[s].own_open)
						own_begin(s, "adopt", epoch, ack, deadline_after(sent));
					held[s].deadline = deadline_after(sent);
					hist_printf("renew %d %" PRId64 " %.1f\n", s, epoch, held[s].deadline);
				}
				held[s].owned = 1;
				held[s].epoch = epoch;
				held[s].handoff = !PQgetisnull(res, r, 2);
			}
			for (int s = 0; s < nshards; s++)
			{
				/* the processor ends the interval when it sees this (after its current batch) */
				if (shard_defs[s].stream == st && !seen[s] && held[s].owned)
				{
					held[s].owned = 0;
					held[s].pos_valid = 0;
				}
			}
			pthread_mutex_unlock(&held_mu);
			if (legacy_renewals)
				counter_renewals(conn, st, res);
			PQclear(res);
		}
		if (!failed)
			shm->w[me].renew_rounds++;
		/*
		 * A renewal that was not acknowledged is repeated soon (run() backed
		 * off already).  The fast-failover mode renews every renew_every,
		 * counted from send to send: its deadline counts from the send.
		 */
		if (failed && opt.public_only)
			continue;
		if (renew_every != NULL)
		{
			double		left = round_sent + opt.renew_every_ms - now_ms();

			if (left > 0)
				sleep_ms((int) left);
		}
		else
			sleep_ms(opt.lease_ms / 3);
	}
	return NULL;
}

/* Appends a processed range to the shared log; returns its slot or -1. */
static long
log_range(int shard, int64_t first, int64_t last)
{
	long		i = __atomic_fetch_add(&shm->nranges, 1, __ATOMIC_RELAXED);
	Range	   *r;

	if (i >= MAX_RANGES)
		return -1;
	r = &shm->ranges[i];
	r->worker = me;
	r->first = first;
	r->last = last;
	r->acked = 0;
	r->why = WHY_NONE;
	__atomic_store_n(&r->shard, shard + 1, __ATOMIC_RELEASE);	/* 0 = never filled */
	return i;
}

/*
 * Reads where a newly held shard is, through lease.my_leases (what a worker
 * role may call): 1 when read; 0 when it is not ours after all, is ours
 * under another epoch than take_leases / renew_leases reported (the renewer
 * or the next balancing round brings the new one), or has ended; -1 when the
 * call failed (--public-only: read again at the next visit).
 */
static int
load_position(PGconn *conn, int s)
{
	char		epoch[32];
	const char *params[5] = {app_name, stream_of(s), me_name, shard_defs[s].id, epoch};
	PGresult   *res;
	int			ok = 0;
	double		sent = now_ms();

	pthread_mutex_lock(&held_mu);
	snprintf(epoch, sizeof(epoch), "%" PRId64, held[s].epoch);
	pthread_mutex_unlock(&held_mu);
	res = run(conn,
			  "SELECT checkpoint FROM lease.my_leases($1, $2, $3)"
			  " WHERE shard_id = $4 AND handoff_from IS NULL AND lease_epoch = $5::bigint",
			  5, params);
	if (res == NULL && opt.public_only)
	{
		shm->w[me].errors++;
		return -1;
	}
	if (res != NULL && PQntuples(res) == 1)
	{
		const char *ck = PQgetvalue(res, 0, 0);

		if (strcmp(ck, "SHARD_END") != 0)
		{
			held[s].pos = (strcmp(ck, "TRIM_HORIZON") == 0 || strcmp(ck, "LATEST") == 0)
				? 0 : strtoll(ck, NULL, 10);
			held[s].pos_epoch = strtoll(epoch, NULL, 10);
			held[s].pos_valid = 1;
			hist_printf("read %d %" PRId64 " %s %.1f\n", s, held[s].pos, epoch, sent);
			ok = 1;
		}
	}
	if (res != NULL)
		PQclear(res);
	return ok;
}

/*
 * Does this worker still hold the lease, under the given fencing token when
 * there is one (to tell a spurious failure from a lost lease)?  Asked
 * through lease.my_leases, as a worker role would.
 */
static bool
still_owner(PGconn *conn, int s, const char *epoch)
{
	const char *params[5] = {app_name, stream_of(s), me_name, shard_defs[s].id, epoch};
	PGresult   *res = run_repeat(conn, 2000, NULL,
								 "SELECT 1 FROM lease.my_leases($1, $2, $3)"
								 " WHERE shard_id = $4 AND handoff_from IS NULL"
								 "   AND ($5::bigint IS NULL OR lease_epoch = $5::bigint)",
								 5, params);
	bool		owner = res != NULL && PQntuples(res) == 1;

	if (res != NULL)
		PQclear(res);
	return owner;
}

/* Calls a lease function returning boolean; true when it returned true (errors counted). */
static bool
call_true(PGconn *conn, const char *sql, int n, const char *const *params)
{
	PGresult   *res = run(conn, sql, n, params);
	bool		result = res != NULL && strcmp(PQgetvalue(res, 0, 0), "t") == 0;

	if (res == NULL)
		shm->w[me].errors++;
	else
		PQclear(res);
	return result;
}

/* This worker no longer processes shard s (until a renewal or take says otherwise). */
static void
drop_shard(int s, const char *why)
{
	pthread_mutex_lock(&held_mu);
	if (held[s].owned)
	{
		held[s].dropped_at = now_ms();
		held[s].dropped_epoch = held[s].epoch;
	}
	held[s].owned = held[s].pos_valid = held[s].handoff = 0;
	own_end(s, why);
	pthread_mutex_unlock(&held_mu);
}

/* One balancing round per stream: take what is free, ask for handoffs. */
static void
balance(PGconn *conn)
{
	for (int st = 0; st < nstreams; st++)
	{
		const char *params[5] = {app_name, stream_names[st], me_name, lease_interval, renew_every};
		double		sent = now_ms();
		PGresult   *res = run(conn,
							  "SELECT shard_id, action, lease_epoch"
							  "  FROM lease.take_leases($1, $2, $3, $4::interval, NULL, 2,"
							  "                         renew_every => $5::interval)",
							  5, params);
		double		ack = now_ms();

		if (res == NULL)
		{
			/* whatever it took arrives with the next renewal (rule 5) */
			shm->w[me].errors++;
			continue;
		}
		for (int r = 0; r < PQntuples(res); r++)
		{
			int			s = shard_index(st, PQgetvalue(res, r, 0));
			const char *action = PQgetvalue(res, r, 1);

			if (s < 0)
				continue;
			if (strcmp(action, "taken") == 0)
			{
				pthread_mutex_lock(&held_mu);
				held[s].owned = 1;
				held[s].handoff = 0;
				held[s].pos_valid = 0;
				held[s].epoch = strtoll(PQgetvalue(res, r, 2), NULL, 10);
				own_begin(s, "take", held[s].epoch, ack, deadline_after(sent));
				pthread_mutex_unlock(&held_mu);
				shm->w[me].taken++;
			}
			else if (strcmp(action, "handoff_requested") == 0)
				shm->w[me].handoffs_requested++;
		}
		PQclear(res);
	}
}

/*
 * Writes the checkpoint for a processed batch, fenced with the token the
 * batch started under (pg_lease) or guarded on the lease_count read before
 * it (legacy); returns WHY_NONE when acknowledged, WHY_PENDING when the
 * call got no answer (--public-only: the connection was lost, so it may or
 * may not have committed; the same fenced call is repeated, which is safe).
 */
static int
checkpoint_batch(PGconn *conn, int s, int64_t last, const char *legacy_count, int64_t epoch)
{
	char		ck[32];
	char		token[32];
	const char *params[6] = {app_name, stream_of(s), shard_defs[s].id, me_name, ck,
	legacy_count != NULL ? legacy_count : token};
	bool		written;

	snprintf(ck, sizeof(ck), "%" PRId64, last);
	snprintf(token, sizeof(token), "%" PRId64, epoch);
	if (legacy_count == NULL)
	{
		PGresult   *res = run(conn, "SELECT lease.update_checkpoint($1, $2, $3, $4, $5, 0, $6::bigint)",
							  6, params);

		written = res != NULL && strcmp(PQgetvalue(res, 0, 0), "t") == 0;
		if (res == NULL)
			shm->w[me].errors++;
		else
			PQclear(res);
		if (res == NULL && opt.public_only && last_call != CALL_ANSWER)
			return WHY_PENDING;
		if (written)
			hist_printf("ack %d %" PRId64 " %" PRId64 " %.1f\n", s, last, epoch, now_ms());
	}
	else
	{
		/* the client-side pattern: conditional write guarded on the lease_count read earlier */
		PGresult   *res = run(conn,
							  "UPDATE lease.shard_leases SET checkpoint = $5, owner_switches_since_checkpoint = 0"
							  " WHERE app_name = $1 AND stream_name = $2 AND shard_id = $3"
							  "   AND lease_owner = $4 AND lease_count = $6::bigint",
							  6, params);

		written = res != NULL && strcmp(PQcmdTuples(res), "1") == 0;
		if (res == NULL)
			shm->w[me].errors++;
		else
			PQclear(res);
	}
	if (written)
		return WHY_NONE;
	return still_owner(conn, s, legacy_count == NULL ? token : NULL) ? WHY_SPURIOUS : WHY_LOST;
}

/* Reads lease_count before a batch (legacy mode only); false when the lease is gone. */
static bool
legacy_read(PGconn *conn, int s, char *count, size_t len)
{
	const char *params[4] = {app_name, stream_of(s), shard_defs[s].id, me_name};
	PGresult   *res = run(conn,
						  "SELECT lease_count FROM lease.shard_leases WHERE app_name = $1"
						  " AND stream_name = $2 AND shard_id = $3 AND lease_owner = $4",
						  4, params);
	bool		ok = res != NULL && PQntuples(res) == 1;

	if (ok)
		snprintf(count, len, "%s", PQgetvalue(res, 0, 0));
	if (res != NULL)
		PQclear(res);
	return ok;
}

/* What a checkpoint's answer means for its range and the shard. */
static void
checkpoint_done(int s, long slot, int64_t last, int why)
{
	if (why == WHY_NONE)
	{
		if (slot >= 0)
			shm->ranges[slot].acked = 1;
		held[s].pos = last;
		shm->w[me].checkpoints++;
		return;
	}
	if (slot >= 0)
		shm->ranges[slot].why = why;
	if (why == WHY_SPURIOUS)
	{
		/* the shard did not advance: the same records come again */
		shm->w[me].ckpt_spurious++;
		return;
	}
	if (why == WHY_LOST)
		shm->w[me].ckpt_lost++;
	drop_shard(s, why == WHY_LOST ? "fenced" : "unanswered");
}

/* A checkpoint left unanswered is given up (the shard is dropped): its range stays unacknowledged. */
static void
forget_pending(int s)
{
	if (!held[s].pending)
		return;
	held[s].pending = 0;
	if (held[s].pending_slot >= 0)
		shm->ranges[held[s].pending_slot].why = WHY_UNANSWERED;
}

/*
 * Whether this worker may process shard s now: still owned (else its
 * interval ends and an unanswered checkpoint is given up) and, with
 * --public-only, before its local deadline.  Says whether a handoff was asked.
 */
static bool
shard_workable(int s, int *handoff)
{
	int			owned;
	double		deadline;

	pthread_mutex_lock(&held_mu);
	owned = held[s].owned;
	*handoff = held[s].handoff;
	deadline = held[s].deadline;
	if (!owned)
		own_end(s, "lost");		/* a renewal no longer returned it */
	pthread_mutex_unlock(&held_mu);
	if (!owned)
	{
		forget_pending(s);
		return false;
	}
	/* the local deadline: no processing on a lease that was not renewed in time */
	if (opt.public_only && now_ms() + opt.work_ms >= deadline)
	{
		forget_pending(s);
		drop_shard(s, "deadline");
		shm->w[me].deadline_drops++;
		return false;
	}
	return true;
}

/* Repeats the unanswered fenced checkpoint of shard s, before anything else on it. */
static void
repeat_pending(PGconn *conn, int s)
{
	int			why = checkpoint_batch(conn, s, held[s].pending_last, NULL, held[s].pending_epoch);

	if (why == WHY_PENDING)
		return;
	held[s].pending = 0;
	checkpoint_done(s, held[s].pending_slot, held[s].pending_last, why);
}

/* Reads the position of shard s when it is not known; false when the shard cannot be processed now. */
static bool
position_known(PGconn *conn, int s)
{
	int			r;

	if (held[s].pos_valid)
		return true;
	r = load_position(conn, s);
	if (r == 0)
		drop_shard(s, "lost");
	return r > 0;
}

/* Closes shard s, processed to its end; kept for the next visit when the call may be repeated. */
static void
close_ended(PGconn *conn, int s, const char *const *key)
{
	PGresult   *res = run(conn, "SELECT lease.close_shard($1, $2, $3, $4)", 4, key);

	if (res == NULL)
	{
		shm->w[me].errors++;
		if (opt.public_only && last_call != CALL_ANSWER)
			return;				/* safe to repeat: again at the next visit */
	}
	else
	{
		if (strcmp(PQgetvalue(res, 0, 0), "t") == 0)
			shm->w[me].closes++;
		PQclear(res);
	}
	drop_shard(s, "ended");
}

/* Runs one statement of a batch transaction; false on an error (the SQLSTATE in last_sqlstate). */
static bool
tx_step(PGconn *conn, const char *sql, int n, const char *const *params, bool *answer)
{
	PGresult   *res = run(conn, sql, n, params);

	if (res == NULL)
		return false;
	if (answer != NULL)
		*answer = PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	PQclear(res);
	return true;
}

/*
 * --exactly-once: records first..last of shard s as one transaction: one
 * output row per record, the processing, hold_lease (unless --omit-hold;
 * its checkpoint must be where the batch starts, else a commit was lost and
 * the position is read again),
 * the fenced checkpoint, COMMIT, sent whatever the checkpoint answered (a
 * careless client: hold_lease is what keeps a stale owner's output out).
 * WHY_NONE when output and checkpoint committed; WHY_LOST when the lease is
 * not held (hold_lease raised, or the checkpoint was refused: with
 * --omit-hold the output committed anyway); WHY_UNANSWERED when nothing
 * committed (an error, a backend killed mid-transaction, or a COMMIT whose
 * outcome my_leases says did not happen), the same records come next.
 */
static int
exactly_once_batch(PGconn *conn, int s, int64_t first, int64_t last, int64_t epoch)
{
	char		from[32], to[32], ck[32], token[32];
	const char *out[5] = {app_name, shard_defs[s].id, me_name, from, to};
	const char *key[6] = {app_name, stream_of(s), shard_defs[s].id, me_name, token, NULL};
	const char *cp[6] = {app_name, stream_of(s), shard_defs[s].id, me_name, ck, token};
	bool		written = false;
	PGresult   *res;
	int			r;

	snprintf(from, sizeof(from), "%" PRId64, first);
	snprintf(to, sizeof(to), "%" PRId64, last);
	snprintf(ck, sizeof(ck), "%" PRId64, last);
	snprintf(token, sizeof(token), "%" PRId64, epoch);
	if (!tx_step(conn, "BEGIN", 0, NULL, NULL) ||
		!tx_step(conn, "INSERT INTO public.pg_lease_demo_output (app_name, shard_id, record, worker)"
				 " SELECT $1, $2, g, $3 FROM pg_catalog.generate_series($4::bigint, $5::bigint) AS g",
				 5, out, NULL))
		goto failed;
	sleep_ms(opt.work_ms);		/* "process" the records, inside the transaction */
	if (!opt.omit_hold)
	{
		/* the server's checkpoint, under the lock: not where this batch starts means a lost commit */
		res = run(conn, "SELECT lease.hold_lease($1, $2, $3, $4, $5::bigint)", 5, key);
		if (res == NULL)
			goto failed;
		if (strtoll(PQgetvalue(res, 0, 0), NULL, 10) != first - 1 &&
			!(first == 1 && strcmp(PQgetvalue(res, 0, 0), "TRIM_HORIZON") == 0))
		{
			PQclear(res);
			PQclear(PQexec(conn, "ROLLBACK"));
			held[s].pos_valid = 0;		/* read it again */
			shm->w[me].tx_rolled_back++;
			return WHY_UNANSWERED;
		}
		PQclear(res);
	}
	if (!tx_step(conn, "SELECT lease.update_checkpoint($1, $2, $3, $4, $5, 0, $6::bigint)", 6, cp, &written))
		goto failed;
	res = PQexec(conn, "COMMIT");
	if (PQresultStatus(res) == PGRES_COMMAND_OK && strcmp(PQcmdStatus(res), "COMMIT") == 0)
	{
		PQclear(res);
		if (!written)
			return WHY_LOST;
		hist_printf("ack %d %" PRId64 " %" PRId64 " %.1f\n", s, last, epoch, now_ms());
		return WHY_NONE;
	}
	PQclear(res);
	if (PQstatus(conn) == CONNECTION_OK)
		goto failed;			/* answered: not committed */
	/* the COMMIT went unanswered: my_leases' checkpoint says whether it happened */
	shm->w[me].tx_unknown++;
	PQreset(conn);
	r = load_position(conn, s);
	if (r == 0)
		return WHY_LOST;
	if (r > 0 && held[s].pos == last)
		return WHY_NONE;
	shm->w[me].tx_rolled_back++;
	return WHY_UNANSWERED;

failed:
	shm->w[me].errors++;
	if (strcmp(last_sqlstate, "55000") == 0)
		shm->w[me].tx_not_held++;
	if (PQstatus(conn) != CONNECTION_OK)
		PQreset(conn);
	else if (PQtransactionStatus(conn) != PQTRANS_IDLE)
		PQclear(PQexec(conn, "ROLLBACK"));	/* not after a reset: the server rolled it back */
	if (strcmp(last_sqlstate, "55000") == 0)
		return WHY_LOST;		/* hold_lease: not held at this epoch */
	shm->w[me].tx_rolled_back++;
	return WHY_UNANSWERED;
}

/*
 * Processes the next batch of shard s and checkpoints it (legacy: guarded
 * on the lease_count read before it); an unanswered checkpoint is kept to
 * be repeated.
 */
static void
process_batch(PGconn *conn, int s, bool legacy)
{
	char		count[32];
	int64_t		epoch, first, last;
	long		slot;
	int			why;

	if (legacy && !legacy_read(conn, s, count, sizeof(count)))
	{
		drop_shard(s, "lost");
		return;
	}

	/*
	 * The position and the token it was read under go together: if the
	 * lease changed hands since, the fenced checkpoint is refused and the
	 * position is read again.
	 */
	epoch = held[s].pos_epoch;
	first = held[s].pos + 1;
	last = held[s].pos + opt.batch;
	if (shard_defs[s].end > 0 && last > shard_defs[s].end)
		last = shard_defs[s].end;
	slot = log_range(s, first, last);
	shm->w[me].batches++;
	if (eo_fleet)
	{
		why = exactly_once_batch(conn, s, first, last, epoch);
		if (why == WHY_UNANSWERED)
		{
			if (slot >= 0)
				shm->ranges[slot].why = WHY_UNANSWERED;		/* rolled back: processed again */
			return;
		}
		checkpoint_done(s, slot, last, why);
		return;
	}
	sleep_ms(opt.work_ms);		/* "process" the records */

	why = checkpoint_batch(conn, s, last, legacy ? count : NULL, epoch);
	if (why == WHY_PENDING)
	{
		held[s].pending = 1;
		held[s].pending_last = last;
		held[s].pending_epoch = epoch;
		held[s].pending_slot = slot;
		return;
	}
	checkpoint_done(s, slot, last, why);
}

/* Processes one batch of one held shard (or honours a handoff, or closes an ended shard). */
static void
work_shard(PGconn *conn, int s, bool legacy)
{
	const char *key[4] = {app_name, stream_of(s), shard_defs[s].id, me_name};
	int			handoff;

	if (!shard_workable(s, &handoff))
		return;
	if (held[s].pending)
	{
		repeat_pending(conn, s);
		return;
	}
	if (!position_known(conn, s))
		return;
	if (handoff)
	{
		/* every processed batch is already checkpointed: hand the shard over */
		drop_shard(s, "handoff");
		if (call_true(conn, "SELECT lease.release_lease($1, $2, $3, $4)", 4, key))
			shm->w[me].handoffs_honoured++;
		return;
	}
	if (shard_defs[s].end > 0 && held[s].pos >= shard_defs[s].end)
	{
		close_ended(conn, s, key);
		return;
	}
	process_batch(conn, s, legacy);
}

/* A worker process; never returns. */
static void
worker_main(int index, const char *app, bool legacy)
{
	PGconn	   *conn, *rconn;
	pthread_t	renewer;
	double		last_balance = 0;

	me = index;
	spread_slot = index + 1;
	app_name = app;
	snprintf(me_name, sizeof(me_name), "worker-%d", index + 1);
	snprintf(lease_interval, sizeof(lease_interval), "%d milliseconds", opt.lease_ms);
	legacy_renewals = legacy;
	if (ff_worker(index))
	{
		snprintf(renew_every_buf, sizeof(renew_every_buf), "%d milliseconds", opt.renew_every_ms);
		renew_every = renew_every_buf;
		ff_margin = ff_margin_ms();
	}
	signal(SIGTERM, on_term);
	memset(held, 0, sizeof(held));
	hist_open(me_name);

	/*
	 * --exactly-once: commits are durable whatever the cluster's default
	 * (the test clusters run synchronous_commit off), so an immediate
	 * restart loses none acknowledged; kept through PQreset.
	 */
	if (eo_fleet)
		conn_options = "-c synchronous_commit=on";
	conn = connect_db(me_name);
	if (eo_fleet)
	{
		/*
		 * The renewer has a name of its own (the driver terminates only
		 * processing connections), and waits behind a batch transaction
		 * holding one of its leases for a tenth of the lease duration at
		 * most (docs/exactly-once.md).
		 */
		char		rname[48];
		static char roptions[96];

		snprintf(rname, sizeof(rname), "%s renewer", me_name);
		snprintf(roptions, sizeof(roptions), "-c synchronous_commit=on -c lock_timeout=%d", opt.lease_ms / 10);
		conn_options = roptions;
		rconn = connect_db(rname);
	}
	else if (renew_every != NULL)
	{
		/*
		 * Fast failover (rule 6): a renewal that hangs, on a slow server or
		 * a half-open connection, gives up within renew_every; the local
		 * deadline stops processing meanwhile, returned or not.
		 */
		static char roptions[64];
		static char rtimeout[16];

		snprintf(roptions, sizeof(roptions), "-c statement_timeout=%d", opt.renew_every_ms);
		snprintf(rtimeout, sizeof(rtimeout), "%d", opt.renew_every_ms);
		conn_options = roptions;
		conn_tcp_timeout = rtimeout;
		rconn = connect_db(me_name);
		conn_options = conn_tcp_timeout = NULL;
	}
	else
		rconn = connect_db(me_name);
	if (!opt.public_only)
	{
		PQclear(PQexec(conn, "SET lease.handoff_timeout = '5s'"));
		PQclear(PQexec(rconn, "SET lease.handoff_timeout = '5s'"));
	}
	if (pthread_create(&renewer, NULL, renewer_main, rconn) != 0)
		die("cannot start a renewer thread");

	while (worker_running())
	{
		if (now_ms() - last_balance >= 1000)
		{
			balance(conn);
			last_balance = now_ms();
		}
		for (int s = 0; s < nshards && worker_running(); s++)
			work_shard(conn, s, legacy);
		sleep_ms(5);
	}

	/* graceful stop: every batch is checkpointed; give the leases back */
	pthread_join(renewer, NULL);
	for (int s = 0; s < nshards; s++)
	{
		const char *key[4] = {app_name, stream_of(s), shard_defs[s].id, me_name};
		bool		owned = held[s].owned;

		drop_shard(s, "stop");
		if (owned &&
			call_true(conn, "SELECT lease.release_lease($1, $2, $3, $4)", 4, key))
			shm->w[me].releases_at_stop++;
	}
	PQfinish(rconn);
	PQfinish(conn);
	if (hist != NULL)
		fclose(hist);
	_exit(0);
}

/* ---------------------------------------------------------------------- */
/* The chat side: rotations, restores and turns */

#define NTENANTS 2
static const char *tenant_user[NTENANTS] = {"demo-tenant-a", "demo-tenant-b"};
static char tenant_buf[NTENANTS][96];	/* --public-only: tenants of this run alone */
static const char *tenant_vault[NTENANTS] = {NULL, "vault-1"};	/* scope with and without a vault */
static const char *tenant_env[NTENANTS] = {NULL, "prod"};
static const char *AGENT = "agent-1";

/* The name of channel c ("C01"). */
static void
channel_name(int c, char *buf, size_t len)
{
	snprintf(buf, len, "C%02d", c + 1);
}

/* The conversation bound to a channel, 0 for none, -1 when the call failed (--public-only). */
static long long
find_binding(PGconn *conn, int t, const char *chan)
{
	const char *params[5] = {tenant_user[t], AGENT, tenant_vault[t], tenant_env[t], chan};
	PGresult   *res = run(conn, "SELECT lease.find_channel_conversation($1, $2, $3, $4, $5)", 5, params);
	long long	id = 0;

	if (res == NULL && opt.public_only)
		return -1;
	if (res != NULL && PQntuples(res) == 1 && !PQgetisnull(res, 0, 0))
		id = atoll(PQgetvalue(res, 0, 0));
	if (res != NULL)
		PQclear(res);
	return id;
}

/* The index of an outcome in names, n for any other. */
static int
outcome_index(const char *outcome, const char *const *names, int n)
{
	for (int i = 0; i < n; i++)
		if (strcmp(outcome, names[i]) == 0)
			return i;
	return n;
}

static const char *const rotation_outcomes[] = {"rotated", "busy", "binding_changed", "refused"};
static const char *const restore_outcomes[] = {"restored", "superseded", "failed"};

static int	rotator_index;		/* set before each rotator is forked */

/* The conversation bound to a channel, asked until answered (up to 100 times); -1 when never answered. */
static long long
find_binding_answered(PGconn *conn, int t, const char *chan)
{
	long long	bound = -1;

	for (int i = 0; i < 100 && bound < 0; i++)
		bound = find_binding(conn, t, chan);
	return bound;
}

/*
 * rotate_channel is not safe to repeat: after a lost connection, look the
 * binding up.  Still `from`: nothing happened (the next round may rotate).
 * Another conversation: the channel moved, by this call or a competing one;
 * the outcome is ambiguous and nothing more is done about it.
 */
static void
rotation_unanswered(PGconn *conn, int t, const char *chan, long long from)
{
	if (find_binding_answered(conn, t, chan) != from)
		shm->ch.ambiguous++;
	else
		shm->ch.repeated++;
}

/*
 * After a rotation: a share of the replacements "fail to start" and the
 * rotation from from_s to new_s is restored; otherwise the previous
 * conversation is ended.
 */
static void
after_rotation(PGconn *conn, unsigned *rng, const char *from_s, const char *new_s)
{
	const char *pair[2] = {from_s, new_s};

	sleep_ms(5);				/* the platform starts the replacement's worker */
	if ((int) (rand_r(rng) % 100) < opt.fail_pct)
	{
		/* safe to repeat: a second call answers superseded when the first restored */
		PGresult   *r2 = run_repeat(conn, 20000, &shm->ch.repeated,
									"SELECT lease.restore_rotated_channel($1, $2)", 2, pair);

		if (r2 == NULL)
			shm->ch.restores[3]++;
		else
		{
			shm->ch.restores[outcome_index(PQgetvalue(r2, 0, 0), restore_outcomes, 3)]++;
			PQclear(r2);
		}
	}
	else
	{
		PGresult   *r2 = run_repeat(conn, 20000, &shm->ch.repeated,
									"SELECT lease.end_conversation($1)", 1, pair);

		if (r2 != NULL)
		{
			shm->ch.ends++;
			PQclear(r2);
		}
	}
}

/* One rotation of a random channel of tenant t, counted by its outcome; then a restore or an end. */
static void
rotate_one(PGconn *conn, unsigned *rng, int t)
{
	char		chan[16];
	long long	from;
	char		from_s[24];
	const char *params[6] = {tenant_user[t], AGENT, tenant_vault[t], tenant_env[t], chan, from_s};
	PGresult   *res;
	double		t0;
	int			k;

	channel_name(rand_r(rng) % opt.channels, chan, sizeof(chan));
	from = find_binding(conn, t, chan);
	if (from < 0)
		return;					/* not answered (run() backed off): look again */
	if (from == 0)
	{
		shm->ch.unbound_seen++;
		sleep_ms(10);
		return;
	}
	snprintf(from_s, sizeof(from_s), "%lld", from);
	t0 = now_ms();
	res = run(conn, "SELECT outcome, conversation_id, previous_conversation_id"
			  "  FROM lease.rotate_channel($1, $2, $3, $4, $5, $6)", 6, params);
	if (res == NULL && opt.public_only && last_call != CALL_ANSWER)
	{
		rotation_unanswered(conn, t, chan, from);
		return;
	}
	if (res == NULL || PQntuples(res) != 1)
	{
		shm->ch.rotations[5]++;
		if (res != NULL)
			PQclear(res);
		return;
	}
	k = outcome_index(PQgetvalue(res, 0, 0), rotation_outcomes, 4);
	shm->ch.rotations[k]++;
	if (k == 1 && now_ms() - t0 > shm->ch.busy_ms_max)
		shm->ch.busy_ms_max = now_ms() - t0;
	if (k == 0)
		after_rotation(conn, rng, from_s, PQgetvalue(res, 0, 1));
	PQclear(res);
	sleep_ms(15);
}

/* Drains the compensation queue once the turns have stopped (up to 20 rounds). */
static void
drain_compensations(PGconn *conn)
{
	for (int i = 0; i < 20; i++)
	{
		PGresult   *res = run(conn, opt.public_only
							  ? "SELECT COALESCE(sum(unresolved), 0) FROM lease.monitoring_compensation_failures()"
							  : "SELECT count(*) FROM lease.compensation_failures WHERE resolved_at IS NULL", 0, NULL);
		long		open = res != NULL ? atol(PQgetvalue(res, 0, 0)) : 1;

		if (res != NULL)
			PQclear(res);
		if (open == 0)
			break;
		res = run(conn, "SELECT count(*) FROM lease.retry_failed_compensations()", 0, NULL);
		if (res != NULL)
		{
			shm->ch.retried += atol(PQgetvalue(res, 0, 0));
			PQclear(res);
		}
		sleep_ms(100);
	}
}

/*
 * Rotates channels at random; a share of the replacements "fail to start" and
 * are restored.  Two rotators run at once, so rotations of one tenant compete
 * for its one spare sandbox (some are refused) and for the same channel
 * (binding_changed, busy).
 */
static void
rotator_main(void)
{
	PGconn	   *conn;
	unsigned	rng = opt.seed ^ (0x9e3779b9u * (unsigned) (rotator_index + 1));
	char		name[32];

	snprintf(name, sizeof(name), "rotator-%d", rotator_index + 1);
	spread_slot = 6 + rotator_index;
	hist_open(name);
	conn = connect_db("demo-rotator");

	while (!shm->stop_channels)
	{
		/*
		 * --public-only sets no tenant limit (no public function does), so
		 * nothing would keep two rotations of one tenant from both
		 * succeeding and then both restoring, which can leave a channel
		 * with nothing to hold it: each rotator keeps to its own tenant.
		 */
		rotate_one(conn, &rng, opt.public_only ? rotator_index % NTENANTS : (int) (rand_r(&rng) % NTENANTS));
	}
	if (rotator_index == 0)
		drain_compensations(conn);
	PQfinish(conn);
	if (hist != NULL)
		fclose(hist);
	_exit(0);
}

/* Admits turns; each holds its conversation row for a while, as a running turn does. */
static void
turns_main(void)
{
	PGconn	   *conn;
	unsigned	rng = opt.seed ^ 0x85ebca6bu;

	hist_open("turns");
	spread_slot = 8;
	conn = connect_db("demo-turns");

	while (!shm->stop_channels)
	{
		int			t = rand_r(&rng) % NTENANTS;
		char		chan[16];
		long long	conv;
		char		conv_s[24];
		const char *params[1] = {conv_s};
		PGresult   *res;

		channel_name(rand_r(&rng) % opt.channels, chan, sizeof(chan));
		conv = find_binding(conn, t, chan);
		if (conv <= 0)
			continue;
		snprintf(conv_s, sizeof(conv_s), "%lld", conv);
		PQclear(PQexec(conn, "BEGIN"));
		res = run(conn, "SELECT lease.admit_turn($1)", 1, params);
		if (res == NULL)
			shm->ch.turn_errors++;	/* e.g. the conversation ended meanwhile */
		else
		{
			shm->ch.turns++;
			PQclear(res);
			sleep_ms(20 + rand_r(&rng) % 380);	/* the turn runs, holding the row */
		}
		PQclear(PQexec(conn, res == NULL ? "ROLLBACK" : "COMMIT"));
		sleep_ms(10);
	}
	PQfinish(conn);
	if (hist != NULL)
		fclose(hist);
	_exit(0);
}

/* Clears the demo's own rows (only its app and tenants) and binds every channel. */
static void
setup_channels(PGconn *conn)
{
	char		users[128];
	char		limit[16];
	const char *p1[1] = {users};

	/*
	 * --public-only: the tenants are new (named for this run), so there is
	 * nothing to clear, and no limit is set (no public function sets one:
	 * lease.default_sandbox_limit applies and rotations are rarely refused).
	 */
	if (!opt.public_only)
	{
		snprintf(users, sizeof(users), "{%s,%s}", tenant_user[0], tenant_user[1]);
		PQclear(must(conn, "DELETE FROM lease.compensation_failures f USING lease.conversations c"
					 " WHERE c.id = f.failed_conversation_id AND c.user_id = ANY ($1::text[])", 1, p1));
		PQclear(must(conn, "DELETE FROM lease.turns t USING lease.conversations c"
					 " WHERE c.id = t.conversation_id AND c.user_id = ANY ($1::text[])", 1, p1));
		PQclear(must(conn, "DELETE FROM lease.conversations WHERE user_id = ANY ($1::text[])", 1, p1));
		PQclear(must(conn, "DELETE FROM lease.sandboxes WHERE user_id = ANY ($1::text[])", 1, p1));
	}

	/* one spare sandbox per tenant: concurrent rotations compete for it, some are refused */
	snprintf(limit, sizeof(limit), "%d", opt.channels + 1);
	for (int t = 0; t < NTENANTS; t++)
	{
		const char *p2[2] = {tenant_user[t], limit};

		if (!opt.public_only)
			PQclear(must(conn, "INSERT INTO lease.tenant_limits (user_id, sandbox_limit) VALUES ($1, $2::int)"
						 " ON CONFLICT (user_id) DO UPDATE SET sandbox_limit = EXCLUDED.sandbox_limit", 2, p2));
		for (int c = 0; c < opt.channels; c++)
		{
			char		chan[16];
			const char *p5[5] = {tenant_user[t], AGENT, tenant_vault[t], tenant_env[t], chan};
			PGresult   *res;

			channel_name(c, chan, sizeof(chan));
			res = must(conn, "SELECT outcome FROM lease.start_conversation($1, $2, $3, $4, $5)", 5, p5);
			if (strcmp(PQgetvalue(res, 0, 0), "started") != 0)
				die("could not bind channel %s: %s", chan, PQgetvalue(res, 0, 0));
			shm->ch.starts++;
			PQclear(res);
		}
	}
}

/* Samples active sandboxes per tenant against the tenant limit. */
static void
sample_quota(PGconn *conn)
{
	char		users[128];
	const char *p1[1] = {users};
	PGresult   *res;

	snprintf(users, sizeof(users), "{%s,%s}", tenant_user[0], tenant_user[1]);
	res = run(conn, "SELECT s.user_id, count(*), max(l.sandbox_limit)"
			  "  FROM lease.sandboxes s JOIN lease.tenant_limits l USING (user_id)"
			  " WHERE s.user_id = ANY ($1::text[]) AND s.status IN ('pending', 'starting', 'ready')"
			  " GROUP BY s.user_id", 1, p1);
	if (res == NULL)
		return;
	shm->ch.quota_samples++;
	for (int r = 0; r < PQntuples(res); r++)
	{
		int			t = strcmp(PQgetvalue(res, r, 0), tenant_user[0]) == 0 ? 0 : 1;
		long		active = atol(PQgetvalue(res, r, 1));

		if (active > shm->ch.max_active[t])
			shm->ch.max_active[t] = active;
		if (active > atol(PQgetvalue(res, r, 2)))
			shm->ch.quota_exceeded++;
	}
	PQclear(res);
}

/* ---------------------------------------------------------------------- */
/* Running a fleet and checking what it did */

typedef struct FleetResult
{
	const char *label;
	int			nworkers;		/* including the one that joins */
	int			crashed;		/* index of the killed worker */
	int			joined;			/* index of the worker that joins */
	int			samples;
	long		checkpoints;
	long		spurious;
	long		lost;
	long		records;		/* distinct records processed */
	long		dup_records[NWHY]; /* by WHY_*: records processed more than once */
	long		dup_after_ack;	/* processed again although already acknowledged */
	long		gaps;			/* records up to the final checkpoint never processed */
	long		orphaned;		/* takeable leases nobody held before the stop */
	long		handoffs_requested, handoffs_honoured, taken, closes;
	long		errors;			/* worker statements that raised */
	int			joined_final;	/* leases the joining worker held at the end */
	int			fair_floor;
	long		ended;			/* --public-only: ended leases per lease.lease_status */
	double		start;			/* now_ms() when the fleet started */
	long		steals, backend_kills, restarts;	/* --exactly-once: faults injected */
	long		tx_rolled_back, tx_unknown, tx_not_held;
	long		out_once, out_expected, out_dups, out_gaps, out_past;	/* the output table */
	bool		exactly_once;	/* the --exactly-once fleet */
} FleetResult;

/* Forks a process running fn. */
static pid_t
spawn(void (*fn) (void))
{
	pid_t		pid = fork();

	if (pid < 0)
		die("fork failed: %s", strerror(errno));
	if (pid == 0)
		fn();
	return pid;
}

/* Forks worker index and records it in shared memory. */
static pid_t
spawn_worker(int index, const char *app, bool legacy)
{
	pid_t		pid = fork();

	if (pid < 0)
		die("fork failed: %s", strerror(errno));
	if (pid == 0)
		worker_main(index, app, legacy);
	shm->w[index].pid = pid;
	shm->w[index].started = shm->sample;
	shm->w[index].crashed = -1;
	shm->w[index].stopped = -1;
	return pid;
}

/*
 * A lease is live while its own expiry or its holder's heartbeat is ahead:
 * since 0.4.0 renew_leases writes one lease.stream_workers row per worker and
 * stream (renewed_until), not every lease row (docs/taker-internals.md).
 */
#define LIVE_LEASE(l) \
	"GREATEST(" l ".lease_expires_at," \
	" (SELECT w.renewed_until FROM lease.stream_workers w" \
	"   WHERE w.app_name = " l ".app_name AND w.stream_name = " l ".stream_name" \
	"     AND w.worker = " l ".lease_owner)) > clock_timestamp()"

/* Samples live leases per worker into shm->load. */
static void
sample_leases(PGconn *conn, const char *app, int sample)
{
	const char *params[2] = {app, STREAM_NAME};
	PGresult   *res = opt.public_only
		? run(conn, "SELECT lease_owner, sum(live_leases) FROM lease.worker_loads"
			  " WHERE app_name = $1 GROUP BY lease_owner", 1, params)
		: run(conn,
			  "SELECT l.lease_owner, count(*) FROM lease.shard_leases l"
			  " WHERE l.app_name = $1 AND l.stream_name = $2 AND l.lease_owner IS NOT NULL"
			  "   AND " LIVE_LEASE("l") " GROUP BY l.lease_owner",
			  2, params);

	if (res == NULL && sample > 0 && sample < MAX_SAMPLES)
	{
		/* not answered (--public-only, a partition failing over): the last sample stands */
		memcpy(shm->load[sample], shm->load[sample - 1], sizeof(shm->load[0]));
		return;
	}
	if (res == NULL || sample >= MAX_SAMPLES)
		return;
	for (int w = 0; w < MAX_WORKERS; w++)
		shm->load[sample][w] = -1;
	for (int w = 0; w < MAX_WORKERS; w++)
		if (shm->w[w].pid != 0 && shm->w[w].crashed < 0 && shm->w[w].stopped < 0)
			shm->load[sample][w] = 0;
	for (int r = 0; r < PQntuples(res); r++)
	{
		int			w = atoi(PQgetvalue(res, r, 0) + strlen("worker-")) - 1;

		if (w >= 0 && w < MAX_WORKERS)
			shm->load[sample][w] = (int16_t) atoi(PQgetvalue(res, r, 1));
	}
	PQclear(res);
}

/* A one-value count that must succeed. */
static long
query_long(PGconn *conn, const char *sql, int n, const char *const *params)
{
	PGresult   *res = must(conn, sql, n, params);
	long		v = atol(PQgetvalue(res, 0, 0));

	PQclear(res);
	return v;
}

/* Creates the stream's leases afresh (only this app's rows are touched). */
static void
setup_stream(PGconn *conn, const char *app)
{
	const char *p1[1] = {app};

	/* --public-only: the app is new (named for this run): nothing to clear */
	if (!opt.public_only)
		PQclear(must(conn, "DELETE FROM lease.shard_leases WHERE app_name = $1", 1, p1));
	for (int s = 0; s < nshards; s++)
	{
		const char *p4[4] = {app, stream_of(s), shard_defs[s].id, shard_defs[s].parents};

		PQclear(must(conn, "SELECT lease.create_lease($1, $2, $3, $4::text[])", 4, p4));
	}
}

/* The final checkpoint of shard s: through lease.lease_status with --public-only, else from the table. */
static PGresult *
final_checkpoint(PGconn *conn, const char *app, int s)
{
	const char *p3[3] = {app, stream_of(s), shard_defs[s].id};

	if (opt.public_only)
		return must_repeat(conn, "SELECT checkpoint FROM lease.lease_status"
						   " WHERE app_name = $1 AND stream_name = $2 AND shard_id = $3", 3, p3);
	return must(conn, "SELECT checkpoint FROM lease.shard_leases"
				" WHERE app_name = $1 AND stream_name = $2 AND shard_id = $3", 3, p3);
}

/* A record processed again: blames the earlier attempt, range prev, unless a checkpoint acknowledged it. */
static void
count_duplicate(FleetResult *fr, long prev)
{
	Range	   *p = &shm->ranges[prev];
	int			why = p->why;

	if (p->acked)
		fr->dup_after_ack++;
	else
	{
		if (why == WHY_NONE && shm->w[p->worker].crashed >= 0)
			why = WHY_CRASH;
		fr->dup_records[why]++;
	}
}

/* Walks the processing log of shard s (n ranges) up to its final checkpoint: records, duplicates, gaps. */
static void
analyse_shard(FleetResult *fr, int s, long n, int64_t final)
{
	int64_t		maxrec = final;
	long	   *owner;

	for (long i = 0; i < n; i++)
		if (shm->ranges[i].shard == s + 1 && shm->ranges[i].last > maxrec)
			maxrec = shm->ranges[i].last;
	owner = calloc((size_t) maxrec + 1, sizeof(long));	/* 1 + index of the first range that processed it */
	for (long i = 0; i < n; i++)
	{
		Range	   *r = &shm->ranges[i];

		if (r->shard != s + 1)
			continue;
		for (int64_t rec = r->first; rec <= r->last; rec++)
		{
			if (owner[rec] == 0)
				fr->records++;
			else
				count_duplicate(fr, owner[rec] - 1);	/* processed again */
			owner[rec] = i + 1;
		}
	}
	for (int64_t rec = 1; rec <= final; rec++)
		if (owner[rec] == 0)
			fr->gaps++;
	free(owner);
}

/* Walks the processing log: duplicates by cause, gaps. */
static void
analyse(PGconn *conn, const char *app, FleetResult *fr)
{
	long		n = shm->nranges < MAX_RANGES ? shm->nranges : MAX_RANGES;

	for (int s = 0; s < nshards; s++)
	{
		PGresult   *res = final_checkpoint(conn, app, s);
		const char *ck = PQgetvalue(res, 0, 0);
		int64_t		final = strcmp(ck, "SHARD_END") == 0 ? shard_defs[s].end
			: (ck[0] >= '0' && ck[0] <= '9') ? strtoll(ck, NULL, 10) : 0;

		PQclear(res);
		analyse_shard(fr, s, n, final);
	}
}

/* One progress line: leases per worker, checkpoints, channel counts (not with --quiet). */
static void
print_progress(const FleetResult *fr, double elapsed)
{
	long		ck = 0;

	if (opt.quiet)
		return;
	for (int w = 0; w < fr->nworkers; w++)
		ck += shm->w[w].checkpoints;
	printf("  %5.1fs  leases", elapsed / 1000.0);
	for (int w = 0; w < fr->nworkers; w++)
	{
		int			l = shm->sample < MAX_SAMPLES ? shm->load[shm->sample][w] : -1;

		if (l >= 0)
			printf(" w%d:%d", w + 1, l);
	}
	printf("  | checkpoints %ld", ck);
	if (shm->ch.quota_samples > 0 || shm->ch.starts > 0)
		printf("  | rotations %ld (busy %ld, refused %ld)  restores %ld  turns %ld",
			   shm->ch.rotations[0], shm->ch.rotations[1], shm->ch.rotations[3],
			   shm->ch.restores[0] + shm->ch.restores[1] + shm->ch.restores[2],
			   shm->ch.turns);
	printf("\n");
	fflush(stdout);
}

/*
 * The leases of stream $2 of app $1 that a worker can take: not ended, and
 * no parent still open.
 */
#define TAKEABLE_LEASES \
	"lease.shard_leases l" \
	" WHERE l.app_name = $1 AND l.stream_name = $2 AND l.checkpoint <> 'SHARD_END'" \
	"   AND NOT EXISTS (SELECT 1 FROM lease.shard_leases p" \
	"                    WHERE p.app_name = l.app_name AND p.stream_name = l.stream_name" \
	"                      AND p.shard_id = ANY (l.parent_shard_ids)" \
	"                      AND p.checkpoint <> 'SHARD_END')"

/* Starts a fleet afresh: its stream (and channels), the workers, the rotators and the turns. */
static void
fleet_start(PGconn *conn, const char *app, bool legacy, bool channels, FleetResult *fr, pid_t *chan_pids)
{
	memset((void *) shm, 0, sizeof(Shared));
	fr->nworkers = opt.workers + 1;
	fr->crashed = 0;
	fr->joined = opt.workers;
	setup_stream(conn, app);
	if (channels)
		setup_channels(conn);

	printf("== %s: %d workers on %d shards for %ds; worker-1 is killed at %d%%, worker-%d joins at %d%%\n",
		   fr->label, opt.workers, nshards, opt.duration, 35, opt.workers + 1, 55);
	fflush(stdout);
	for (int w = 0; w < opt.workers; w++)
		spawn_worker(w, app, legacy);
	if (channels)
	{
		rotator_index = 0;
		chan_pids[0] = spawn(rotator_main);
		rotator_index = 1;
		chan_pids[1] = spawn(rotator_main);
		chan_pids[2] = spawn(turns_main);
	}
}

/*
 * --exactly-once: steals a lease from a live worker for "demo-thief", which
 * never renews nor processes it: the victim's batch in flight must not
 * commit, and the lease is taken over once it expires.
 */
static void
steal_for_thief(PGconn *conn, const char *app, FleetResult *fr, int n)
{
	char		nth[16], interval[32];
	const char *p[4] = {app, STREAM_NAME, nth, interval};
	PGresult   *res;

	snprintf(nth, sizeof(nth), "%d", n);
	snprintf(interval, sizeof(interval), "%d milliseconds", opt.lease_ms);
	res = must(conn, "SELECT c.shard_id, c.lease_owner,"
			   "       lease.take_lease($1, $2, c.shard_id, 'demo-thief', c.lease_count, $4::interval)"
			   "  FROM (SELECT l.shard_id, l.lease_owner, l.lease_count FROM lease.shard_leases l"
			   "         WHERE l.app_name = $1 AND l.stream_name = $2 AND l.lease_owner <> 'worker-1'"
			   "           AND l.lease_owner LIKE 'worker-%' AND " LIVE_LEASE("l")
			   "           AND l.shard_id LIKE 'shard-%'"
			   "           AND l.handoff_to IS NULL AND l.checkpoint <> 'SHARD_END'"
			   "         ORDER BY l.shard_id OFFSET $3::int LIMIT 1) AS c", 4, p);
	if (PQntuples(res) == 1 && !PQgetisnull(res, 0, 2))
	{
		fr->steals++;
		printf("  !! %s stolen from %s by a thief that never renews: its batch in flight must not commit,"
			   " the lease is taken over when it expires\n", PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1));
	}
	PQclear(res);
}

/* --exactly-once: terminates the processing backends of the workers that are inside a transaction. */
static void
kill_backends(PGconn *conn, FleetResult *fr)
{
	for (int i = 0; i < 50; i++)
	{
		PGresult   *res = must(conn, "SELECT count(pg_catalog.pg_terminate_backend(pid))"
							   "  FROM pg_catalog.pg_stat_activity"
							   " WHERE application_name LIKE 'worker-%' AND application_name NOT LIKE '% renewer'"
							   "   AND datname = pg_catalog.current_database()"
							   "   AND state IN ('active', 'idle in transaction') LIMIT 1", 0, NULL);
		long		n = atol(PQgetvalue(res, 0, 0));

		PQclear(res);
		if (n > 0)
		{
			fr->backend_kills += n;
			printf("  !! %ld worker backend(s) terminated mid-transaction\n", n);
			return;
		}
		sleep_ms(10);
	}
}

/* --exactly-once --restart-cmd: runs the command (an immediate stop and start), then reconnects. */
static void
restart_server(PGconn *conn, FleetResult *fr)
{
	int			rc;

	fflush(stdout);
	rc = system(opt.restart_cmd);
	for (int i = 0; i < 150; i++)
	{
		PQreset(conn);
		if (PQstatus(conn) == CONNECTION_OK)
			break;
		sleep_ms(200);
	}
	if (PQstatus(conn) != CONNECTION_OK)
		die("no connection after the restart: %s", PQerrorMessage(conn));
	must_exec(conn, "SET client_min_messages = warning");
	fr->restarts += rc == 0;
	printf("  !! the server stopped (immediate) and started again (%s): every connection lost\n",
		   rc == 0 ? "ok" : "the command failed");
}

/*
 * Waits until worker w's renewer has just finished a round (for up to
 * renew_every + 1 s), so a kill right after it is the fast-failover mode's
 * longest wait: its leases are taken renew_every + lease.liveness_grace
 * after that renewal, still before they expire, which any balancing round
 * of the survivors in between shows (session_ended, not expiry_takeover).
 */
static void
await_renewal(int w)
{
	long		rounds = __atomic_load_n(&shm->w[w].renew_rounds, __ATOMIC_RELAXED);
	double		until = now_ms() + opt.renew_every_ms + 1000;

	while (__atomic_load_n(&shm->w[w].renew_rounds, __ATOMIC_RELAXED) == rounds && now_ms() < until)
		sleep_ms(2);
}

/* SIGUSR1 (to the main process): end the fleet soon (make soak's short run, once its faults are over). */
static volatile sig_atomic_t end_soon = 0;

static void
on_usr1(int sig)
{
	(void) sig;
	end_soon = 1;
}

/*
 * Samples the fleet every 500 ms for opt.duration seconds: worker-1 is
 * killed at 35 %, one joins at 55 %.  After SIGUSR1 the run ends 20 s
 * later, worker-1 killed now and the joiner started 3 s later if they
 * were not yet; opt.duration becomes the run's length.
 */
static void
fleet_drive(PGconn *conn, const char *app, bool legacy, bool channels, FleetResult *fr)
{
	double		start, crash_at, join_at, end_at;
	int			crashed = 0, joined = 0, steals = 0, kills = 0, restarted = 0;
	static const int steal_pct[] = {15, 25, 40, 50};
	static const int kill_pct[] = {25, 50, 65, 80};

	start = now_ms();
	fr->start = start;
	crash_at = start + opt.duration * 350.0;
	join_at = start + opt.duration * 550.0;
	end_at = start + opt.duration * 1000.0;
	signal(SIGUSR1, on_usr1);
	while (now_ms() < end_at && shm->sample < MAX_SAMPLES - 1)
	{
		if (end_soon == 1)
		{
			double		now = now_ms();

			end_soon = 2;
			end_at = now + 20000.0 < end_at ? now + 20000.0 : end_at;
			crash_at = now < crash_at ? now : crash_at;
			join_at = now + 3000.0 < join_at ? now + 3000.0 : join_at;
			printf("  -- told to end (SIGUSR1): the run ends in %.0f s\n", (end_at - now) / 1000.0);
		}
		sample_leases(conn, app, shm->sample);
		if (channels && !opt.public_only)
			sample_quota(conn);	/* --public-only: no public view per tenant */
		if (shm->sample % 2 == 0)
			print_progress(fr, now_ms() - start);
		if (!crashed && now_ms() >= crash_at)
		{
			if (ff_worker(0))
				await_renewal(0);
			kill(shm->w[0].pid, SIGKILL);
			waitpid(shm->w[0].pid, NULL, 0);
			shm->w[0].crashed = shm->sample;
			crashed = 1;
			printf("  !! worker-1 killed (SIGKILL): nothing released; its leases must %s and be taken over\n",
				   ff_worker(0) ? "wait out renew_every + grace (fast failover)" : "expire");
		}
		if (eo_fleet && steals < 4 && now_ms() >= start + opt.duration * 10.0 * steal_pct[steals])
		{
			steal_for_thief(conn, app, fr, steals);
			steals++;
		}
		if (eo_fleet && kills < 4 && now_ms() >= start + opt.duration * 10.0 * kill_pct[kills])
		{
			kill_backends(conn, fr);
			kills++;
		}
		if (eo_fleet && opt.restart_cmd != NULL && !restarted && now_ms() >= start + opt.duration * 600.0)
		{
			restart_server(conn, fr);
			restarted = 1;
		}
		if (!joined && now_ms() >= join_at)
		{
			spawn_worker(fr->joined, app, legacy);
			joined = 1;
			printf("  ++ worker-%d joins: it must get its share through handoffs, not steals\n", fr->joined + 1);
		}
		sleep_ms(500);
		shm->sample++;
	}
	if (end_soon)
		opt.duration = (int) ((now_ms() - start) / 1000.0) + 1;
	fr->samples = shm->sample;
}

/* Before the stop: every takeable lease must be held by a live worker; the fair share; the joiner's leases. */
static void
fleet_orphans(PGconn *conn, const char *app, FleetResult *fr)
{
	if (opt.public_only)
	{
		const char *p1[1] = {app};
		PGresult   *res = must_repeat(conn,
									  "SELECT count(*) FILTER (WHERE state IN ('unowned', 'expired')),"
									  "       count(*) FILTER (WHERE state NOT IN ('ended', 'blocked')),"
									  "       count(*) FILTER (WHERE state = 'ended')"
									  "  FROM lease.lease_status WHERE app_name = $1", 1, p1);

		fr->orphaned = atol(PQgetvalue(res, 0, 0));
		fr->fair_floor = (int) (atol(PQgetvalue(res, 0, 1)) / opt.workers);
		fr->ended = atol(PQgetvalue(res, 0, 2));
		PQclear(res);
	}
	else
	{
		const char *p2[2] = {app, STREAM_NAME};

		fr->orphaned = query_long(conn, "SELECT count(*) FROM " TAKEABLE_LEASES
								  "   AND (l.lease_owner IS NULL OR NOT " LIVE_LEASE("l") ")",
								  2, p2);
		fr->fair_floor = (int) (query_long(conn, "SELECT count(*) FROM " TAKEABLE_LEASES, 2, p2) / opt.workers);
	}
	fr->joined_final = shm->load[fr->samples - 1][fr->joined];
}

/* Stops the live workers (SIGTERM: they checkpoint and release), then the channel processes. */
static void
fleet_stop(const FleetResult *fr, const pid_t *chan_pids)
{
	shm->stop_workers = 1;
	for (int w = 0; w < fr->nworkers; w++)
	{
		if (shm->w[w].pid == 0 || shm->w[w].crashed >= 0)
			continue;
		kill(shm->w[w].pid, SIGTERM);
		waitpid(shm->w[w].pid, NULL, 0);
		shm->w[w].stopped = fr->samples;
	}
	shm->stop_channels = 1;
	for (int i = 0; i < 3; i++)
		if (chan_pids[i] != 0)
			waitpid(chan_pids[i], NULL, 0);
}

/* Adds up the workers' counters. */
static void
fleet_totals(FleetResult *fr)
{
	for (int w = 0; w < fr->nworkers; w++)
	{
		fr->checkpoints += shm->w[w].checkpoints;
		fr->spurious += shm->w[w].ckpt_spurious;
		fr->lost += shm->w[w].ckpt_lost;
		fr->handoffs_requested += shm->w[w].handoffs_requested;
		fr->handoffs_honoured += shm->w[w].handoffs_honoured;
		fr->taken += shm->w[w].taken;
		fr->closes += shm->w[w].closes;
		fr->errors += shm->w[w].errors;
		fr->tx_rolled_back += shm->w[w].tx_rolled_back;
		fr->tx_unknown += shm->w[w].tx_unknown;
		fr->tx_not_held += shm->w[w].tx_not_held;
	}
}

/* Runs one fleet for opt.duration seconds: crash at 35 %, join at 55 %; then walks what it did. */
static void
run_fleet(PGconn *conn, const char *app, bool legacy, bool channels, FleetResult *fr)
{
	pid_t		chan_pids[3] = {0, 0, 0};

	fleet_start(conn, app, legacy, channels, fr, chan_pids);
	fleet_drive(conn, app, legacy, channels, fr);
	fleet_orphans(conn, app, fr);
	fleet_stop(fr, chan_pids);
	fleet_totals(fr);
	analyse(conn, app, fr);
}

/* ---------------------------------------------------------------------- */
/* The history checker (--history): what the server acknowledged, judged */

typedef struct Own
{
	int			s, w;
	int64_t		epoch;
	double		start, end;
} Own;

typedef struct Ack
{
	int			s;
	int64_t		v;
	double		t;
} Ack;

/* Orders ownership intervals by shard, then start. */
static int
cmp_own(const void *a, const void *b)
{
	const Own  *x = a, *y = b;

	if (x->s != y->s)
		return x->s - y->s;
	return (x->start > y->start) - (x->start < y->start);
}

/* Orders doubles (qsort). */
static int
cmp_double(const void *a, const void *b)
{
	double		x = *(const double *) a, y = *(const double *) b;

	return (x > y) - (x < y);
}

/* Appends to a growing array. */
static void *
grow(void *arr, long *cap, long n, size_t size)
{
	if (n < *cap)
		return arr;
	*cap = *cap ? *cap * 2 : 1024;
	arr = realloc(arr, (size_t) *cap * size);
	if (arr == NULL)
		die("out of memory");
	return arr;
}

/* A growing list of acknowledged positions (checkpoints, or positions read). */
typedef struct AckList
{
	Ack		   *a;
	long		n;
	long		cap;
} AckList;

/* What the histories of every process say, gathered for the checks. */
typedef struct History
{
	const char *files[MAX_WORKERS + 4];	/* the processes, in reading order */
	char		names[MAX_WORKERS][32];
	int			nfiles;
	Own		   *owns;			/* ownership intervals */
	long		nowns;
	long		cap_owns;
	AckList		acks;			/* checkpoints acknowledged */
	AckList		reads;			/* positions read */
	int64_t		max_ack[MAX_SHARDS];
	char		state[64][6];	/* the SQLSTATEs seen ... */
	long		count[64];		/* ... and how often */
	int			ns;
	long		errors;
	long		handoffs;
	long		unbound;
	int			violations;		/* missing files, partitions without progress, no handoff */
} History;

/* One process's open ownership interval of a shard, while its history is read. */
typedef struct OpenOwn
{
	int			open;
	int64_t		epoch;
	double		since;
	double		deadline;
} OpenOwn;

/* Records an ownership interval of shard s by process w. */
static void
history_add_own(History *h, int s, int w, int64_t epoch, double start, double end)
{
	h->owns = grow(h->owns, &h->cap_owns, h->nowns, sizeof(Own));
	h->owns[h->nowns++] = (Own) {s, w, epoch, start, end};
}

/* Records an acknowledged position v of shard s at time t. */
static void
ack_push(AckList *l, int s, int64_t v, double t)
{
	l->a = grow(l->a, &l->cap, l->n, sizeof(Ack));
	l->a[l->n++] = (Ack) {s, v, t};
}

/* Counts one error by its SQLSTATE (the first 64 SQLSTATEs are told apart). */
static void
history_add_error(History *h, const char *st)
{
	int			i;

	h->errors++;
	for (i = 0; i < h->ns; i++)
		if (strcmp(h->state[i], st) == 0)
			break;
	if (i == h->ns && h->ns < 64)
	{
		memcpy(h->state[h->ns], st, 6);
		h->count[h->ns++] = 0;
	}
	if (i < h->ns)
		h->count[i]++;
}

/* The processes whose histories are read: the workers, the rotators, the turns, main. */
static void
history_files(History *h, const FleetResult *fr)
{
	for (int w = 0; w < fr->nworkers; w++)
	{
		snprintf(h->names[w], sizeof(h->names[w]), "worker-%d", w + 1);
		h->files[h->nfiles++] = h->names[w];
	}
	h->files[h->nfiles++] = "rotator-1";
	h->files[h->nfiles++] = "rotator-2";
	h->files[h->nfiles++] = "turns";
	h->files[h->nfiles++] = "main";
}

/* Takes in one line of process k's history; iv is its open interval per shard. */
static void
history_line(History *h, int k, OpenOwn *iv, const char *line)
{
	int			s;
	int64_t		e, v;
	double		t1, t2;
	char		how[16], st[6], why[16], yn[8];

	if (sscanf(line, "%15s %d %" SCNd64 " %lf %lf", how, &s, &e, &t1, &t2) == 5 &&
		(strcmp(how, "take") == 0 || strcmp(how, "adopt") == 0) && s >= 0 && s < nshards)
	{
		if (iv[s].open)
			history_add_own(h, s, k, iv[s].epoch, iv[s].since, iv[s].deadline);
		iv[s] = (OpenOwn) {1, e, t1, t2};
	}
	else if (sscanf(line, "renew %d %" SCNd64 " %lf", &s, &e, &t1) == 3 && s >= 0 && s < nshards)
	{
		if (iv[s].open && iv[s].epoch == e && t1 > iv[s].deadline)
			iv[s].deadline = t1;
	}
	else if (sscanf(line, "drop %d %" SCNd64 " %lf %15s", &s, &e, &t1, why) == 4 && s >= 0 && s < nshards)
	{
		if (iv[s].open && iv[s].epoch == e)
		{
			history_add_own(h, s, k, e, iv[s].since, t1 < iv[s].deadline ? t1 : iv[s].deadline);
			iv[s].open = 0;
		}
		if (strcmp(why, "handoff") == 0)
			h->handoffs++;
	}
	else if (sscanf(line, "ack %d %" SCNd64 " %" SCNd64 " %lf", &s, &v, &e, &t1) == 4 && s >= 0 && s < nshards)
	{
		if (v > h->max_ack[s])
			h->max_ack[s] = v;
		ack_push(&h->acks, s, v, t1);
	}
	else if (sscanf(line, "read %d %" SCNd64 " %" SCNd64 " %lf", &s, &v, &e, &t1) == 4 && s >= 0 && s < nshards)
		ack_push(&h->reads, s, v, t1);
	else if (sscanf(line, "error %lf %5s", &t1, st) == 2)
		history_add_error(h, st);
	else if (sscanf(line, "bound %*s %*s %7s", yn) == 1 && strcmp(yn, "no") == 0)
		h->unbound++;
}

/* Reads process k's history; a missing one is a violation. */
static void
history_read(History *h, int k)
{
	char		path[1024], line[512];
	FILE	   *f;
	OpenOwn		iv[MAX_SHARDS];

	memset(iv, 0, sizeof(iv));
	snprintf(path, sizeof(path), "%s/%s.log", opt.history, h->files[k]);
	f = fopen(path, "r");
	if (f == NULL)
	{
		printf("pg_lease_demo: %s missing\n", path);
		h->violations++;
		return;
	}
	while (fgets(line, sizeof(line), f))
		history_line(h, k, iv, line);
	fclose(f);
	/* a worker killed without a stop owned its leases up to its last local deadline */
	for (int s = 0; s < nshards; s++)
		if (iv[s].open)
			history_add_own(h, s, k, iv[s].epoch, iv[s].since, iv[s].deadline);
}

/* Lost: a final checkpoint (through lease.lease_status) below an acknowledged one. */
static long
history_lost_final(PGconn *conn, const char *app, const History *h)
{
	long		lost = 0;

	for (int s = 0; s < nshards; s++)
	{
		PGresult   *res = final_checkpoint(conn, app, s);
		const char *ck = PQntuples(res) == 1 ? PQgetvalue(res, 0, 0) : "";

		if (strcmp(ck, "SHARD_END") != 0 && strtoll(ck, NULL, 10) < h->max_ack[s])
		{
			printf("pg_lease_demo: LOST: %s/%s final checkpoint '%s' below acknowledged %" PRId64 "\n",
				   stream_of(s), shard_defs[s].id, ck, h->max_ack[s]);
			lost++;
		}
		PQclear(res);
	}
	return lost;
}

/*
 * Lost and hidden by a later owner writing on top: a position read (sent)
 * after an acknowledgement came back lower than it.
 */
static long
history_lost_read(const History *h)
{
	const AckList *acks = &h->acks, *reads = &h->reads;
	long		lost = 0;

	for (long i = 0; i < reads->n; i++)
		for (long j = 0; j < acks->n; j++)
			if (acks->a[j].s == reads->a[i].s && acks->a[j].t < reads->a[i].t && acks->a[j].v > reads->a[i].v)
			{
				printf("pg_lease_demo: LOST: %s/%s acknowledged %" PRId64 ", read %" PRId64 " later\n",
					   stream_of(reads->a[i].s), shard_defs[reads->a[i].s].id, acks->a[j].v, reads->a[i].v);
				lost++;
				break;
			}
	return lost;
}

/* Two owners at once: intervals of one shard by two processes that overlap. */
static long
history_double_owners(History *h, const FleetResult *fr)
{
	const Own  *o = h->owns;
	long		double_owners = 0;

	qsort(h->owns, (size_t) h->nowns, sizeof(Own), cmp_own);
	for (long i = 0; i < h->nowns; i++)
		for (long j = i + 1; j < h->nowns && o[j].s == o[i].s; j++)
			if (o[j].start < o[i].end && o[j].w != o[i].w)
			{
				printf("pg_lease_demo: DOUBLE OWNER: %s/%s %s (epoch %" PRId64 ", %.0f..%.0f ms) and %s (epoch %" PRId64 ", from %.0f ms)\n",
					   stream_of(o[i].s), shard_defs[o[i].s].id, h->files[o[i].w], o[i].epoch,
					   o[i].start - fr->start, o[i].end - fr->start,
					   h->files[o[j].w], o[j].epoch, o[j].start - fr->start);
				double_owners++;
			}
	return double_owners;
}

/* The longest gap between acknowledged checkpoints of each partition; one without progress is a violation. */
static void
history_write_gaps(History *h, const FleetResult *fr)
{
	double		end = fr->start + opt.duration * 1000.0;

	for (int st = 0; st < nstreams; st++)
	{
		double	   *t = malloc(sizeof(double) * (size_t) (h->acks.n + 2));
		long		n = 0;
		double		gap = 0;

		if (t == NULL)
			die("out of memory");
		/* the run's start and end count too: a partition that stops is a gap */
		t[n++] = fr->start;
		t[n++] = end;
		for (long j = 0; j < h->acks.n; j++)
			if (shard_defs[h->acks.a[j].s].stream == st && h->acks.a[j].t <= end)
				t[n++] = h->acks.a[j].t;
		qsort(t, (size_t) n, sizeof(double), cmp_double);
		for (long i = 1; i < n; i++)
			if (t[i] - t[i - 1] > gap)
				gap = t[i] - t[i - 1];
		printf("partition %d (%s): %ld acknowledged checkpoints, longest write gap %.2f s\n",
			   st, stream_names[st], n - 2, gap / 1000.0);
		if (n - 2 <= 2)
		{
			printf("pg_lease_demo: partition %d made no progress\n", st);
			h->violations++;
		}
		free(t);
	}
}

/*
 * After a router was killed (the line "router_killed MS PORT" in DIR/faults
 * written by test/scale/run.sh, MS on this program's monotonic clock):
 * every connection whose last connection before the kill was to that
 * router, and how long after the kill its first call was answered through
 * another one ("back" lines).  A figure, printed; a violation only when no
 * connection was on that router (the kill tested nothing).
 */
static void
history_router_moves(History *h)
{
	char		path[1024], line[256], port[16];
	double		killed_at, d[256];
	int			nd = 0, clients = 0, not_back = 0;
	FILE	   *f;

	snprintf(path, sizeof(path), "%s/faults", opt.history);
	f = fopen(path, "r");
	if (f == NULL)
		return;
	if (fgets(line, sizeof(line), f) == NULL ||
		sscanf(line, "router_killed %lf %15s", &killed_at, port) != 2)
	{
		fclose(f);
		printf("pg_lease_demo: %s: no router_killed line\n", path);
		h->violations++;
		return;
	}
	fclose(f);
	printf("router on port %s killed; its connections:", port);
	for (int k = 0; k < h->nfiles; k++)
	{
		char		ids[8][24], last_port[8][16];
		double		back[8];
		int			n = 0;

		snprintf(path, sizeof(path), "%s/%s.log", opt.history, h->files[k]);
		f = fopen(path, "r");
		if (f == NULL)
			continue;
		while (fgets(line, sizeof(line), f))
		{
			char		what[8], p[16], id[24];
			double		t;
			int			i;

			if (sscanf(line, "%7s %lf %15s %23s", what, &t, p, id) != 4 ||
				(strcmp(what, "conn") != 0 && strcmp(what, "back") != 0))
				continue;
			for (i = 0; i < n && strcmp(ids[i], id) != 0; i++)
				;
			if (i == n && n < 8)
			{
				snprintf(ids[n], sizeof(ids[n]), "%s", id);
				last_port[n][0] = '\0';
				back[n++] = -1;
			}
			if (i == n)
				continue;
			if (t <= killed_at)
				snprintf(last_port[i], sizeof(last_port[i]), "%s", p);
			else if (strcmp(what, "back") == 0 && strcmp(p, port) != 0 && back[i] < 0)
				back[i] = t;
		}
		fclose(f);
		for (int i = 0; i < n; i++)
		{
			if (strcmp(last_port[i], port) != 0)
				continue;
			clients++;
			printf(" %s", h->files[k]);
			if (back[i] < 0)
			{
				printf(" (not back)");
				not_back++;
			}
			else if (nd < 256)
				d[nd++] = back[i] - killed_at;
		}
	}
	printf("\n");
	if (clients == 0)
	{
		printf("pg_lease_demo: no connection was on the killed router\n");
		h->violations++;
		return;
	}
	qsort(d, (size_t) nd, sizeof(double), cmp_double);
	printf("clients of the killed router: %d connections, %d back through another router"
		   " (median %.2f s, longest %.2f s after the kill), %d not back (their process ended first)\n",
		   clients, nd, nd > 0 ? d[nd / 2] / 1000.0 : 0.0, nd > 0 ? d[nd - 1] / 1000.0 : 0.0, not_back);
}

/* The errors the clients met, by SQLSTATE. */
static void
history_print_errors(const History *h)
{
	printf("errors by SQLSTATE (what the clients did: reconnected when the connection broke,"
		   " repeated an unanswered fenced checkpoint, re-read positions, looked a channel up"
		   " after an unanswered rotation, retried):");
	if (h->ns == 0)
		printf(" none");
	for (int i = 0; i < h->ns; i++)
		printf(" %s=%ld", h->state[i], h->count[i]);
	printf("\n");
}

/*
 * Reads every process's history and checks it against the final state read
 * through lease.lease_status: an acknowledged checkpoint lost (the final
 * checkpoint below it, or a position read after it below it), two workers
 * owning one lease at once (their intervals from the acknowledgement of a
 * take or transfer to the local deadline of the last acknowledged renewal,
 * or to when they stopped, overlap), channels left unbound, handoffs; the
 * longest gap between acknowledged checkpoints per partition; errors by
 * SQLSTATE.  Returns the number of violations.
 */
static int
check_history(PGconn *conn, const char *app, const FleetResult *fr)
{
	History    *h = calloc(1, sizeof(History));
	long		lost, double_owners;
	int			violations;

	if (h == NULL)
		die("out of memory");
	history_files(h, fr);
	for (int k = 0; k < h->nfiles; k++)
		history_read(h, k);
	lost = history_lost_final(conn, app, h);
	lost += history_lost_read(h);
	double_owners = history_double_owners(h, fr);

	printf("\n-- history (%s): %ld acknowledged checkpoints, %ld ownership intervals, %ld errors\n",
		   opt.history, h->acks.n, h->nowns, h->errors);
	history_write_gaps(h, fr);
	history_router_moves(h);
	history_print_errors(h);
	printf("acknowledged checkpoints lost: %ld\n", lost);
	printf("double owners: %ld\n", double_owners);
	printf("leases handed over on request (take_leases asks, release_lease transfers): %ld\n", h->handoffs);
	printf("channels left unbound: %ld\n", h->unbound);
	if (h->handoffs == 0)
	{
		printf("pg_lease_demo: no lease was handed over: the handoffs were not exercised\n");
		h->violations++;
	}
	violations = h->violations + (int) (lost + double_owners + h->unbound);
	free(h->owns);
	free(h->acks.a);
	free(h->reads.a);
	free(h);
	return violations;
}

/* ---------------------------------------------------------------------- */
/* Report */

static int	failures;

/* Counts a broken invariant and prints it. */
static void
check(bool ok, const char *what)
{
	if (!ok)
	{
		failures++;
		printf("  BROKEN: %s\n", what);
	}
}

/* One row per worker, one column per second: leases held; X killed, . not running. */
/*
 * --exactly-once: counts the output rows of every shard against its final
 * checkpoint: records 1..checkpoint written exactly once, duplicates, gaps,
 * rows past the checkpoint (output whose checkpoint did not commit).
 */
static void
analyse_output(PGconn *conn, const char *app, FleetResult *fr)
{
	for (int s = 0; s < nshards; s++)
	{
		const char *p2[2] = {app, shard_defs[s].id};
		PGresult   *res = final_checkpoint(conn, app, s);
		const char *ck = PQgetvalue(res, 0, 0);
		int64_t		final = strcmp(ck, "SHARD_END") == 0 ? shard_defs[s].end
			: (ck[0] >= '0' && ck[0] <= '9') ? strtoll(ck, NULL, 10) : 0;
		long	   *n = calloc((size_t) final + 1, sizeof(long));

		PQclear(res);
		res = must(conn, "SELECT record, count(*) FROM public.pg_lease_demo_output"
				   " WHERE app_name = $1 AND shard_id = $2 GROUP BY record", 2, p2);
		for (int r = 0; r < PQntuples(res); r++)
		{
			int64_t		rec = strtoll(PQgetvalue(res, r, 0), NULL, 10);
			long		c = atol(PQgetvalue(res, r, 1));

			fr->out_dups += c - 1;
			if (rec < 1 || rec > final)
				fr->out_past += c;
			else
				n[rec] = c;
		}
		PQclear(res);
		for (int64_t rec = 1; rec <= final; rec++)
		{
			fr->out_expected++;
			fr->out_once += n[rec] == 1;
			fr->out_gaps += n[rec] == 0;
		}
		free(n);
	}
}

/* The --exactly-once section of the report, next to the normal fleet's at-least-once figure. */
static void
print_exactly_once(const FleetResult *normal, const FleetResult *fr)
{
	printf("\n-- exactly once (%s): one row per record in public.pg_lease_demo_output (no unique constraint),\n"
		   "   written in the batch's transaction with %s the fenced checkpoint, COMMIT sent unchecked\n",
		   fr->label, opt.omit_hold ? "(NO hold_lease: --omit-hold)" : "lease.hold_lease and");
	printf("  faults: worker-%d SIGKILLed, %ld lease(s) stolen for a thief that never renews (expiry takeovers"
		   " follow), %ld backend(s) terminated mid-transaction, %ld handoff(s) to the joiner,"
		   " %ld immediate restart(s) of the server\n",
		   fr->crashed + 1, fr->steals, fr->backend_kills, fr->handoffs_honoured, fr->restarts);
	printf("  batches not committed %ld (refused by hold_lease %ld, COMMIT unanswered %ld)\n",
		   fr->tx_rolled_back + fr->tx_not_held, fr->tx_not_held, fr->tx_unknown);
	printf("\n-- at-least-once vs exactly-once\n");
	if (opt.omit_hold)
		printf("  normal mode:        not run (--omit-hold)\n");
	else
		printf("  normal mode:        records processed more than once %ld (their effects land twice in a sink of their own)\n",
			   normal->dup_records[WHY_NONE] + normal->dup_records[WHY_LOST] + normal->dup_records[WHY_SPURIOUS] +
			   normal->dup_records[WHY_CRASH] + normal->dup_records[WHY_UNANSWERED] + normal->dup_after_ack);
	printf("  transactional mode: records written exactly once: %ld of %ld, %ld duplicates, %ld gaps"
		   " (%ld rows past a checkpoint)\n",
		   fr->out_once, fr->out_expected, fr->out_dups, fr->out_gaps, fr->out_past);
}

/* The --exactly-once invariants: the output holds every record up to each checkpoint once, nothing else. */
static void
check_exactly_once(const FleetResult *fr)
{
	check(fr->out_dups == 0, "records were written to the output more than once (duplicates)");
	check(fr->out_gaps == 0, "records up to a checkpoint are missing from the output (gaps)");
	check(fr->out_past == 0, "output rows past their shard's checkpoint committed");
	check(fr->out_once == fr->out_expected && fr->out_expected > 0, "not every record was written exactly once");
	check(fr->steals > 0, "the thief stole nothing (no stale owner was tested)");
	if (opt.restart_cmd != NULL)
		check(fr->restarts > 0, "the --restart-cmd command failed (no restart was tested)");
}

static void
print_timeline(const FleetResult *fr)
{
	printf("\n-- lease timeline (%s): live leases per worker, one column per second"
		   " (0-9, then a-z for 10-35);\n   X = killed (the digits after it are leases the dead worker still"
		   " holds until they expire), . = not running\n", fr->label);
	for (int w = 0; w < fr->nworkers; w++)
	{
		printf("  worker-%-2d |", w + 1);
		for (int s = 0; s < fr->samples; s += 2)
		{
			int			l = shm->load[s][w];

			if (shm->w[w].crashed >= 0 && s >= shm->w[w].crashed && s < shm->w[w].crashed + 2)
				putchar('X');
			else if (l < 0)
				putchar('.');
			else
				putchar(l < 10 ? '0' + l : (l < 36 ? 'a' + l - 10 : '+'));
		}
		printf("|\n");
	}
}

/* The stream section of the report for one fleet. */
static void
print_stream(const FleetResult *fr, bool pg_lease)
{
	long		dups = fr->dup_records[WHY_NONE] + fr->dup_records[WHY_LOST] +
		fr->dup_records[WHY_SPURIOUS] + fr->dup_records[WHY_CRASH] +
		fr->dup_records[WHY_UNANSWERED] + fr->dup_after_ack;
	/* --public-only runs through failovers: a lease lost to an expiry is the client rules at work */
	const char *lost_note = !pg_lease ? "" : fr->exactly_once
		? "   (the thief's steals: the victims' batches in flight)" : opt.public_only
		? "   (a failover longer than the local deadline)" : "   (must be 0: no abrupt steals)";

	printf("\n-- stream (%s)\n", fr->label);
	printf("  records processed                 %8ld\n", fr->records);
	printf("  checkpoints written               %8ld\n", fr->checkpoints);
	printf("  spurious checkpoint failures      %8ld%s\n", fr->spurious, pg_lease ? "   (must be 0)" : "");
	printf("  checkpoints refused, lease lost   %8ld%s\n", fr->lost, lost_note);
	printf("  records processed more than once  %8ld\n", dups);
	printf("    after the crash (worker-%d's unacknowledged tail) %ld\n", fr->crashed + 1, fr->dup_records[WHY_CRASH]);
	printf("    after a spurious checkpoint failure             %ld\n", fr->dup_records[WHY_SPURIOUS]);
	printf("    after a lost lease                              %ld\n", fr->dup_records[WHY_LOST]);
	if (opt.public_only)
		printf("    after a checkpoint left unanswered (lost connections) %ld\n", fr->dup_records[WHY_UNANSWERED]);
	if (fr->exactly_once)
		printf("    after a batch transaction that did not commit   %ld\n", fr->dup_records[WHY_UNANSWERED]);
	printf("    after an acknowledged checkpoint                %ld\n", fr->dup_after_ack);
	printf("  records never processed (gaps)    %8ld   (must be 0)\n", fr->gaps);
	printf("  leases taken / handoffs requested / honoured  %ld / %ld / %ld\n",
		   fr->taken, fr->handoffs_requested, fr->handoffs_honoured);
	if (opt.public_only)
		printf("  shards ended (split and merge parents, per lease_status) %ld\n", fr->ended);
	else
		printf("  shards closed (split and merge parents)       %ld\n", fr->closes);
	printf("  worker statements that raised an error        %ld\n", fr->errors);
	if (opt.public_only)
	{
		long		drops[2] = {0, 0};

		for (int w = 0; w < fr->nworkers; w++)
			drops[ff_worker(w) ? 1 : 0] += shm->w[w].deadline_drops;
		printf("  shards dropped at their local deadline        %ld", drops[0] + drops[1]);
		if (opt.renew_every_ms > 0)
			printf("   (fast-failover workers %ld, others %ld)", drops[1], drops[0]);
		printf("\n");
	}
	printf("  takeable leases unheld before the stop        %ld   (must be 0)\n", fr->orphaned);
	printf("  worker-%d (joined) holds %d leases at the end (fair share >= %d)\n",
		   fr->joined + 1, fr->joined_final, fr->fair_floor);
}

/* The stream invariants for one fleet. */
static void
check_stream(const FleetResult *fr)
{
	check(fr->spurious == 0, "a checkpoint failed although the worker owned the lease");
	if (opt.public_only)
	{
		/*
		 * Through failovers a lease may be lost to its expiry (the local
		 * deadline drops it first), and the records after its last
		 * acknowledged checkpoint are processed again: that is allowed.
		 * Processing again what a checkpoint acknowledged is not.
		 */
		check(fr->dup_records[WHY_NONE] + fr->dup_records[WHY_SPURIOUS] + fr->dup_after_ack == 0,
			  "records were processed twice other than after a lost lease, an unanswered checkpoint or the crash");
		check(fr->ended >= 3 * nstreams, "the split and merge parents were not all closed");
	}
	else if (fr->exactly_once)
	{
		/*
		 * The thief's steals and the restart make live workers lose
		 * leases, and a batch that did not commit is processed again:
		 * processing stays at-least-once.  A stale owner may even process
		 * records its successor acknowledged (after an acknowledged
		 * checkpoint), but that batch never commits: the output table,
		 * checked below, counts what committed.
		 */
		check(fr->dup_records[WHY_NONE] + fr->dup_records[WHY_SPURIOUS] == 0,
			  "records were processed twice other than after a lost lease, a rolled-back batch or the crash");
	}
	else
	{
		check(fr->lost == 0, "a live worker lost a lease it was processing (an abrupt steal or an expiry under load)");
		check(fr->dup_records[WHY_NONE] + fr->dup_records[WHY_LOST] + fr->dup_records[WHY_SPURIOUS] +
			  fr->dup_after_ack == 0,
			  "records were processed twice other than the crashed worker's unacknowledged tail");
	}
	check(fr->gaps == 0, "records up to a checkpoint were never processed");
	check(fr->orphaned == 0, "a takeable lease was held by nobody at the end");
	if (!opt.public_only)
		check(fr->closes >= 3, "the split and merge parents were not all closed");
	check(fr->joined_final > 0, "the joining worker got no leases");
}

/* The channels' final state, as the report reads it. */
typedef struct ChannelState
{
	long		unbound;		/* channels bound to nothing */
	long		twice;			/* channels bound twice in one scope */
	long		dead;			/* bindings held by ended conversations */
	long		open_failures;	/* unresolved compensation failures */
} ChannelState;

/* Counts the channels left unbound (and records each in the history). */
static long
count_unbound(PGconn *conn)
{
	long		unbound = 0;

	for (int t = 0; t < NTENANTS; t++)
		for (int c = 0; c < opt.channels; c++)
		{
			char		chan[16];
			long long	bound;

			channel_name(c, chan, sizeof(chan));
			bound = find_binding_answered(conn, t, chan);
			if (bound <= 0)
				unbound++;
			hist_printf("bound %s %s %s\n", tenant_user[t], chan, bound > 0 ? "yes" : "no");
		}
	return unbound;
}

/* Reads the channels' final state. */
static void
read_channel_state(PGconn *conn, ChannelState *cs)
{
	char		users[128];
	const char *p1[1] = {users};

	snprintf(users, sizeof(users), "{%s,%s}", tenant_user[0], tenant_user[1]);
	cs->unbound = count_unbound(conn);
	if (opt.public_only)
	{
		/*
		 * No public view lists a tenant's conversations: "bound twice" and
		 * "bound to an ended conversation" are checked by the normal demo
		 * only.  The compensation queue is seen through the monitoring
		 * function (every tenant's: the cluster is the demo's).
		 */
		PGresult   *res = must_repeat(conn, "SELECT COALESCE(sum(unresolved), 0)"
									  "  FROM lease.monitoring_compensation_failures()", 0, NULL);

		cs->open_failures = atol(PQgetvalue(res, 0, 0));
		PQclear(res);
		cs->twice = cs->dead = 0;
		return;
	}
	cs->twice = query_long(conn, "SELECT count(*) FROM (SELECT 1 FROM lease.conversations"
						   " WHERE user_id = ANY ($1::text[]) AND channel_id IS NOT NULL"
						   " GROUP BY user_id, agent_id, vault_id, environment_id, channel_id"
						   " HAVING count(*) > 1) x", 1, p1);
	cs->dead = query_long(conn, "SELECT count(*) FROM lease.conversations WHERE user_id = ANY ($1::text[])"
						  " AND channel_id IS NOT NULL AND status NOT IN ('pending', 'running', 'idle')", 1, p1);
	cs->open_failures = query_long(conn, "SELECT count(*) FROM lease.compensation_failures f"
								   " JOIN lease.conversations c ON c.id = f.failed_conversation_id"
								   " WHERE c.user_id = ANY ($1::text[]) AND f.resolved_at IS NULL", 1, p1);
}

/* The channels section of the report. */
static void
print_channel_report(const ChannelStats *ch, const ChannelState *cs)
{
	if (opt.public_only)
		printf("\n-- channels (%d tenants x %d channels, lease.default_sandbox_limit)\n",
			   NTENANTS, opt.channels);
	else
		printf("\n-- channels (%d tenants x %d channels, tenant limit %d active sandboxes)\n",
			   NTENANTS, opt.channels, opt.channels + 1);
	printf("  rotations: rotated %ld, busy %ld, binding_changed %ld, refused %ld, other %ld, errors %ld\n",
		   ch->rotations[0], ch->rotations[1], ch->rotations[2], ch->rotations[3],
		   ch->rotations[4], ch->rotations[5]);
	printf("  longest wait for a busy answer     %.0f ms\n", ch->busy_ms_max);
	printf("  restores: restored %ld, superseded %ld, failed %ld, errors %ld; retried from the queue %ld\n",
		   ch->restores[0], ch->restores[1], ch->restores[2], ch->restores[3], ch->retried);
	printf("  turns admitted %ld (refused %ld: conversation ended or failed meanwhile)\n",
		   ch->turns, ch->turn_errors);
	printf("  channels left unbound              %ld   (must be 0)\n", cs->unbound);
	printf("  channels seen unbound mid-run      %ld   (must be 0)\n", ch->unbound_seen);
	if (opt.public_only)
	{
		printf("  rotations whose connection was lost: nothing happened %ld, ambiguous (the channel moved) %ld\n",
			   ch->repeated, ch->ambiguous);
		printf("  bound twice / to an ended conversation / quota: not checked (no public view per tenant)\n");
	}
	else
	{
		printf("  channels bound twice in one scope  %ld   (must be 0)\n", cs->twice);
		printf("  bindings held by ended conversations %ld (must be 0)\n", cs->dead);
	}
	printf("  unresolved compensation failures   %ld   (must be 0)\n", cs->open_failures);
	if (!opt.public_only)
		printf("  quota exceeded                     %ld times in %ld samples (must be 0); peak active %ld / %ld\n",
			   ch->quota_exceeded, ch->quota_samples, ch->max_active[0], ch->max_active[1]);
}

/* The channel invariants. */
static void
check_channels(const ChannelStats *ch, const ChannelState *cs)
{
	check(cs->unbound == 0 && ch->unbound_seen == 0, "a channel was left bound to nothing");
	check(cs->twice == 0, "a channel was bound twice in one scope");
	check(cs->dead == 0, "a channel is bound to an ended conversation");
	check(cs->open_failures == 0, "a failed compensation was not drained");
	check(ch->quota_exceeded == 0, "a tenant exceeded its sandbox limit");
	check(ch->rotations[5] == 0 && ch->restores[3] == 0, "a rotation or restore raised an error");
	check(ch->rotations[0] > 0, "no rotation succeeded");
}

/* Reads, prints and checks the channels' final state. */
static void
print_channels(PGconn *conn, const ChannelStats *ch)
{
	ChannelState cs;

	read_channel_state(conn, &cs);
	print_channel_report(ch, &cs);
	check_channels(ch, &cs);
}

/* ---------------------------------------------------------------------- */

/*
 * --public-only: an app and tenants of this run alone (so nothing has to be
 * cleared first); --router: stream k and tenant k on partition k (the
 * router's routing functions say where a name goes).
 */
static void
setup_public_names(PGconn *conn, char *app, size_t len)
{
	unsigned	tag = (unsigned) time(NULL) ^ ((unsigned) getpid() << 16);
	char		mask[16];

	snprintf(app, len, "%s_%08x", APP_NAME, tag);
	snprintf(mask, sizeof(mask), "%d", opt.partitions - 1);
	nstreams = opt.router ? opt.partitions : 1;
	for (int st = 0; st < nstreams; st++)
	{
		for (int i = 0; opt.router; i++)
		{
			const char *p3[3] = {app, stream_names[st], mask};
			PGresult   *res;
			bool		here;

			snprintf(stream_names[st], sizeof(stream_names[st]), "%s-%d", STREAM_NAME, i);
			res = must(conn, "SELECT lease_router.stream_partition($1, $2) & $3::int", 3, p3);
			here = atoi(PQgetvalue(res, 0, 0)) == st;
			PQclear(res);
			if (here)
				break;
		}
	}
	for (int t = 0; t < NTENANTS; t++)
	{
		for (int i = 0;; i++)
		{
			const char *p2[2] = {tenant_buf[t], mask};
			PGresult   *res;
			bool		here;

			snprintf(tenant_buf[t], sizeof(tenant_buf[t]), "demo-tenant-%c-%08x%s%.0d",
					 'a' + t, tag, i > 0 ? "-" : "", i);
			if (!opt.router)
				break;
			res = must(conn, "SELECT lease_router.user_partition($1) & $2::int", 2, p2);
			here = atoi(PQgetvalue(res, 0, 0)) == t % opt.partitions;
			PQclear(res);
			if (here)
				break;
		}
		tenant_user[t] = tenant_buf[t];
	}
}

/* Prints the options. */
static void
usage(void)
{
	printf("usage: pg_lease_demo [options]\n"
		   "  --dsn STR              connection string (default: libpq environment, PGHOST etc.)\n"
		   "  --workers N            workers at the start (default %d; one more joins later)\n"
		   "  --shards N             shards in the stream, 12..%d (default %d; includes a split and a merge)\n"
		   "  --duration S           seconds per fleet run (default %d)\n"
		   "  --seed N               random seed (default: time)\n"
		   "  --lease-ms N           lease duration in ms (default %d)\n"
		   "  --channels N           channels per tenant (default %d)\n"
		   "  --legacy-checkpoints   also run the fleet with read-then-conditional-write checkpoints\n"
		   "                         guarded on lease_count, side by side (the default but with\n"
		   "                         --public-only, --router or --omit-hold)\n"
		   "  --no-legacy-checkpoints  ... do not\n"
		   "  --public-only          only pg_lease's public functions and views (no table reads, no\n"
		   "                         CREATE EXTENSION); an app and tenants of this run; the client rules\n"
		   "  --router               the DSN is a pg_lease_router router (implies --public-only): one\n"
		   "                         stream and one tenant per partition\n"
		   "  --partitions N         the router's partition count (default %d)\n"
		   "  --exactly-once         also run the fleet in transactional mode (output rows, hold_lease and\n"
		   "                         checkpoint in one transaction) under steals and backend kills\n"
		   "  --omit-hold            ... leaving hold_lease out (or PG_LEASE_DEMO_OMIT_HOLD=1): must fail\n"
		   "  --restart-cmd CMD      ... and run CMD (an immediate stop and start of the server) at 60%%\n"
		   "  --history DIR          record what the server acknowledged to each process in DIR and\n"
		   "                         check it after the run (with --public-only)\n"
		   "  --fast-failover MS     workers declare renew_every MS to take_leases and renew_leases,\n"
		   "                         renew every MS and process a shard only while its last renewal was\n"
		   "                         sent less than MS + min(lease/5, MS/2) ago (with --public-only)\n"
		   "  --fast-failover-workers N,M,...  ... only these workers (default: all), e.g. 1,3,5\n"
		   "  --spread-hosts         with a multi-host DSN (host=A,B port=P,Q): each process starts at\n"
		   "                         another host, in turn, and falls back to the next ones\n"
		   "  --quiet                no progress lines\n",
		   opt.workers, MAX_SHARDS, opt.shards, opt.duration, opt.lease_ms, opt.channels,
		   opt.partitions);
}

/* --fast-failover-workers: a comma-separated list of worker numbers, as a bit set (exits 2 on a bad one). */
static unsigned
parse_worker_list(const char *list)
{
	unsigned	set = 0;
	const char *p = list;

	while (*p != '\0')
	{
		char	   *end;
		long		n = strtol(p, &end, 10);

		if (end == p || n < 1 || n > MAX_WORKERS || (*end != ',' && *end != '\0'))
			die("--fast-failover-workers must list worker numbers 1..%d, comma-separated: %s", MAX_WORKERS, list);
		set |= 1u << (n - 1);
		p = *end == ',' ? end + 1 : end;
	}
	if (set == 0)
		die("--fast-failover-workers lists no worker");
	return set;
}

/* Reads and validates the options (exits 2 on a bad one). */
static void
parse_args(int argc, char **argv)
{
	static struct option longopts[] = {
		{"dsn", required_argument, NULL, 'd'},
		{"workers", required_argument, NULL, 'w'},
		{"shards", required_argument, NULL, 's'},
		{"duration", required_argument, NULL, 't'},
		{"seed", required_argument, NULL, 'r'},
		{"lease-ms", required_argument, NULL, 'l'},
		{"channels", required_argument, NULL, 'c'},
		{"legacy-checkpoints", no_argument, NULL, 'L'},
		{"no-legacy-checkpoints", no_argument, NULL, 'l' + 256},
		{"public-only", no_argument, NULL, 'P'},
		{"router", no_argument, NULL, 'R'},
		{"partitions", required_argument, NULL, 'N'},
		{"history", required_argument, NULL, 'H'},
		{"exactly-once", no_argument, NULL, 'E'},
		{"omit-hold", no_argument, NULL, 'O'},
		{"restart-cmd", required_argument, NULL, 'X'},
		{"fast-failover", required_argument, NULL, 'F'},
		{"fast-failover-workers", required_argument, NULL, 'V'},
		{"spread-hosts", no_argument, NULL, 'S'},
		{"quiet", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	int			c;

	opt.seed = (unsigned) time(NULL);
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1)
	{
		switch (c)
		{
			case 'd': opt.dsn = optarg; break;
			case 'w': opt.workers = atoi(optarg); break;
			case 's': opt.shards = atoi(optarg); break;
			case 't': opt.duration = atoi(optarg); break;
			case 'r': opt.seed = (unsigned) strtoul(optarg, NULL, 10); break;
			case 'l': opt.lease_ms = atoi(optarg); break;
			case 'c': opt.channels = atoi(optarg); break;
			case 'L': opt.legacy_set = 1; break;
			case 'l' + 256: opt.legacy_set = 0; break;
			case 'P': opt.public_only = true; break;
			case 'R': opt.router = opt.public_only = true; break;
			case 'N': opt.partitions = atoi(optarg); break;
			case 'H': opt.history = optarg; break;
			case 'E': opt.exactly_once = true; break;
			case 'O': opt.exactly_once = opt.omit_hold = true; break;
			case 'X': opt.restart_cmd = optarg; break;
			case 'F': opt.renew_every_ms = atoi(optarg) > 0 ? atoi(optarg) : -1; break;
			case 'V': opt.ff_workers = parse_worker_list(optarg); break;
			case 'S': opt.spread_hosts = true; break;
			case 'q': opt.quiet = true; break;
			case 'h': usage(); exit(0);
			default: usage(); exit(2);
		}
	}
	if (getenv("PG_LEASE_DEMO_OMIT_HOLD") != NULL && strcmp(getenv("PG_LEASE_DEMO_OMIT_HOLD"), "1") == 0)
		opt.exactly_once = opt.omit_hold = true;
	if (opt.exactly_once && opt.public_only)
		die("--exactly-once writes its output table next to the leases: not with --public-only or --router");
	if (opt.workers < 2 || opt.workers >= MAX_WORKERS)
		die("--workers must be between 2 and %d", MAX_WORKERS - 1);
	if (opt.shards < 12 || opt.shards > MAX_SHARDS)
		die("--shards must be between 12 and %d", MAX_SHARDS);
	if (opt.partitions < 1 || opt.partitions > MAX_STREAMS || (opt.partitions & (opt.partitions - 1)) != 0)
		die("--partitions must be a power of two up to %d", MAX_STREAMS);
	if (opt.router && opt.shards * opt.partitions > MAX_SHARDS)
		die("--shards times --partitions must be at most %d", MAX_SHARDS);
	/* by default the legacy fleet runs wherever it can: it writes the lease table */
	opt.legacy = opt.legacy_set == 1 || (opt.legacy_set == -1 && !opt.public_only && !opt.omit_hold);
	if (opt.public_only && opt.legacy)
		die("--legacy-checkpoints writes the lease table: not with --public-only or --router");
	if (opt.history != NULL && !opt.public_only)
		die("--history needs --public-only (or --router)");
	if (opt.duration < 6 || opt.duration > 7200)
		die("--duration must be between 6 and 7200 seconds");
	if (opt.lease_ms < 300)
		die("--lease-ms must be at least 300");
	if (opt.channels < 1 || opt.channels > MAX_CHANNELS)
		die("--channels must be between 1 and %d", MAX_CHANNELS);
	if (opt.renew_every_ms != 0 && (opt.renew_every_ms < 100 || opt.renew_every_ms > 2000))
		die("--fast-failover must be between 100 and 2000 ms (its margin stays within lease.liveness_grace's default 1 s)");
	if (opt.renew_every_ms != 0 && !opt.public_only)
		die("--fast-failover needs the client rules: with --public-only or --router");
}

/* What the compensation scene saw, for the report. */
typedef struct CompScene
{
	char		first[24];		/* the restore while a turn holds the previous conversation */
	double		first_ms;
	long		queued;			/* unresolved pairs it added to the queue */
	long long	held_by;		/* who holds the channel meanwhile */
	char		retry_locked[24];	/* retry_failed_compensations while the turn runs */
	char		retry_free[24];	/* ... and after it committed */
	long long	bound_after;
	long		left;			/* unresolved pairs it left */
} CompScene;

/* Unresolved failed restores, through the monitoring function (every tenant's). */
static long
unresolved_compensations(PGconn *conn)
{
	return query_long(conn, "SELECT COALESCE(sum(unresolved), 0) FROM lease.monitoring_compensation_failures()",
					  0, NULL);
}

/* The outcome retry_failed_compensations gives the pair (prev, repl), "absent" when it gives none. */
static void
retry_pair(PGconn *conn, const char *prev, const char *repl, char *outcome, size_t len)
{
	const char *p2[2] = {prev, repl};
	PGresult   *res = must(conn, "SELECT r.outcome FROM lease.retry_failed_compensations() r"
						   " WHERE r.previous_conversation_id = $1::bigint AND r.failed_conversation_id = $2::bigint",
						   2, p2);

	snprintf(outcome, len, "%s", PQntuples(res) == 1 ? PQgetvalue(res, 0, 0) : "absent");
	PQclear(res);
}

/* The conversation holding the scene's channel, 0 when none. */
static long long
scene_binding(PGconn *conn, const char *tenant)
{
	const char *p5[5] = {tenant, AGENT, NULL, NULL, "compensation"};
	PGresult   *res = must(conn, "SELECT lease.find_channel_conversation($1, $2, $3, $4, $5)", 5, p5);
	long long	id = PQgetisnull(res, 0, 0) ? 0 : atoll(PQgetvalue(res, 0, 0));

	PQclear(res);
	return id;
}

/*
 * The compensation queue at work, on a tenant and channel of its own: a
 * rotation whose replacement "fails to start", restored while a turn on the
 * previous conversation is being admitted (its row locked past
 * lease.rotation_lock_timeout): the restore answers failed and queues the
 * pair, the replacement keeps the channel; a retry while the turn runs fails
 * again; once it committed, the retry restores the binding.
 */
static void
run_compensation_scene(PGconn *conn, CompScene *cs)
{
	char		tenant[96];
	char		prev[24], repl[24];
	const char *p5[5];
	const char *p6[6];
	const char *p1[1] = {prev};
	PGconn	   *turn = connect_db("demo-compensation-turn");
	PGresult   *res;
	long		before;
	double		t0;

	memset(cs, 0, sizeof(*cs));
	snprintf(tenant, sizeof(tenant), "%s-compensation", tenant_user[0]);
	p5[0] = tenant; p5[1] = AGENT; p5[2] = NULL; p5[3] = NULL; p5[4] = "compensation";
	must_exec(conn, "SET client_min_messages = error");	/* the failed restores' WARNINGs */
	must_exec(conn, "SET lease.rotation_lock_timeout = '200ms'");
	before = unresolved_compensations(conn);
	res = must(conn, "SELECT conversation_id FROM lease.start_conversation($1, $2, $3, $4, $5)", 5, p5);
	snprintf(prev, sizeof(prev), "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
	p6[0] = tenant; p6[1] = AGENT; p6[2] = NULL; p6[3] = NULL; p6[4] = "compensation"; p6[5] = prev;
	res = must(conn, "SELECT outcome, conversation_id FROM lease.rotate_channel($1, $2, $3, $4, $5, $6)", 6, p6);
	if (strcmp(PQgetvalue(res, 0, 0), "rotated") != 0)
		die("compensation scene: rotate_channel answered %s", PQgetvalue(res, 0, 0));
	snprintf(repl, sizeof(repl), "%s", PQgetvalue(res, 0, 1));
	PQclear(res);

	/* a turn being admitted on the previous conversation, its transaction open */
	PQclear(must(turn, "BEGIN", 0, NULL));
	PQclear(must(turn, "SELECT lease.admit_turn($1::bigint)", 1, p1));

	{
		const char *p2[2] = {prev, repl};

		t0 = now_ms();
		res = must(conn, "SELECT lease.restore_rotated_channel($1, $2)", 2, p2);
		cs->first_ms = now_ms() - t0;
		snprintf(cs->first, sizeof(cs->first), "%s", PQgetvalue(res, 0, 0));
		PQclear(res);
	}
	cs->queued = unresolved_compensations(conn) - before;
	cs->held_by = scene_binding(conn, tenant);
	retry_pair(conn, prev, repl, cs->retry_locked, sizeof(cs->retry_locked));
	PQclear(must(turn, "COMMIT", 0, NULL));
	PQfinish(turn);
	retry_pair(conn, prev, repl, cs->retry_free, sizeof(cs->retry_free));
	cs->bound_after = scene_binding(conn, tenant);
	cs->left = unresolved_compensations(conn) - before;

	/* ends the restored conversation, so that a later run finds the channel free */
	PQclear(must(conn, "SELECT lease.end_conversation($1::bigint)", 1, p1));
	must_exec(conn, "RESET lease.rotation_lock_timeout");
	must_exec(conn, "SET client_min_messages = warning");

	printf("\n-- compensation queue (tenant %s: a restore that fails, is queued, then retried)\n", tenant);
	printf("  restore while a turn holds conversation %s   %s after %.0f ms   (must be failed)\n",
		   prev, cs->first, cs->first_ms);
	printf("  pairs queued in lease.compensation_failures  %ld   (must be 1)\n", cs->queued);
	printf("  channel held meanwhile by                    %lld   (must be the replacement, %s)\n",
		   cs->held_by, repl);
	printf("  retry while the turn still runs              %s   (must be failed)\n", cs->retry_locked);
	printf("  retry after the turn committed               %s   (must be restored)\n", cs->retry_free);
	printf("  channel bound afterwards to                  %lld   (must be %s)\n", cs->bound_after, prev);
	printf("  pairs left in the queue                      %ld   (must be 0)\n", cs->left);
	check(strcmp(cs->first, "failed") == 0, "a restore blocked by a turn did not answer failed");
	check(cs->queued == 1, "a failed restore was not queued");
	check(cs->held_by == atoll(repl), "the replacement did not keep the channel while the restore was queued");
	check(strcmp(cs->retry_locked, "failed") == 0, "a retry while the turn held the conversation did not fail");
	check(strcmp(cs->retry_free, "restored") == 0, "the retry after the turn did not restore the binding");
	check(cs->bound_after == atoll(prev), "the channel is not bound to the previous conversation after the retry");
	check(cs->left == 0, "the retried pair is still in the queue");
}

/* Runs the fleet (and the legacy one), then the report; the exit status is the verdict. */
int
main(int argc, char **argv)
{
	PGconn	   *conn;
	FleetResult fleet = {.label = "pg_lease"};
	FleetResult legacy = {.label = "legacy read-then-write"};
	FleetResult eo = {.label = "pg_lease, exactly once", .exactly_once = true};
	ChannelStats ch;
	CompScene	scene;

	char		app[64] = APP_NAME;

	parse_args(argc, argv);
	setvbuf(stdout, NULL, _IOLBF, 0);
	srand(opt.seed);
	shm = mmap(NULL, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (shm == MAP_FAILED)
		die("mmap failed: %s", strerror(errno));
	if (opt.history != NULL && mkdir(opt.history, 0777) != 0 && errno != EEXIST)
		die("cannot create %s: %s", opt.history, strerror(errno));
	hist_open("main");

	conn = connect_db("pg_lease_demo");
	must_exec(conn, "SET client_min_messages = warning");
	if (opt.public_only)
		setup_public_names(conn, app, sizeof(app));
	else
		must_exec(conn, "CREATE EXTENSION IF NOT EXISTS pg_lease");
	define_shards();
	printf("pg_lease demo: seed %u, %d workers (+1 joining), %d shards, %ds per fleet, lease %d ms, server %s\n",
		   opt.seed, opt.workers, nshards, opt.duration, opt.lease_ms, PQparameterStatus(conn, "server_version"));
	if (opt.public_only)
		printf("public functions and views only%s: app %s, streams %s%s%s, tenants %s and %s\n",
			   opt.router ? ", through a router" : "", app, stream_names[0],
			   nstreams > 1 ? " and " : "", nstreams > 1 ? stream_names[1] : "",
			   tenant_user[0], tenant_user[1]);
	if (opt.renew_every_ms > 0)
	{
		printf("fast failover (rule 6): renew_every %d ms, margin %.0f ms, for", opt.renew_every_ms, ff_margin_ms());
		for (int w = 0; w <= opt.workers; w++)
			if (ff_worker(w))
				printf(" worker-%d", w + 1);
		printf("\n");
	}

	/* --omit-hold is the negative control of --exactly-once: its fleet alone */
	if (!opt.omit_hold)
	{
		run_fleet(conn, app, false, true, &fleet);
		ch = shm->ch;
		print_timeline(&fleet);
		print_stream(&fleet, true);
		check_stream(&fleet);
		print_channels(conn, &ch);
		if (!opt.router)
			run_compensation_scene(conn, &scene);
	}
	if (opt.history != NULL)
		failures += check_history(conn, app, &fleet);

	if (opt.legacy)
	{
		run_fleet(conn, APP_NAME "_legacy", true, false, &legacy);
		print_timeline(&legacy);
		print_stream(&legacy, false);
		printf("\n-- side by side                     %12s %12s\n", "pg_lease", "legacy");
		printf("  checkpoints written               %12ld %12ld\n", fleet.checkpoints, legacy.checkpoints);
		printf("  spurious checkpoint failures      %12ld %12ld\n", fleet.spurious, legacy.spurious);
		printf("  records processed more than once  %12ld %12ld\n",
			   fleet.dup_records[WHY_CRASH] + fleet.dup_records[WHY_SPURIOUS] + fleet.dup_records[WHY_LOST] + fleet.dup_after_ack,
			   legacy.dup_records[WHY_CRASH] + legacy.dup_records[WHY_SPURIOUS] + legacy.dup_records[WHY_LOST] + legacy.dup_after_ack);
		printf("    of them after spurious failures %12ld %12ld\n",
			   fleet.dup_records[WHY_SPURIOUS], legacy.dup_records[WHY_SPURIOUS]);
		printf("  (a spurious failure: the checkpoint was refused although the worker owned the lease,\n"
			   "   because a renewal moved lease_count between the read and the conditional write)\n");
		check(fleet.spurious == 0, "pg_lease refused a checkpoint of the lease's owner");
	}

	if (opt.exactly_once)
	{
		const char *p1[1] = {APP_NAME "_exactly_once"};

		must_exec(conn, "CREATE TABLE IF NOT EXISTS public.pg_lease_demo_output"
				  " (app_name text, shard_id text, record bigint, worker text)");	/* no unique constraint */
		PQclear(must(conn, "DELETE FROM public.pg_lease_demo_output WHERE app_name = $1", 1, p1));
		eo_fleet = true;
		run_fleet(conn, p1[0], false, false, &eo);
		eo_fleet = false;
		print_timeline(&eo);
		print_stream(&eo, true);
		check_stream(&eo);
		analyse_output(conn, p1[0], &eo);
		print_exactly_once(&fleet, &eo);
		check_exactly_once(&eo);
	}

	PQfinish(conn);
	if (failures > 0)
	{
		printf("\nverdict: %d invariant(s) BROKEN (seed %u)\n", failures, opt.seed);
		return 1;
	}
	if (opt.public_only)
		printf("\nverdict: every invariant held: no acknowledged checkpoint lost, no lease owned twice at once,"
			   " nothing processed again but after a lost lease or the crash, no channel left unbound\n");
	else
		printf("\nverdict: every invariant held: nothing lost, nothing done twice but the crashed"
			   " worker's unacknowledged tail, no channel left unbound, no quota exceeded%s\n",
			   opt.exactly_once ? "; in transactional mode every record written exactly once" : "");
	return 0;
}
