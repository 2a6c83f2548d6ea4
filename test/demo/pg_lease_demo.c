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
 * --legacy-checkpoints runs the same fleet twice: with lease.update_checkpoint
 * and with the client-side read-then-conditional-write checkpoint guarded on
 * lease_count, and prints the two side by side.
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "libpq-fe.h"

#define MAX_WORKERS		16
#define MAX_SHARDS		256
#define MAX_RANGES		(1 << 20)
#define MAX_SAMPLES		1200
#define MAX_CHANNELS	16
#define APP_NAME		"pg_lease_demo"
#define STREAM_NAME		"orders"
#define FINITE_RECORDS	120			/* records in a shard that ends (split/merge parents) */

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
	bool		quiet;
	int			lease_ms;		/* lease duration */
	int			batch;			/* records per batch */
	int			work_ms;		/* simulated processing time per batch */
	int			channels;		/* per tenant */
	int			fail_pct;		/* replacement starts that fail */
} Options;

static Options opt = {
	.dsn = NULL,
	.workers = 4,
	.shards = 32,
	.duration = 24,
	.seed = 0,
	.legacy = false,
	.quiet = false,
	.lease_ms = 3000,
	.batch = 10,
	.work_ms = 15,
	.channels = 3,
	.fail_pct = 25,
};

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
	WHY_CRASH = 3				/* worker killed before the checkpoint */
};

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

static double
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000.0 + ts.tv_nsec / 1e6;
}

static void
sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long) (ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

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

static PGconn *
connect_db(const char *appname)
{
	const char *keys[] = {"dbname", "application_name", NULL};
	const char *vals[] = {opt.dsn, appname, NULL};
	PGconn	   *conn = PQconnectdbParams(keys, vals, 1);

	if (PQstatus(conn) != CONNECTION_OK)
		die("cannot connect: %s", PQerrorMessage(conn));
	return conn;
}

/* Runs a parameterised statement; returns the result or NULL (error counted by caller). */
static PGresult *
run(PGconn *conn, const char *sql, int n, const char *const *params)
{
	PGresult   *res = PQexecParams(conn, sql, n, NULL, params, NULL, NULL, 0);
	ExecStatusType st = PQresultStatus(res);

	if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)
		return res;
	PQclear(res);
	return NULL;
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

static void
must_exec(PGconn *conn, const char *sql)
{
	PQclear(must(conn, sql, 0, NULL));
}

/* ---------------------------------------------------------------------- */
/* The stream: shards, lineage, finite parents */

typedef struct ShardDef
{
	char		id[32];
	char		parents[64];	/* text[] literal */
	int64_t		end;			/* last record of an ending shard, or 0 */
} ShardDef;

static ShardDef shard_defs[MAX_SHARDS];
static int	nshards;

/* A stream with a split (split-parent -> split-a, split-b) and a merge (merge-a + merge-b -> merge-child). */
static void
define_shards(void)
{
	int			plain = opt.shards - 6;

	nshards = 0;
	for (int i = 0; i < plain; i++)
	{
		snprintf(shard_defs[nshards].id, sizeof(shard_defs[0].id), "shard-%03d", i);
		strcpy(shard_defs[nshards].parents, "{}");
		shard_defs[nshards++].end = 0;
	}
	strcpy(shard_defs[nshards].id, "split-parent");
	strcpy(shard_defs[nshards].parents, "{}");
	shard_defs[nshards++].end = FINITE_RECORDS;
	strcpy(shard_defs[nshards].id, "split-a");
	strcpy(shard_defs[nshards].parents, "{split-parent}");
	shard_defs[nshards++].end = 0;
	strcpy(shard_defs[nshards].id, "split-b");
	strcpy(shard_defs[nshards].parents, "{split-parent}");
	shard_defs[nshards++].end = 0;
	strcpy(shard_defs[nshards].id, "merge-a");
	strcpy(shard_defs[nshards].parents, "{}");
	shard_defs[nshards++].end = FINITE_RECORDS;
	strcpy(shard_defs[nshards].id, "merge-b");
	strcpy(shard_defs[nshards].parents, "{}");
	shard_defs[nshards++].end = FINITE_RECORDS + 40;
	strcpy(shard_defs[nshards].id, "merge-child");
	strcpy(shard_defs[nshards].parents, "{merge-a,merge-b}");
	shard_defs[nshards++].end = 0;
}

static int
shard_index(const char *id)
{
	for (int i = 0; i < nshards; i++)
		if (strcmp(shard_defs[i].id, id) == 0)
			return i;
	return -1;
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
} Held;

static Held held[MAX_SHARDS];
static pthread_mutex_t held_mu = PTHREAD_MUTEX_INITIALIZER;
static int	me;
static char me_name[32];
static const char *app_name;
static char lease_interval[32];
static volatile sig_atomic_t got_term;

static void
on_term(int sig)
{
	(void) sig;
	got_term = 1;
}

static bool
worker_running(void)
{
	return !got_term && !shm->stop_workers;
}

/* Renewer thread: renew everything held, every lease_duration / 3. */
static void *
renewer_main(void *arg)
{
	PGconn	   *conn = (PGconn *) arg;
	const char *params[4] = {app_name, STREAM_NAME, me_name, lease_interval};

	while (worker_running())
	{
		PGresult   *res = run(conn,
							  "SELECT shard_id, lease_count, handoff_to, lease_epoch"
							  "  FROM lease.renew_leases($1, $2, $3, $4::interval)",
							  4, params);
		int			seen[MAX_SHARDS] = {0};

		if (res == NULL)
			__atomic_fetch_add(&shm->w[me].errors, 1, __ATOMIC_RELAXED);
		else
		{
			pthread_mutex_lock(&held_mu);
			for (int r = 0; r < PQntuples(res); r++)
			{
				int			s = shard_index(PQgetvalue(res, r, 0));
				int64_t		epoch = strtoll(PQgetvalue(res, r, 3), NULL, 10);

				if (s < 0)
					continue;
				seen[s] = 1;
				/*
				 * A lease that is new to us (a transfer from its holder's
				 * release_lease arrives this way) or held under another
				 * epoch than we knew (lost and got back in between): its
				 * position must be read again.
				 */
				if (!held[s].owned || held[s].epoch != epoch)
					held[s].pos_valid = 0;
				held[s].owned = 1;
				held[s].epoch = epoch;
				held[s].handoff = !PQgetisnull(res, r, 2);
			}
			for (int s = 0; s < nshards; s++)
			{
				if (!seen[s] && held[s].owned)
				{
					held[s].owned = 0;
					held[s].pos_valid = 0;
				}
			}
			pthread_mutex_unlock(&held_mu);
			PQclear(res);
			shm->w[me].renew_rounds++;
		}
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
 * role may call); false when it is not ours after all, is ours under another
 * epoch than take_leases / renew_leases reported (the renewer or the next
 * balancing round brings the new one), or has ended.
 */
static bool
load_position(PGconn *conn, int s)
{
	char		epoch[32];
	const char *params[5] = {app_name, STREAM_NAME, me_name, shard_defs[s].id, epoch};
	PGresult   *res;
	bool		ok = false;

	pthread_mutex_lock(&held_mu);
	snprintf(epoch, sizeof(epoch), "%" PRId64, held[s].epoch);
	pthread_mutex_unlock(&held_mu);
	res = run(conn,
			  "SELECT checkpoint FROM lease.my_leases($1, $2, $3)"
			  " WHERE shard_id = $4 AND handoff_from IS NULL AND lease_epoch = $5::bigint",
			  5, params);
	if (res != NULL && PQntuples(res) == 1)
	{
		const char *ck = PQgetvalue(res, 0, 0);

		if (strcmp(ck, "SHARD_END") != 0)
		{
			held[s].pos = (strcmp(ck, "TRIM_HORIZON") == 0 || strcmp(ck, "LATEST") == 0)
				? 0 : strtoll(ck, NULL, 10);
			held[s].pos_epoch = strtoll(epoch, NULL, 10);
			held[s].pos_valid = 1;
			ok = true;
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
	const char *params[5] = {app_name, STREAM_NAME, me_name, shard_defs[s].id, epoch};
	PGresult   *res = run(conn,
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
drop_shard(int s)
{
	pthread_mutex_lock(&held_mu);
	held[s].owned = held[s].pos_valid = held[s].handoff = 0;
	pthread_mutex_unlock(&held_mu);
}

/* One balancing round: take what is free, ask for handoffs. */
static void
balance(PGconn *conn)
{
	const char *params[4] = {app_name, STREAM_NAME, me_name, lease_interval};
	PGresult   *res = run(conn,
						  "SELECT shard_id, action, lease_epoch"
						  "  FROM lease.take_leases($1, $2, $3, $4::interval, NULL, 2)",
						  4, params);

	if (res == NULL)
	{
		shm->w[me].errors++;
		return;
	}
	for (int r = 0; r < PQntuples(res); r++)
	{
		int			s = shard_index(PQgetvalue(res, r, 0));
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
			pthread_mutex_unlock(&held_mu);
			shm->w[me].taken++;
		}
		else if (strcmp(action, "handoff_requested") == 0)
			shm->w[me].handoffs_requested++;
	}
	PQclear(res);
}

/*
 * Writes the checkpoint for a processed batch, fenced with the token the
 * batch started under (pg_lease) or guarded on the lease_count read before
 * it (legacy); returns WHY_NONE when acknowledged.
 */
static int
checkpoint_batch(PGconn *conn, int s, int64_t last, const char *legacy_count, int64_t epoch)
{
	char		ck[32];
	char		token[32];
	const char *params[6] = {app_name, STREAM_NAME, shard_defs[s].id, me_name, ck,
	legacy_count != NULL ? legacy_count : token};
	bool		written;

	snprintf(ck, sizeof(ck), "%" PRId64, last);
	snprintf(token, sizeof(token), "%" PRId64, epoch);
	if (legacy_count == NULL)
		written = call_true(conn, "SELECT lease.update_checkpoint($1, $2, $3, $4, $5, 0, $6::bigint)",
							6, params);
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
	const char *params[4] = {app_name, STREAM_NAME, shard_defs[s].id, me_name};
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

/* Processes one batch of one held shard (or honours a handoff, or closes an ended shard). */
static void
work_shard(PGconn *conn, int s, bool legacy)
{
	const char *key[4] = {app_name, STREAM_NAME, shard_defs[s].id, me_name};
	int			owned, handoff;
	int64_t		first, last;
	long		slot;
	char		count[32];
	int64_t		epoch;
	int			why;

	pthread_mutex_lock(&held_mu);
	owned = held[s].owned;
	handoff = held[s].handoff;
	pthread_mutex_unlock(&held_mu);
	if (!owned)
		return;
	if (!held[s].pos_valid && !load_position(conn, s))
	{
		drop_shard(s);
		return;
	}

	if (handoff)
	{
		/* every processed batch is already checkpointed: hand the shard over */
		if (call_true(conn, "SELECT lease.release_lease($1, $2, $3, $4)", 4, key))
			shm->w[me].handoffs_honoured++;
		drop_shard(s);
		return;
	}

	if (shard_defs[s].end > 0 && held[s].pos >= shard_defs[s].end)
	{
		if (call_true(conn, "SELECT lease.close_shard($1, $2, $3, $4)", 4, key))
			shm->w[me].closes++;
		drop_shard(s);
		return;
	}

	if (legacy && !legacy_read(conn, s, count, sizeof(count)))
	{
		drop_shard(s);
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
	sleep_ms(opt.work_ms);		/* "process" the records */
	shm->w[me].batches++;

	why = checkpoint_batch(conn, s, last, legacy ? count : NULL, epoch);
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
	shm->w[me].ckpt_lost++;
	drop_shard(s);
}

/* A worker process; never returns. */
static void
worker_main(int index, const char *app, bool legacy)
{
	PGconn	   *conn, *rconn;
	pthread_t	renewer;
	double		last_balance = 0;

	me = index;
	app_name = app;
	snprintf(me_name, sizeof(me_name), "worker-%d", index + 1);
	snprintf(lease_interval, sizeof(lease_interval), "%d milliseconds", opt.lease_ms);
	signal(SIGTERM, on_term);
	memset(held, 0, sizeof(held));

	conn = connect_db(me_name);
	rconn = connect_db(me_name);
	PQclear(PQexec(conn, "SET lease.handoff_timeout = '5s'"));
	PQclear(PQexec(rconn, "SET lease.handoff_timeout = '5s'"));
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
		const char *key[4] = {app_name, STREAM_NAME, shard_defs[s].id, me_name};

		if (held[s].owned &&
			call_true(conn, "SELECT lease.release_lease($1, $2, $3, $4)", 4, key))
			shm->w[me].releases_at_stop++;
	}
	PQfinish(rconn);
	PQfinish(conn);
	_exit(0);
}

/* ---------------------------------------------------------------------- */
/* The chat side: rotations, restores and turns */

#define NTENANTS 2
static const char *tenant_user[NTENANTS] = {"demo-tenant-a", "demo-tenant-b"};
static const char *tenant_vault[NTENANTS] = {NULL, "vault-1"};	/* scope with and without a vault */
static const char *tenant_env[NTENANTS] = {NULL, "prod"};
static const char *AGENT = "agent-1";

static void
channel_name(int c, char *buf, size_t len)
{
	snprintf(buf, len, "C%02d", c + 1);
}

/* The conversation bound to a channel, or 0. */
static long long
find_binding(PGconn *conn, int t, const char *chan)
{
	const char *params[5] = {tenant_user[t], AGENT, tenant_vault[t], tenant_env[t], chan};
	PGresult   *res = run(conn, "SELECT lease.find_channel_conversation($1, $2, $3, $4, $5)", 5, params);
	long long	id = 0;

	if (res != NULL && PQntuples(res) == 1 && !PQgetisnull(res, 0, 0))
		id = atoll(PQgetvalue(res, 0, 0));
	if (res != NULL)
		PQclear(res);
	return id;
}

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

/*
 * Rotates channels at random; a share of the replacements "fail to start" and
 * are restored.  Two rotators run at once, so rotations of one tenant compete
 * for its one spare sandbox (some are refused) and for the same channel
 * (binding_changed, busy).
 */
static void
rotator_main(void)
{
	PGconn	   *conn = connect_db("demo-rotator");
	unsigned	rng = opt.seed ^ (0x9e3779b9u * (unsigned) (rotator_index + 1));
	bool		drains = rotator_index == 0;

	while (!shm->stop_channels)
	{
		int			t = rand_r(&rng) % NTENANTS;
		char		chan[16];
		long long	from;
		char		from_s[24];
		const char *params[6];
		PGresult   *res;
		double		t0;
		int			k;

		channel_name(rand_r(&rng) % opt.channels, chan, sizeof(chan));
		from = find_binding(conn, t, chan);
		if (from == 0)
		{
			shm->ch.unbound_seen++;
			sleep_ms(10);
			continue;
		}
		snprintf(from_s, sizeof(from_s), "%lld", from);
		params[0] = tenant_user[t];
		params[1] = AGENT;
		params[2] = tenant_vault[t];
		params[3] = tenant_env[t];
		params[4] = chan;
		params[5] = from_s;
		t0 = now_ms();
		res = run(conn, "SELECT outcome, conversation_id, previous_conversation_id"
				  "  FROM lease.rotate_channel($1, $2, $3, $4, $5, $6)", 6, params);
		if (res == NULL || PQntuples(res) != 1)
		{
			shm->ch.rotations[5]++;
			if (res != NULL)
				PQclear(res);
			continue;
		}
		k = outcome_index(PQgetvalue(res, 0, 0), rotation_outcomes, 4);
		shm->ch.rotations[k]++;
		if (k == 1 && now_ms() - t0 > shm->ch.busy_ms_max)
			shm->ch.busy_ms_max = now_ms() - t0;
		if (k == 0)
		{
			char		new_s[24];
			const char *pair[2] = {from_s, new_s};

			snprintf(new_s, sizeof(new_s), "%s", PQgetvalue(res, 0, 1));
			sleep_ms(5);		/* the platform starts the replacement's worker */
			if ((int) (rand_r(&rng) % 100) < opt.fail_pct)
			{
				PGresult   *r2 = run(conn, "SELECT lease.restore_rotated_channel($1, $2)", 2, pair);

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
				PGresult   *r2 = run(conn, "SELECT lease.end_conversation($1)", 1, pair);

				if (r2 != NULL)
				{
					shm->ch.ends++;
					PQclear(r2);
				}
			}
		}
		PQclear(res);
		sleep_ms(15);
	}

	/* drain the compensation queue once the turns have stopped */
	for (int i = 0; drains && i < 20; i++)
	{
		PGresult   *res = run(conn, "SELECT count(*) FROM lease.compensation_failures WHERE resolved_at IS NULL", 0, NULL);
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
	PQfinish(conn);
	_exit(0);
}

/* Admits turns; each holds its conversation row for a while, as a running turn does. */
static void
turns_main(void)
{
	PGconn	   *conn = connect_db("demo-turns");
	unsigned	rng = opt.seed ^ 0x85ebca6bu;

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
		if (conv == 0)
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
	_exit(0);
}

/* Clears the demo's own rows (only its app and tenants) and binds every channel. */
static void
setup_channels(PGconn *conn)
{
	char		users[128];
	char		limit[16];
	const char *p1[1] = {users};

	snprintf(users, sizeof(users), "{%s,%s}", tenant_user[0], tenant_user[1]);
	PQclear(must(conn, "DELETE FROM lease.compensation_failures f USING lease.conversations c"
				 " WHERE c.id = f.failed_conversation_id AND c.user_id = ANY ($1::text[])", 1, p1));
	PQclear(must(conn, "DELETE FROM lease.turns t USING lease.conversations c"
				 " WHERE c.id = t.conversation_id AND c.user_id = ANY ($1::text[])", 1, p1));
	PQclear(must(conn, "DELETE FROM lease.conversations WHERE user_id = ANY ($1::text[])", 1, p1));
	PQclear(must(conn, "DELETE FROM lease.sandboxes WHERE user_id = ANY ($1::text[])", 1, p1));

	/* one spare sandbox per tenant: concurrent rotations compete for it, some are refused */
	snprintf(limit, sizeof(limit), "%d", opt.channels + 1);
	for (int t = 0; t < NTENANTS; t++)
	{
		const char *p2[2] = {tenant_user[t], limit};

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
	long		dup_records[4]; /* by WHY_*: records processed more than once */
	long		dup_after_ack;	/* processed again although already acknowledged */
	long		gaps;			/* records up to the final checkpoint never processed */
	long		orphaned;		/* takeable leases nobody held before the stop */
	long		handoffs_requested, handoffs_honoured, taken, closes;
	long		errors;			/* worker statements that raised */
	int			joined_final;	/* leases the joining worker held at the end */
	int			fair_floor;
} FleetResult;

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

/* Samples live leases per worker into shm->load. */
static void
sample_leases(PGconn *conn, const char *app, int sample)
{
	const char *params[2] = {app, STREAM_NAME};
	PGresult   *res = run(conn,
						  "SELECT lease_owner, count(*) FROM lease.shard_leases"
						  " WHERE app_name = $1 AND stream_name = $2 AND lease_owner IS NOT NULL"
						  "   AND lease_expires_at > clock_timestamp() GROUP BY lease_owner",
						  2, params);

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

	PQclear(must(conn, "DELETE FROM lease.shard_leases WHERE app_name = $1", 1, p1));
	for (int s = 0; s < nshards; s++)
	{
		const char *p4[4] = {app, STREAM_NAME, shard_defs[s].id, shard_defs[s].parents};

		PQclear(must(conn, "SELECT lease.create_lease($1, $2, $3, $4::text[])", 4, p4));
	}
}

/* Walks the processing log: duplicates by cause, gaps. */
static void
analyse(PGconn *conn, const char *app, FleetResult *fr)
{
	long		n = shm->nranges < MAX_RANGES ? shm->nranges : MAX_RANGES;

	for (int s = 0; s < nshards; s++)
	{
		const char *p3[3] = {app, STREAM_NAME, shard_defs[s].id};
		PGresult   *res = must(conn, "SELECT checkpoint FROM lease.shard_leases"
							   " WHERE app_name = $1 AND stream_name = $2 AND shard_id = $3", 3, p3);
		const char *ck = PQgetvalue(res, 0, 0);
		int64_t		final = strcmp(ck, "SHARD_END") == 0 ? shard_defs[s].end
			: (ck[0] >= '0' && ck[0] <= '9') ? strtoll(ck, NULL, 10) : 0;
		int64_t		maxrec = final;
		long	   *owner;

		PQclear(res);
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
				long		prev = owner[rec] - 1;

				if (prev < 0)
				{
					owner[rec] = i + 1;
					fr->records++;
					continue;
				}
				/* processed again: blame the earlier, unacknowledged attempt */
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
				owner[rec] = i + 1;
			}
		}
		for (int64_t rec = 1; rec <= final; rec++)
			if (owner[rec] == 0)
				fr->gaps++;
		free(owner);
	}
}

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
	if (shm->ch.quota_samples > 0)
		printf("  | rotations %ld (busy %ld, refused %ld)  restores %ld  turns %ld",
			   shm->ch.rotations[0], shm->ch.rotations[1], shm->ch.rotations[3],
			   shm->ch.restores[0] + shm->ch.restores[1] + shm->ch.restores[2],
			   shm->ch.turns);
	printf("\n");
	fflush(stdout);
}

/* Runs one fleet for opt.duration seconds: crash at 35 %, join at 55 %. */
static void
run_fleet(PGconn *conn, const char *app, bool legacy, bool channels, FleetResult *fr)
{
	pid_t		chan_pids[3] = {0, 0, 0};
	double		start, crash_at, join_at, end_at;
	int			crashed = 0, joined = 0;

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

	start = now_ms();
	crash_at = start + opt.duration * 350.0;
	join_at = start + opt.duration * 550.0;
	end_at = start + opt.duration * 1000.0;
	while (now_ms() < end_at && shm->sample < MAX_SAMPLES - 1)
	{
		sample_leases(conn, app, shm->sample);
		if (channels)
			sample_quota(conn);
		if (shm->sample % 2 == 0)
			print_progress(fr, now_ms() - start);
		if (!crashed && now_ms() >= crash_at)
		{
			kill(shm->w[0].pid, SIGKILL);
			waitpid(shm->w[0].pid, NULL, 0);
			shm->w[0].crashed = shm->sample;
			crashed = 1;
			printf("  !! worker-1 killed (SIGKILL): nothing released; its leases must expire and be taken over\n");
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
	fr->samples = shm->sample;

	/* before stopping: every takeable lease must be held by a live worker */
	{
		const char *p2[2] = {app, STREAM_NAME};

		fr->orphaned = query_long(conn,
								  "SELECT count(*) FROM lease.shard_leases l"
								  " WHERE l.app_name = $1 AND l.stream_name = $2 AND l.checkpoint <> 'SHARD_END'"
								  "   AND (l.lease_owner IS NULL OR l.lease_expires_at <= clock_timestamp())"
								  "   AND NOT EXISTS (SELECT 1 FROM lease.shard_leases p"
								  "                    WHERE p.app_name = l.app_name AND p.stream_name = l.stream_name"
								  "                      AND p.shard_id = ANY (l.parent_shard_ids)"
								  "                      AND p.checkpoint <> 'SHARD_END')", 2, p2);
		fr->fair_floor = (int) (query_long(conn,
										   "SELECT count(*) FROM lease.shard_leases l"
										   " WHERE l.app_name = $1 AND l.stream_name = $2 AND l.checkpoint <> 'SHARD_END'"
										   "   AND NOT EXISTS (SELECT 1 FROM lease.shard_leases p"
										   "                    WHERE p.app_name = l.app_name AND p.stream_name = l.stream_name"
										   "                      AND p.shard_id = ANY (l.parent_shard_ids)"
										   "                      AND p.checkpoint <> 'SHARD_END')", 2, p2) / opt.workers);
		fr->joined_final = shm->load[fr->samples - 1][fr->joined];
	}

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
	}
	analyse(conn, app, fr);
}

/* ---------------------------------------------------------------------- */
/* Report */

static int	failures;

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

static void
print_stream(const FleetResult *fr, bool pg_lease)
{
	long		dups = fr->dup_records[WHY_NONE] + fr->dup_records[WHY_LOST] +
		fr->dup_records[WHY_SPURIOUS] + fr->dup_records[WHY_CRASH] + fr->dup_after_ack;

	printf("\n-- stream (%s)\n", fr->label);
	printf("  records processed                 %8ld\n", fr->records);
	printf("  checkpoints written               %8ld\n", fr->checkpoints);
	printf("  spurious checkpoint failures      %8ld%s\n", fr->spurious, pg_lease ? "   (must be 0)" : "");
	printf("  checkpoints refused, lease lost   %8ld%s\n", fr->lost, pg_lease ? "   (must be 0: no abrupt steals)" : "");
	printf("  records processed more than once  %8ld\n", dups);
	printf("    after the crash (worker-%d's unacknowledged tail) %ld\n", fr->crashed + 1, fr->dup_records[WHY_CRASH]);
	printf("    after a spurious checkpoint failure             %ld\n", fr->dup_records[WHY_SPURIOUS]);
	printf("    after a lost lease                              %ld\n", fr->dup_records[WHY_LOST]);
	printf("    after an acknowledged checkpoint                %ld\n", fr->dup_after_ack);
	printf("  records never processed (gaps)    %8ld   (must be 0)\n", fr->gaps);
	printf("  leases taken / handoffs requested / honoured  %ld / %ld / %ld\n",
		   fr->taken, fr->handoffs_requested, fr->handoffs_honoured);
	printf("  shards closed (split and merge parents)       %ld\n", fr->closes);
	printf("  worker statements that raised an error        %ld\n", fr->errors);
	printf("  takeable leases unheld before the stop        %ld   (must be 0)\n", fr->orphaned);
	printf("  worker-%d (joined) holds %d leases at the end (fair share >= %d)\n",
		   fr->joined + 1, fr->joined_final, fr->fair_floor);
}

static void
check_stream(const FleetResult *fr)
{
	check(fr->spurious == 0, "a checkpoint failed although the worker owned the lease");
	check(fr->lost == 0, "a live worker lost a lease it was processing (an abrupt steal or an expiry under load)");
	check(fr->dup_records[WHY_NONE] + fr->dup_records[WHY_LOST] + fr->dup_records[WHY_SPURIOUS] +
		  fr->dup_after_ack == 0,
		  "records were processed twice other than the crashed worker's unacknowledged tail");
	check(fr->gaps == 0, "records up to a checkpoint were never processed");
	check(fr->orphaned == 0, "a takeable lease was held by nobody at the end");
	check(fr->closes >= 3, "the split and merge parents were not all closed");
	check(fr->joined_final > 0, "the joining worker got no leases");
}

static void
print_channels(PGconn *conn, const ChannelStats *ch)
{
	char		users[128];
	const char *p1[1] = {users};
	long		unbound, twice, dead, open_failures;

	snprintf(users, sizeof(users), "{%s,%s}", tenant_user[0], tenant_user[1]);
	unbound = 0;
	for (int t = 0; t < NTENANTS; t++)
		for (int c = 0; c < opt.channels; c++)
		{
			char		chan[16];

			channel_name(c, chan, sizeof(chan));
			if (find_binding(conn, t, chan) == 0)
				unbound++;
		}
	twice = query_long(conn, "SELECT count(*) FROM (SELECT 1 FROM lease.conversations"
					   " WHERE user_id = ANY ($1::text[]) AND channel_id IS NOT NULL"
					   " GROUP BY user_id, agent_id, vault_id, environment_id, channel_id"
					   " HAVING count(*) > 1) x", 1, p1);
	dead = query_long(conn, "SELECT count(*) FROM lease.conversations WHERE user_id = ANY ($1::text[])"
					  " AND channel_id IS NOT NULL AND status NOT IN ('pending', 'running', 'idle')", 1, p1);
	open_failures = query_long(conn, "SELECT count(*) FROM lease.compensation_failures f"
							   " JOIN lease.conversations c ON c.id = f.failed_conversation_id"
							   " WHERE c.user_id = ANY ($1::text[]) AND f.resolved_at IS NULL", 1, p1);

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
	printf("  channels left unbound              %ld   (must be 0)\n", unbound);
	printf("  channels seen unbound mid-run      %ld   (must be 0)\n", ch->unbound_seen);
	printf("  channels bound twice in one scope  %ld   (must be 0)\n", twice);
	printf("  bindings held by ended conversations %ld (must be 0)\n", dead);
	printf("  unresolved compensation failures   %ld   (must be 0)\n", open_failures);
	printf("  quota exceeded                     %ld times in %ld samples (must be 0); peak active %ld / %ld\n",
		   ch->quota_exceeded, ch->quota_samples, ch->max_active[0], ch->max_active[1]);

	check(unbound == 0 && ch->unbound_seen == 0, "a channel was left bound to nothing");
	check(twice == 0, "a channel was bound twice in one scope");
	check(dead == 0, "a channel is bound to an ended conversation");
	check(open_failures == 0, "a failed compensation was not drained");
	check(ch->quota_exceeded == 0, "a tenant exceeded its sandbox limit");
	check(ch->rotations[5] == 0 && ch->restores[3] == 0, "a rotation or restore raised an error");
	check(ch->rotations[0] > 0, "no rotation succeeded");
}

/* ---------------------------------------------------------------------- */

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
		   "  --quiet                no progress lines\n",
		   opt.workers, MAX_SHARDS, opt.shards, opt.duration, opt.lease_ms, opt.channels);
}

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
			case 'L': opt.legacy = true; break;
			case 'q': opt.quiet = true; break;
			case 'h': usage(); exit(0);
			default: usage(); exit(2);
		}
	}
	if (opt.workers < 2 || opt.workers >= MAX_WORKERS)
		die("--workers must be between 2 and %d", MAX_WORKERS - 1);
	if (opt.shards < 12 || opt.shards > MAX_SHARDS)
		die("--shards must be between 12 and %d", MAX_SHARDS);
	if (opt.duration < 6 || opt.duration > 500)
		die("--duration must be between 6 and 500 seconds");
	if (opt.lease_ms < 300)
		die("--lease-ms must be at least 300");
	if (opt.channels < 1 || opt.channels > MAX_CHANNELS)
		die("--channels must be between 1 and %d", MAX_CHANNELS);
}

int
main(int argc, char **argv)
{
	PGconn	   *conn;
	FleetResult fleet = {.label = "pg_lease"};
	FleetResult legacy = {.label = "legacy read-then-write"};
	ChannelStats ch;

	parse_args(argc, argv);
	setvbuf(stdout, NULL, _IOLBF, 0);
	srand(opt.seed);
	define_shards();
	shm = mmap(NULL, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (shm == MAP_FAILED)
		die("mmap failed: %s", strerror(errno));

	conn = connect_db("pg_lease_demo");
	must_exec(conn, "SET client_min_messages = warning");
	must_exec(conn, "CREATE EXTENSION IF NOT EXISTS pg_lease");
	printf("pg_lease demo: seed %u, %d workers (+1 joining), %d shards, %ds per fleet, lease %d ms, server %s\n",
		   opt.seed, opt.workers, nshards, opt.duration, opt.lease_ms, PQparameterStatus(conn, "server_version"));

	run_fleet(conn, APP_NAME, false, true, &fleet);
	ch = shm->ch;
	print_timeline(&fleet);
	print_stream(&fleet, true);
	check_stream(&fleet);
	print_channels(conn, &ch);

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
	}

	PQfinish(conn);
	if (failures > 0)
	{
		printf("\nverdict: %d invariant(s) BROKEN (seed %u)\n", failures, opt.seed);
		return 1;
	}
	printf("\nverdict: every invariant held: nothing lost, nothing done twice but the crashed"
		   " worker's unacknowledged tail, no channel left unbound, no quota exceeded\n");
	return 0;
}
