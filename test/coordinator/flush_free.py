#!/usr/bin/env python3
"""Heartbeats without a flush, and the crash that loses them
(docs/worker-guide.md, "Heartbeats without a flush").

Three steps, run by test/coordinator/restart.sh around an immediate stop:

  flush_free.py beat JOURNAL      holders h1, h2 (two leases each, taken
                                  durably) send heartbeats for a while
                                  longer than the lease; every
                                  acknowledged heartbeat is journaled with
                                  the holder's local deadline (client rule
                                  3: the time the call was sent + the lease
                                  duration), then the script exits at once
                                  (the shell stops the server immediately)
  flush_free.py take JOURNAL      after the restart, taker h3's rounds back
                                  to back for two lease durations; every
                                  lease it was told it took is journaled
                                  with the time the answer came
  flush_free.py check JOURNAL     the checker, over what the clients were
                                  told only: a lease taken before its
                                  holder's local deadline is a second
                                  owner.  Prints "violations lost_heartbeats
                                  taken": how many takes came too early,
                                  whether the server lost the holders' last
                                  heartbeats (else the run proved nothing),
                                  and how many leases h3 took in all

The connection is the usual libpq environment (PGHOST, PGPORT) with
dbname from PG_LEASE_DB; PGOPTIONS chooses the holders' settings.
"""
import json
import sys
import time

import psycopg2

APP, STREAM, DURATION = "ff", "s", 3.0
SHARDS = ["shard-%d" % i for i in range(1, 5)]


def connect():
    import os
    conn = psycopg2.connect(dbname=os.environ.get("PG_LEASE_DB", "postgres"))
    conn.autocommit = True
    return conn


def beat(journal):
    conn = connect()
    cur = conn.cursor()
    cur.execute("DELETE FROM lease.shard_leases WHERE app_name = %s", (APP,))
    for i, shard in enumerate(SHARDS):
        cur.execute("SELECT lease.create_lease(%s, %s, %s)", (APP, STREAM, shard))
        cur.execute("SELECT lease.take_lease(%s, %s, %s, %s, NULL, %s)",
                    (APP, STREAM, shard, "h%d" % (i // 2 + 1), "%g s" % DURATION))
    # what each holder was told it took: its two leases
    told = {"h1": {"shards": SHARDS[:2]}, "h2": {"shards": SHARDS[2:]}}
    # 1.5 lease durations of heartbeats every 0.4 s: the leases' own
    # expiry (their take) passes, only the heartbeats keep them live
    end = time.time() + DURATION * 1.5
    while time.time() < end:
        for worker in ("h1", "h2"):
            sent = time.time()
            cur.execute("SELECT leases FROM lease.heartbeat(%s, %s, %s, %s)",
                        (APP, STREAM, worker, "%g s" % DURATION))
            # a heartbeat that counts both leases keeps both (client rule 5)
            if cur.fetchone()[0] == 2:
                told[worker].update(sent=sent, deadline=sent + DURATION)
        time.sleep(0.4)
    with open(journal, "w") as f:
        json.dump({"holders": told}, f)


def take(journal):
    with open(journal) as f:
        j = json.load(f)
    deadline = time.time() + 30
    while True:
        try:
            conn = connect()
            break
        except psycopg2.OperationalError:
            if time.time() > deadline:
                raise
            time.sleep(0.05)
    cur = conn.cursor()
    taken = []
    end = time.time() + DURATION * 2
    while time.time() < end:
        cur.execute("SELECT shard_id FROM lease.take_leases(%s, %s, 'h3', %s, max_steal => 0)"
                    " WHERE action = 'taken'", (APP, STREAM, "%g s" % DURATION))
        at = time.time()
        taken += [{"shard": r[0], "at": at} for r in cur.fetchall()]
        time.sleep(0.1)
    cur.execute("SELECT worker, extract(epoch FROM renewed_at) FROM lease.stream_workers"
                " WHERE app_name = %s AND stream_name = %s", (APP, STREAM))
    j["renewed_at"] = {w: (float(t) if t is not None else None) for w, t in cur.fetchall()}
    j["taken"] = taken
    with open(journal, "w") as f:
        json.dump(j, f)


def check(journal):
    with open(journal) as f:
        j = json.load(f)
    owner_of = {s: "h%d" % (i // 2 + 1) for i, s in enumerate(SHARDS)}
    violations = 0
    for t in j["taken"]:
        holder = j["holders"][owner_of[t["shard"]]]
        if t["shard"] in holder["shards"] and t["at"] < holder.get("deadline", 0):
            violations += 1
            print("# %s taken %.2f s before %s's local deadline"
                  % (t["shard"], holder["deadline"] - t["at"], owner_of[t["shard"]]), file=sys.stderr)
    # the server's record of each holder's last heartbeat, against the last
    # one the holder was told succeeded: lost if older
    lost = all((j["renewed_at"].get(w) or 0) < told.get("sent", 0) - 0.2 for w, told in j["holders"].items())
    print(violations, "yes" if lost else "no", len(j["taken"]))


if __name__ == "__main__":
    {"beat": beat, "take": take, "check": check}[sys.argv[1]](sys.argv[2])
