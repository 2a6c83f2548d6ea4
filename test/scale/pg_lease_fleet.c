/*
 * test/scale/pg_lease_fleet.c: the make scale fleet.  Consumers and chat
 * clients that use only pg_lease's public functions and views (no table
 * reads, no CREATE EXTENSION), so they run unchanged against the
 * pg_lease_router router, and a Jepsen-style checker over what the server
 * acknowledged to them.
 *
 *   pg_lease_fleet --dsn ROUTER_DSN --seconds N --out DIR
 *                  [--workers 4] [--shards 4] [--lease-ms 3000] [--chat 2]
 *
 * Consumers (one process each, app 'scale', one stream per partition,
 * started 1.5 s apart): take_leases with max_steal 1 (a later worker asks
 * the most loaded one for its share), renew_leases (a handoff_to makes
 * the holder stop processing and release_lease, which hands the lease
 * over; the new holder finds it in its next renew_leases), and fenced
 * update_checkpoint with the lease_epoch they were given; checkpoints count
 * up per shard.  Each keeps
 * a local deadline: it stops processing a shard at (send time of its last
 * acknowledged take or renewal) + lease duration - margin, so a failover
 * longer than a lease causes a handoff, never two owners.
 *
 * Every client retries what failed, by the client rules of
 * docs/client-rules.md: on a lost connection (PL/Proxy reports XX000, or the
 * router connection itself breaks) it reconnects and repeats the call
 * (every call here is safe to repeat); a checkpoint whose commit is
 * unknown is not counted as acknowledged.
 *
 * The checker, after the run:
 *   - acknowledged checkpoints lost: per shard, the final checkpoint (read
 *     through lease.lease_status) is below the highest acknowledged one;
 *   - double owners: per shard, two workers' ownership intervals (from the
 *     acknowledgement of a take to the local deadline of the last
 *     acknowledged renewal) overlap;
 *   - channels left unbound: a chat channel its client holds bound is not
 *     found by lease.find_channel_conversation;
 *   - per partition, the longest gap between acknowledged checkpoints;
 *   - errors by SQLSTATE, and what the clients did.
 * Exit status 1 on any violation.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#define APP "scale"
#define MAX_SHARDS 64
#define MAX_WORKERS 32
#define NPART 2
#define MARGIN_MS 500

static const char *dsn;
static const char *outdir = ".";
static int	seconds = 60;
static int	nworkers = 4;
static int	nshards = 4;
static int	lease_ms = 3000;
static int	nchat = 2;
static char streams[NPART][32];
static double run_start;

/* Milliseconds of the wall clock (the histories of all processes are compared). */
static double
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec * 1000.0 + ts.tv_nsec / 1e6;
}

static void
sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

static FILE *logf;				/* this process's history */

/* Errors by SQLSTATE, per process, written to the history at exit. */
#define MAX_STATES 32
static char err_state[MAX_STATES][6];
static long err_count[MAX_STATES];
static int	nstates;

static void
count_error(const char *state)
{
	for (int i = 0; i < nstates; i++)
		if (strcmp(err_state[i], state) == 0)
		{
			err_count[i]++;
			return;
		}
	if (nstates < MAX_STATES)
	{
		snprintf(err_state[nstates], 6, "%s", state);
		err_count[nstates++] = 1;
	}
}

static PGconn *conn;

/* Notices (PL/Proxy's "dropping stale conn" after a failover) are not errors. */
static void
quiet(void *arg, const char *message)
{
	(void) arg;
	(void) message;
}

/* Connects (again), until it works or the run is over. */
static void
reconnect(double end)
{
	if (conn)
		PQfinish(conn);
	for (;;)
	{
		conn = PQconnectdb(dsn);
		if (PQstatus(conn) == CONNECTION_OK)
		{
			PQsetNoticeProcessor(conn, quiet, NULL);
			return;
		}
		count_error("08000");	/* the router itself unreachable */
		PQfinish(conn);
		conn = NULL;
		if (now_ms() > end)
			exit(0);
		sleep_ms(200);
	}
}

/*
 * Runs a statement; NULL on error (counted by SQLSTATE; a broken
 * connection is re-made).  The caller retries as it sees fit.
 */
static PGresult *
run(double end, const char *sql, int n, const char *const *params)
{
	PGresult   *res = PQexecParams(conn, sql, n, NULL, params, NULL, NULL, 0);
	ExecStatusType st = PQresultStatus(res);

	if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)
		return res;
	{
		const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);

		count_error(state ? state : "08006");
		if (logf)
		{
			const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);

			fprintf(logf, "error %.1f %s %.160s\n", now_ms(), state ? state : "08006",
					msg ? msg : PQerrorMessage(conn));
		}
	}
	PQclear(res);
	if (PQstatus(conn) != CONNECTION_OK)
		reconnect(end);
	return NULL;
}

/* A consumer's held shard. */
typedef struct Held
{
	bool		held;
	long long	epoch;
	long long	ckpt;
	double		since;			/* ack of the take */
	double		deadline;		/* local deadline */
} Held;

static Held held[NPART][MAX_SHARDS];

static int
shard_index(const char *shard)
{
	return atoi(shard + 1);
}

/* Ends an ownership interval at `at` (or its deadline if earlier): written to the history. */
static void
drop_at(int p, int s, const char *why, double at)
{
	Held	   *h = &held[p][s];
	double		end = h->deadline;

	if (!h->held)
		return;
	if (at < end)
		end = at;
	fprintf(logf, "own %d s%d %lld %.1f %.1f %s\n", p, s, h->epoch, h->since, end, why);
	h->held = false;
}

/* Ends an ownership interval now. */
static void
drop(int p, int s, const char *why)
{
	drop_at(p, s, why, now_ms());
}

static void
consumer(int me)
{
	char		owner[32],
				dur[32];
	double		end = now_ms() + seconds * 1000.0;

	snprintf(owner, sizeof owner, "w%d", me);
	snprintf(dur, sizeof dur, "%d milliseconds", lease_ms);
	/* staggered starts: the first worker takes everything, the later ones steal their share */
	sleep_ms(me * 1500);
	reconnect(end);
	while (now_ms() < end)
	{
		for (int p = 0; p < NPART; p++)
		{
			const char *pr[4] = {APP, streams[p], owner, dur};
			double		sent = now_ms();
			PGresult   *res;

			/*
			 * renew what is held; whatever is not returned is no longer
			 * ours, and a lease returned that we did not hold is one its
			 * holder handed over to us (release_lease transfers it)
			 */
			res = run(end, "SELECT shard_id, handoff_to, lease_epoch FROM lease.renew_leases($1, $2, $3, $4::interval)", 4, pr);
			if (res)
			{
				bool		still[MAX_SHARDS] = {false};
				double		ack = now_ms();

				for (int r = 0; r < PQntuples(res); r++)
				{
					int			s = shard_index(PQgetvalue(res, r, 0));
					Held	   *h = &held[p][s];

					still[s] = true;
					if (!h->held)
					{
						h->held = true;
						h->epoch = atoll(PQgetvalue(res, r, 2));
						h->since = ack;
						h->ckpt = -1;
						fprintf(logf, "handed %d s%d %lld %.1f\n", p, s, h->epoch, ack);
					}
					h->deadline = sent + lease_ms - MARGIN_MS;
					if (!PQgetisnull(res, r, 1))
					{
						/*
						 * another worker asked for it: stop processing, then
						 * release (which hands it over); the ownership ends
						 * when the release is sent, whatever its outcome
						 */
						char		shard[16];
						const char *rp[4] = {APP, streams[p], shard, owner};
						double		rsent = now_ms();
						PGresult   *rr;

						snprintf(shard, sizeof shard, "s%d", s);
						drop_at(p, s, "handoff", rsent);
						rr = run(end, "SELECT lease.release_lease($1, $2, $3, $4)", 4, rp);
						if (rr)
							PQclear(rr);
					}
				}
				for (int s = 0; s < nshards; s++)
					if (held[p][s].held && !still[s])
						drop(p, s, "lost");
				PQclear(res);
			}
			/* take what is free, and ask the most loaded worker for a share (max_steal 1) */
			sent = now_ms();
			res = run(end, "SELECT shard_id, lease_epoch, action FROM lease.take_leases($1, $2, $3, $4::interval, NULL, 1)", 4, pr);
			if (res)
			{
				double		ack = now_ms();

				for (int r = 0; r < PQntuples(res); r++)
				{
					int			s = shard_index(PQgetvalue(res, r, 0));
					Held	   *h = &held[p][s];

					if (strcmp(PQgetvalue(res, r, 2), "taken") != 0)
						continue;	/* handoff_requested: it arrives through renew_leases */

					drop(p, s, "retaken");
					h->held = true;
					h->epoch = atoll(PQgetvalue(res, r, 1));
					h->since = ack;
					h->deadline = sent + lease_ms - MARGIN_MS;
					h->ckpt = -1;
				}
				PQclear(res);
			}
			/* process: one fenced checkpoint per held shard, within the deadline */
			for (int s = 0; s < nshards; s++)
			{
				Held	   *h = &held[p][s];
				char		shard[16],
							ckpt[32],
							epoch[32];
				const char *cp[7];

				if (!h->held)
					continue;
				if (now_ms() >= h->deadline)
				{
					drop(p, s, "deadline");
					continue;
				}
				snprintf(shard, sizeof shard, "s%d", s);
				if (h->ckpt < 0)
				{
					const char *sp[3] = {APP, streams[p], shard};

					res = run(end, "SELECT checkpoint FROM lease.lease_status"
							  " WHERE app_name = $1 AND stream_name = $2 AND shard_id = $3", 3, sp);
					if (!res)
						continue;
					h->ckpt = PQntuples(res) == 1 ? atoll(PQgetvalue(res, 0, 0)) : 0;
					PQclear(res);
					fprintf(logf, "read %d s%d %lld %.1f\n", p, s, h->ckpt, now_ms());
				}
				snprintf(ckpt, sizeof ckpt, "%lld", h->ckpt + 1);
				snprintf(epoch, sizeof epoch, "%lld", h->epoch);
				cp[0] = APP;
				cp[1] = streams[p];
				cp[2] = shard;
				cp[3] = owner;
				cp[4] = ckpt;
				cp[5] = "0";
				cp[6] = epoch;
				res = run(end, "SELECT lease.update_checkpoint($1, $2, $3, $4, $5, $6::bigint, $7::bigint)", 7, cp);
				if (!res)
				{
					/* unknown outcome: re-read the checkpoint before the next one */
					h->ckpt = -1;
					continue;
				}
				if (strcmp(PQgetvalue(res, 0, 0), "t") == 0)
				{
					h->ckpt++;
					fprintf(logf, "ack %d s%d %lld %lld %.1f\n", p, s, h->ckpt, h->epoch, now_ms());
				}
				else
					drop(p, s, "fenced");
				PQclear(res);
			}
		}
		fflush(logf);
		sleep_ms(100);
	}
	for (int p = 0; p < NPART; p++)
		for (int s = 0; s < nshards; s++)
			drop(p, s, "end");
}

/* A chat client: one tenant, one channel, conversations started, turned, rotated, ended. */
static void
chat(int me)
{
	char		user[32],
				conv[32] = "";
	double		end = now_ms() + seconds * 1000.0;
	long		n = 0;
	const char *bound_sql = "SELECT lease.find_channel_conversation($1, 'agent', NULL, NULL, 'ch')";

	snprintf(user, sizeof user, "scale-user-%d", me);
	reconnect(end);
	while (now_ms() < end)
	{
		PGresult   *res;
		const char *p1[1] = {user};

		n++;
		if (conv[0] == '\0')
		{
			res = run(end, "SELECT outcome, conversation_id FROM lease.start_conversation($1, 'agent', NULL, NULL, 'ch')", 1, p1);
			if (res)
			{
				fprintf(logf, "chat %s\n", PQgetvalue(res, 0, 0));
				if (!PQgetisnull(res, 0, 1))
					snprintf(conv, sizeof conv, "%s", PQgetvalue(res, 0, 1));
				PQclear(res);
			}
		}
		else if (n % 10 == 0)
		{
			const char *p2[2] = {user, conv};

			res = run(end, "SELECT outcome, conversation_id FROM lease.rotate_channel($1, 'agent', NULL, NULL, 'ch', $2::bigint)", 2, p2);
			if (res)
			{
				fprintf(logf, "chat rotate:%s\n", PQgetvalue(res, 0, 0));
				if (strcmp(PQgetvalue(res, 0, 0), "rotated") == 0)
					snprintf(conv, sizeof conv, "%s", PQgetvalue(res, 0, 1));
				PQclear(res);
			}
			else
				conv[0] = '\0'; /* unknown: look the binding up again */
		}
		else if (n % 25 == 0)
		{
			const char *p3[1] = {conv};

			res = run(end, "SELECT lease.end_conversation($1::bigint)", 1, p3);
			if (res)
			{
				fprintf(logf, "chat end\n");
				PQclear(res);
			}
			conv[0] = '\0';
		}
		else
		{
			const char *p3[1] = {conv};

			res = run(end, "SELECT lease.admit_turn($1::bigint)", 1, p3);
			if (res)
			{
				fprintf(logf, "chat turn\n");
				PQclear(res);
			}
			else
				conv[0] = '\0';
		}
		if (conv[0] == '\0' && n % 25 != 0)
		{
			/* after an error: whatever the server holds is the truth */
			res = run(end, bound_sql, 1, p1);
			if (res)
			{
				if (!PQgetisnull(res, 0, 0))
					snprintf(conv, sizeof conv, "%s", PQgetvalue(res, 0, 0));
				PQclear(res);
			}
		}
		fflush(logf);
		sleep_ms(50);
	}
	/* the channel held bound must be found bound */
	if (conv[0] != '\0')
	{
		const char *p1[1] = {user};
		PGresult   *res = NULL;

		for (int i = 0; i < 50 && !res; i++)
			if (!(res = run(now_ms() + 60000, bound_sql, 1, p1)))
				sleep_ms(200);
		fprintf(logf, "bound %s %s\n", user, res && !PQgetisnull(res, 0, 0) ? "yes" : "no");
		if (res)
			PQclear(res);
	}
}

static pid_t
spawn(const char *kind, int i, void (*fn) (int))
{
	pid_t		pid = fork();
	char		path[512];

	if (pid != 0)
		return pid;
	snprintf(path, sizeof path, "%s/%s%d.log", outdir, kind, i);
	logf = fopen(path, "w");
	if (!logf)
		_exit(2);
	fn(i);
	for (int k = 0; k < nstates; k++)
		fprintf(logf, "err %s %ld\n", err_state[k], err_count[k]);
	fclose(logf);
	if (conn)
		PQfinish(conn);
	_exit(0);
}

/* ---- the checker ---- */

typedef struct Own
{
	int			p, s, w;
	long long	epoch;
	double		start, end;
} Own;

typedef struct Read
{
	int			p, s;
	long long	v;
	double		t;
} Read;

typedef Read Ack;

static int
cmp_own(const void *a, const void *b)
{
	const Own  *x = a,
			   *y = b;

	if (x->p != y->p)
		return x->p - y->p;
	if (x->s != y->s)
		return x->s - y->s;
	return (x->start > y->start) - (x->start < y->start);
}

static int
cmp_double(const void *a, const void *b)
{
	double		x = *(const double *) a,
				y = *(const double *) b;

	return (x > y) - (x < y);
}

int
main(int argc, char **argv)
{
	static struct option longopts[] = {
		{"dsn", required_argument, NULL, 'd'},
		{"seconds", required_argument, NULL, 't'},
		{"out", required_argument, NULL, 'o'},
		{"workers", required_argument, NULL, 'w'},
		{"shards", required_argument, NULL, 's'},
		{"lease-ms", required_argument, NULL, 'l'},
		{"chat", required_argument, NULL, 'c'},
		{NULL, 0, NULL, 0}
	};
	int			c;
	pid_t		pids[MAX_WORKERS * 2];
	int			npids = 0;
	int			violations = 0;

	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1)
	{
		switch (c)
		{
			case 'd': dsn = optarg; break;
			case 't': seconds = atoi(optarg); break;
			case 'o': outdir = optarg; break;
			case 'w': nworkers = atoi(optarg); break;
			case 's': nshards = atoi(optarg); break;
			case 'l': lease_ms = atoi(optarg); break;
			case 'c': nchat = atoi(optarg); break;
			default:
				fprintf(stderr, "usage: pg_lease_fleet --dsn DSN --seconds N --out DIR [--workers N] [--shards N] [--lease-ms MS] [--chat N]\n");
				return 2;
		}
	}
	if (!dsn || nworkers < 1 || nworkers > MAX_WORKERS || nshards < 1 || nshards > MAX_SHARDS || nchat > MAX_WORKERS)
	{
		fprintf(stderr, "pg_lease_fleet: --dsn is required; 1..%d workers, 1..%d shards\n", MAX_WORKERS, MAX_SHARDS);
		return 2;
	}

	/* setup through the router: one stream on each partition, its shards */
	conn = PQconnectdb(dsn);
	if (PQstatus(conn) != CONNECTION_OK)
	{
		fprintf(stderr, "pg_lease_fleet: %s", PQerrorMessage(conn));
		return 2;
	}
	for (int p = 0, i = 0; p < NPART; i++)
	{
		char		name[32],
					q[256];
		PGresult   *res;

		snprintf(name, sizeof name, "stream-%d", i);
		snprintf(q, sizeof q, "SELECT lease_router.stream_partition('%s', '%s') & %d", APP, name, NPART - 1);
		res = PQexec(conn, q);
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
		{
			fprintf(stderr, "pg_lease_fleet: not a router? %s", PQerrorMessage(conn));
			return 2;
		}
		if (atoi(PQgetvalue(res, 0, 0)) == p)
		{
			snprintf(streams[p], sizeof streams[p], "%s", name);
			p++;
		}
		PQclear(res);
	}
	for (int p = 0; p < NPART; p++)
		for (int s = 0; s < nshards; s++)
		{
			char		shard[16];
			const char *pr[3] = {APP, streams[p], shard};
			PGresult   *res;

			snprintf(shard, sizeof shard, "s%d", s);
			res = PQexecParams(conn, "SELECT lease.create_lease($1, $2, $3, '{}', '0')", 3, NULL, pr, NULL, NULL, 0);
			if (PQresultStatus(res) != PGRES_TUPLES_OK)
			{
				fprintf(stderr, "pg_lease_fleet: create_lease: %s", PQerrorMessage(conn));
				return 2;
			}
			PQclear(res);
		}
	PQfinish(conn);
	conn = NULL;

	run_start = now_ms();
	for (int i = 0; i < nworkers; i++)
		pids[npids++] = spawn("worker", i, consumer);
	for (int i = 0; i < nchat; i++)
		pids[npids++] = spawn("chat", i, chat);
	for (int i = 0; i < npids; i++)
		waitpid(pids[i], NULL, 0);

	/* read the histories */
	{
		static Own owns[200000];
		static double acks[NPART][400000];
		static Read reads[200000];
		static Ack allacks[400000];
		int			nreads = 0,
					nall = 0;
		long long	max_ack[NPART][MAX_SHARDS];
		int			nacks[NPART] = {0};
		int			nowns = 0;
		char		state[MAX_STATES][6];
		long		count[MAX_STATES];
		int			ns = 0;
		long		chat_ops = 0,
					unbound = 0,
					lost = 0,
					double_owners = 0,
					handoffs = 0,
					total_acks = 0;

		memset(max_ack, 0, sizeof max_ack);
		for (int k = 0; k < nworkers + nchat; k++)
		{
			char		path[512],
						line[256];
			FILE	   *f;
			bool		w = k < nworkers;

			snprintf(path, sizeof path, "%s/%s%d.log", outdir, w ? "worker" : "chat", w ? k : k - nworkers);
			f = fopen(path, "r");
			if (!f)
			{
				printf("pg_lease_fleet: %s missing (a client died)\n", path);
				violations++;
				continue;
			}
			while (fgets(line, sizeof line, f))
			{
				int			p,
							s;
				long long	a,
							b;
				double		t1,
							t2;
				char		st[6],
							why[16];
				long		n;

				if (sscanf(line, "ack %d s%d %lld %lld %lf", &p, &s, &a, &b, &t1) == 5)
				{
					if (a > max_ack[p][s])
						max_ack[p][s] = a;
					if (nacks[p] < 400000)
						acks[p][nacks[p]++] = t1;
					if (nall < 400000)
						allacks[nall++] = (Ack) {p, s, a, t1};
					total_acks++;
				}
				else if (sscanf(line, "read %d s%d %lld %lf", &p, &s, &a, &t1) == 4)
				{
					if (nreads < 200000)
						reads[nreads++] = (Read) {p, s, a, t1};
				}
				else if (sscanf(line, "own %d s%d %lld %lf %lf %15s", &p, &s, &a, &t1, &t2, why) == 6)
				{
					if (strcmp(why, "handoff") == 0)
						handoffs++;
					if (nowns < 200000)
						owns[nowns++] = (Own) {p, s, k, a, t1, t2};
				}
				else if (strncmp(line, "err ", 4) == 0 && sscanf(line, "err %5s %ld", st, &n) == 2)
				{
					int			i;

					for (i = 0; i < ns; i++)
						if (strcmp(state[i], st) == 0)
							break;
					if (i == ns && ns < MAX_STATES)
					{
						memcpy(state[ns], st, 6);
						count[ns++] = 0;
					}
					if (i < MAX_STATES)
						count[i] += n;
				}
				else if (strncmp(line, "bound ", 6) == 0)
				{
					if (strstr(line, " no"))
						unbound++;
				}
				else if (strncmp(line, "chat ", 5) == 0)
					chat_ops++;
			}
			fclose(f);
		}

		/* lost acknowledged checkpoints: the final state, through the router */
		conn = PQconnectdb(dsn);
		PQsetNoticeProcessor(conn, quiet, NULL);
		for (int p = 0; p < NPART; p++)
			for (int s = 0; s < nshards; s++)
			{
				char		shard[16];
				const char *pr[3] = {APP, streams[p], shard};
				PGresult   *res = NULL;

				snprintf(shard, sizeof shard, "s%d", s);
				for (int i = 0; i < 50; i++)
				{
					if (PQstatus(conn) != CONNECTION_OK)
						PQreset(conn);
					res = PQexecParams(conn, "SELECT checkpoint FROM lease.lease_status"
									   " WHERE app_name = $1 AND stream_name = $2 AND shard_id = $3",
									   3, NULL, pr, NULL, NULL, 0);
					if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
						break;
					PQclear(res);
					res = NULL;
					sleep_ms(200);
				}
				if (!res)
				{
					printf("pg_lease_fleet: cannot read the final checkpoint of %s/%s\n", streams[p], shard);
					violations++;
					continue;
				}
				if (atoll(PQgetvalue(res, 0, 0)) < max_ack[p][s])
				{
					printf("pg_lease_fleet: LOST: %s/%s final checkpoint %s below acknowledged %lld\n",
						   streams[p], shard, PQgetvalue(res, 0, 0), max_ack[p][s]);
					lost++;
				}
				PQclear(res);
			}
		PQfinish(conn);

		/*
		 * An acknowledged checkpoint the next owner did not see: a read
		 * after an acknowledgement returned less (a later owner writing on
		 * top would otherwise hide the loss from the final state).
		 */
		for (int i = 0; i < nreads; i++)
			for (int j = 0; j < nall; j++)
				if (allacks[j].p == reads[i].p && allacks[j].s == reads[i].s &&
					allacks[j].t < reads[i].t && allacks[j].v > reads[i].v)
				{
					printf("pg_lease_fleet: LOST: %s/s%d acknowledged %lld, read %lld later\n",
						   streams[reads[i].p], reads[i].s, allacks[j].v, reads[i].v);
					lost++;
					break;
				}

		/* two owners at once */
		qsort(owns, nowns, sizeof(Own), cmp_own);
		for (int i = 0; i < nowns; i++)
			for (int j = i + 1; j < nowns && owns[j].p == owns[i].p && owns[j].s == owns[i].s; j++)
				if (owns[j].start < owns[i].end && owns[j].w != owns[i].w)
				{
					printf("pg_lease_fleet: DOUBLE OWNER: %s/s%d w%d (epoch %lld, %.0f..%.0f) and w%d (epoch %lld, from %.0f)\n",
						   streams[owns[i].p], owns[i].s, owns[i].w, owns[i].epoch, owns[i].start, owns[i].end,
						   owns[j].w, owns[j].epoch, owns[j].start);
					double_owners++;
				}

		printf("fleet: %d consumers, %d chat clients, %d s, lease %d ms; %ld acknowledged checkpoints, %d ownership intervals, %ld chat operations\n",
			   nworkers, nchat, seconds, lease_ms, total_acks, nowns, chat_ops);
		for (int p = 0; p < NPART; p++)
		{
			double		gap = 0;

			/* the run's start and end count too: a partition that stops is a gap */
			if (nacks[p] < 399998)
			{
				acks[p][nacks[p]++] = run_start;
				acks[p][nacks[p]++] = run_start + seconds * 1000.0;
			}
			qsort(acks[p], nacks[p], sizeof(double), cmp_double);
			for (int i = 1; i < nacks[p]; i++)
				if (acks[p][i] - acks[p][i - 1] > gap)
					gap = acks[p][i] - acks[p][i - 1];
			printf("partition %d (%s): %d acknowledged checkpoints, longest write gap %.2f s\n",
				   p, streams[p], nacks[p], gap / 1000.0);
		}
		printf("errors by SQLSTATE (what the clients did: reconnected when the connection broke, re-read the checkpoint after an unknown outcome, looked the channel up again, retried):");
		if (ns == 0)
			printf(" none");
		for (int i = 0; i < ns; i++)
			printf(" %s=%ld", state[i], count[i]);
		printf("\n");
		printf("acknowledged checkpoints lost: %ld\n", lost);
		printf("double owners: %ld\n", double_owners);
		printf("leases handed over on request (take_leases steals, release_lease transfers): %ld\n", handoffs);
		printf("channels left unbound: %ld\n", unbound);
		violations += lost + double_owners + unbound;
		if (handoffs == 0)
		{
			printf("pg_lease_fleet: no lease was handed over: the steals were not exercised\n");
			violations++;
		}
		for (int p = 0; p < NPART; p++)
			if (nacks[p] <= 2)
			{
				printf("pg_lease_fleet: partition %d made no progress\n", p);
				violations++;
			}
	}
	return violations ? 1 : 0;
}
