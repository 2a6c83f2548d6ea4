#!/usr/bin/python3
"""The fleet checker: the invariants of the demo, over what the workers recorded.

    check.py DIR DSN --killed W,.. --joined W,.. [--failover] [--stream NAME]

DIR holds, per worker W, W.records (one JSON line per record processed:
shard, seq, its sub-sequence, time) and W.journal (one JSON line per thing the server
acknowledged: takes and renewals with their send times and epochs,
processor starts with their checkpoint, checkpoints with ok true/false,
releases, closes, shutdowns), plus "fairness" (the harness's last look at
the live leases before the stop).  The server's final state is read only to
compare it with the journals.

Invariants:
  - no checkpoint refused (no spurious failure, no lease lost by a live
    worker), and, but with --failover, no checkpoint that failed to be written;
  - positions are (sequence number, sub-sequence) pairs compared as big
    integers (a Kinesis sequence number has 56 digits); on a stream named
    "kpl-..." every even record is an aggregate of 5 user records
    (sub-sequences 0..4), as the example workers synthesize it; a shard's
    records start after the first checkpoint a processor started it from
    (TRIM_HORIZON, or an imported one);
  - no acknowledged checkpoint lost: every processor starts from a checkpoint
    at or past every checkpoint of its shard acknowledged before;
  - nothing processed twice, except the unacknowledged tail of a killed worker
    (records after its last acknowledged checkpoint of that shard) and, with
    --failover, of a live worker whose checkpoints failed while a partition
    failed over and which then lost the lease (shut down, "lease lost");
  - no gaps: every record up to a shard's final checkpoint was processed, and
    the server's checkpoint is the last one a worker was told was written
    (with --failover: or a later one whose write failed ambiguously: it
    committed, but the answer was lost);
  - no two owners at once: per shard, the spans in which a worker processed
    it (from its processor start to its last record) never overlap another
    worker's, and the fencing epoch grows from one owner to the next;
  - the local deadline: every record was processed less than one lease
    duration after the send time of an acknowledged take/renewal of that
    shard by that worker (a renewal by heartbeat, journaled "via":
    "heartbeat", counts for the shards it lists at the epochs listed:
    those of the last renew_leases, whose leases_version it confirmed);
  - ended shards closed, their children processed from the start;
  - the workers that renew by heartbeat (Python, Node, Elixir) did, when they
    renewed ten times or more;
  - every language's workers (the name's prefix: py, node, java, go, ex) and every
    joining worker processed records;
  - fair shares at the end, no takeable lease unheld.
"""
import argparse
import collections
import glob
import json
import os
import sys

import psycopg2

ap = argparse.ArgumentParser()
ap.add_argument("dir")
ap.add_argument("dsn")
ap.add_argument("--killed", default="")
ap.add_argument("--joined", default="")
ap.add_argument("--failover", action="store_true",
                help="a partition failed over under the workers (through the router)")
ap.add_argument("--stream", default="orders", help="the stream of app clients the workers ran on")
args = ap.parse_args()
killed = set(filter(None, args.killed.split(",")))
joined = set(filter(None, args.joined.split(",")))

failures = []


def check(ok, what):
    print("  %s %s" % ("ok" if ok else "FAIL", what))
    if not ok:
        failures.append(what)


def load(pattern):
    out = {}
    for path in sorted(glob.glob(os.path.join(args.dir, pattern))):
        name = os.path.basename(path).rsplit(".", 1)[0]
        with open(path) as f:
            # a SIGKILL may cut the last line short
            out[name] = [json.loads(l) for l in f if l.endswith("\n")]
    return out


journals = load("*.journal")
records = load("*.records")
workers = sorted(journals)
print("# workers: %s" % " ".join(workers))

lease_duration = {w: next(e["lease_duration"] for e in j if e["ev"] == "started") for w, j in journals.items()}

AGGREGATE = 5
kpl = args.stream.startswith("kpl-")
SENTINELS = ("TRIM_HORIZON", "LATEST", "AT_TIMESTAMP")


def position(checkpoint, sub=0):
    """A checkpoint (text, never a machine integer) and its sub-sequence as a comparable pair."""
    return (0, 0) if checkpoint in SENTINELS else (int(checkpoint), int(sub or 0))


def following(pos):
    """The user record after pos on this stream (an even record of a kpl- stream is an aggregate)."""
    seq, sub = pos
    if kpl and seq > 0 and seq % 2 == 0 and sub + 1 < AGGREGATE:
        return (seq, sub + 1)
    return (seq + 1, 0)


def record_position(r):
    return (int(r["seq"]), int(r.get("sub", 0)))

# -- checkpoints ------------------------------------------------------------
refused = [(w, e) for w, j in journals.items() for e in j if e["ev"] == "checkpoint" and not e["ok"]]
acked = collections.defaultdict(list)       # (worker, shard) -> [(t, seq)]
for w, j in journals.items():
    for e in j:
        if e["ev"] == "checkpoint" and e["ok"]:
            acked[(w, e["shard"])].append((e["t"], position(e["checkpoint"], e.get("sub"))))
n_checkpoints = sum(len(v) for v in acked.values())
check(not refused, "no checkpoint refused: %d acknowledged, %d refused %s"
      % (n_checkpoints, len(refused), refused[:3]))
failed = collections.defaultdict(list)      # shard -> [(t, seq)] of writes that failed
for w, j in journals.items():
    for e in j:
        if e["ev"] == "checkpoint_failed":
            failed[e["shard"]].append((e["t"], position(e["checkpoint"], e.get("sub"))))
n_failed = sum(len(v) for v in failed.values())
if args.failover:
    print("# %d checkpoint writes failed during the failover (ambiguous or unavailable)" % n_failed)
else:
    check(not n_failed, "no checkpoint failed to be written: %d %s" % (n_failed, list(failed.items())[:3]))


lost = []
start = {}                                  # shard -> the position its first processor started after
for w, j in journals.items():
    for e in j:
        if e["ev"] == "initialized":
            at = position(e["checkpoint"], e.get("sub"))
            before = max([c for (_, s), v in acked.items() if s == e["shard"] for t, c in v if t < e["t"]],
                         default=(0, 0))
            if at < before:
                lost.append((w, e["shard"], e["checkpoint"], before))
            if e["shard"] not in start or e["t"] < start[e["shard"]][0]:
                start[e["shard"]] = (e["t"], at)
start = {s: at for s, (_, at) in start.items()}
check(not lost, "no acknowledged checkpoint lost: every processor started at or past its shard's"
      " acknowledged checkpoints %s" % lost[:3])

# -- duplicates and gaps --------------------------------------------------------
by_shard = collections.defaultdict(list)    # shard -> [(t, worker, (seq, sub))]
for w, rs in records.items():
    for r in rs:
        by_shard[r["shard"]].append((r["t"], w, record_position(r)))
total = sum(len(v) for v in by_shard.values())
lost_at = collections.defaultdict(list)    # (worker, shard) -> when it shut down with "lease lost"
for w, j in journals.items():
    for e in j:
        if e["ev"] == "shutdown" and e["reason"] == "lease lost":
            lost_at[(w, e["shard"])].append(e["t"])
dups_tail = 0
dups_lost = 0
dups_bad = []
for shard, rs in by_shard.items():
    seen = {}
    for t, w, seq in sorted(rs):
        if seq in seen:
            pw, pt = seen[seq]
            # acknowledged before this repeat: then the repeat is a violation
            covered = any(c >= seq and ct < t for ct, c in acked[(pw, shard)])
            if pw in killed and not covered:
                dups_tail += 1
            elif args.failover and not covered and any(lt >= pt for lt in lost_at[(pw, shard)]):
                dups_lost += 1
            else:
                dups_bad.append((shard, seq, pw, w))
        seen[seq] = (w, t)
what = "a killed worker's unacknowledged tail" + (" or a lease lost in the failover's" if args.failover else "")
check(not dups_bad, "nothing processed twice but %s: %d records, %d again from a killed worker's tail,"
      " %d from a lost lease's, %d other repeats %s"
      % (what, total, dups_tail, dups_lost, len(dups_bad), dups_bad[:3]))

conn = psycopg2.connect(args.dsn)
conn.autocommit = True
cur = conn.cursor()
cur.execute("SELECT shard_id, checkpoint, checkpoint_sub_sequence, parent_shard_ids FROM lease.shard_leases"
            " WHERE app_name = 'clients' AND stream_name = %s ORDER BY shard_id", (args.stream,))
server = {s: (c, sub, p) for s, c, sub, p in cur.fetchall()}
closed = {e["shard"] for j in journals.values() for e in j if e["ev"] == "closed" and e["ok"]}
gaps = []
mismatch = []
for shard, (server_ckpt, server_sub, _) in server.items():
    if server_ckpt != "SHARD_END":
        start.setdefault(shard, position(server_ckpt, server_sub))    # never started: where it is
    first = start.get(shard, (0, 0))
    last_acked = max([c for (w, s), v in acked.items() if s == shard for _, c in v] + [first])
    if shard in closed or (server_ckpt == "SHARD_END" and shard not in start):
        want, got = "SHARD_END", server_ckpt          # closed here, or ended before (an import)
    else:
        want = last_acked
        got = "SHARD_END" if server_ckpt == "SHARD_END" else position(server_ckpt, server_sub)
    committed_unacked = (args.failover and got != "SHARD_END" and want != "SHARD_END" and got > last_acked and
                         any(c == got for _, c in failed[shard]))
    if got != want and not committed_unacked:
        mismatch.append((shard, server_ckpt, server_sub, want))
    done = {pos for _, _, pos in by_shard.get(shard, [])}
    missing = []
    pos = following(first)
    while pos <= last_acked and len(missing) < 5:
        if pos not in done:
            missing.append(pos)
        pos = following(pos)
    if missing:
        gaps.append((shard, missing))
check(not gaps, "no gaps: every record up to each shard's last acknowledged checkpoint was processed %s" % gaps[:3])
check(not mismatch, "the server's checkpoints are the last ones the workers were told were written%s %s"
      % (" (or a later one whose answer was lost)" if args.failover else "", mismatch[:3]))

# -- ended shards ---------------------------------------------------------------
ended = sorted(s for s in server if "-end" in s)
check(set(ended) <= closed and all(server[s][0] == "SHARD_END" for s in ended),
      "the ended shards %s were closed by their owners" % ended)
for shard in ended:
    n = int(shard.rsplit("-end", 1)[1])
    done = {pos for _, _, pos in by_shard.get(shard, [])}
    want, pos = set(), following((0, 0))
    while pos[0] <= n:
        want.add(pos)
        pos = following(pos)
    check(done == want, "%s: exactly records 1..%d processed (%d user records)" % (shard, n, len(want)))
children = [s for s, (_, _, parents) in server.items() if parents]
for shard in children:
    rs = sorted(by_shard.get(shard, []))
    parents_end = max([t for p in server[shard][2] for t, _, _ in by_shard.get(p, [])], default=0)
    first = following(start.get(shard, (0, 0)))
    check(bool(rs) and rs[0][2] == first and rs[0][0] > parents_end,
          "%s (child of %s) processed from %s, after its parents ended" % (shard, server[shard][2], first))

# -- no two owners at once; epochs; the local deadline ----------------------------
spans = collections.defaultdict(list)       # shard -> [(start, end, worker, epoch)]
deadline_bad = []
for w, j in journals.items():
    inits = [e for e in j if e["ev"] == "initialized"]
    acks = collections.defaultdict(list)    # (shard, epoch) -> [sent]
    for e in j:
        if e["ev"] == "taken":
            acks[(e["shard"], e["epoch"])].append(e["sent"])
        elif e["ev"] == "renewed":
            for s, ep in e["leases"].items():
                acks[(s, ep)].append(e["sent"])
    mine = collections.defaultdict(list)
    for r in records.get(w, []):
        mine[r["shard"]].append(r["t"])
    for k, e in enumerate(inits):
        later = [x["t"] for x in inits[k + 1:] if x["shard"] == e["shard"]]
        until = min(later) if later else float("inf")
        ts = [t for t in mine[e["shard"]] if e["t"] <= t < until]
        if ts:
            spans[e["shard"]].append((e["t"], max(ts), w, e["epoch"]))
        sent = sorted(acks[(e["shard"], e["epoch"])])
        for t in ts:
            before = [s for s in sent if s <= t]
            if not before or t >= before[-1] + lease_duration[w]:
                deadline_bad.append((w, e["shard"], t))
overlaps = []
epochs_bad = []
for shard, ss in spans.items():
    ss.sort()
    for i, (start, end, w, ep) in enumerate(ss):
        for pstart, pend, pw, pep in ss[:i]:
            if pw != w and pend >= start:
                overlaps.append((shard, pw, pend, w, start))
            if pw != w and pep >= ep:
                epochs_bad.append((shard, pw, pep, w, ep))
n_spans = sum(len(v) for v in spans.values())
check(not overlaps, "no two owners at once: %d processing spans, none overlapping another worker's %s%s"
      % (n_spans, overlaps[:3], " (the earlier owners: %s)" % ", ".join(sorted({o[1] for o in overlaps}))
         if overlaps else ""))
check(not epochs_bad, "the fencing epoch grows from one owner of a shard to the next %s" % epochs_bad[:3])
check(not deadline_bad, "every record processed within a lease duration of an acknowledged take/renewal %s"
      % deadline_bad[:3])

# -- renewals by heartbeat (the Python, Node and Elixir workers, docs/client-rules.md rule 5) ------
via = {}   # worker -> Counter of "heartbeat" and "list" renewals
for w, j in journals.items():
    c = collections.Counter(e["via"] for e in j if e["ev"] == "renewed" and "via" in e)
    if c:
        via[w] = c
print("# renewals by heartbeat / by renew_leases: %s"
      % {w: "%d/%d" % (c["heartbeat"], c["list"]) for w, c in sorted(via.items())})
lived = [w for w, c in via.items() if sum(c.values()) >= 10]
check(all(via[w]["heartbeat"] > 0 for w in lived),
      "the workers that renew by heartbeat did: %s" % sorted(w for w in lived if not via[w]["heartbeat"]))

# -- both languages, joiners, fairness ------------------------------------------------
per_worker = {w: len(records.get(w, [])) for w in workers}
print("# records per worker: %s" % per_worker)
languages = sorted({w.split("-", 1)[0] for w in workers})
check(len(languages) > 1 and all(any(per_worker[w] for w in workers if w.startswith(lang + "-")) for lang in languages),
      "the workers of every language (%s) processed the stream" % ", ".join(languages))
check(all(per_worker.get(w, 0) > 0 for w in joined), "the joining workers %s got leases and processed" % sorted(joined))
handoffs = [e for j in journals.values() for e in j if e["ev"] == "released" and e.get("to")]
check(len(handoffs) > 0, "the joining workers got their share through %d graceful handoffs" % len(handoffs))
with open(os.path.join(args.dir, "fairness")) as f:
    fairness = f.read().strip()
check(fairness.endswith(" fair"), "fair shares at the end, no takeable lease unheld (%s)" % fairness)

print("# %s" % ("every invariant held" if not failures else "%d invariant(s) BROKEN" % len(failures)))
sys.exit(1 if failures else 0)
