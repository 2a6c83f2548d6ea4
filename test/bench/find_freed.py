#!/usr/bin/python3
"""make bench, section 9: how surviving workers find freed leases.

    find_freed.py DSN LEASE_SECONDS CYCLES          prints a Markdown fragment
    find_freed.py worker DSN STREAM OWNER VARIANT LEASE_SECONDS

Four fleets run at once, one stream each (12 leases, three Python workers
with nothing to process, clients/python's Worker), one per way of finding
freed leases:

  normal  the normal mode, the baseline: renewals and rounds every lease / 3
  rounds  fast failover (renew_every 0.5 s) with the client's rounds every
          renew_every: what fast_failover=True does
  listen  fast failover, rounds every lease / 3, plus a round as soon as a
          notification on lease.notify_channel says a lease of the stream
          was freed (to_owner NULL: a release, a close)
  both    fast failover, rounds every renew_every, plus that round

Each cycle: the leases are handed out four to each worker (take_lease), the
workers start, renew once, and then the server CPU of their backends
(/proc/PID/schedstat, nanoseconds) is read over whole rounds of the normal
mode.  Then one worker of each fleet stops gracefully (it releases its
leases), and another is SIGKILLed.  Times are the database's: from a release
(its event) or from the moment a crashed worker's lease became takeable
(its effective expiry, or in the mode renewed_at + renew_every +
lease.liveness_grace), and from the kill, to the lease's next take event.
"""
import json
import os
import select
import signal
import subprocess
import sys
import time

import psycopg2

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../clients/python"))
from pg_lease import Ambiguous, RecordProcessor, Unavailable, Worker  # noqa: E402

APP = "bench"
RENEW_EVERY = 0.5
SHARDS = 12
VARIANTS = ("normal", "rounds", "listen", "both")
LABELS = {
    "normal": "normal mode: renewals and rounds every lease / 3 (the baseline)",
    "rounds": "fast failover, a round every `renew_every` (what the clients do)",
    "listen": "fast failover, LISTEN: a round on each notification freeing a lease, else every lease / 3",
    "both": "fast failover, a round every `renew_every` and on each such notification",
}


class ListeningWorker(Worker):
    """A worker that also runs a round as soon as a notification on lease.notify_channel
    says a lease of its stream was freed by another worker."""

    def __init__(self, dsn, *args, **kwargs):
        super().__init__(dsn, *args, **kwargs)
        self.listen = psycopg2.connect(dsn, application_name=self.owner + " listener")
        self.listen.autocommit = True
        with self.listen.cursor() as cur:
            cur.execute("SELECT coalesce(current_setting('lease.notify_channel', true), 'lease_events')")
            cur.execute('LISTEN "%s"' % cur.fetchone()[0].replace('"', '""'))

    def _freed(self):
        """True when a notification since the last call freed a lease of the stream (drains them)."""
        self.listen.poll()
        freed = False
        while self.listen.notifies:
            event = json.loads(self.listen.notifies.pop(0).payload)
            if (event["app"], event["stream"]) == self.key and event["to"] is None \
                    and event["from"] != self.owner:
                freed = True
        return freed

    def _loop(self):
        next_balance = 0.0
        while not self.stopping.is_set():
            if self._freed() or time.monotonic() >= next_balance:
                self._balance()
                next_balance = time.monotonic() + self.balance_every
            with self.lock:
                held = list(self.held.items())
            for shard, lease in held:
                try:
                    self._work(shard, lease)
                except (Unavailable, Ambiguous) as e:
                    self.journal("call_failed", shard=shard, error=str(e))
            select.select([self.listen], [], [], 0.02)


def worker(dsn, stream, owner, variant, lease_seconds):
    """One idle worker of a fleet, until SIGTERM (graceful: it releases its leases)."""
    lease_seconds = float(lease_seconds)
    kwargs = dict(lease_duration=lease_seconds, max_steal=2)
    if variant != "normal":
        kwargs.update(fast_failover=True, renew_every=RENEW_EVERY)
    if variant == "listen":
        kwargs.update(balance_every=lease_seconds / 3)
    cls = ListeningWorker if variant in ("listen", "both") else Worker
    w = cls(dsn, APP, stream, owner, RecordProcessor(), **kwargs)
    signal.signal(signal.SIGTERM, lambda *_: w.stop())
    w.run()


def cpu_ns(pid):
    """The CPU time a process has run, in nanoseconds (0 once it is gone)."""
    try:
        with open("/proc/%d/schedstat" % pid) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


class Bench:
    def __init__(self, dsn, lease_seconds, cycles):
        self.dsn = dsn
        self.lease = float(lease_seconds)
        self.cycles = int(cycles)
        self.db = psycopg2.connect(dsn)
        self.db.autocommit = True
        self.procs = {}                                   # owner -> Popen
        self.cpu = {v: [0, 0, 0.0] for v in VARIANTS}     # all ns, rounds ns, worker-seconds
        self.times = {(v, k): [] for v in VARIANTS for k in ("release", "crash", "kill")}

    def q(self, sql, params=()):
        with self.db.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall() if cur.description else None

    def start(self, variant, owner):
        self.procs[owner] = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "worker", self.dsn, "find-" + variant, owner, variant,
             str(self.lease)], stdin=subprocess.DEVNULL)

    def stop(self, owner, sig=signal.SIGTERM):
        """Signals a worker once (a second SIGTERM can deadlock the client's
        Event.set(), called from its signal handler) and waits for it."""
        proc = self.procs[owner]
        if sig is not None:
            proc.send_signal(sig)
        try:
            proc.wait(timeout=3 * self.lease)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise SystemExit("find_freed: worker %s did not stop within %g s" % (owner, 3 * self.lease))
        del self.procs[owner]

    def stop_all(self):
        for proc in self.procs.values():
            proc.send_signal(signal.SIGTERM)
        for owner in list(self.procs):
            self.stop(owner, None)

    def last_event(self):
        return self.q("SELECT coalesce(max(event_id), 0) FROM lease.lease_events")[0][0]

    def wait_taken(self, variant, since, shards):
        """Waits until each of shards has a take event after event `since` (or 3 lease durations)."""
        limit = time.monotonic() + 3 * self.lease
        while time.monotonic() < limit:
            n = self.q("SELECT count(DISTINCT shard_id) FROM lease.lease_events"
                       " WHERE event_id > %s AND stream_name = %s AND shard_id = ANY (%s)"
                       "   AND to_owner IS NOT NULL AND event <> 'handoff_request'",
                       (since, "find-" + variant, shards))[0][0]
            if n == len(shards):
                return
            time.sleep(0.05)

    def taken_after(self, variant, since, freed):
        """Seconds from each shard's freed time (a dict) to its first take event after `since`."""
        rows = self.q("SELECT shard_id, min(occurred_at) FROM lease.lease_events"
                      " WHERE event_id > %s AND stream_name = %s AND to_owner IS NOT NULL"
                      "   AND event <> 'handoff_request' GROUP BY shard_id", (since, "find-" + variant))
        taken = dict(rows)
        return [(taken[s] - t).total_seconds() if s in taken else float("nan") for s, t in freed.items()]

    def cycle(self, c):
        owners = {v: ["%s-%d-%d" % (v, c, i) for i in range(3)] for v in VARIANTS}
        everyone = [o for v in VARIANTS for o in owners[v]]
        # handed out for 1.5 lease durations: time for the workers to start and renew
        assigned, until = self.q("SELECT clock_timestamp(), clock_timestamp() + %s::interval",
                                 ("%d ms" % (self.lease * 1500),))[0]
        for v in VARIANTS:
            for i in range(SHARDS):
                got = self.q("SELECT lease.take_lease(%s, %s, %s, %s, NULL, %s::interval)",
                             (APP, "find-" + v, "s%02d" % i, owners[v][i % 3], "%d ms" % (self.lease * 1500)))
                if got[0][0] is None:
                    raise SystemExit("find_freed: lease s%02d of find-%s was not free" % (i, v))
            for o in owners[v]:
                self.start(v, o)
        # every worker has learned its leases from a renewal (the normal mode's first comes after lease / 3)
        limit = time.monotonic() + 60
        while self.q("SELECT count(*) FROM lease.stream_workers WHERE app_name = %s AND worker = ANY (%s)"
                     "   AND renewed_at > %s", (APP, everyone, assigned))[0][0] < len(everyone):
            if time.monotonic() > limit:
                raise SystemExit("find_freed: the workers did not renew within 60 s")
            time.sleep(0.1)
        pids = {}
        for v in VARIANTS:
            pids[v] = self.q("SELECT pid, application_name LIKE '%% renewer' FROM pg_stat_activity"
                             " WHERE datname = current_database() AND split_part(application_name, ' ', 1) = ANY (%s)",
                             (owners[v],))
        # whole rounds of the normal mode (lease / 3 each): every fleet measured over the same window
        window = self.lease / 3 * (1 if self.lease < 10 else 2)
        before = {pid: cpu_ns(pid) for v in VARIANTS for pid, _ in pids[v]}
        time.sleep(window)
        for v in VARIANTS:
            for pid, renewer in pids[v]:
                used = cpu_ns(pid) - before[pid]
                self.cpu[v][0] += used
                if not renewer:
                    self.cpu[v][1] += used
            self.cpu[v][2] += 3 * window
        # a graceful stop: the worker releases its leases
        since = self.last_event()
        for v in VARIANTS:
            self.procs[owners[v][0]].send_signal(signal.SIGTERM)
        for v in VARIANTS:
            self.stop(owners[v][0], None)
        released = {v: dict(self.q("SELECT shard_id, occurred_at FROM lease.lease_events"
                                   " WHERE event_id > %s AND stream_name = %s AND event = 'release'",
                                   (since, "find-" + v))) for v in VARIANTS}
        for v in VARIANTS:
            self.wait_taken(v, since, list(released[v]))
            self.times[(v, "release")] += self.taken_after(v, since, released[v])
        # the leases as handed out have expired: a crash's leases live as long as their worker's heartbeat
        self.q("SELECT pg_sleep(GREATEST(0, extract(epoch FROM %s - clock_timestamp())))", (until,))
        # a crash: SIGKILL; takeable at the lease's effective expiry, or in the mode once
        # its session has ended and renewed_at + renew_every + grace has passed
        since = self.last_event()
        kill_at = self.q("SELECT clock_timestamp()")[0][0]
        for v in VARIANTS:
            self.procs[owners[v][1]].send_signal(signal.SIGKILL)
        for v in VARIANTS:
            self.stop(owners[v][1], None)
        freed = {}
        for v in VARIANTS:
            freed[v] = dict(self.q(
                "SELECT l.shard_id, GREATEST(%s, CASE WHEN w.renew_every IS NULL THEN e.expires_at"
                "       ELSE LEAST(e.expires_at, w.renewed_at + w.renew_every"
                "                  + current_setting('lease.liveness_grace')::interval) END)"
                "  FROM lease.shard_leases AS l JOIN lease.stream_workers AS w"
                "       ON (w.app_name, w.stream_name, w.worker) = (l.app_name, l.stream_name, l.lease_owner),"
                "       LATERAL (SELECT GREATEST(l.lease_expires_at, w.renewed_until) AS expires_at) AS e"
                " WHERE l.app_name = %s AND l.stream_name = %s AND l.lease_owner = %s",
                (kill_at, APP, "find-" + v, owners[v][1])))
        for v in VARIANTS:
            self.wait_taken(v, since, list(freed[v]))
            self.times[(v, "crash")] += self.taken_after(v, since, freed[v])
            self.times[(v, "kill")] += self.taken_after(v, since, {s: kill_at for s in freed[v]})
        self.stop_all()

    def run(self):
        for v in VARIANTS:
            self.q("SELECT count(lease.create_lease(%s, %s, 's' || lpad(i::text, 2, '0')))"
                   "  FROM generate_series(0, %s) AS i", (APP, "find-" + v, SHARDS - 1))
        try:
            for c in range(self.cycles):
                self.cycle(c)
        finally:
            for proc in self.procs.values():
                proc.kill()
        self.report()

    def report(self):
        def med_max(xs):
            xs = sorted(x for x in xs if x == x)
            return (xs[(len(xs) - 1) // 2], xs[-1]) if xs else (float("nan"), float("nan"))

        def ratio(a, b):
            return "%.2f×" % (a / b) if b > 0 else "n/a"

        base_cpu = self.cpu["normal"][0] / self.cpu["normal"][2]
        base = {k: med_max(self.times[("normal", k)])[0] for k in ("kill", "crash", "release")}
        n = {k: len(self.times[("normal", k)]) for k in ("kill", "release")}
        print("How the surviving workers find freed leases: four fleets at once, one 12-shard stream each,"
              " three Python workers with nothing to process (`test/bench/find_freed.py`), %g s leases, %d cycle%s."
              " Each cycle: the server CPU of each worker's backends (`/proc/PID/schedstat`) over %s of the normal"
              " mode (every fleet in the same window; *of which rounds*: all but the renewer's connection), then in"
              " each fleet one worker stopped gracefully (it releases its leases: %d over the run) and one"
              " SIGKILLed (%d leases over the run). Times on the database clock, to each lease's next take; a"
              " crashed worker's lease is *takeable* at its effective expiry, or in the mode at `renewed_at +"
              " renew_every + lease.liveness_grace` (0.5 s + 1 s). A crash notifies nothing (its session just"
              " ends): only a round finds its leases; a release is announced on `lease.notify_channel`. Ratios"
              " against the normal mode."
              % (self.lease, self.cycles, "s" if self.cycles > 1 else "",
                 "two rounds" if self.lease >= 10 else "one round", n["release"], n["kill"]))
        print()
        print("| how the survivors find freed leases | server CPU per worker (ms/s) | CPU vs normal"
              " | of which rounds (ms/s) | crash: kill → new owner, median / max (s) | vs normal"
              " | crash: takeable → new owner, median / max (s) | graceful release → new owner,"
              " median / max (s) | vs normal |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for v in VARIANTS:
            all_ns, rounds_ns, secs = self.cpu[v]
            cpu = all_ns / secs
            kill, crash, release = (med_max(self.times[(v, k)]) for k in ("kill", "crash", "release"))
            print("| %s | %.3f | %s | %.3f | %.2f / %.2f | %s | %.2f / %.2f | %.2f / %.2f | %s |"
                  % (LABELS[v], cpu / 1e6, ratio(cpu, base_cpu), rounds_ns / secs / 1e6, kill[0], kill[1],
                     ratio(kill[0], base["kill"]), crash[0], crash[1], release[0], release[1],
                     ratio(release[0], base["release"])))


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        worker(*sys.argv[2:7])
    else:
        Bench(*sys.argv[1:4]).run()
