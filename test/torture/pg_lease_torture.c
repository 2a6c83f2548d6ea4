/*
 * pg_lease_torture: a libpq torture driver for pg_lease.
 *
 * N clients (threads, one connection each) call every public function of the
 * extension concurrently for a fixed time, choosing operations with a seeded
 * random generator; a checker thread on its own connection verifies the
 * invariants while they run, and once more at the end.  Clients remember in
 * their own memory (never in the database) every result the server
 * acknowledged, so the end check can tell what a crash must not have lost.
 *
 * With --expect-crash the server may go away under the load (the crash script
 * stops it with `pg_ctl stop -m immediate` and starts it again): clients
 * reconnect, and the end check proves that every acknowledged checkpoint,
 * take, start and rotation survived and that nothing left uncommitted did.
 * With --kills N a killer thread terminates single backends with
 * pg_terminate_backend while they are held mid-rotation and mid-restore by a
 * lock it owns, and checks that nothing partial is left.
 *
 * Lease clients renew with renew_leases and with lease.heartbeat:
 * a client keeps its last renew_leases list under the leases_version of the
 * heartbeat before it, lists again when the version moved or a handoff is
 * pending, and otherwise checks that the heartbeat counts the leases its
 * standing list holds.
 *
 * Beside them, --txn-clients N (3 by default) transactional clients commit
 * one output row per record together with hold_lease and the fenced
 * checkpoint; the checker proves each record up to each shard's
 * checkpoint is in their output exactly once, and --omit-hold shows that
 * check failing without hold_lease.
 *
 * Prints the seed, a count per operation and outcome, and each invariant's
 * verdict; exits 1 on any violation, 2 on a usage or setup error.
 *
 * This is a client program: it is never linked into the server module.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#define MAX_CLIENTS 64
#define NSHARDS 8
#define NCHAN 2					/* own channels per client */
#define NTENANTS 4
#define TENANT_LIMIT 3			/* lease.default_sandbox_limit; every tenant here has a row */
#define FLEET_CAPACITY 35
#define APP "torture"
#define STREAM "orders"
#define LINEAGE "lineage"
#define NSHTEN 2				/* tenants whose channels several clients share */
#define NSHCH 2					/* shared channels per such tenant */
#define NSHARED (NSHTEN * NSHCH)
#define NMINE 2					/* own rotations a client may leave to restore later */
#define NKNOWN 8				/* conversations a client remembers per shared channel */
#define XSTREAM "exactly"		/* the transactional clients' stream */
#define NXSHARDS 4				/* its shards, s00..s03 */

/* ---------------------------------------------------------------- options */

static int	opt_clients = 8;
static int	opt_seconds = 10;
static int	opt_kills = 0;
static int	opt_shared = 4;			/* clients also working the shared channels */
static int	opt_serial = 0;			/* steps of the serial replay; 0: the concurrent run */
static bool opt_expect_crash = false;
static int	opt_txn = 3;			/* transactional clients (stream XSTREAM); 0: none */
static bool opt_omit_hold = false;	/* ... without hold_lease: the check must fail */
static unsigned long long opt_seed;
static const char *opt_dbname = NULL;

static double t_start;
static double t_deadline;

/* ------------------------------------------------------------ bookkeeping */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int	violations = 0;

/* Reports an invariant violation (any thread); each distinct message once. */
static void
violation(const char *fmt,...)
{
	static char printed[64][160];
	static int	nprinted = 0;
	char		msg[160];
	va_list		ap;
	int			i;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&mu);
	violations++;
	/* the checker finds the same violation on every sample: print it once */
	for (i = 0; i < nprinted; i++)
		if (strcmp(printed[i], msg) == 0)
			break;
	if (i == nprinted)
	{
		fprintf(stderr, "VIOLATION: %s\n", msg);
		if (nprinted < 64)
			memcpy(printed[nprinted++], msg, sizeof(msg));
	}
	pthread_mutex_unlock(&mu);
}

/* Wall clock in seconds. */
static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Sleeps ms milliseconds. */
static void
sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long) (ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* One tally: how often an operation ended with an outcome. */
typedef struct Tally
{
	char		op[48];
	char		outcome[48];
	long		count;
} Tally;

static Tally tallies[512];
static int	ntallies = 0;

/* Counts one outcome of one operation. */
static void
tally(const char *op, const char *outcome)
{
	int			i;

	pthread_mutex_lock(&mu);
	for (i = 0; i < ntallies; i++)
		if (strncmp(tallies[i].op, op, sizeof(tallies[i].op) - 1) == 0 &&
			strncmp(tallies[i].outcome, outcome, sizeof(tallies[i].outcome) - 1) == 0)
			break;
	if (i == ntallies && ntallies < (int) (sizeof(tallies) / sizeof(tallies[0])))
	{
		snprintf(tallies[i].op, sizeof(tallies[i].op), "%s", op);
		snprintf(tallies[i].outcome, sizeof(tallies[i].outcome), "%s", outcome);
		ntallies++;
	}
	if (i < ntallies)
		tallies[i].count++;
	pthread_mutex_unlock(&mu);
}

/* A growable array of fixed-size records. */
typedef struct Vec
{
	void	   *data;
	size_t		n;
	size_t		cap;
	size_t		size;
} Vec;

/* Appends one record (caller holds mu). */
static void
vec_push(Vec *v, const void *rec)
{
	if (v->n == v->cap)
	{
		v->cap = v->cap ? v->cap * 2 : 256;
		v->data = realloc(v->data, v->cap * v->size);
		if (v->data == NULL)
		{
			fprintf(stderr, "out of memory\n");
			exit(2);
		}
	}
	memcpy((char *) v->data + v->n * v->size, rec, v->size);
	v->n++;
}

/* An accepted checkpoint: who wrote it, under which epoch, which range. */
typedef struct CkptAck
{
	int			shard;
	int			client;
	long long	epoch;			/* lease_epoch at commit */
	long long	lo;				/* position the owner started from */
	long long	hi;				/* position written */
	bool		fenced;
} CkptAck;

/* A checkpoint value and what its client knows of its fate. */
typedef enum ValState
{
	VAL_ACKED,					/* committed and acknowledged */
	VAL_REFUSED,				/* the function answered false */
	VAL_UNCOMMITTED,			/* the connection died before COMMIT was sent */
	VAL_UNKNOWN					/* COMMIT sent, no answer */
} ValState;

typedef struct CkptVal
{
	int			shard;
	long long	pos;
	char		value[64];
	ValState	state;
} CkptVal;

/* An acknowledged take: (shard, epoch) must be in lease_events. */
typedef struct TakeAck
{
	int			shard;
	int			client;
	long long	epoch;
} TakeAck;

/* A restore that answered failed: its pair must be queued. */
typedef struct FailedPair
{
	long long	prev;
	long long	failed;
} FailedPair;

static Vec	ckpt_acks = {.size = sizeof(CkptAck)};
static Vec	ckpt_vals = {.size = sizeof(CkptVal)};
static Vec	take_acks = {.size = sizeof(TakeAck)};
static Vec	failed_pairs = {.size = sizeof(FailedPair)};
static Vec	conv_acked = {.size = sizeof(long long)};	/* started or rotated */
static Vec	rot_acked = {.size = sizeof(FailedPair)};	/* (rotated_from, id) */
static Vec	conv_pool = {.size = sizeof(long long)};	/* load clients' ids: admit_turn targets */
static Vec	conv_uncommitted = {.size = sizeof(long long)};
static long	indeterminate_admissions = 0;	/* start/rotate with no answer */
static long	reconnects = 0;
static int	kills_done[2];		/* mid-rotation, mid-restore */

/* Appends a record under the mutex. */
static void
record(Vec *v, const void *rec)
{
	pthread_mutex_lock(&mu);
	vec_push(v, rec);
	pthread_mutex_unlock(&mu);
}

/* ------------------------------------------------------------- randomness */

/* splitmix64: a seeded generator per thread. */
static uint64_t
rnd_next(uint64_t *s)
{
	uint64_t	z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Uniform integer in [0, n). */
static int
rnd(uint64_t *s, int n)
{
	return (int) (rnd_next(s) % (uint64_t) n);
}

/* ------------------------------------------------------------ connections */

typedef enum Res
{
	RES_OK,						/* the statement succeeded */
	RES_ERROR,					/* an SQL error; sqlstate says which */
	RES_LOST						/* the connection is gone */
} Res;

typedef struct Conn
{
	PGconn	   *pg;
	char		appname[64];
	char		sqlstate[6];
	char		errmsg[256];
	PGresult   *res;
} Conn;

/* Silences notices and warnings (restore failures warn by design). */
static void
quiet(void *arg, const char *msg)
{
	(void) arg;
	(void) msg;
}

/* Opens a connection; false when the server is not there (yet). */
static bool
conn_open(Conn *c, const char *appname)
{
	const char *keys[] = {"dbname", "application_name", NULL};
	const char *vals[] = {opt_dbname, appname, NULL};

	snprintf(c->appname, sizeof(c->appname), "%s", appname);
	c->res = NULL;
	c->pg = PQconnectdbParams(keys, vals, 1);
	if (PQstatus(c->pg) != CONNECTION_OK)
	{
		snprintf(c->errmsg, sizeof(c->errmsg), "%s", PQerrorMessage(c->pg));
		PQfinish(c->pg);
		c->pg = NULL;
		return false;
	}
	PQsetNoticeProcessor(c->pg, quiet, NULL);
	/* acknowledged must mean durable: the test cluster runs synchronous_commit = off */
	PQclear(PQexec(c->pg, "SET synchronous_commit = on"));
	PQclear(PQexec(c->pg, "SET statement_timeout = '60s'"));
	return true;
}

/* Closes a connection. */
static void
conn_close(Conn *c)
{
	if (c->res)
		PQclear(c->res);
	c->res = NULL;
	if (c->pg)
		PQfinish(c->pg);
	c->pg = NULL;
}

/* Runs one statement with text parameters; the result stays in c->res. */
static Res
q(Conn *c, const char *sql, int n, const char *const *params)
{
	ExecStatusType st;

	if (c->res)
		PQclear(c->res);
	c->res = NULL;
	c->sqlstate[0] = '\0';
	c->errmsg[0] = '\0';
	if (c->pg == NULL)
		return RES_LOST;
	c->res = PQexecParams(c->pg, sql, n, NULL, params, NULL, NULL, 0);
	st = PQresultStatus(c->res);
	if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)
		return RES_OK;
	{
		const char *ss = PQresultErrorField(c->res, PG_DIAG_SQLSTATE);
		const char *m = PQresultErrorField(c->res, PG_DIAG_MESSAGE_PRIMARY);

		snprintf(c->sqlstate, sizeof(c->sqlstate), "%s", ss ? ss : "");
		snprintf(c->errmsg, sizeof(c->errmsg), "%s", m ? m : PQerrorMessage(c->pg));
	}
	if (PQstatus(c->pg) == CONNECTION_BAD || c->sqlstate[0] == '\0' ||
		strncmp(c->sqlstate, "08", 2) == 0 || strcmp(c->sqlstate, "57P01") == 0 ||
		strcmp(c->sqlstate, "57P02") == 0 || strcmp(c->sqlstate, "57P03") == 0)
		return RES_LOST;
	return RES_ERROR;
}

/* Value of row r, column f of the last result ("" for NULL). */
static const char *
val(Conn *c, int r, int f)
{
	return PQgetvalue(c->res, r, f);
}

/* True when row r, column f of the last result is NULL. */
static bool
isnull(Conn *c, int r, int f)
{
	return PQgetisnull(c->res, r, f);
}

/* Runs a statement that must succeed (setup, checks); exits on failure. */
static void
must(Conn *c, const char *sql, int n, const char *const *params)
{
	if (q(c, sql, n, params) != RES_OK)
	{
		fprintf(stderr, "pg_lease_torture: %s\n  failed: %s %s\n", sql, c->sqlstate, c->errmsg);
		exit(2);
	}
}

/* --------------------------------------------------------------- clients */

typedef struct Held
{
	bool		have;
	long long	epoch;			/* -1: unknown */
	long long	count;
	bool		pos_known;
	long long	pos;
} Held;

typedef struct Chan
{
	char		channel[32];
	long long	holder;			/* the conversation we know holds it, 0: unbound */
	bool		outstanding;	/* a failed restore is queued for it */
	FailedPair	pair;
} Chan;

/*
 * What one client knows of one shared channel: the conversation it last saw
 * holding it (0: none), its own rotations whose worker "failed" and which it
 * has still to restore, and recent conversations of the channel.
 */
typedef struct SharedView
{
	long long	seen;
	int			nmine;
	FailedPair	mine[NMINE];
	int			nknown;
	long long	known[NKNOWN];
} SharedView;

typedef struct Client
{
	int			id;
	uint64_t	rng;
	Conn		c;
	char		owner[16];
	char		user[16];
	char		agent[16];
	Held		held[NSHARDS];
	Chan		chan[NCHAN];
	bool		shared;			/* works the shared channels too */
	SharedView	sh[NSHARED];
	long long	seq;
	bool		lost;			/* the last call lost the connection */
	/*
	 * The heartbeat protocol (docs/shard-leases.md, lease.heartbeat): the
	 * leases_version of the last heartbeat (0: NULL, no row), and the one
	 * held[] was listed under (renew_leases after that heartbeat); list_known
	 * false until a list, and again after any error (its outcome unknown).
	 */
	bool		hb_known;
	long long	hb_version;
	bool		list_known;
	long long	list_version;
	pthread_t	thread;
} Client;

static Client clients[MAX_CLIENTS];
static const char *durations[] = {"300 ms", "800 ms", "2 s"};

/*
 * The fast-failover mode: clients with an odd id declare
 * renew_every on their renewals and balancing rounds, so a killed one's
 * leases are taken before their expiry ('session_ended' events).
 */
#define RENEW_EVERY(cl)	((cl)->id % 2 ? "200 ms" : NULL)

/* Shard name of index i. */
static void
shard_name(int i, char *buf, size_t len)
{
	snprintf(buf, len, "s%02d", i);
}

/* The owner name of client `client` ("w07"). */
static void
owner_name(int client, char *buf, size_t len)
{
	snprintf(buf, len, "w%02d", client);
}

/* Fills the first four arguments of a lease call: app, stream, shard, owner. */
static void
lease_key(Client *cl, int s, char *shard, const char **p)
{
	shard_name(s, shard, 8);
	p[0] = APP;
	p[1] = STREAM;
	p[2] = shard;
	p[3] = cl->owner;
}

/* Parses a checkpoint position ("TRIM_HORIZON" is 0). */
static long long
ckpt_pos(const char *v)
{
	if (strcmp(v, "TRIM_HORIZON") == 0 || v[0] == '\0')
		return 0;
	return strtoll(v, NULL, 10);
}

/*
 * Handles an error of a client call: connection loss (expected only with
 * --expect-crash or after a kill), tolerated conflicts, or a violation.
 * Returns the outcome label to tally.
 */
static const char *
on_error(Client *cl, const char *op, Res r)
{
	static __thread char label[48];

	cl->list_known = false;		/* what the call changed is unknown: list again */
	if (r == RES_LOST)
	{
		cl->lost = true;
		if (!opt_expect_crash)
			violation("%s: connection lost: %s", op, cl->c.errmsg);
		return "connection_lost";
	}
	/*
	 * Retryable (docs/client-rules.md): a conflict, or 55P03 from a bounded
	 * wait (lease.admission_lock_timeout: admission or a turn is busy).
	 */
	if (strcmp(cl->c.sqlstate, "40P01") == 0 || strcmp(cl->c.sqlstate, "40001") == 0 ||
		strcmp(cl->c.sqlstate, "55P03") == 0)
	{
		snprintf(label, sizeof(label), "error %s", cl->c.sqlstate);
		return label;
	}
	violation("%s: unexpected error %s: %s", op, cl->c.sqlstate, cl->c.errmsg);
	snprintf(label, sizeof(label), "error %s", cl->c.sqlstate);
	return label;
}

/* Ends an explicit transaction after an error, ignoring failures. */
static void
rollback(Client *cl)
{
	if (!cl->lost)
		q(&cl->c, "ROLLBACK", 0, NULL);
}

/* Reads the epoch and checkpoint of a shard just taken; learns the position. */
static void
learn_position(Client *cl, int s)
{
	char		shard[8];
	const char *p[3] = {APP, STREAM, shard};
	Res			r;

	shard_name(s, shard, sizeof(shard));
	cl->held[s].pos_known = false;
	if ((r = q(&cl->c, "SELECT lease_epoch, checkpoint FROM lease.shard_leases"
			   " WHERE app_name = $1 AND stream_name = $2 AND shard_id = $3", 3, p)) != RES_OK)
	{
		tally("read lease", on_error(cl, "read lease", r));
		return;
	}
	if (PQntuples(cl->c.res) == 1 && atoll(val(&cl->c, 0, 0)) == cl->held[s].epoch)
	{
		cl->held[s].pos_known = true;
		cl->held[s].pos = ckpt_pos(val(&cl->c, 0, 1));
	}
	else
		cl->held[s].pos_known = false;
}

/*
 * BEGIN, take_lease(p[0..5]) and, when *taken, the count, epoch and
 * checkpoint it set, read inside the taking transaction (whose owner must be
 * p[3]); the caller commits.  Not taken: already committed.
 */
static Res
begin_take(Conn *c, const char *op, const char *const *p, bool *taken, long long *count, long long *epoch,
		   long long *pos)
{
	Res			r;

	*taken = false;
	if ((r = q(c, "BEGIN", 0, NULL)) != RES_OK ||
		(r = q(c, "SELECT lease.take_lease($1, $2, $3, $4, $5::bigint, $6::interval)", 6, p)) != RES_OK)
		return r;
	if (isnull(c, 0, 0))
		return q(c, "COMMIT", 0, NULL);
	*count = atoll(val(c, 0, 0));
	if ((r = q(c, "SELECT lease_epoch, checkpoint, lease_owner FROM lease.shard_leases"
			   " WHERE app_name = $1 AND stream_name = $2 AND shard_id = $3", 3, p)) != RES_OK)
		return r;
	*taken = true;
	*epoch = atoll(val(c, 0, 0));
	*pos = ckpt_pos(val(c, 0, 1));
	if (strcmp(val(c, 0, 2), p[3]) != 0)
		violation("%s %s/%s: taken, but the owner is %s", op, p[1], p[2], val(c, 0, 2));
	return RES_OK;
}

/* take_lease without a count, or with the current count (a steal). */
static void
op_take(Client *cl, bool steal)
{
	const char *op = steal ? "take_lease(count)" : "take_lease";
	int			s = rnd(&cl->rng, NSHARDS);
	char		shard[8],
				count[24] = "";
	const char *p[6];
	Res			r;
	long long	epoch;
	bool		taken;

	lease_key(cl, s, shard, p);
	p[5] = durations[rnd(&cl->rng, 3)];
	if (steal)
	{
		if ((r = q(&cl->c, "SELECT lease_count FROM lease.shard_leases"
				   " WHERE app_name = $1 AND stream_name = $2 AND shard_id = $3", 3, p)) != RES_OK)
		{
			tally(op, on_error(cl, op, r));
			return;
		}
		snprintf(count, sizeof(count), "%s", val(&cl->c, 0, 0));
	}
	p[4] = steal ? count : NULL;
	if ((r = begin_take(&cl->c, op, p, &taken, &cl->held[s].count, &epoch, &cl->held[s].pos)) != RES_OK)
	{
		tally(op, on_error(cl, op, r));
		rollback(cl);
		return;
	}
	if (!taken)
	{
		tally(op, "not taken");
		return;
	}
	if ((r = q(&cl->c, "COMMIT", 0, NULL)) != RES_OK)
	{
		tally(op, on_error(cl, op, r));
		cl->held[s].have = false;
		return;
	}
	cl->held[s].have = true;
	cl->held[s].epoch = epoch;
	cl->held[s].pos_known = true;
	{
		TakeAck		t = {s, cl->id, epoch};

		record(&take_acks, &t);
	}
	tally(op, steal ? "stolen" : "taken");
}

/* renew_lease with the count we hold (or a guess, which must fail). */
static void
op_renew(Client *cl)
{
	int			s = rnd(&cl->rng, NSHARDS);
	char		shard[8],
				count[24];
	const char *p[6];
	Res			r;

	shard_name(s, shard, sizeof(shard));
	snprintf(count, sizeof(count), "%lld", cl->held[s].have ? cl->held[s].count : 0LL);
	p[0] = APP;
	p[1] = STREAM;
	p[2] = shard;
	p[3] = cl->owner;
	p[4] = count;
	p[5] = durations[rnd(&cl->rng, 3)];
	r = q(&cl->c, "SELECT lease.renew_lease($1, $2, $3, $4, $5::bigint, $6::interval)", 6, p);
	if (r != RES_OK)
	{
		tally("renew_lease", on_error(cl, "renew_lease", r));
		return;
	}
	if (isnull(&cl->c, 0, 0))
	{
		/* guessed, not listed: the list no longer says what we hold */
		if (cl->held[s].have)
			cl->list_known = false;
		cl->held[s].have = false;
		tally("renew_lease", "lost");
		return;
	}
	if (!cl->held[s].have)
	{
		/* the count matched although we thought we did not hold it */
		cl->list_known = false;
		cl->held[s].epoch = -1;
		cl->held[s].pos_known = false;
	}
	cl->held[s].have = true;
	cl->held[s].count = atoll(val(&cl->c, 0, 0));
	tally("renew_lease", "renewed");
}

/* renew_leases: everything we hold in the stream. */
static void
op_renew_leases(Client *cl)
{
	const char *p[5] = {APP, STREAM, cl->owner, durations[rnd(&cl->rng, 3)], RENEW_EVERY(cl)};
	bool		seen[NSHARDS] = {false};
	Res			r;
	int			i;

	r = q(&cl->c, "SELECT shard_id, lease_count, handoff_to"
		  " FROM lease.renew_leases($1, $2, $3, $4::interval, $5::interval)", 5, p);
	if (r != RES_OK)
	{
		tally("renew_leases", on_error(cl, "renew_leases", r));
		return;
	}
	for (i = 0; i < PQntuples(cl->c.res); i++)
	{
		int			s = atoi(val(&cl->c, i, 0) + 1);

		if (s < 0 || s >= NSHARDS)
			continue;
		seen[s] = true;
		if (!cl->held[s].have)
		{
			/* handed to us (a transfer we did not see): epoch unknown */
			cl->held[s].have = true;
			cl->held[s].epoch = -1;
			cl->held[s].pos_known = false;
		}
		cl->held[s].count = atoll(val(&cl->c, i, 1));
		if (!isnull(&cl->c, i, 2))
			tally("renew_leases", "handoff_pending");
	}
	for (i = 0; i < NSHARDS; i++)
		if (!seen[i])
			cl->held[i].have = false;
	/* the list, under the version of the heartbeat before it */
	cl->list_known = cl->hb_known;
	cl->list_version = cl->hb_version;
	tally("renew_leases", PQntuples(cl->c.res) ? "renewed" : "none");
}

/*
 * heartbeat: renew_leases' one write, answered from the client's row.  The
 * same leases_version as its list's and no handoff pending: every lease on
 * the list is renewed (held[] stands, and must count what the heartbeat
 * counts); otherwise renew_leases lists again.
 */
static void
op_heartbeat(Client *cl)
{
	const char *p[5] = {APP, STREAM, cl->owner, durations[rnd(&cl->rng, 3)], RENEW_EVERY(cl)};
	long long	leases,
				pending;
	int			listed = 0;
	Res			r;
	int			i;

	r = q(&cl->c, "SELECT leases, leases_version, handoffs_pending"
		  " FROM lease.heartbeat($1, $2, $3, $4::interval, $5::interval)", 5, p);
	if (r != RES_OK)
	{
		tally("heartbeat", on_error(cl, "heartbeat", r));
		return;
	}
	leases = atoll(val(&cl->c, 0, 0));
	cl->hb_version = isnull(&cl->c, 0, 1) ? 0 : atoll(val(&cl->c, 0, 1));
	cl->hb_known = true;
	pending = atoll(val(&cl->c, 0, 2));
	if (!cl->list_known || cl->hb_version != cl->list_version || pending > 0)
	{
		tally("heartbeat", pending > 0 ? "handoff pending: list" : "version moved: list");
		op_renew_leases(cl);
		return;
	}
	for (i = 0; i < NSHARDS; i++)
		listed += cl->held[i].have;
	if (listed != leases)
		violation("heartbeat: %s's list (version %lld) stands with %d leases, the heartbeat counts %lld",
				  cl->owner, cl->hb_version, listed, leases);
	tally("heartbeat", "list stands");
}

/*
 * take_leases: one balancing round, declaring a capacity (mostly the
 * default 1; another, or a weight set by op_events, makes the stream
 * balanced by load).
 */
static void
op_take_leases(Client *cl)
{
	static const char *capacities[] = {"1", "1", "1", "2", "0.5"};
	char		max_leases[8];
	const char *p[8];
	Res			r;
	int			i,
				n;
	int			taken[NSHARDS];
	int			ntaken = 0;

	snprintf(max_leases, sizeof(max_leases), "%d", 1 + rnd(&cl->rng, 4));
	p[0] = APP;
	p[1] = STREAM;
	p[2] = cl->owner;
	p[3] = durations[rnd(&cl->rng, 3)];
	p[4] = rnd(&cl->rng, 2) ? max_leases : NULL;
	p[5] = rnd(&cl->rng, 2) ? "1" : "2";
	p[6] = capacities[rnd(&cl->rng, 5)];
	p[7] = RENEW_EVERY(cl);
	r = q(&cl->c, "SELECT shard_id, lease_count, action, previous_owner, lease_epoch"
		  " FROM lease.take_leases($1, $2, $3, $4::interval, $5::int, $6::int, $7::float8, $8::interval)",
		  8, p);
	if (r != RES_OK)
	{
		tally("take_leases", on_error(cl, "take_leases", r));
		return;
	}
	n = PQntuples(cl->c.res);
	for (i = 0; i < n; i++)
	{
		int			s = atoi(val(&cl->c, i, 0) + 1);

		if (strcmp(val(&cl->c, i, 2), "taken") == 0)
		{
			TakeAck		t = {s, cl->id, atoll(val(&cl->c, i, 4))};

			cl->held[s].have = true;
			cl->held[s].count = atoll(val(&cl->c, i, 1));
			cl->held[s].epoch = t.epoch;
			record(&take_acks, &t);
			taken[ntaken++] = s;
			tally("take_leases", "taken");
		}
		else
			tally("take_leases", val(&cl->c, i, 2));
	}
	if (n == 0)
		tally("take_leases", "nothing");
	for (i = 0; i < ntaken; i++)
		learn_position(cl, taken[i]);
}

/*
 * Inside an open transaction, before COMMIT: false when the server is gone,
 * so COMMIT was certainly never sent and the transaction must not survive.
 */
static bool
still_there(Client *cl)
{
	return q(&cl->c, "SELECT 1", 0, NULL) != RES_LOST;
}

/* Records the fate of a checkpoint value. */
static void
note_value(int s, long long pos, const char *value, ValState st)
{
	CkptVal		v = {.shard = s, .pos = pos, .state = st};

	snprintf(v.value, sizeof(v.value), "%s", value);
	record(&ckpt_vals, &v);
}

/*
 * The fenced checkpoint, sometimes with a stale token, half the time
 * reporting work (the measured rate, a weight of the stream's balancing).
 */
static void
op_checkpoint_fenced(Client *cl)
{
	const char *op = "update_checkpoint(fenced)";
	int			s = -1,
				i;
	char		shard[8],
				value[64],
				token[24];
	const char *p[8];
	bool		stale,
				slow,
				ok;
	long long	newpos;
	Res			r;

	for (i = 0; i < NSHARDS; i++)
	{
		int			k = (i + rnd(&cl->rng, NSHARDS)) % NSHARDS;

		if (cl->held[k].have && cl->held[k].epoch > 0 && cl->held[k].pos_known)
		{
			s = k;
			break;
		}
	}
	if (s < 0)
	{
		tally(op, "nothing held");
		return;
	}
	stale = rnd(&cl->rng, 10) == 0;
	slow = opt_expect_crash && rnd(&cl->rng, 4) == 0;
	newpos = cl->held[s].pos + 1 + rnd(&cl->rng, 50);
	snprintf(value, sizeof(value), "%016lld-w%02d-%lld", newpos, cl->id, ++cl->seq);
	snprintf(token, sizeof(token), "%lld", cl->held[s].epoch - (stale ? 1 : 0));
	lease_key(cl, s, shard, p);
	p[4] = value;
	p[5] = "0";
	p[6] = token;
	p[7] = rnd(&cl->rng, 2) ? "100" : NULL;	/* work reported: the measured rate */
	if (slow)
	{
		/* an explicit transaction held open: a crash here must lose it */
		if ((r = q(&cl->c, "BEGIN", 0, NULL)) != RES_OK ||
			(r = q(&cl->c, "SELECT lease.update_checkpoint($1, $2, $3, $4, $5, $6::bigint, $7::bigint, $8::bigint)",
				   8, p)) != RES_OK)
		{
			tally(op, on_error(cl, op, r));
			note_value(s, newpos, value, VAL_UNCOMMITTED);
			rollback(cl);
			return;
		}
		ok = val(&cl->c, 0, 0)[0] == 't';
		sleep_ms(20 + rnd(&cl->rng, 150));
		if (!still_there(cl))
		{
			note_value(s, newpos, value, VAL_UNCOMMITTED);
			tally(op, on_error(cl, op, RES_LOST));
			return;
		}
		if ((r = q(&cl->c, "COMMIT", 0, NULL)) != RES_OK)
		{
			/* COMMIT was sent: it may or may not have committed */
			note_value(s, newpos, value, ok ? VAL_UNKNOWN : VAL_REFUSED);
			tally(op, on_error(cl, op, r));
			return;
		}
	}
	else
	{
		r = q(&cl->c, "SELECT lease.update_checkpoint($1, $2, $3, $4, $5, $6::bigint, $7::bigint, $8::bigint)",
			  8, p);
		if (r != RES_OK)
		{
			note_value(s, newpos, value, VAL_UNKNOWN);
			tally(op, on_error(cl, op, r));
			return;
		}
		ok = val(&cl->c, 0, 0)[0] == 't';
	}
	note_value(s, newpos, value, ok ? VAL_ACKED : VAL_REFUSED);
	if (!ok)
	{
		/* given up on a refusal (a stale token we sent, too), not listed */
		if (cl->held[s].have)
			cl->list_known = false;
		cl->held[s].have = false;
		tally(op, stale ? "refused (stale token)" : "refused");
		return;
	}
	if (stale)
		violation("%s %s: accepted a stale fencing token %s", op, shard, token);
	{
		CkptAck		a = {s, cl->id, cl->held[s].epoch - (stale ? 1 : 0), cl->held[s].pos, newpos, true};

		record(&ckpt_acks, &a);
	}
	cl->held[s].pos = newpos;
	tally(op, "accepted");
}

/*
 * The unfenced checkpoint (6 arguments): the client locks the lease row,
 * reads owner, epoch and checkpoint, and writes on from there, so the range
 * it acknowledges and the epoch it wrote under are exact.
 */
static void
op_checkpoint_plain(Client *cl)
{
	const char *op = "update_checkpoint";
	int			s = rnd(&cl->rng, NSHARDS);
	char		shard[8],
				value[64];
	const char *p[6];
	long long	epoch,
				cur,
				newpos;
	bool		mine,
				ok;
	Res			r;

	lease_key(cl, s, shard, p);
	if ((r = q(&cl->c, "BEGIN", 0, NULL)) != RES_OK ||
		(r = q(&cl->c, "SELECT lease_owner, lease_epoch, checkpoint FROM lease.shard_leases"
			   " WHERE app_name = $1 AND stream_name = $2 AND shard_id = $3 FOR NO KEY UPDATE", 3, p)) != RES_OK)
	{
		tally(op, on_error(cl, op, r));
		rollback(cl);
		return;
	}
	mine = strcmp(val(&cl->c, 0, 0), cl->owner) == 0;
	epoch = atoll(val(&cl->c, 0, 1));
	cur = ckpt_pos(val(&cl->c, 0, 2));
	newpos = cur + 1 + rnd(&cl->rng, 50);
	snprintf(value, sizeof(value), "%016lld-w%02d-%lld", newpos, cl->id, ++cl->seq);
	p[4] = value;
	p[5] = "0";
	if ((r = q(&cl->c, "SELECT lease.update_checkpoint($1, $2, $3, $4, $5, $6::bigint)", 6, p)) != RES_OK)
	{
		note_value(s, newpos, value, VAL_UNCOMMITTED);
		tally(op, on_error(cl, op, r));
		rollback(cl);
		return;
	}
	ok = val(&cl->c, 0, 0)[0] == 't';
	if ((r = q(&cl->c, "COMMIT", 0, NULL)) != RES_OK)
	{
		note_value(s, newpos, value, ok ? VAL_UNKNOWN : VAL_REFUSED);
		tally(op, on_error(cl, op, r));
		return;
	}
	note_value(s, newpos, value, ok ? VAL_ACKED : VAL_REFUSED);
	if (ok && !mine)
		violation("%s %s: accepted from %s, but the owner was someone else", op, shard, cl->owner);
	if (!ok && mine)
		violation("%s %s: refused from its owner %s", op, shard, cl->owner);
	if (ok)
	{
		CkptAck		a = {s, cl->id, epoch, cur, newpos, false};

		record(&ckpt_acks, &a);
		if (cl->held[s].have && cl->held[s].epoch == epoch)
			cl->held[s].pos = newpos;
		else
		{
			if (!cl->held[s].have)
				cl->list_known = false;		/* learned apart from the list */
			cl->held[s].have = true;
			cl->held[s].epoch = epoch;
			cl->held[s].pos = newpos;
		}
		cl->held[s].pos_known = true;
	}
	tally(op, ok ? "accepted" : "refused (not owner)");
}

/* prepare_checkpoint, release_lease, request_handoff: boolean lease calls. */
static void
op_lease_bool(Client *cl, int which)
{
	static const char *names[] = {"prepare_checkpoint", "release_lease", "request_handoff"};
	int			s = rnd(&cl->rng, NSHARDS);
	char		shard[8],
				value[64],
				other[16];
	const char *p[5];
	Res			r;

	lease_key(cl, s, shard, p);
	if (which == 0)
	{
		snprintf(value, sizeof(value), "%016lld-pending", cl->held[s].pos + 1);
		p[4] = value;
		r = q(&cl->c, "SELECT lease.prepare_checkpoint($1, $2, $3, $4, $5)", 5, p);
	}
	else if (which == 1)
		r = q(&cl->c, "SELECT lease.release_lease($1, $2, $3, $4)", 4, p);
	else
	{
		owner_name(rnd(&cl->rng, opt_clients), other, sizeof(other));
		p[3] = other;
		r = q(&cl->c, "SELECT lease.request_handoff($1, $2, $3, $4)", 4, p);
	}
	if (r != RES_OK)
	{
		tally(names[which], on_error(cl, names[which], r));
		return;
	}
	if (which == 1)
	{
		/* refused: it was not ours, whatever the list said */
		if (cl->held[s].have && val(&cl->c, 0, 0)[0] != 't')
			cl->list_known = false;
		cl->held[s].have = false;
	}
	tally(names[which], val(&cl->c, 0, 0)[0] == 't' ? "true" : "false");
}

/* Lineage on its own stream: parents, children, close, cleanup, delete. */
static void
op_lineage(Client *cl)
{
	int			g = rnd(&cl->rng, 6);
	char		a[16],
				b[16],
				parents[24];
	const char *p[5];
	Res			r;
	int			step = rnd(&cl->rng, 5);
	static const char *steps[] = {"create_lease", "take_lease", "close_shard", "cleanup_ended", "delete_lease"};
	const char *op = steps[step];

	snprintf(a, sizeof(a), "g%d-a", g);
	snprintf(b, sizeof(b), "g%d-b", g);
	snprintf(parents, sizeof(parents), "{%s}", a);
	p[0] = APP;
	p[1] = LINEAGE;
	switch (step)
	{
		case 0:
			p[2] = a;
			r = q(&cl->c, "SELECT lease.create_lease($1, $2, $3)", 3, p);
			if (r == RES_OK)
			{
				tally("lineage create_lease(parent)", val(&cl->c, 0, 0)[0] == 't' ? "true" : "false");
				p[2] = b;
				p[3] = parents;
				r = q(&cl->c, "SELECT lease.create_lease($1, $2, $3, $4::text[])", 4, p);
			}
			break;
		case 1:
			p[2] = rnd(&cl->rng, 2) ? a : b;
			p[3] = cl->owner;
			r = q(&cl->c, "SELECT lease.take_lease($1, $2, $3, $4) IS NOT NULL", 4, p);
			break;
		case 2:
			p[2] = rnd(&cl->rng, 2) ? a : b;
			p[3] = cl->owner;
			r = q(&cl->c, "SELECT lease.close_shard($1, $2, $3, $4)", 4, p);
			break;
		case 3:
			r = q(&cl->c, "SELECT lease.cleanup_ended($1, $2) > 0", 2, p);
			break;
		default:
			p[2] = rnd(&cl->rng, 2) ? a : b;
			r = q(&cl->c, "SELECT lease.delete_lease($1, $2, $3)", 3, p);
			break;
	}
	{
		char		label[40];

		snprintf(label, sizeof(label), "lineage %s", op);
		if (r != RES_OK)
			tally(label, on_error(cl, label, r));
		else
			tally(label, val(&cl->c, 0, 0)[0] == 't' ? "true" : "false");
	}
}

/* prune_events, the two views, and the per-app grant functions. */
static void
op_events(Client *cl)
{
	const char *p[1] = {"1 hour"};
	Res			r;

	r = q(&cl->c, "SELECT lease.prune_events($1::interval)", 1, p);
	if (r != RES_OK)
	{
		tally("prune_events", on_error(cl, "prune_events", r));
		return;
	}
	tally("prune_events", atoll(val(&cl->c, 0, 0)) == 0 ? "0 pruned" : "pruned");
	r = q(&cl->c, "SELECT (SELECT count(*) FROM lease.lease_status),"
		  " (SELECT count(*) FROM lease.worker_loads)", 0, NULL);
	tally("lease_status/worker_loads", r == RES_OK ? "read" : on_error(cl, "views", r));
	/* an operator weighing a shard (or clearing its weight), and the dry run */
	{
		static const char *weights[] = {NULL, "1", "3", "10"};
		char		shard[8];
		const char *w[4];

		shard_name(rnd(&cl->rng, NSHARDS), shard, sizeof(shard));
		w[0] = APP;
		w[1] = STREAM;
		w[2] = shard;
		w[3] = weights[rnd(&cl->rng, 4)];
		r = q(&cl->c, "SELECT lease.set_weight($1, $2, $3, $4::float8)", 4, w);
		tally("set_weight", r != RES_OK ? on_error(cl, "set_weight", r) :
			  val(&cl->c, 0, 0)[0] == 't' ? "true" : "false");
		r = q(&cl->c, "SELECT count(*) FROM lease.plan_rebalance($1, $2)", 2, w);
		tally("plan_rebalance", r != RES_OK ? on_error(cl, "plan_rebalance", r) :
			  atoll(val(&cl->c, 0, 0)) == 0 ? "no move" : "moves");
	}
	/* the per-app grants: an operator granting and revoking another app */
	r = q(&cl->c, "SELECT lease.has_app_access('" APP "')", 0, NULL);
	tally("has_app_access", r != RES_OK ? on_error(cl, "has_app_access", r) :
		  val(&cl->c, 0, 0)[0] == 't' ? "true" : "false");
	r = q(&cl->c, rnd(&cl->rng, 2) ? "SELECT lease.grant_app('torture-grants', 'torture_role')"
		  : "SELECT lease.revoke_app('torture-grants', 'torture_role')", 0, NULL);
	tally("grant_app/revoke_app", r != RES_OK ? on_error(cl, "grant_app/revoke_app", r) :
		  val(&cl->c, 0, 0)[0] == 't' ? "true" : "false");
}

/* ----------------------------------------------------------- channel ops */

/* One line of the serial replay's trace; channel -1: not about a channel. */
typedef struct TraceLine
{
	int			channel;
	char		text[120];
} TraceLine;

static Vec	trace_lines = {.size = sizeof(TraceLine)};
static int	serial_step = 0;

static int	check_restorable(Conn *c, int from, int to, bool confirm);

/* Records a call and its answer in the serial replay (no-op otherwise). */
static void
trace(Client *cl, int channel, const char *fmt,...)
{
	TraceLine	t = {.channel = channel};
	int			len;
	va_list		ap;

	if (opt_serial == 0)
		return;
	len = snprintf(t.text, sizeof(t.text), "step %d: w%02d ", serial_step, cl->id);
	va_start(ap, fmt);
	vsnprintf(t.text + len, sizeof(t.text) - len, fmt, ap);
	va_end(ap);
	record(&trace_lines, &t);
}

/* The conversation bound to a channel of (user, agent), or 0. */
static Res
find_channel(Client *cl, const char *user, const char *agent, const char *channel, long long *holder)
{
	const char *p[5] = {user, agent, NULL, NULL, channel};
	Res			r = q(&cl->c, "SELECT lease.find_channel_conversation($1, $2, $3, $4, $5)", 5, p);

	if (r == RES_OK)
		*holder = isnull(&cl->c, 0, 0) ? 0 : atoll(val(&cl->c, 0, 0));
	return r;
}

/*
 * Counts the compensation_failures rows of a pair (with `unresolved`, the
 * unresolved ones only); the count stays in c->res.
 */
static Res
pair_rows(Conn *c, const FailedPair *fp, bool unresolved)
{
	char		a[24],
				b[24];
	const char *p[2] = {a, b};

	snprintf(a, sizeof(a), "%lld", fp->prev);
	snprintf(b, sizeof(b), "%lld", fp->failed);
	return q(c, unresolved
			 ? "SELECT count(*) FROM lease.compensation_failures"
			 " WHERE previous_conversation_id = $1 AND failed_conversation_id = $2 AND resolved_at IS NULL"
			 : "SELECT count(*) FROM lease.compensation_failures"
			 " WHERE previous_conversation_id = $1 AND failed_conversation_id = $2", 2, p);
}

/* Whether an unresolved compensation row still exists for a pair. */
static bool
pair_unresolved(Client *cl, FailedPair *fp)
{
	if (pair_rows(&cl->c, fp, true) != RES_OK)
		return true;
	return atoi(val(&cl->c, 0, 0)) > 0;
}

/* find_channel_conversation on an own channel, checked against what we know. */
static void
op_find(Client *cl, Chan *ch)
{
	long long	holder;
	Res			r = find_channel(cl, cl->user, cl->agent, ch->channel, &holder);

	if (r != RES_OK)
	{
		tally("find_channel_conversation", on_error(cl, "find_channel_conversation", r));
		return;
	}
	if (ch->outstanding)
	{
		ch->holder = holder;
		if (!pair_unresolved(cl, &ch->pair))
			ch->outstanding = false;
		tally("find_channel_conversation", "resynced");
		return;
	}
	if (holder != ch->holder)
		violation("channel %s/%s: bound to %lld, the client's last acknowledged binding is %lld",
				  cl->user, ch->channel, holder, ch->holder);
	tally("find_channel_conversation", holder ? "bound" : "unbound");
}

/* Remembers an admission we got no answer for. */
static void
note_indeterminate(void)
{
	pthread_mutex_lock(&mu);
	indeterminate_admissions++;
	pthread_mutex_unlock(&mu);
}

/*
 * Runs a start or rotation (an admission) tallied under op; on an error
 * tallies it, remembering an admission with no answer, and returns false.
 */
static bool
admit_call(Client *cl, const char *op, const char *sql, int n, const char *const *p)
{
	Res			r = q(&cl->c, sql, n, p);

	if (r == RES_OK)
		return true;
	if (r == RES_LOST)
		note_indeterminate();
	tally(op, on_error(cl, op, r));
	return false;
}

/* start_conversation on an unbound own channel. */
static void
op_start(Client *cl, Chan *ch)
{
	const char *p[5] = {cl->user, cl->agent, NULL, NULL, ch->channel};

	if (!admit_call(cl, "start_conversation",
					"SELECT outcome, conversation_id FROM lease.start_conversation($1, $2, $3, $4, $5)", 5, p))
		return;
	if (strcmp(val(&cl->c, 0, 0), "started") == 0)
	{
		long long	id = atoll(val(&cl->c, 0, 1));

		record(&conv_acked, &id);
		record(&conv_pool, &id);
		ch->holder = id;
	}
	else if (strcmp(val(&cl->c, 0, 0), "already_bound") == 0)
		violation("start_conversation %s: already_bound to %s, the client knew it unbound",
				  ch->channel, val(&cl->c, 0, 1));
	tally("start_conversation", val(&cl->c, 0, 0));
}

/* end_conversation of a conversation id (boolean), tallied under op. */
static Res
end_conv(Client *cl, const char *op, long long id)
{
	char		a[24];
	const char *p[1] = {a};
	Res			r;

	snprintf(a, sizeof(a), "%lld", id);
	r = q(&cl->c, "SELECT lease.end_conversation($1::bigint)", 1, p);
	if (r == RES_OK)
		tally(op, val(&cl->c, 0, 0)[0] == 't' ? "ended" : "already ended");
	else
		tally(op, on_error(cl, op, r));
	return r;
}

/* restore_rotated_channel(prev, failed) tallied under op; the outcome or NULL. */
static const char *
restore(Client *cl, const char *op, long long prev, long long failed)
{
	char		a[24],
				b[24];
	const char *p[2] = {a, b};
	Res			r;

	snprintf(a, sizeof(a), "%lld", prev);
	snprintf(b, sizeof(b), "%lld", failed);
	r = q(&cl->c, "SELECT lease.restore_rotated_channel($1::bigint, $2::bigint)", 2, p);
	if (r != RES_OK)
	{
		tally(op, on_error(cl, op, r));
		return NULL;
	}
	tally(op, val(&cl->c, 0, 0));
	return val(&cl->c, 0, 0);
}

/*
 * The replacement `id` of a rotation from `prev` started: its
 * worker runs, so confirm_rotation or, with `turn`, its first admit_turn
 * ends the previous conversation (check_lifecycle checks that).  Tallied
 * under op: the confirmation's outcome, "admitted", or "55000 ended" when
 * the replacement was restored or ended meanwhile.
 */
static void
start_replacement(Client *cl, const char *op, long long prev, long long id, bool turn)
{
	char		a[24],
				b[24];
	const char *p[2] = {a, b};
	Res			r;

	snprintf(a, sizeof(a), "%lld", turn ? id : prev);
	snprintf(b, sizeof(b), "%lld", id);
	r = turn ? q(&cl->c, "SELECT lease.admit_turn($1::bigint)", 1, p)
		: q(&cl->c, "SELECT lease.confirm_rotation($1::bigint, $2::bigint)", 2, p);
	if (r == RES_ERROR && strcmp(cl->c.sqlstate, "55000") == 0)
		tally(op, "55000 ended");
	else if (r != RES_OK)
		tally(op, on_error(cl, op, r));
	else
		tally(op, turn ? "admitted" : val(&cl->c, 0, 0));
}

/*
 * rotate_channel on an own channel; after `rotated`, sometimes the worker
 * "fails to start" and the rotation is restored, otherwise the replacement
 * starts (confirm_rotation or its first turn, which end the previous
 * conversation) or the previous conversation is ended.  A refused, busy or binding_changed rotation must
 * leave the previous binding (checked at once: nobody else moves our
 * channels unless a failed restore of ours is queued).
 */
static void
op_rotate(Client *cl, Chan *ch)
{
	char		from[24];
	const char *p[6] = {cl->user, cl->agent, NULL, NULL, ch->channel, from};
	Res			r;
	const char *outcome;
	long long	prev = ch->holder,
				id;
	bool		slow = opt_expect_crash && rnd(&cl->rng, 5) == 0;

	snprintf(from, sizeof(from), "%lld", prev);
	if (slow && (r = q(&cl->c, "BEGIN", 0, NULL)) != RES_OK)
	{
		tally("rotate_channel", on_error(cl, "rotate_channel", r));
		return;
	}
	r = q(&cl->c, "SELECT outcome, conversation_id FROM lease.rotate_channel($1, $2, $3, $4, $5, $6::bigint)", 6, p);
	if (r != RES_OK)
	{
		if (r == RES_LOST && !slow)
			note_indeterminate();
		tally("rotate_channel", on_error(cl, "rotate_channel", r));
		if (slow)
			rollback(cl);
		return;
	}
	outcome = val(&cl->c, 0, 0);
	id = isnull(&cl->c, 0, 1) ? 0 : atoll(val(&cl->c, 0, 1));
	tally("rotate_channel", outcome);
	if (strcmp(outcome, "rotated") != 0)
	{
		long long	holder;

		if (slow)
			q(&cl->c, "COMMIT", 0, NULL);
		if (strcmp(outcome, "binding_changed") == 0)
			violation("rotate_channel %s from %lld: binding_changed, nobody else rotates it",
					  ch->channel, prev);
		if (find_channel(cl, cl->user, cl->agent, ch->channel, &holder) == RES_OK && holder != prev)
			violation("rotate_channel %s from %lld: %s, but the channel is now bound to %lld",
					  ch->channel, prev, outcome, holder);
		return;
	}
	if (slow)
	{
		sleep_ms(20 + rnd(&cl->rng, 150));
		if (!still_there(cl))
		{
			record(&conv_uncommitted, &id);
			tally("rotate_channel", on_error(cl, "rotate_channel", RES_LOST));
			return;
		}
		if ((r = q(&cl->c, "COMMIT", 0, NULL)) != RES_OK)
		{
			note_indeterminate();
			tally("rotate_channel", on_error(cl, "rotate_channel", r));
			return;
		}
	}
	record(&conv_acked, &id);
	record(&conv_pool, &id);
	{
		FailedPair	rp = {prev, id};

		record(&rot_acked, &rp);
	}
	ch->holder = id;
	if (rnd(&cl->rng, 3) == 0)
	{
		const char *o = restore(cl, "restore_rotated_channel", prev, id);

		if (o == NULL)
			return;
		if (strcmp(o, "restored") == 0)
			ch->holder = prev;
		else if (strcmp(o, "failed") == 0)
		{
			FailedPair	fp = {prev, id};

			record(&failed_pairs, &fp);
			ch->outstanding = true;
			ch->pair = fp;
		}
	}
	else
	{
		int			k = rnd(&cl->rng, 5);

		if (k < 2)
			start_replacement(cl, "confirm_rotation", prev, id, false);
		else if (k < 4)
			start_replacement(cl, "admit_turn(first)", prev, id, true);
		else
			end_conv(cl, "end_conversation", prev);
	}
}

/*
 * Picks a random conversation of the load (0 when none yet): mostly recent
 * ones, which are still live; `hot` picks among the newest few, the
 * replacements a restore is about to lock.
 */
static long long
random_conversation(Client *cl, bool hot)
{
	long long	id = 0;

	pthread_mutex_lock(&mu);
	if (conv_pool.n > 0)
	{
		size_t		window = hot ? 4 : 40;

		if (conv_pool.n < window || rnd(&cl->rng, 10) == 0)
			window = conv_pool.n;

		id = ((long long *) conv_pool.data)[conv_pool.n - 1 - rnd_next(&cl->rng) % window];
	}
	pthread_mutex_unlock(&mu);
	return id;
}

/*
 * admit_turn on conversation id (none when 0), tallied under op; `hold`
 * keeps its transaction open a while, so rotations and restores meet a busy
 * conversation.
 */
static void
admit_turn_on(Client *cl, const char *op, long long id, bool hold)
{
	char		a[24];
	const char *p[1] = {a};
	Res			r;

	if (id == 0)
		return;
	snprintf(a, sizeof(a), "%lld", id);
	if (hold && (r = q(&cl->c, "BEGIN", 0, NULL)) != RES_OK)
	{
		tally(op, on_error(cl, op, r));
		return;
	}
	r = q(&cl->c, "SELECT lease.admit_turn($1::bigint)", 1, p);
	if (r == RES_ERROR && strcmp(cl->c.sqlstate, "55000") == 0)
		tally(op, "55000 ended");
	else if (r != RES_OK)
		tally(op, on_error(cl, op, r));
	else
		tally(op, "admitted");
	if (hold)
	{
		if (r == RES_OK)
			sleep_ms(100 + rnd(&cl->rng, 300));
		q(&cl->c, r == RES_OK ? "COMMIT" : "ROLLBACK", 0, NULL);
	}
}

/* admit_turn on a random conversation of the load, sometimes held. */
static void
op_admit(Client *cl, bool hold)
{
	admit_turn_on(cl, hold ? "admit_turn(held)" : "admit_turn",
				  random_conversation(cl, hold && rnd(&cl->rng, 2) == 0), hold);
}

/* Rotates a shared channel (every client competes for it). */
static void
op_rotate_shared(Client *cl)
{
	char		channel[8],
				from[24];
	long long	holder;
	const char *p[6] = {"ts", "shared", NULL, NULL, channel, from};
	Res			r;

	snprintf(channel, sizeof(channel), "sh%d", rnd(&cl->rng, 2));
	if ((r = find_channel(cl, "ts", "shared", channel, &holder)) != RES_OK)
	{
		tally("rotate_channel(shared)", on_error(cl, "rotate_channel(shared)", r));
		return;
	}
	snprintf(from, sizeof(from), "%lld", holder);
	if (!admit_call(cl, "rotate_channel(shared)",
					"SELECT outcome, conversation_id FROM lease.rotate_channel($1, $2, $3, $4, $5, $6::bigint)", 6, p))
		return;
	tally("rotate_channel(shared)", val(&cl->c, 0, 0));
	if (strcmp(val(&cl->c, 0, 0), "rotated") == 0)
	{
		long long	id = atoll(val(&cl->c, 0, 1));
		FailedPair	rp = {holder, id};

		record(&conv_acked, &id);
		record(&conv_pool, &id);
		record(&rot_acked, &rp);
		end_conv(cl, "end_conversation", holder);
	}
}

/* retry_failed_compensations: the operator's drain. */
static void
op_retry(Client *cl)
{
	Res			r = q(&cl->c, "SELECT outcome, previous_conversation_id, failed_conversation_id"
					  "  FROM lease.retry_failed_compensations()", 0, NULL);
	int			i;

	if (r != RES_OK)
	{
		tally("retry_failed_compensations", on_error(cl, "retry_failed_compensations", r));
		return;
	}
	for (i = 0; i < PQntuples(cl->c.res); i++)
	{
		FailedPair	fp = {atoll(val(&cl->c, i, 1)), atoll(val(&cl->c, i, 2))};

		tally("retry_failed_compensations", val(&cl->c, i, 0));
		trace(cl, -1, "retry_failed_compensations() -> (%lld, %lld) %s", fp.prev, fp.failed, val(&cl->c, i, 0));
		if (strcmp(val(&cl->c, i, 0), "failed") == 0)
			record(&failed_pairs, &fp);
	}
	if (PQntuples(cl->c.res) == 0)
		tally("retry_failed_compensations", "queue empty");
}

/* ------------------------------------------------------ shared channels */

/*
 * Shared channels: NSHARED channels of NSHTEN tenants ("tx" with a small
 * limit, so rotations are refused by it, and "ty"), each channel in its own scope
 * (agent "sa<j>", channel "sc<j>"), so every conversation of that scope is a
 * conversation of that channel.  The first --shared-channels clients rotate,
 * restore their own rotations, end, admit turns and retry on them.
 */
static const char *const sh_tenant[NSHTEN] = {"tx", "ty"};
static const int sh_limit[NSHTEN] = {4, 10};

/* The tenant, agent and channel names of shared channel j. */
static const char *
sh_names(int j, char *agent, char *channel)
{
	snprintf(agent, 8, "sa%d", j);
	snprintf(channel, 8, "sc%d", j);
	return sh_tenant[j / NSHCH];
}

/* Remembers a conversation of a shared channel. */
static void
sh_remember(SharedView *v, long long id)
{
	v->known[v->nknown++ % NKNOWN] = id;
}

/* A remembered conversation of a shared channel, 0 if none. */
static long long
sh_known(Client *cl, SharedView *v)
{
	int			n = v->nknown < NKNOWN ? v->nknown : NKNOWN;

	return n ? v->known[rnd(&cl->rng, n)] : 0;
}

/* Records an acknowledged start or rotation of a shared channel. */
static void
sh_acked(SharedView *v, long long prev, long long id)
{
	record(&conv_acked, &id);
	record(&conv_pool, &id);
	if (prev != 0)
	{
		FailedPair	rp = {prev, id};

		record(&rot_acked, &rp);
	}
	v->seen = id;
	sh_remember(v, id);
}

/* The outcome of a shared start or rotation; a refusal says whose limit. */
static const char *
sh_outcome(Client *cl)
{
	if (strcmp(val(&cl->c, 0, 0), "refused") != 0)
		return val(&cl->c, 0, 0);
	return strncmp(val(&cl->c, 0, 2), "fleet", 5) == 0 ? "refused (fleet)" : "refused (tenant)";
}

/*
 * start_conversation on a shared channel the client found unbound; first
 * the restorable-chain rule for that channel, evaluated by the client that
 * is about to bind it (so a violation is seen before a new start hides it).
 */
static void
sh_start(Client *cl, int j)
{
	char		agent[8],
				channel[8];
	const char *p[5] = {sh_names(j, agent, channel), agent, NULL, NULL, channel};

	check_restorable(&cl->c, j, j + 1, opt_serial == 0);
	if (!admit_call(cl, "shared: start_conversation",
					"SELECT outcome, conversation_id, detail FROM lease.start_conversation($1, $2, $3, $4, $5)", 5, p))
		return;
	tally("shared: start_conversation", sh_outcome(cl));
	trace(cl, j, "start_conversation(%s) -> %s %s", channel, sh_outcome(cl), val(&cl->c, 0, 1));
	if (strcmp(val(&cl->c, 0, 0), "started") == 0)
		sh_acked(&cl->sh[j], 0, atoll(val(&cl->c, 0, 1)));
	else if (!isnull(&cl->c, 0, 1))
		cl->sh[j].seen = atoll(val(&cl->c, 0, 1));
}

/* find_channel_conversation on a shared channel; starts one when unbound. */
static void
sh_find(Client *cl, int j)
{
	char		agent[8],
				channel[8];
	const char *user = sh_names(j, agent, channel);
	long long	holder;
	Res			r = find_channel(cl, user, agent, channel, &holder);

	if (r != RES_OK)
	{
		tally("shared: find_channel_conversation", on_error(cl, "shared: find_channel_conversation", r));
		return;
	}
	tally("shared: find_channel_conversation", holder ? "bound" : "unbound");
	trace(cl, j, "find_channel_conversation(%s) -> %lld", channel, holder);
	cl->sh[j].seen = holder;
	if (holder == 0)
		sh_start(cl, j);
	else
		sh_remember(&cl->sh[j], holder);
}

/*
 * Restores an own rotation of shared channel j (its worker "failed").  When
 * superseded, the client is done with the previous conversation a third of
 * the time and ends it (else it stays live and unbound, holding its quota
 * slot, until an end_conversation of a remembered conversation finds it).
 */
static void
sh_restore_pair(Client *cl, int j, FailedPair fp)
{
	const char *o = restore(cl, "shared: restore_rotated_channel", fp.prev, fp.failed);

	trace(cl, j, "restore_rotated_channel(%lld, %lld) -> %s", fp.prev, fp.failed, o ? o : "error");
	if (o == NULL)
		return;
	if (strcmp(o, "restored") == 0)
		cl->sh[j].seen = fp.prev;
	else if (strcmp(o, "failed") == 0)
		record(&failed_pairs, &fp);
	else if (strcmp(o, "superseded") != 0)
		return;
	else if (rnd(&cl->rng, 3) != 0)
		sh_remember(&cl->sh[j], fp.prev);
	else if (end_conv(cl, "shared: end_conversation", fp.prev) == RES_OK)
		trace(cl, j, "end_conversation(%lld)", fp.prev);
}

/* Restores one of the client's pending rotations of shared channel j. */
static void
sh_restore(Client *cl, int j)
{
	SharedView *v = &cl->sh[j];
	int			i = rnd(&cl->rng, v->nmine);
	FailedPair	fp = v->mine[i];

	v->mine[i] = v->mine[--v->nmine];
	sh_restore_pair(cl, j, fp);
}

/*
 * end_conversation of the holder of a shared channel or of a remembered one;
 * after a refusal by the tenant limit (`tidy`), of a remembered one that is
 * not the holder, as the refusal's detail advises.
 */
static void
sh_end(Client *cl, int j, bool tidy)
{
	SharedView *v = &cl->sh[j];
	long long	id = !tidy && rnd(&cl->rng, 3) == 0 ? v->seen : sh_known(cl, v);

	if (id == 0 || (tidy && id == v->seen))
		return;
	if (end_conv(cl, "shared: end_conversation", id) != RES_OK)
		return;
	trace(cl, j, "end_conversation(%lld)", id);
	if (id == v->seen)
		v->seen = 0;
}

/*
 * rotate_channel on a shared channel, from the conversation the client last
 * saw there or from find_channel_conversation.  After `rotated` the new
 * worker either "fails" (the pair is kept to restore later, so other
 * clients' rotations and restores come in between), or starts
 * (confirm_rotation or its first turn, which end the previous conversation),
 * or the previous conversation is ended, or left live.
 */
static void
sh_rotate(Client *cl, int j)
{
	SharedView *v = &cl->sh[j];
	char		agent[8],
				channel[8],
				from[24];
	const char *p[6] = {sh_names(j, agent, channel), agent, NULL, NULL, channel, from};
	long long	prev = v->seen;
	int			k;
	Res			r;

	if (prev == 0 || rnd(&cl->rng, 2) == 0)
	{
		if ((r = find_channel(cl, p[0], agent, channel, &prev)) != RES_OK)
		{
			tally("shared: rotate_channel", on_error(cl, "shared: rotate_channel", r));
			return;
		}
		if (prev == 0)
		{
			sh_start(cl, j);
			return;
		}
	}
	snprintf(from, sizeof(from), "%lld", prev);
	if (!admit_call(cl, "shared: rotate_channel",
					"SELECT outcome, conversation_id, detail FROM lease.rotate_channel($1, $2, $3, $4, $5, $6::bigint)", 6, p))
		return;
	tally("shared: rotate_channel", sh_outcome(cl));
	trace(cl, j, "rotate_channel(%s from %lld) -> %s %s", channel, prev, sh_outcome(cl), val(&cl->c, 0, 1));
	if (strcmp(val(&cl->c, 0, 0), "rotated") != 0)
	{
		if (strcmp(sh_outcome(cl), "refused (tenant)") == 0)
			sh_end(cl, j, true);
		v->seen = 0;			/* look it up next time */
		return;
	}
	sh_acked(v, prev, atoll(val(&cl->c, 0, 1)));
	k = rnd(&cl->rng, 10);
	if (k < 4)
	{
		FailedPair	fp = {prev, v->seen};

		if (v->nmine < NMINE)
			v->mine[v->nmine++] = fp;
		else
			sh_restore_pair(cl, j, fp);
	}
	else if (k < 8)
	{
		start_replacement(cl, k < 6 ? "shared: confirm_rotation" : "shared: admit_turn(first)",
						  prev, v->seen, k >= 6);
		trace(cl, j, "%s(%lld, %lld)", k < 6 ? "confirm_rotation" : "admit_turn", prev, v->seen);
	}
	else if (k < 9 && end_conv(cl, "shared: end_conversation", prev) == RES_OK)
		trace(cl, j, "end_conversation(%lld)", prev);
}

/* admit_turn on a conversation of a shared channel (ended ones refuse). */
static void
sh_admit(Client *cl, int j)
{
	SharedView *v = &cl->sh[j];

	admit_turn_on(cl, "shared: admit_turn", v->seen && rnd(&cl->rng, 2) ? v->seen : sh_known(cl, v), false);
}

/* One operation on a random shared channel. */
static void
op_shared(Client *cl)
{
	int			j = rnd(&cl->rng, NSHARED);
	int			k = rnd(&cl->rng, 100);

	if (cl->sh[j].nmine > 0 && k < 30)
		sh_restore(cl, j);
	else if (k < 60)
		sh_rotate(cl, j);
	else if (k < 72)
		sh_end(cl, j, false);
	else if (k < 80)
		sh_admit(cl, j);
	else if (k < 92)
		sh_find(cl, j);
	else
		op_retry(cl);
}

/* One channel operation on a random own channel. */
static void
op_channel(Client *cl)
{
	Chan	   *ch = &cl->chan[rnd(&cl->rng, NCHAN)];
	int			k = rnd(&cl->rng, 10);

	if (ch->outstanding || k < 2)
		op_find(cl, ch);
	else if (ch->holder == 0)
		op_start(cl, ch);
	else if (k < 8)
		op_rotate(cl, ch);
	else
	{
		if (end_conv(cl, "end_conversation", ch->holder) == RES_OK)
			ch->holder = 0;
	}
}

/* After a reconnect: forget what we held, learn our channels again. */
static void
resync(Client *cl)
{
	int			i;

	memset(cl->held, 0, sizeof(cl->held));
	cl->list_known = false;
	for (i = 0; i < NCHAN; i++)
	{
		long long	holder;

		if (find_channel(cl, cl->user, cl->agent, cl->chan[i].channel, &holder) == RES_OK)
			cl->chan[i].holder = holder;
		else
			cl->lost = true;
		if (cl->chan[i].outstanding && !pair_unresolved(cl, &cl->chan[i].pair))
			cl->chan[i].outstanding = false;
	}
}

/* Reconnects after the server went away, until the deadline. */
static bool
reconnect(Conn *c, const char *appname)
{
	conn_close(c);
	while (now_s() < t_deadline + 30)
	{
		if (conn_open(c, appname))
		{
			pthread_mutex_lock(&mu);
			reconnects++;
			pthread_mutex_unlock(&mu);
			return true;
		}
		sleep_ms(100);
	}
	return false;
}

/* Wrappers, so that every operation is a void (Client *) for the mix. */
static void op_take_free(Client *cl) { op_take(cl, false); }
static void op_steal(Client *cl) { op_take(cl, true); }
static void op_prepare(Client *cl) { op_lease_bool(cl, 0); }
static void op_release(Client *cl) { op_lease_bool(cl, 1); }
static void op_handoff(Client *cl) { op_lease_bool(cl, 2); }
static void op_admit_turn(Client *cl) { op_admit(cl, false); }
static void op_admit_held(Client *cl) { op_admit(cl, true); }

/* The operation mix: relative weights, summing to 100. */
static const struct
{
	int			weight;
	void		(*fn) (Client *cl);
}			mix[] = {
	{10, op_take_free}, {3, op_steal}, {6, op_renew}, {2, op_renew_leases}, {3, op_heartbeat},
	{6, op_take_leases}, {10, op_checkpoint_fenced}, {6, op_checkpoint_plain},
	{3, op_prepare}, {3, op_release}, {2, op_handoff}, {4, op_lineage}, {1, op_events},
	{21, op_channel}, {6, op_rotate_shared}, {6, op_admit_turn}, {3, op_admit_held},
	{5, op_retry},
};

/* A client thread: random operations until the deadline. */
static void *
client_main(void *arg)
{
	Client	   *cl = arg;

	while (now_s() < t_deadline)
	{
		int			k = rnd(&cl->rng, 100);
		size_t		i;

		/* a shared-channel client spends a third of its calls there */
		if (cl->shared && rnd(&cl->rng, 3) == 0)
			op_shared(cl);
		else
		{
			for (i = 0; i < sizeof(mix) / sizeof(mix[0]) - 1 && k >= mix[i].weight; i++)
				k -= mix[i].weight;
			mix[i].fn(cl);
		}
		if (cl->lost)
		{
			if (!opt_expect_crash || !reconnect(&cl->c, cl->c.appname))
				break;
			cl->lost = false;
			resync(cl);
		}
	}
	return NULL;
}

/* -------------------------------------------------------------- checking */

/* Per shard: the owner each ownership-gaining event names, by epoch. */
typedef struct EpochOwners
{
	int			n;
	char	  **owner;			/* owner[epoch], NULL when none recorded */
} EpochOwners;

/* The invariants, each with its name and how often it was checked. */
enum
{
	INV_CKPT_OWNER,
	INV_EPOCH_UNIQUE,
	INV_RANGES,
	INV_BINDING,
	INV_SHARED,
	INV_QUOTA,
	INV_COMPENSATION,
	INV_LEFTOVERS,
	INV_DURABLE_CKPT,
	INV_DURABLE_CONV,
	INV_KILL_ROTATE,
	INV_KILL_RESTORE,
	INV_TAKER_STATE,
	INV_RESTORABLE,
	INV_LIFECYCLE,
	INV_EXACTLY_ONCE,
	NINV
};
static const char *inv_names[NINV] = {
	"checkpoint accepted only from the owner of record at its epoch (lease_events)",
	"one owner per (shard, lease_epoch) in lease_events",
	"no record range acknowledged by two owners",
	"every bound channel bound to exactly one live conversation per scope",
	"shared channels bound exactly once at all times",
	"active sandboxes within fleet capacity and tenant limits",
	"every failed compensation has its compensation_failures row",
	"no leftover rows (every conversation and sandbox acknowledged or in flight)",
	"every acknowledged checkpoint present, no refused or uncommitted one",
	"every acknowledged start/rotation present, no uncommitted one",
	"backend killed mid-rotation leaves nothing partial",
	"backend killed mid-restore leaves nothing partial",
	"the taker's bookkeeping equals a recount (test/lib/taker_state_check.sql)",
	"no shared channel unbound while a failed chain leads back to a live unbound conversation",
	"no live conversation whose replacement runs (its start ended it: the rotation lifecycle)",
	"transactional clients: every record up to each shard's checkpoint in torture_output exactly once",
};
static int	inv_failures[NINV];
static int	inv_checks[NINV];

/* Marks one check of an invariant, failed or not (caller reports details). */
static void
checked(int inv, bool ok)
{
	pthread_mutex_lock(&mu);
	inv_checks[inv]++;
	if (!ok)
		inv_failures[inv]++;
	pthread_mutex_unlock(&mu);
}

/* Loads the ownership history of the stream from lease_events. */
static bool
load_events(Conn *c, EpochOwners *eo)
{
	const char *p[2] = {APP, STREAM};
	int			i,
				bad = 0;

	if (q(c, "SELECT shard_id, lease_epoch, to_owner FROM lease.lease_events"
		  " WHERE app_name = $1 AND stream_name = $2"
		  "   AND event IN ('take', 'expiry_takeover', 'session_ended', 'steal', 'transfer')", 2, p) != RES_OK)
		return false;
	for (i = 0; i < NSHARDS; i++)
		eo[i].n = 0;
	for (i = 0; i < PQntuples(c->res); i++)
	{
		int			s = atoi(val(c, i, 0) + 1);
		long long	e = atoll(val(c, i, 1));
		EpochOwners *x = &eo[s];

		if (s < 0 || s >= NSHARDS || e < 0 || e > 10000000)
			continue;
		if (e >= x->n)
		{
			int			nn = (int) e + 64;

			x->owner = realloc(x->owner, nn * sizeof(char *));
			memset(x->owner + x->n, 0, (nn - x->n) * sizeof(char *));
			x->n = nn;
		}
		if (x->owner[e] != NULL)
		{
			if (strcmp(x->owner[e], val(c, i, 2)) != 0)
				violation("lease_events: s%02d epoch %lld gained by both %s and %s",
						  s, e, x->owner[e], val(c, i, 2));
			bad++;
		}
		else
			x->owner[e] = strdup(val(c, i, 2));
	}
	checked(INV_EPOCH_UNIQUE, bad == 0);
	if (bad)
		violation("lease_events: %d (shard, epoch) pairs gained more than once", bad);
	return true;
}

/* Frees the event history. */
static void
free_events(EpochOwners *eo)
{
	int			i,
				j;

	for (i = 0; i < NSHARDS; i++)
	{
		for (j = 0; j < eo[i].n; j++)
			free(eo[i].owner[j]);
		free(eo[i].owner);
		eo[i].owner = NULL;
		eo[i].n = 0;
	}
}

/* Orders checkpoint ranges by shard, then start, then end. */
static int
cmp_range(const void *a, const void *b)
{
	const CkptAck *x = a,
			   *y = b;

	if (x->shard != y->shard)
		return x->shard - y->shard;
	if (x->lo != y->lo)
		return (x->lo > y->lo) - (x->lo < y->lo);
	return (x->hi > y->hi) - (x->hi < y->hi);
}

/* The owner lease_events name for (shard, epoch), NULL when no event gained it. */
static const char *
epoch_owner(const EpochOwners *eo, int shard, long long epoch)
{
	return (epoch >= 0 && epoch < eo[shard].n) ? eo[shard].owner[epoch] : NULL;
}

/* A copy of what the clients recorded in v so far, taken under the mutex; *n records (free it). */
static void *
vec_snapshot(Vec *v, size_t *n)
{
	void	   *copy;

	pthread_mutex_lock(&mu);
	*n = v->n;
	copy = malloc((v->n + 1) * v->size);
	memcpy(copy, v->data, v->n * v->size);
	pthread_mutex_unlock(&mu);
	return copy;
}

/* Every acknowledged checkpoint was written under an epoch its client gained (lease_events). */
static void
check_ckpt_owners(const CkptAck *acks, size_t n, const EpochOwners *eo)
{
	int			bad = 0;

	for (size_t i = 0; i < n; i++)
	{
		const CkptAck *a = &acks[i];
		const char *who = epoch_owner(eo, a->shard, a->epoch);
		char		me[16];

		owner_name(a->client, me, sizeof(me));
		if (who == NULL || strcmp(who, me) != 0)
		{
			if (bad++ < 5)
				violation("checkpoint s%02d (%lld, %lld] accepted from %s under epoch %lld, %s; lease_events say %s",
						  a->shard, a->lo, a->hi, me, a->epoch, a->fenced ? "fenced" : "unfenced",
						  who ? who : "nobody gained that epoch");
		}
	}
	checked(INV_CKPT_OWNER, bad == 0);
}

/*
 * Ranges: within a shard, ranges of two different epochs must not overlap.
 * Sorted by (shard, lo, hi), a range overlaps an earlier one exactly when it
 * starts below the largest end seen so far.
 */
static void
check_ckpt_ranges(CkptAck *acks, size_t n)
{
	size_t		i,
				j;
	int			overlaps = 0;

	qsort(acks, n, sizeof(CkptAck), cmp_range);
	for (i = 0; i < n; i = j)
	{
		long long	maxhi = acks[i].hi;
		size_t		at = i;

		for (j = i + 1; j < n && acks[j].shard == acks[i].shard; j++)
		{
			CkptAck    *x = &acks[at],
					   *y = &acks[j];

			if (y->lo < maxhi && y->epoch != x->epoch && overlaps++ < 5)
				violation("checkpoint ranges overlap on s%02d: (%lld, %lld] by w%02d epoch %lld and (%lld, %lld] by w%02d epoch %lld",
						  x->shard, x->lo, x->hi, x->client, x->epoch, y->lo, y->hi, y->client, y->epoch);
			if (y->hi > maxhi)
			{
				maxhi = y->hi;
				at = j;
			}
		}
	}
	checked(INV_RANGES, overlaps == 0);
}

/* Checkpoints against ownership history; and no overlapping ranges. */
static void
check_checkpoints(Conn *c)
{
	EpochOwners eo[NSHARDS];
	CkptAck    *acks;
	size_t		n;

	/*
	 * The acknowledgements first, the history after: an acknowledged
	 * checkpoint's epoch was gained by a take that committed before it, so
	 * the later snapshot of lease_events contains it.  (The other way round,
	 * a take committing between the two reads looks like a missing event.)
	 */
	acks = vec_snapshot(&ckpt_acks, &n);
	memset(eo, 0, sizeof(eo));
	if (!load_events(c, eo))
	{
		free(acks);
		return;
	}
	check_ckpt_owners(acks, n, eo);
	check_ckpt_ranges(acks, n);
	free(acks);
	free_events(eo);
}

/*
 * The taker's bookkeeping against a recount, in one snapshot (the
 * statements that change leases change it too): per worker, its leases
 * counted exactly, no lease expiring before its bound, and the number and
 * sum of their known weights (the sum to 1e-9); every stream with
 * its takeable row; a cached takeable count not marked stale equal to the
 * leases neither ended nor blocked.  False when the query failed.
 */
static bool
check_taker_state(Conn *c)
{
	if (q(c, "SELECT 'worker ' || coalesce(r.worker, w.worker) || ': holds ' || coalesce(r.n, 0)"
		  "       || ', counted ' || coalesce(w.leases, 0)"
		  "       || ', weighed ' || coalesce(r.k, 0) || '/' || coalesce(w.weighed, 0)"
		  "       || ', load ' || coalesce(r.l, 0) || '/' || coalesce(w.load, 0)"
		  "  FROM (SELECT app_name, stream_name, lease_owner AS worker, count(*) AS n,"
		  "               min(lease_expires_at) AS e, count(coalesce(weight, work_rate)) AS k,"
		  "               coalesce(sum(coalesce(weight, work_rate)), 0) AS l FROM lease.shard_leases"
		  "         WHERE lease_owner IS NOT NULL GROUP BY 1, 2, 3) r"
		  "  FULL JOIN (SELECT * FROM lease.worker_holdings WHERE leases <> 0 OR weighed <> 0 OR load <> 0) w"
		  "       USING (app_name, stream_name, worker)"
		  " WHERE r.n IS DISTINCT FROM w.leases OR w.expires_min IS NULL OR w.expires_min > r.e"
		  "    OR coalesce(r.k, 0) <> coalesce(w.weighed, 0)"
		  "    OR abs(coalesce(r.l, 0) - coalesce(w.load, 0)) > 1e-9 * greatest(1, abs(coalesce(r.l, 0)))"
		  " UNION ALL"
		  " SELECT 'stream ' || l.stream_name || ': no stream_takeable row'"
		  "  FROM (SELECT DISTINCT app_name, stream_name FROM lease.shard_leases) l"
		  " WHERE NOT EXISTS (SELECT 1 FROM lease.stream_takeable t"
		  "                    WHERE t.app_name = l.app_name AND t.stream_name = l.stream_name)"
		  " UNION ALL"
		  " SELECT 'stream ' || t.stream_name || ': takeable cached ' || t.takeable || ', counted ' || n.n"
		  "  FROM lease.stream_takeable t,"
		  "       LATERAL (SELECT count(*) AS n FROM lease.shard_leases l"
		  "                 WHERE l.app_name = t.app_name AND l.stream_name = t.stream_name"
		  "                   AND l.checkpoint <> 'SHARD_END'"
		  "                   AND NOT EXISTS (SELECT 1 FROM lease.shard_leases p"
		  "                                    WHERE p.app_name = l.app_name AND p.stream_name = l.stream_name"
		  "                                      AND p.shard_id = ANY (l.parent_shard_ids)"
		  "                                      AND p.checkpoint <> 'SHARD_END')) n"
		  " WHERE t.takeable IS NOT NULL AND t.takeable <> n.n"
		  "   AND NOT EXISTS (SELECT 1 FROM lease.lineage_changes g"
		  "                    WHERE g.app_name = t.app_name AND g.stream_name = t.stream_name)",
		  0, NULL) != RES_OK)
		return false;
	checked(INV_TAKER_STATE, PQntuples(c->res) == 0);
	for (int i = 0; i < PQntuples(c->res); i++)
		violation("taker bookkeeping: %s", val(c, i, 0));
	return true;
}

/* No channel bound twice in one scope, none bound to a dead conversation; false when the query failed. */
static bool
check_bindings(Conn *c)
{
	if (q(c, "SELECT (SELECT count(*) FROM (SELECT 1 FROM lease.conversations WHERE channel_id IS NOT NULL"
		  "          GROUP BY user_id, agent_id, vault_id, environment_id, channel_id HAVING count(*) > 1) d),"
		  "       (SELECT count(*) FROM lease.conversations WHERE channel_id IS NOT NULL"
		  "          AND status NOT IN ('pending', 'running', 'idle'))", 0, NULL) != RES_OK)
		return false;
	checked(INV_BINDING, atoi(val(c, 0, 0)) == 0 && atoi(val(c, 0, 1)) == 0);
	if (atoi(val(c, 0, 0)) != 0 || atoi(val(c, 0, 1)) != 0)
		violation("bindings: %s channels bound twice, %s bound to a dead conversation", val(c, 0, 0), val(c, 0, 1));
	return true;
}

/* The load's shared channels (ts/shared sh0, sh1) each bound exactly once; false when the query failed. */
static bool
check_shared_bound(Conn *c)
{
	if (q(c, "SELECT ch, (SELECT count(*) FROM lease.conversations"
		  "             WHERE user_id = 'ts' AND agent_id = 'shared' AND channel_id = ch)"
		  "  FROM unnest(ARRAY['sh0', 'sh1']) AS ch", 0, NULL) != RES_OK)
		return false;
	for (int i = 0; i < 2; i++)
	{
		bool		ok = atoi(val(c, i, 1)) == 1;

		checked(INV_SHARED, ok);
		if (!ok)
			violation("shared channel %s bound %s times", val(c, i, 0), val(c, i, 1));
	}
	return true;
}

/* Active sandboxes within the fleet capacity and every tenant's limit; false when the query failed. */
static bool
check_quota(Conn *c)
{
	char		cap[16],
				deflimit[16];
	const char *p[2] = {cap, deflimit};
	bool		ok;

	snprintf(cap, sizeof(cap), "%d", FLEET_CAPACITY);
	snprintf(deflimit, sizeof(deflimit), "%d", TENANT_LIMIT);
	if (q(c, "WITH a AS (SELECT user_id FROM lease.sandboxes WHERE status IN ('pending', 'starting', 'ready'))"
		  " SELECT (SELECT count(*) FROM a) > $1::int,"
		  "        (SELECT string_agg(u.user_id || ':' || u.n, ' ') FROM"
		  "           (SELECT a.user_id, count(*) AS n, coalesce(min(t.sandbox_limit), $2::int) AS lim"
		  "              FROM a LEFT JOIN lease.tenant_limits t USING (user_id)"
		  "             GROUP BY a.user_id) u WHERE u.n > u.lim),"
		  "        (SELECT count(*) FROM a)", 2, p) != RES_OK)
		return false;
	ok = val(c, 0, 0)[0] == 'f' && isnull(c, 0, 1);
	checked(INV_QUOTA, ok);
	if (!ok)
		violation("quota: %s active sandboxes (capacity %d); tenants over their limit: %s",
				  val(c, 0, 2), FLEET_CAPACITY, val(c, 0, 1));
	return true;
}

/*
 * The lifecycle of a rotation: a replacement's start (its first
 * turn or confirm_rotation) ends, in its transaction, the conversation it
 * was rotated from, which can never be live again; so no running or idle
 * conversation has a live rotated_from, in any state between whole calls.
 * A violation would be a slot held forever by a conversation that nothing
 * can restore to.  False when the query failed.
 */
static bool
check_lifecycle(Conn *c)
{
	bool		ok;

	if (q(c, "SELECT count(*), string_agg(p.id || '<-' || r.id, ' ')"
		  "  FROM lease.conversations r JOIN lease.conversations p ON p.id = r.rotated_from"
		  " WHERE r.status IN ('running', 'idle') AND p.status IN ('pending', 'running', 'idle')",
		  0, NULL) != RES_OK)
		return false;
	ok = atoi(val(c, 0, 0)) == 0;
	checked(INV_LIFECYCLE, ok);
	if (!ok)
		violation("lifecycle: %s live conversations whose replacement runs (previous<-replacement): %s",
				  val(c, 0, 0), val(c, 0, 1));
	return true;
}

/* Every restore that answered failed has its compensation_failures row. */
static void
check_compensation_rows(Conn *c)
{
	size_t		n;
	FailedPair *fps = vec_snapshot(&failed_pairs, &n);
	int			missing = 0;

	for (size_t i = 0; i < n; i++)
	{
		if (pair_rows(c, &fps[i], false) != RES_OK)
			break;
		if (atoi(val(c, 0, 0)) == 0 && missing++ < 5)
			violation("restore (%lld, %lld) answered failed but has no compensation_failures row",
					  fps[i].prev, fps[i].failed);
	}
	checked(INV_COMPENSATION, missing == 0);
	free(fps);
}

/* Bindings, shared channels, quotas, the lifecycle, compensation rows: one sample (it stops at a failed query). */
static void
check_tables(Conn *c)
{
	if (check_taker_state(c) && check_bindings(c) && check_shared_bound(c) && check_quota(c) &&
		check_lifecycle(c))
		check_compensation_rows(c);
}

/*
 * The transactional clients' output: per shard of XSTREAM, the rows of
 * public.torture_output (no unique constraint) are exactly the records 1 to
 * the checkpoint, each once.  Holds in every snapshot, since output and
 * checkpoint commit together.
 */
static void
check_exactly_once(Conn *c)
{
	static int	reported = 0;	/* the first few, every sample would repeat them */
	const char *p[2] = {APP, XSTREAM};
	bool		ok = true;

	if (opt_txn == 0)
		return;
	if (q(c, "SELECT l.shard_id, l.checkpoint, count(o.seq), count(DISTINCT o.seq),"
		  "       coalesce(min(o.seq), 0), coalesce(max(o.seq), 0),"
		  "       count(DISTINCT o.seq) FILTER (WHERE o.seq <="
		  "             CASE WHEN l.checkpoint ~ '^[0-9]+$' THEN l.checkpoint::bigint ELSE 0 END)"
		  "  FROM lease.shard_leases l LEFT JOIN public.torture_output o"
		  "       ON o.app = l.app_name AND o.stream = l.stream_name AND o.shard = l.shard_id"
		  " WHERE l.app_name = $1 AND l.stream_name = $2"
		  " GROUP BY l.shard_id, l.checkpoint ORDER BY l.shard_id", 2, p) != RES_OK)
		return;
	for (int i = 0; i < PQntuples(c->res); i++)
	{
		long long	ck = ckpt_pos(val(c, i, 1)),
					rows = atoll(val(c, i, 2)),
					distinct = atoll(val(c, i, 3)),
					lo = atoll(val(c, i, 4)),
					hi = atoll(val(c, i, 5)),
					upto = atoll(val(c, i, 6));

		if (rows == ck && distinct == ck && (ck == 0 || (lo == 1 && hi == ck)))
			continue;
		ok = false;
		if (reported++ < 2 * NXSHARDS)
			violation("exactly once: %s %s checkpoint %lld, %lld output rows of %lld distinct records %lld..%lld:"
					  " %lld duplicates, %lld of records 1..%lld missing, %lld beyond the checkpoint",
					  XSTREAM, val(c, i, 0), ck, rows, distinct, lo, hi, rows - distinct, ck - upto, ck,
					  distinct - upto);
	}
	checked(INV_EXACTLY_ONCE, ok);
}

/* The length of a text[] literal naming the shared channels' users, agents or channels. */
#define SCOPES_LEN 64

/* The scopes of shared channels from..to-1 as three text[] literals: users, agents, channels. */
static void
shared_scopes(int from, int to, char *users, char *agents, char *channels)
{
	strcpy(users, "{");
	strcpy(agents, "{");
	strcpy(channels, "{");
	for (int j = from; j < to; j++)
	{
		char		agent[8],
					channel[8];
		const char *user = sh_names(j, agent, channel);
		const char *sep = j + 1 < to ? "," : "}";

		snprintf(users + strlen(users), SCOPES_LEN - strlen(users), "%s%s", user, sep);
		snprintf(agents + strlen(agents), SCOPES_LEN - strlen(agents), "%s%s", agent, sep);
		snprintf(channels + strlen(channels), SCOPES_LEN - strlen(channels), "%s%s", channel, sep);
	}
}

/*
 * The restorable-chain rule on shared channels from..to-1: no channel is
 * unbound while restore could have given it back.  Precisely: a channel that
 * no conversation holds, whose newest conversation (the highest id in its
 * scope: admissions are serialized by the admission lock, held until
 * commit, so ids are in commit order) reaches, through rotated_from across conversations that failed, a
 * conversation that is live and unbound.  The walk stops at the first
 * conversation that did not fail: one ended on purpose ends the chain.
 *
 * Every call is its own transaction, so one statement's snapshot is a state
 * between whole calls; with `confirm` (while clients run) a violation counts
 * only if a second snapshot 100 ms later shows the very same chain, so no
 * state a call in flight is about to change is reported.  Returns a bit per
 * violating channel.
 */
static int
check_restorable(Conn *c, int from, int to, bool confirm)
{
	char		users[SCOPES_LEN],
				agents[SCOPES_LEN],
				channels[SCOPES_LEN],
				seen[NSHARED][160];
	const char *p[3] = {users, agents, channels};
	int			j,
				pass,
				bad = 0;

	shared_scopes(from, to, users, agents, channels);
	for (j = from; j < to; j++)
		seen[j][0] = '\0';
	for (pass = 0; pass < (confirm ? 2 : 1); pass++)
	{
		int			i;

		if (pass > 0)
			sleep_ms(100);
		if (q(c, "WITH RECURSIVE ch(u, a, chan) AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[])),"
			  " walk AS ("
			  "  SELECT ch.chan, n.id, n.status, n.channel_id, n.rotated_from, n.id::text AS path"
			  "    FROM ch CROSS JOIN LATERAL (SELECT * FROM lease.conversations c"
			  "           WHERE c.user_id = ch.u AND c.agent_id = ch.a ORDER BY c.id DESC LIMIT 1) n"
			  "   WHERE NOT EXISTS (SELECT 1 FROM lease.conversations h"
			  "                      WHERE h.user_id = ch.u AND h.agent_id = ch.a AND h.channel_id = ch.chan)"
			  "  UNION ALL"
			  "  SELECT w.chan, p.id, p.status, p.channel_id, p.rotated_from,"
			  "         w.path || ' (failed) <- ' || p.id"
			  "    FROM walk w JOIN lease.conversations p ON p.id = w.rotated_from"
			  "   WHERE w.status = 'failed')"
			  " SELECT substr(chan, 3)::int, chan, path || ' (' || status || ', unbound)' FROM walk"
			  "  WHERE status IN ('pending', 'running', 'idle') AND channel_id IS NULL", 3, p) != RES_OK)
			return 0;
		bad = 0;
		for (i = 0; i < PQntuples(c->res); i++)
		{
			int			k = atoi(val(c, i, 0));
			char		msg[160];

			if (k < from || k >= to)
				continue;
			snprintf(msg, sizeof(msg), "shared channel %s unbound, restore could give it back: %s",
					 val(c, i, 1), val(c, i, 2));
			if (pass + 1 == (confirm ? 2 : 1) && (!confirm || strcmp(seen[k], msg) == 0))
			{
				bad |= 1 << k;
				violation("%s", msg);
			}
			snprintf(seen[k], sizeof(seen[k]), "%s", msg);
		}
		if (PQntuples(c->res) == 0)
			break;
	}
	checked(INV_RESTORABLE, bad == 0);
	return bad;
}

/* Compares two long longs (qsort, bsearch). */
static int
cmp_ll(const void *a, const void *b)
{
	long long	x = *(const long long *) a,
				y = *(const long long *) b;

	return (x > y) - (x < y);
}

/*
 * Durability of checkpoints: no refused or uncommitted value in the table,
 * no shard behind its acknowledged position.  The count of violations, -1
 * when the table could not be read.
 */
static int
durable_checkpoints(Conn *c)
{
	long long	maxacked[NSHARDS];
	char		dbval[NSHARDS][64];
	int			i,
				bad = 0;

	if (q(c, "SELECT shard_id, checkpoint FROM lease.shard_leases"
		  " WHERE app_name = '" APP "' AND stream_name = '" STREAM "'", 0, NULL) != RES_OK)
		return -1;
	memset(dbval, 0, sizeof(dbval));
	for (i = 0; i < PQntuples(c->res); i++)
	{
		int			s = atoi(val(c, i, 0) + 1);

		if (s >= 0 && s < NSHARDS)
			snprintf(dbval[s], sizeof(dbval[s]), "%s", val(c, i, 1));
	}
	for (i = 0; i < NSHARDS; i++)
		maxacked[i] = 0;
	for (size_t k = 0; k < ckpt_vals.n; k++)
	{
		CkptVal    *v = &((CkptVal *) ckpt_vals.data)[k];

		if (v->state == VAL_ACKED && v->pos > maxacked[v->shard])
			maxacked[v->shard] = v->pos;
		if ((v->state == VAL_REFUSED || v->state == VAL_UNCOMMITTED) &&
			strcmp(dbval[v->shard], v->value) == 0)
		{
			violation("s%02d holds checkpoint %s, which was %s", v->shard, v->value,
					  v->state == VAL_REFUSED ? "refused" : "never committed");
			bad++;
		}
	}
	for (i = 0; i < NSHARDS; i++)
		if (ckpt_pos(dbval[i]) < maxacked[i])
		{
			violation("s%02d: checkpoint %s is behind the acknowledged position %lld",
					  i, dbval[i], maxacked[i]);
			bad++;
		}
	return bad;
}

/* Every acknowledged take is in the event history; the count of those missing. */
static int
durable_takes(Conn *c)
{
	EpochOwners eo[NSHARDS];
	int			lost = 0;

	memset(eo, 0, sizeof(eo));
	if (load_events(c, eo))
	{
		for (size_t k = 0; k < take_acks.n; k++)
		{
			TakeAck    *t = &((TakeAck *) take_acks.data)[k];
			const char *who = epoch_owner(eo, t->shard, t->epoch);
			char		me[16];

			owner_name(t->client, me, sizeof(me));
			if ((who == NULL || strcmp(who, me) != 0) && lost++ < 5)
				violation("acknowledged take of s%02d epoch %lld by %s is not in lease_events",
						  t->shard, t->epoch, me);
		}
	}
	free_events(eo);
	return lost;
}

/*
 * Durability of conversations: every acknowledged start and rotation
 * present, none from an uncommitted rotation, each rotation still saying
 * where it came from.  Counts in *unacked the conversations nobody
 * acknowledged; false when the table could not be read.
 */
static bool
durable_conversations(Conn *c, long *unacked)
{
	long long  *ids;
	int			nids,
				i,
				bad = 0;
	size_t		k;

	if (q(c, "SELECT id, rotated_from FROM lease.conversations ORDER BY id", 0, NULL) != RES_OK)
		return false;
	nids = PQntuples(c->res);
	ids = malloc((nids + 1) * sizeof(long long));
	for (i = 0; i < nids; i++)
		ids[i] = atoll(val(c, i, 0));
	qsort(conv_acked.data, conv_acked.n, sizeof(long long), cmp_ll);
	for (k = 0; k < conv_acked.n; k++)
	{
		long long	id = ((long long *) conv_acked.data)[k];

		if (!bsearch(&id, ids, nids, sizeof(long long), cmp_ll) && bad++ < 5)
			violation("acknowledged conversation %lld is missing", id);
	}
	for (k = 0; k < conv_uncommitted.n; k++)
	{
		long long	id = ((long long *) conv_uncommitted.data)[k];

		if (bsearch(&id, ids, nids, sizeof(long long), cmp_ll) && bad++ < 5)
			violation("conversation %lld from an uncommitted rotation exists", id);
	}
	*unacked = 0;
	for (i = 0; i < nids; i++)
		if (!bsearch(&ids[i], conv_acked.data, conv_acked.n, sizeof(long long), cmp_ll))
			(*unacked)++;
	/* each acknowledged rotation still says where it came from */
	for (k = 0; k < rot_acked.n; k++)
	{
		FailedPair *rp = &((FailedPair *) rot_acked.data)[k];
		long long  *hit = bsearch(&rp->failed, ids, nids, sizeof(long long), cmp_ll);

		if (hit && atoll(val(c, (int) (hit - ids), 1)) != rp->prev && bad++ < 5)
			violation("rotated conversation %lld has rotated_from %s, expected %lld",
					  rp->failed, val(c, (int) (hit - ids), 1), rp->prev);
	}
	checked(INV_DURABLE_CONV, bad == 0);
	free(ids);
	return true;
}

/* No leftover rows: unacknowledged conversations only from admissions in flight, a sandbox for each. */
static void
check_leftovers(Conn *c, long unacked)
{
	bool		ok;

	if (q(c, "SELECT (SELECT count(*) FROM lease.sandboxes), (SELECT count(*) FROM lease.conversations),"
		  " (SELECT count(*) FROM lease.conversations c JOIN lease.sandboxes s ON s.id = c.sandbox_id)", 0, NULL) != RES_OK)
		return;
	ok = unacked <= indeterminate_admissions &&
		strcmp(val(c, 0, 0), val(c, 0, 1)) == 0 && strcmp(val(c, 0, 1), val(c, 0, 2)) == 0;
	checked(INV_LEFTOVERS, ok);
	if (!ok)
		violation("leftovers: %ld conversations nobody acknowledged (%ld admissions in flight at a crash);"
				  " %s sandboxes, %s conversations, %s with their sandbox",
				  unacked, indeterminate_admissions, val(c, 0, 0), val(c, 0, 1), val(c, 0, 2));
}

/* End check: durability of acknowledged work, absence of the rest. */
static void
check_durability(Conn *c)
{
	int			bad = durable_checkpoints(c);
	long		unacked;

	if (bad < 0)
		return;
	bad += durable_takes(c);
	checked(INV_DURABLE_CKPT, bad == 0);
	if (durable_conversations(c, &unacked))
		check_leftovers(c, unacked);
}

/* The checker thread: samples the invariants until the deadline. */
static void *
checker_main(void *arg)
{
	Conn		c;

	(void) arg;
	if (!conn_open(&c, "torture-checker"))
		return NULL;
	while (now_s() < t_deadline)
	{
		check_tables(&c);
		check_checkpoints(&c);
		check_exactly_once(&c);
		if (opt_shared > 0)
			check_restorable(&c, 0, NSHARED, true);
		if (PQstatus(c.pg) == CONNECTION_BAD)
		{
			if (!opt_expect_crash || !reconnect(&c, "torture-checker"))
				break;
		}
		sleep_ms(250);
	}
	conn_close(&c);
	return NULL;
}

/* ------------------------------------------------- transactional clients */

/*
 * Transactional clients (docs/exactly-once.md): on a stream of
 * their own, each batch is one transaction: one output row per record into
 * public.torture_output, hold_lease (its checkpoint must be where the batch
 * starts, else a commit was lost: roll back and resume from it), the fenced
 * checkpoint, COMMIT.  Their connections run synchronous_commit = off (as the
 * test cluster), so a crash can lose a commit they were told about; after a
 * reconnect they go on from what they remember (a COMMIT that went
 * unanswered leaves the position where the batch started), and hold_lease's
 * checkpoint corrects them.  They
 * take, steal, renew, release and let leases expire among themselves; with
 * --kills a killer terminates their backends mid-transaction.  With
 * --omit-hold they leave hold_lease out and commit even when the fenced
 * checkpoint was refused (a forgotten IF NOT ok THEN ROLLBACK): the check
 * must find duplicates.
 */
static Client txns[MAX_CLIENTS];
static int	txn_kills_done = 0;

/* The first four arguments of a lease call on XSTREAM. */
static void
tx_key(Client *cl, int s, char *shard, const char **p)
{
	lease_key(cl, s, shard, p);
	p[1] = XSTREAM;
}

/* An error of a transactional client: a lost connection is expected after a kill or crash. */
static void
tx_fail(Client *cl, const char *op, Res r)
{
	cl->list_known = false;		/* what the call changed is unknown: list again */
	if (r == RES_LOST)
	{
		cl->lost = true;
		if (!opt_expect_crash && opt_kills == 0)
			violation("%s: connection lost: %s", op, cl->c.errmsg);
		tally(op, "connection_lost");
	}
	else
		tally(op, on_error(cl, op, r));
	rollback(cl);
}

/* Opens a transactional client's connection, commits asynchronous. */
static bool
tx_connect(Client *cl)
{
	char		app[32];

	snprintf(app, sizeof(app), "torture-x%02d", cl->id);
	if (cl->c.pg == NULL && !conn_open(&cl->c, app))
		return false;
	return q(&cl->c, "SET synchronous_commit = off", 0, NULL) == RES_OK;
}

/* take_lease on XSTREAM, free or (one time in three) a steal with the current count. */
static void
tx_take(Client *cl)
{
	const char *op = "txn take_lease";
	int			s = rnd(&cl->rng, NXSHARDS);
	char		shard[8],
				count[24] = "";
	const char *p[6];
	Res			r;
	bool		taken;

	tx_key(cl, s, shard, p);
	p[4] = NULL;
	p[5] = durations[rnd(&cl->rng, 2)];
	if (rnd(&cl->rng, 3) == 0)
	{
		if ((r = q(&cl->c, "SELECT lease_count FROM lease.shard_leases"
				   " WHERE app_name = $1 AND stream_name = $2 AND shard_id = $3", 3, p)) != RES_OK)
		{
			tx_fail(cl, op, r);
			return;
		}
		snprintf(count, sizeof(count), "%s", val(&cl->c, 0, 0));
		p[4] = count;
	}
	if ((r = begin_take(&cl->c, op, p, &taken, &cl->held[s].count, &cl->held[s].epoch,
						&cl->held[s].pos)) != RES_OK)
	{
		tx_fail(cl, op, r);
		return;
	}
	if (!taken)
	{
		tally(op, "not taken");
		return;
	}
	if ((r = q(&cl->c, "COMMIT", 0, NULL)) != RES_OK)
	{
		tx_fail(cl, op, r);
		return;
	}
	cl->held[s].have = cl->held[s].pos_known = true;
	tally(op, p[4] ? "stolen" : "taken");
}

/* renew_lease or release_lease of a shard held on XSTREAM. */
static void
tx_renew_release(Client *cl, bool release)
{
	const char *op = release ? "txn release_lease" : "txn renew_lease";
	int			s = rnd(&cl->rng, NXSHARDS);
	char		shard[8],
				count[24];
	const char *p[6];
	Res			r;

	if (!cl->held[s].have)
		return;
	tx_key(cl, s, shard, p);
	snprintf(count, sizeof(count), "%lld", cl->held[s].count);
	p[4] = count;
	p[5] = durations[rnd(&cl->rng, 2)];
	r = release ? q(&cl->c, "SELECT lease.release_lease($1, $2, $3, $4)", 4, p)
		: q(&cl->c, "SELECT lease.renew_lease($1, $2, $3, $4, $5::bigint, $6::interval)", 6, p);
	if (r != RES_OK)
	{
		tx_fail(cl, op, r);
		return;
	}
	if (release || isnull(&cl->c, 0, 0))
	{
		cl->held[s].have = false;
		tally(op, release ? "released" : "lost");
		return;
	}
	cl->held[s].count = atoll(val(&cl->c, 0, 0));
	tally(op, "renewed");
}

/*
 * Inside the batch's transaction: hold_lease.  False (the transaction rolled
 * back) when the lease is not held (55000: drop the shard) or the server's
 * checkpoint is not where the batch starts (resume from it).
 */
static bool
tx_hold(Client *cl, int s, const char **p)
{
	const char *op = "txn batch";
	Res			r;
	long long	ck;

	if ((r = q(&cl->c, "SELECT lease.hold_lease($1, $2, $3, $4, $5::bigint)", 5, p)) != RES_OK)
	{
		if (r == RES_ERROR && strcmp(cl->c.sqlstate, "55000") == 0)
		{
			cl->held[s].have = false;
			tally(op, "not held (hold_lease 55000)");
			rollback(cl);
		}
		else
			tx_fail(cl, op, r);
		return false;
	}
	ck = ckpt_pos(val(&cl->c, 0, 0));
	if (ck == cl->held[s].pos)
		return true;
	cl->held[s].pos = ck;
	tally(op, "resumed from hold_lease's checkpoint");
	rollback(cl);
	return false;
}

/* One batch of 1 to 20 records of a shard held, output and checkpoint in one transaction. */
static void
tx_batch(Client *cl)
{
	const char *op = "txn batch";
	int			s = rnd(&cl->rng, NXSHARDS);
	char		shard[8],
				epoch[24],
				from[24],
				to[24];
	const char *p[7];
	long long	last;
	bool		ok;
	Res			r;

	if (!cl->held[s].have || !cl->held[s].pos_known)
	{
		tx_take(cl);
		return;
	}
	last = cl->held[s].pos + 1 + rnd(&cl->rng, 20);
	tx_key(cl, s, shard, p);
	snprintf(epoch, sizeof(epoch), "%lld", cl->held[s].epoch);
	snprintf(from, sizeof(from), "%lld", cl->held[s].pos + 1);
	snprintf(to, sizeof(to), "%lld", last);
	p[4] = from;
	p[5] = to;
	if ((r = q(&cl->c, "BEGIN", 0, NULL)) != RES_OK ||
		(r = q(&cl->c, "INSERT INTO public.torture_output (app, stream, shard, seq, owner)"
			   " SELECT $1, $2, $3, g, $4 FROM pg_catalog.generate_series($5::bigint, $6::bigint) AS g",
			   6, p)) != RES_OK)
	{
		tx_fail(cl, op, r);
		return;
	}
	sleep_ms(5 + rnd(&cl->rng, 30));	/* the work, inside the transaction */
	p[4] = epoch;
	if (!opt_omit_hold && !tx_hold(cl, s, p))
		return;
	p[4] = to;
	p[5] = "0";
	p[6] = epoch;
	if ((r = q(&cl->c, "SELECT lease.update_checkpoint($1, $2, $3, $4, $5, $6::bigint, $7::bigint)", 7, p)) != RES_OK)
	{
		tx_fail(cl, op, r);
		return;
	}
	ok = val(&cl->c, 0, 0)[0] == 't';
	if (!ok && !opt_omit_hold)
	{
		/* hold_lease held the row: a refusal here is a bug */
		violation("%s %s: hold_lease passed at epoch %s, then the fenced checkpoint was refused", op, shard, epoch);
		cl->held[s].have = false;
		rollback(cl);
		return;
	}
	if ((r = q(&cl->c, "COMMIT", 0, NULL)) != RES_OK)
	{
		/* outcome unknown: the position stays where the batch started, hold_lease tells */
		tx_fail(cl, op, r);
		return;
	}
	cl->held[s].pos = last;
	cl->held[s].have = ok;
	tally(op, ok ? "committed" : "committed a refused checkpoint (--omit-hold)");
}

/* A transactional client: batches mostly, takes, renewals, releases; reconnects after a kill or crash. */
static void *
txn_main(void *arg)
{
	Client	   *cl = arg;

	while (now_s() < t_deadline)
	{
		int			k = rnd(&cl->rng, 100);

		if (k < 15)
			tx_take(cl);
		else if (k < 25)
			tx_renew_release(cl, false);
		else if (k < 28)
			tx_renew_release(cl, true);
		else
			tx_batch(cl);
		if (cl->lost)
		{
			conn_close(&cl->c);
			while (!tx_connect(cl) && now_s() < t_deadline + 30)
			{
				conn_close(&cl->c);
				sleep_ms(100);
			}
			if (cl->c.pg == NULL)
				break;
			/* what it holds and where it is, it keeps: hold_lease corrects both */
			cl->lost = false;
		}
	}
	conn_close(&cl->c);
	return NULL;
}

/* Terminates opt_kills transactional clients' backends while they are inside a batch's transaction. */
static void *
txn_killer_main(void *arg)
{
	Conn		k;

	(void) arg;
	if (!conn_open(&k, "torture-txn-killer"))
		return NULL;
	for (int i = 0; i < opt_kills && now_s() < t_deadline; i++)
	{
		sleep_ms((int) (1000.0 * (t_deadline - now_s()) / (opt_kills - i + 1) / 2));
		while (now_s() < t_deadline &&
			   q(&k, "SELECT pg_catalog.pg_terminate_backend(pid) FROM pg_catalog.pg_stat_activity"
				 " WHERE application_name LIKE 'torture-x%' AND state = 'idle in transaction'"
				 "   AND query LIKE 'INSERT INTO public.torture_output%' LIMIT 1", 0, NULL) == RES_OK &&
			   PQntuples(k.res) == 0)
			sleep_ms(5);
		if (k.res && PQresultStatus(k.res) == PGRES_TUPLES_OK && PQntuples(k.res) == 1)
		{
			pthread_mutex_lock(&mu);
			txn_kills_done++;
			pthread_mutex_unlock(&mu);
		}
	}
	conn_close(&k);
	return NULL;
}

/* Creates XSTREAM's shards and the output table (no unique constraint: duplicates must show). */
static void
txn_setup(Conn *c)
{
	for (int i = 0; i < NXSHARDS; i++)
	{
		char		shard[8];
		const char *p[3] = {APP, XSTREAM, shard};

		shard_name(i, shard, sizeof(shard));
		must(c, "SELECT lease.create_lease($1, $2, $3)", 3, p);
	}
	must(c, "CREATE TABLE public.torture_output (app text, stream text, shard text, seq bigint, owner text)",
		 0, NULL);
}

/* Names and connects the transactional clients (owners x00, x01, ...); false when one cannot connect. */
static bool
open_txns(void)
{
	for (int i = 0; i < opt_txn; i++)
	{
		Client	   *cl = &txns[i];

		cl->id = i;
		cl->rng = opt_seed * 7919ULL + 1000ULL + (uint64_t) i;
		snprintf(cl->owner, sizeof(cl->owner), "x%02d", i);
		if (!tx_connect(cl))
		{
			fprintf(stderr, "pg_lease_torture: cannot connect: %s", cl->c.errmsg);
			return false;
		}
	}
	return true;
}

/* ---------------------------------------------------------------- kills */

/*
 * Waits until the backend running `like` under application name
 * torture-victim waits on a lock, then terminates it; false if it never did.
 */
static bool
terminate_victim(Conn *k, const char *like)
{
	const char *p[1] = {like};
	int			i;

	for (i = 0; i < 200; i++)
	{
		if (q(k, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
			  " WHERE application_name = 'torture-victim' AND wait_event_type = 'Lock'"
			  "   AND query LIKE $1", 1, p) != RES_OK)
			return false;
		if (PQntuples(k->res) == 1 && val(k, 0, 0)[0] == 't')
			return true;
		sleep_ms(50);
	}
	return false;
}

/* Drains the victim's result after the kill; true if it failed. */
static bool
victim_died(Conn *v)
{
	PGresult   *res;
	bool		failed = false;

	while ((res = PQgetResult(v->pg)) != NULL)
	{
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
			failed = true;
		PQclear(res);
	}
	return failed || PQstatus(v->pg) == CONNECTION_BAD;
}

/*
 * Sends `sql` on the victim connection while h holds a lock it will wait
 * for, terminates the victim once it waits, then ends h's transaction.
 * False (and a failed check of inv) if the victim was not held and killed.
 */
static bool
kill_held(Conn *k, Conn *h, Conn *v, const char *sql, int n, const char *const *p,
		  const char *like, int inv)
{
	bool		ok;

	ok = PQsendQueryParams(v->pg, sql, n, NULL, p, NULL, NULL, 0) == 1;
	ok = ok && terminate_victim(k, like);
	ok = victim_died(v) && ok;
	must(h, "ROLLBACK", 0, NULL);
	if (!ok)
	{
		violation("%s: the call was not held and killed", inv_names[inv]);
		checked(inv, false);
	}
	return ok;
}

/* A count from a one-value query. */
static long long
count1(Conn *c, const char *sql, int n, const char *const *p)
{
	must(c, sql, n, p);
	return atoll(val(c, 0, 0));
}

/* The kill tenant's conversations and sandboxes, counted together. */
static long long
kill_tenant_rows(Conn *k)
{
	return count1(k, "SELECT count(*) FROM lease.conversations WHERE user_id = 'tk'", 0, NULL)
		+ count1(k, "SELECT count(*) FROM lease.sandboxes WHERE user_id = 'tk'", 0, NULL);
}

/* The conversation bound to the kill tenant's channel, 0 for none. */
static long long
kill_channel_bound(Conn *k)
{
	const char *p[5] = {"tk", "killer", NULL, NULL, "kc"};

	must(k, "SELECT lease.find_channel_conversation($1, $2, $3, $4, $5)", 5, p);
	return isnull(k, 0, 0) ? 0 : atoll(val(k, 0, 0));
}

/* Makes sure the kill tenant's channel is bound; returns its holder. */
static long long
kill_channel_holder(Conn *k)
{
	const char *p[5] = {"tk", "killer", NULL, NULL, "kc"};
	int			i;

	for (i = 0; i < 100; i++)
	{
		long long	bound = kill_channel_bound(k);

		if (bound != 0)
			return bound;
		must(k, "SELECT outcome, conversation_id FROM lease.start_conversation($1, $2, $3, $4, $5)", 5, p);
		if (strcmp(val(k, 0, 0), "started") == 0)
		{
			long long	id = atoll(val(k, 0, 1));

			record(&conv_acked, &id);
			return id;
		}
		sleep_ms(100);			/* the fleet is full: wait for a slot */
	}
	return 0;
}

/*
 * Mid-rotation: the rotation has locked and unbound the old conversation
 * and waits for the admission lock (the row of lease.admission_gate), which
 * we hold; the victim may wait for it a minute.  Killing it must leave the
 * old binding and no new rows.
 */
static void
kill_rotation(Conn *k, Conn *h, Conn *v)
{
	long long	prev = kill_channel_holder(k),
				before,
				after,
				holder;
	char		from[24];
	const char *p[6] = {"tk", "killer", NULL, NULL, "kc", from};
	bool		ok;

	if (prev == 0)
	{
		tally("kill mid-rotation", "skipped (no slot)");
		return;
	}
	snprintf(from, sizeof(from), "%lld", prev);
	before = kill_tenant_rows(k);
	must(h, "LOAD 'pg_lease'", 0, NULL);
	must(h, "BEGIN", 0, NULL);
	must(h, "SELECT only_row FROM lease.admission_gate FOR NO KEY UPDATE", 0, NULL);
	must(v, "SET lease.admission_lock_timeout = '60s'", 0, NULL);
	if (!kill_held(k, h, v, "SELECT outcome FROM lease.rotate_channel($1, $2, $3, $4, $5, $6::bigint)",
				   6, p, "%rotate_channel%", INV_KILL_ROTATE))
		return;
	after = kill_tenant_rows(k);
	holder = kill_channel_bound(k);
	ok = holder == prev && before == after;
	checked(INV_KILL_ROTATE, ok);
	if (!ok)
		violation("kill mid-rotation: channel bound to %lld (expected %lld), rows %lld -> %lld",
				  holder, prev, before, after);
	pthread_mutex_lock(&mu);
	kills_done[0]++;
	pthread_mutex_unlock(&mu);
	tally("kill mid-rotation", "killed, nothing partial");
}

/* Rotates the kill tenant's channel away from prev; the new id, 0 if refused. */
static long long
rotate_kill_channel(Conn *k, long long prev)
{
	char		from[24];
	const char *p[6] = {"tk", "killer", NULL, NULL, "kc", from};
	long long	id = 0;
	int			i;

	snprintf(from, sizeof(from), "%lld", prev);
	for (i = 0; i < 100 && id == 0; i++)
	{
		must(k, "SELECT outcome, conversation_id FROM lease.rotate_channel($1, $2, $3, $4, $5, $6::bigint)", 6, p);
		if (strcmp(val(k, 0, 0), "rotated") == 0)
			id = atoll(val(k, 0, 1));
		else
			sleep_ms(100);		/* refused: wait for a slot */
	}
	if (id != 0)
	{
		FailedPair	rp = {prev, id};

		record(&conv_acked, &id);
		record(&rot_acked, &rp);
	}
	return id;
}

/*
 * A restore that cannot lock the previous conversation (we hold it FOR
 * UPDATE past lease.rotation_lock_timeout) must answer failed and queue the
 * pair (the load's retry_failed_compensations may pick it up); once the
 * lock is gone, restoring again resolves it.
 */
static void
fail_restore(Conn *k, Conn *h)
{
	long long	prev = kill_channel_holder(k),
				id;
	char		from[24],
				idbuf[24];
	const char *pr[2] = {from, idbuf};

	if (prev == 0 || (id = rotate_kill_channel(k, prev)) == 0)
	{
		tally("restore against a held lock", "skipped (no slot)");
		return;
	}
	snprintf(from, sizeof(from), "%lld", prev);
	snprintf(idbuf, sizeof(idbuf), "%lld", id);
	must(h, "BEGIN", 0, NULL);
	must(h, "SELECT 1 FROM lease.conversations WHERE id = $1::bigint FOR UPDATE", 1, pr);
	must(k, "SELECT lease.restore_rotated_channel($1::bigint, $2::bigint)", 2, pr);
	tally("restore against a held lock", val(k, 0, 0));
	if (strcmp(val(k, 0, 0), "failed") == 0)
	{
		FailedPair	fp = {prev, id};

		record(&failed_pairs, &fp);
	}
	else
		violation("restore (%lld, %lld) against a held lock answered %s, not failed", prev, id, val(k, 0, 0));
	must(h, "ROLLBACK", 0, NULL);
	/* settle it now (a concurrent retry may have): the next scenario starts clean */
	must(k, "SELECT lease.restore_rotated_channel($1::bigint, $2::bigint)", 2, pr);
	tally("restore after the lock is gone", val(k, 0, 0));
}

/*
 * Mid-restore: the restore has marked the replacement failed and waits for
 * its sandbox row, which we lock.  Killing it must leave the replacement
 * pending and bound, and queue nothing; a second restore then restores.
 */
static void
kill_restore(Conn *k, Conn *h, Conn *v)
{
	long long	prev = kill_channel_holder(k),
				id = 0;
	char		from[24],
				idbuf[24];
	const char *pr[2] = {from, idbuf};
	bool		ok;

	if (prev == 0)
	{
		tally("kill mid-restore", "skipped (no slot)");
		return;
	}
	snprintf(from, sizeof(from), "%lld", prev);
	if ((id = rotate_kill_channel(k, prev)) == 0)
	{
		tally("kill mid-restore", "skipped (no slot)");
		return;
	}
	snprintf(idbuf, sizeof(idbuf), "%lld", id);
	must(h, "BEGIN", 0, NULL);
	{
		const char *pp[1] = {idbuf};

		must(h, "SELECT 1 FROM lease.sandboxes WHERE id = (SELECT sandbox_id FROM lease.conversations"
			 " WHERE id = $1::bigint) FOR UPDATE", 1, pp);
	}
	if (!kill_held(k, h, v, "SELECT lease.restore_rotated_channel($1::bigint, $2::bigint)",
				   2, pr, "%restore_rotated_channel%", INV_KILL_RESTORE))
		return;
	must(k, "SELECT (SELECT status || ':' || coalesce(channel_id, '-') FROM lease.conversations WHERE id = $2::bigint)"
		 " || ' ' || (SELECT coalesce(channel_id, '-') FROM lease.conversations WHERE id = $1::bigint)"
		 " || ' ' || (SELECT s.status FROM lease.sandboxes s JOIN lease.conversations c ON c.sandbox_id = s.id"
		 "             WHERE c.id = $2::bigint)"
		 " || ' ' || (SELECT count(*) FROM lease.compensation_failures"
		 "             WHERE previous_conversation_id = $1::bigint AND failed_conversation_id = $2::bigint)", 2, pr);
	ok = strcmp(val(k, 0, 0), "pending:kc - pending 0") == 0;
	if (!ok)
		violation("kill mid-restore: after the kill, replacement/previous/sandbox/queue are '%s',"
				  " expected 'pending:kc - pending 0'", val(k, 0, 0));
	/* the compensator still works afterwards */
	must(k, "SELECT lease.restore_rotated_channel($1::bigint, $2::bigint)", 2, pr);
	if (strcmp(val(k, 0, 0), "restored") != 0)
	{
		ok = false;
		violation("kill mid-restore: the restore after the kill answered %s", val(k, 0, 0));
	}
	checked(INV_KILL_RESTORE, ok);
	pthread_mutex_lock(&mu);
	kills_done[1]++;
	pthread_mutex_unlock(&mu);
	tally("kill mid-restore", "killed, nothing partial");
}

/*
 * The killer thread: opt_kills scenarios in turn (kill mid-rotation, kill
 * mid-restore, a restore failing against a held lock), spread over the run.
 */
static void *
killer_main(void *arg)
{
	Conn		k,
				h,
				v;
	int			i;

	(void) arg;
	if (!conn_open(&k, "torture-killer") || !conn_open(&h, "torture-holder"))
	{
		violation("killer: cannot connect");
		return NULL;
	}
	for (i = 0; i < opt_kills && now_s() < t_deadline; i++)
	{
		sleep_ms((int) (1000.0 * (t_deadline - now_s()) / (opt_kills - i + 1) / 2));
		if (!conn_open(&v, "torture-victim"))
			break;
		if (i % 3 == 0)
			kill_rotation(&k, &h, &v);
		else if (i % 3 == 1)
			kill_restore(&k, &h, &v);
		else
			fail_restore(&k, &h);
		conn_close(&v);
	}
	conn_close(&k);
	conn_close(&h);
	return NULL;
}

/* ---------------------------------------------------------------- setup */

/* Creates the leases, limits (shared tenants' too), shared channels; sets the quota GUCs. */
static void
setup(void)
{
	Conn		c;
	char		sql[512];
	char	   *db;
	int			i;

	if (!conn_open(&c, "torture-setup"))
	{
		fprintf(stderr, "pg_lease_torture: cannot connect: %s", c.errmsg);
		exit(2);
	}
	db = PQescapeIdentifier(c.pg, PQdb(c.pg), strlen(PQdb(c.pg)));
	snprintf(sql, sizeof(sql), "ALTER DATABASE %s SET lease.fleet_capacity = %d", db, FLEET_CAPACITY);
	must(&c, sql, 0, NULL);
	snprintf(sql, sizeof(sql), "ALTER DATABASE %s SET lease.default_sandbox_limit = %d", db, TENANT_LIMIT);
	must(&c, sql, 0, NULL);
	PQfreemem(db);
	/* a role for grant_app/revoke_app (roles are per cluster: it may exist) */
	q(&c, "CREATE ROLE torture_role NOLOGIN", 0, NULL);
	must(&c, "SELECT count(*) FROM lease.conversations", 0, NULL);
	if (atoi(val(&c, 0, 0)) != 0)
	{
		fprintf(stderr, "pg_lease_torture: database %s is not fresh (it has conversations)\n", opt_dbname);
		exit(2);
	}
	must(&c, "INSERT INTO lease.tenant_limits VALUES ('t0', 4), ('t1', 3), ('t2', 5), ('t3', 6), ('ts', 3), ('tk', 3)",
		 0, NULL);
	for (i = 0; i < NSHTEN; i++)
	{
		char		lim[8];
		const char *p[2] = {sh_tenant[i], lim};

		snprintf(lim, sizeof(lim), "%d", sh_limit[i]);
		must(&c, "INSERT INTO lease.tenant_limits VALUES ($1, $2::int)", 2, p);
	}
	for (i = 0; i < NSHARDS; i++)
	{
		char		shard[8];
		const char *p[3] = {APP, STREAM, shard};

		shard_name(i, shard, sizeof(shard));
		must(&c, "SELECT lease.create_lease($1, $2, $3)", 3, p);
	}
	/* import_kcl_ex, once */
	must(&c, "CREATE TEMP TABLE kcl (shard_id text, app_name text, stream_name text, checkpoint text,"
		 " lease_owner text, lease_count bigint, completed boolean)", 0, NULL);
	must(&c, "INSERT INTO kcl VALUES ('k0', 'imported', 'orders', '42', 'old-worker', 7, false),"
		 " ('k1', 'imported', 'orders', NULL, NULL, NULL, true)", 0, NULL);
	must(&c, "SELECT lease.import_kcl_ex('pg_temp.kcl')", 0, NULL);
	tally("import_kcl_ex", atoi(val(&c, 0, 0)) == 2 ? "imported 2" : "unexpected count");
	for (i = 0; i < 2; i++)
	{
		char		ch[8];
		const char *p[5] = {"ts", "shared", NULL, NULL, ch};
		long long	id;

		snprintf(ch, sizeof(ch), "sh%d", i);
		must(&c, "SELECT outcome, conversation_id FROM lease.start_conversation($1, $2, $3, $4, $5)", 5, p);
		if (strcmp(val(&c, 0, 0), "started") != 0)
		{
			fprintf(stderr, "pg_lease_torture: could not start shared channel %s: %s\n", ch, val(&c, 0, 0));
			exit(2);
		}
		id = atoll(val(&c, 0, 1));
		vec_push(&conv_acked, &id);
	}
	if (opt_txn > 0)
		txn_setup(&c);
	conn_close(&c);
}

/* ----------------------------------------------------------------- main */

/* The concurrent run: client threads, the checker, the killer. */
static void
run_concurrent(void)
{
	pthread_t	checker,
				killer,
				txn_killer;
	int			i;

	for (i = 0; i < opt_clients; i++)
		pthread_create(&clients[i].thread, NULL, client_main, &clients[i]);
	for (i = 0; i < opt_txn; i++)
		pthread_create(&txns[i].thread, NULL, txn_main, &txns[i]);
	pthread_create(&checker, NULL, checker_main, NULL);
	if (opt_kills > 0)
		pthread_create(&killer, NULL, killer_main, NULL);
	if (opt_kills > 0 && opt_txn > 0)
		pthread_create(&txn_killer, NULL, txn_killer_main, NULL);
	for (i = 0; i < opt_clients; i++)
		pthread_join(clients[i].thread, NULL);
	for (i = 0; i < opt_txn; i++)
		pthread_join(txns[i].thread, NULL);
	pthread_join(checker, NULL);
	if (opt_kills > 0)
		pthread_join(killer, NULL);
	if (opt_kills > 0 && opt_txn > 0)
		pthread_join(txn_killer, NULL);
}

/*
 * The serial replay: opt_serial shared-channel calls, one at a time (each
 * call its own transaction, so every state checked is quiescent), by the
 * client the seeded generator picks; the restorable rule after each.  The
 * same seed gives the same calls and answers on a fresh database.  Stops at
 * the first violation and prints the calls that led to it.
 */
static void
run_serial(void)
{
	uint64_t	pick = opt_seed ^ 0x5e71a1ULL;
	Conn		c;
	int			bad = 0;
	size_t		k;

	if (!conn_open(&c, "torture-checker"))
	{
		violation("serial replay: cannot connect: %s", c.errmsg);
		return;
	}
	for (serial_step = 1; serial_step <= opt_serial && bad == 0; serial_step++)
	{
		Client	   *cl = &clients[rnd(&pick, opt_shared)];

		op_shared(cl);
		if (cl->lost)
			break;
		bad = check_restorable(&c, 0, NSHARED, false);
	}
	conn_close(&c);
	if (bad == 0)
		return;
	printf("\nserial replay: violated after step %d; the calls on that channel and the retries:\n",
		   serial_step - 1);
	for (k = 0; k < trace_lines.n; k++)
	{
		TraceLine  *t = &((TraceLine *) trace_lines.data)[k];

		if (t->channel < 0 || (bad & (1 << t->channel)))
			printf("  %s\n", t->text);
	}
}

/* The sum of an operation's tallies for one outcome (NULL: all outcomes). */
static long
tally_sum(const char *op, const char *outcome)
{
	long		n = 0;
	int			i;

	for (i = 0; i < ntallies; i++)
		if (strcmp(tallies[i].op, op) == 0 && (outcome == NULL || strcmp(tallies[i].outcome, outcome) == 0))
			n += tallies[i].count;
	return n;
}

/* One line of counts for the shared channels. */
static void
print_shared_counts(void)
{
	const char *rs = "shared: restore_rotated_channel";

	printf("\nshared channels: %d clients on %d channels of %d tenants: %ld rotations (%ld rotated, %ld refused"
		   " by the tenant limit, %ld by the fleet), restores %ld restored / %ld superseded / %ld failed,"
		   " %ld starts, %ld ends, %ld retries (all clients)\n",
		   opt_shared, NSHARED, NSHTEN, tally_sum("shared: rotate_channel", NULL),
		   tally_sum("shared: rotate_channel", "rotated"), tally_sum("shared: rotate_channel", "refused (tenant)"),
		   tally_sum("shared: rotate_channel", "refused (fleet)"),
		   tally_sum(rs, "restored"), tally_sum(rs, "superseded"), tally_sum(rs, "failed"),
		   tally_sum("shared: start_conversation", "started"),
		   tally_sum("shared: end_conversation", "ended"), tally_sum("retry_failed_compensations", NULL));
}

/* Prints what runs and how to reproduce it. */
static void
print_banner(void)
{
	if (opt_serial > 0)
		printf("pg_lease_torture: seed %llu, serial replay: %d steps of %d clients on %d shared channels, database %s\n"
			   "reproduce with: --seed %llu --clients %d --shared-channels %d --serial %d\n",
			   opt_seed, opt_serial, opt_shared, NSHARED, opt_dbname, opt_seed, opt_clients, opt_shared, opt_serial);
	else
		printf("pg_lease_torture: seed %llu, %d clients (%d on %d shared channels), %d transactional%s, %d s, %d kills%s,"
			   " database %s\n"
			   "reproduce with: --seed %llu --clients %d --shared-channels %d --txn-clients %d%s --seconds %d --kills %d%s\n",
			   opt_seed, opt_clients, opt_shared, NSHARED, opt_txn, opt_omit_hold ? " WITHOUT hold_lease" : "",
			   opt_seconds, opt_kills, opt_expect_crash ? ", expecting a crash" : "", opt_dbname,
			   opt_seed, opt_clients, opt_shared, opt_txn, opt_omit_hold ? " --omit-hold" : "", opt_seconds, opt_kills,
			   opt_expect_crash ? " --expect-crash" : "");
	fflush(stdout);
}

/* Orders tallies by operation, then outcome. */
static int
cmp_tally(const void *a, const void *b)
{
	const Tally *x = a,
			   *y = b;
	int			c = strcmp(x->op, y->op);

	return c ? c : strcmp(x->outcome, y->outcome);
}

/* Prints usage and exits. */
static void
usage(const char *argv0)
{
	fprintf(stderr,
			"usage: %s [--clients N] [--seconds S] [--seed N] [--kills N] [--expect-crash]\n"
			"          [--shared-channels N] [--serial STEPS] [--txn-clients N] [--omit-hold] [--dbname DB]\n"
			"--shared-channels N: the first N clients also work the shared channels (default 4, 0: none);\n"
			"--txn-clients N: transactional clients (output, hold_lease, fenced checkpoint in one\n"
			"transaction; default 3, 0: none); --omit-hold: they leave hold_lease out (must fail);\n"
			"--serial STEPS: instead of the concurrent run, STEPS shared-channel calls one at a time,\n"
			"the client chosen by the seed, the restorable rule checked after each (deterministic).\n"
			"Connects with the usual PG* environment (PGHOST, PGPORT, PGUSER) to database DB,\n"
			"which must be fresh and have CREATE EXTENSION pg_lease; needs a superuser.\n",
			argv0);
	exit(2);
}

/* Reads the options; a seed from the clock when none is given. */
static void
parse_args(int argc, char **argv)
{
	int			i;
	bool		seeded = false;

	for (i = 1; i < argc; i++)
	{
		const char *a = argv[i];
		const char *next = i + 1 < argc ? argv[i + 1] : NULL;

		if (strcmp(a, "--expect-crash") == 0)
			opt_expect_crash = true;
		else if (strcmp(a, "--omit-hold") == 0)
			opt_omit_hold = true;
		else if (next == NULL)
			usage(argv[0]);
		else if (strcmp(a, "--clients") == 0)
			opt_clients = atoi(argv[++i]);
		else if (strcmp(a, "--seconds") == 0)
			opt_seconds = atoi(argv[++i]);
		else if (strcmp(a, "--kills") == 0)
			opt_kills = atoi(argv[++i]);
		else if (strcmp(a, "--dbname") == 0)
			opt_dbname = argv[++i];
		else if (strcmp(a, "--shared-channels") == 0)
			opt_shared = atoi(argv[++i]);
		else if (strcmp(a, "--txn-clients") == 0)
			opt_txn = atoi(argv[++i]);
		else if (strcmp(a, "--serial") == 0)
			opt_serial = atoi(argv[++i]);
		else if (strcmp(a, "--seed") == 0)
		{
			opt_seed = strtoull(argv[++i], NULL, 10);
			seeded = true;
		}
		else
			usage(argv[0]);
	}
	if (opt_clients < 1 || opt_clients > MAX_CLIENTS || opt_seconds < 1 || opt_kills < 0 ||
		opt_shared < 0 || opt_serial < 0 || (opt_serial > 0 && (opt_shared < 1 || opt_kills > 0 || opt_expect_crash)))
		usage(argv[0]);
	if (opt_shared > opt_clients)
		opt_shared = opt_clients;
	if (opt_txn < 0 || opt_txn > MAX_CLIENTS || (opt_omit_hold && opt_txn == 0))
		usage(argv[0]);
	if (opt_serial > 0)
		opt_txn = 0;			/* the serial replay is the shared channels' only */
	if (!seeded)
	{
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		opt_seed = ((unsigned long long) ts.tv_sec * 1000003ULL) ^ (unsigned long long) ts.tv_nsec ^ (unsigned long long) getpid();
		opt_seed %= 1000000000ULL;
	}
	if (opt_dbname == NULL)
		opt_dbname = getenv("PGDATABASE") ? getenv("PGDATABASE") : "postgres";
}

/* Names the clients, seeds their generators and connects them; false when one cannot connect. */
static bool
open_clients(void)
{
	for (int i = 0; i < opt_clients; i++)
	{
		Client	   *cl = &clients[i];
		char		app[32];

		cl->id = i;
		cl->rng = opt_seed * 1000003ULL + (uint64_t) i;
		cl->shared = i < opt_shared;
		owner_name(i, cl->owner, sizeof(cl->owner));
		snprintf(cl->user, sizeof(cl->user), "t%d", i % NTENANTS);
		snprintf(cl->agent, sizeof(cl->agent), "a%02d", i);
		for (int j = 0; j < NCHAN; j++)
			snprintf(cl->chan[j].channel, sizeof(cl->chan[j].channel), "c%02d-%d", i, j);
		snprintf(app, sizeof(app), "torture-w%02d", i);
		if (!conn_open(&cl->c, app))
		{
			fprintf(stderr, "pg_lease_torture: cannot connect: %s", cl->c.errmsg);
			return false;
		}
	}
	return true;
}

/*
 * The final check, on a fresh connection (after any restart), quiescent (no
 * client runs); then whether the crash and the kills asked for happened.
 * False when it cannot connect within a minute.
 */
static bool
final_check(void)
{
	Conn		c;
	double		until = now_s() + 60;

	while (!conn_open(&c, "torture-final"))
	{
		if (now_s() > until)
		{
			fprintf(stderr, "pg_lease_torture: cannot connect for the final check: %s", c.errmsg);
			return false;
		}
		sleep_ms(200);
	}
	check_tables(&c);
	check_checkpoints(&c);
	check_durability(&c);
	check_exactly_once(&c);
	if (opt_shared > 0)
		check_restorable(&c, 0, NSHARED, false);	/* quiescent: no client runs */
	conn_close(&c);
	if (opt_expect_crash && reconnects == 0)
		violation("--expect-crash, but no client lost its connection: the crash did not happen under load");
	if (opt_kills > 0 && (kills_done[0] == 0 || (opt_kills > 1 && kills_done[1] == 0)))
		violation("--kills %d, but only %d mid-rotation and %d mid-restore kills happened",
				  opt_kills, kills_done[0], kills_done[1]);
	if (opt_kills > 0 && opt_txn > 0 && txn_kills_done == 0)
		violation("--kills %d, but no transactional client was killed mid-transaction", opt_kills);
	return true;
}

/* The count of every operation and outcome, then what was acknowledged. */
static void
print_counts(void)
{
	size_t		k,
				uncommitted = 0;

	qsort(tallies, ntallies, sizeof(Tally), cmp_tally);
	printf("\n%-40s %-36s %8s\n", "operation", "outcome", "count");
	for (int i = 0; i < ntallies; i++)
		printf("%-40s %-36s %8ld\n", tallies[i].op, tallies[i].outcome, tallies[i].count);
	for (k = 0; k < ckpt_vals.n; k++)
		if (((CkptVal *) ckpt_vals.data)[k].state == VAL_UNCOMMITTED)
			uncommitted++;
	printf("\nacknowledged: %zu checkpoints, %zu takes, %zu conversations (%zu rotations), %zu failed restores;"
		   " %ld reconnects, %ld admissions in flight at a crash, %zu checkpoints and %zu rotations"
		   " left uncommitted by a crash or an error\n",
		   ckpt_acks.n, take_acks.n, conv_acked.n, rot_acked.n, failed_pairs.n, reconnects,
		   indeterminate_admissions, uncommitted, conv_uncommitted.n);
	if (opt_txn > 0)
		printf("transactional clients: %ld batches committed (%ld resumed from hold_lease's checkpoint),"
			   " %d killed mid-transaction\n",
			   tally_sum("txn batch", "committed"), tally_sum("txn batch", "resumed from hold_lease's checkpoint"),
			   txn_kills_done);
	if (opt_shared > 0)
		print_shared_counts();
}

/*
 * Each invariant's verdict; one that was never checked counts as a
 * violation (but for the compensation rows: no restore may have failed).
 */
static void
print_invariants(void)
{
	printf("\ninvariants:\n");
	for (int i = 0; i < NINV; i++)
	{
		const char *verdict;

		if (inv_failures[i])
			verdict = "FAILED";
		else if (inv_checks[i] == 0)
			verdict = "not run";
		else
			verdict = "ok";
		if (((i == INV_KILL_ROTATE || i == INV_KILL_RESTORE) && opt_kills == 0) ||
			(i == INV_RESTORABLE && opt_shared == 0) || (i == INV_EXACTLY_ONCE && opt_txn == 0))
			continue;
		printf("  %-7s %s (%d checks)\n", verdict, inv_names[i], inv_checks[i]);
		if (inv_checks[i] == 0 && i != INV_COMPENSATION)
			violations++;
	}
}

/* Runs the load (or the serial replay), the final check and the report; exits 1 on a violation, 2 on an error. */
int
main(int argc, char **argv)
{
	parse_args(argc, argv);
	print_banner();

	setup();

	t_start = now_s();
	t_deadline = t_start + opt_seconds;
	if (!open_clients() || !open_txns())
		return 2;
	if (opt_serial > 0)
		run_serial();
	else
		run_concurrent();
	for (int i = 0; i < opt_clients; i++)
		conn_close(&clients[i].c);
	if (!final_check())
		return 2;

	print_counts();
	print_invariants();
	printf("pg_lease_torture: seed %llu: %s (%d violations)\n", opt_seed,
		   violations ? "FAILED" : "passed", violations);
	return violations ? 1 : 0;
}
