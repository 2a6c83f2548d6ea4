#!/usr/bin/env python3
"""The soak's checker (test/scale/soak.sh): judges what the clients were told, per fault.

Reads the demo's histories (test/demo/pg_lease_demo --history: one file per
process, times on CLOCK_MONOTONIC in ms) and the nemesis's record (one line
per fault: number, fault, partition or router, start, end, healed, status,
wall-clock time) and reports for every fault, within its window (from its
start to one lease duration after its partition was healthy again, and two
lease durations for slack):
  lost      acknowledged checkpoints lost: a position read after an
            acknowledgement of a higher one (a later owner starting below
            what was acknowledged);
  overlaps  two owners at once: ownership intervals of one shard by two
            processes that overlap, each from its take (or adopt) to its
            drop or its local deadline as its renewals moved it;
  changes   ownership changes: a shard that went from a live holder to
            another worker without a handoff, a release or a shard end
            (the reshuffle; a worker that died or had stopped is not
            counted: its shards must move).
Lost checkpoints the demo's own checker found at the end (final checkpoint
below an acknowledged one) count on the row "(final)".  Exit status 1 on
any lost acknowledged checkpoint or overlap, a fault that did not heal, a
partition stop that changed more than QUIET_MAX owners (the restart grace
keeps the holders' leases), or with --expect reshuffle (lease.restart_grace
off) when the partition stops changed fewer than RESHUFFLE_MIN owners.
"""
import argparse
import glob
import os
import re
import sys

ap = argparse.ArgumentParser()
ap.add_argument("--history", required=True)
ap.add_argument("--nemesis", required=True)
ap.add_argument("--report", required=True)
ap.add_argument("--lease-ms", type=float, default=3000.0)
ap.add_argument("--expect", choices=["quiet", "reshuffle"], default="quiet")
args = ap.parse_args()
QUIET_MAX = 2           # ownership changes a partition stop may cost with the grace on
RESHUFFLE_MIN = 3       # ... and must cost with it off (the negative control)

# The faults, in order; each window ends 2 lease durations after healing.
faults = []
with open(args.nemesis) as f:
    for line in f:
        p = line.split()
        if len(p) < 8:
            continue
        faults.append(dict(n=int(p[0]), fault=p[1], k=p[2], t0=float(p[3]), t1=float(p[4]),
                           t2=float(p[5]), status=p[6], wall=p[7], lost=0, overlaps=0, changes=0))
for fl in faults:
    fl["end"] = fl["t2"] + 2 * args.lease_ms


def fault_at(t):
    """The fault whose window holds time t (None: between faults)."""
    for fl in faults:
        if fl["t0"] <= t <= fl["end"]:
            return fl
    return None


# Every process's history: intervals per shard, acks, reads, last sign of life.
intervals = []          # (shard, proc, epoch, start, end, why)
acks = {}               # shard -> [(t, v)]
reads = []              # (shard, v, t)
last_seen = {}
for path in sorted(glob.glob(os.path.join(args.history, "*.log"))):
    proc = os.path.basename(path)[:-4]
    opened = {}
    seen = 0.0
    with open(path, errors="replace") as f:
        for line in f:
            p = line.split()
            if not p:
                continue
            try:
                if p[0] in ("take", "adopt") and len(p) >= 5:
                    s, e, t1, t2 = int(p[1]), int(p[2]), float(p[3]), float(p[4])
                    if s in opened:
                        o = opened.pop(s)
                        intervals.append((s, proc, o[0], o[1], o[2], "retaken"))
                    opened[s] = [e, t1, t2]
                    seen = max(seen, t1)
                elif p[0] == "renew" and len(p) >= 4:
                    s, e, t = int(p[1]), int(p[2]), float(p[3])
                    if s in opened and opened[s][0] == e and t > opened[s][2]:
                        opened[s][2] = t
                elif p[0] == "drop" and len(p) >= 5:
                    s, e, t, why = int(p[1]), int(p[2]), float(p[3]), p[4]
                    if s in opened and opened[s][0] == e:
                        o = opened.pop(s)
                        intervals.append((s, proc, e, o[1], min(t, o[2]), why))
                    seen = max(seen, t)
                elif p[0] == "ack" and len(p) >= 5:
                    s, v, t = int(p[1]), int(p[2]), float(p[4])
                    acks.setdefault(s, []).append((t, v))
                    seen = max(seen, t)
                elif p[0] == "read" and len(p) >= 5:
                    s, v, t = int(p[1]), int(p[2]), float(p[4])
                    reads.append((s, v, t))
                    seen = max(seen, t)
                elif p[0] in ("error", "conn", "back") and len(p) >= 2:
                    seen = max(seen, float(p[1]))
            except ValueError:
                continue
    for s, o in opened.items():
        intervals.append((s, proc, o[0], o[1], o[2], "open"))
    last_seen[proc] = seen

between = dict(lost=0, overlaps=0, changes=0)


def charge(t, what, n=1):
    fl = fault_at(t)
    (fl if fl is not None else between)[what] += n


# Lost: a position read after a higher one was acknowledged.
for s, v, t in reads:
    best = max((av for at, av in acks.get(s, []) if at < t), default=None)
    if best is not None and best > v:
        print(f"LOST: shard {s}: acknowledged {best}, read {v} at {t:.0f} ms")
        charge(t, "lost")

# Overlaps and ownership changes, per shard in start order.
by_shard = {}
for iv in intervals:
    by_shard.setdefault(iv[0], []).append(iv)
for s, ivs in by_shard.items():
    ivs.sort(key=lambda x: x[3])
    for i, a in enumerate(ivs):
        for b in ivs[i + 1:]:
            if b[3] < a[4] and b[1] != a[1]:
                print(f"OVERLAP: shard {s}: {a[1]} (epoch {a[2]}, {a[3]:.0f}..{a[4]:.0f} ms) "
                      f"and {b[1]} (epoch {b[2]}, from {b[3]:.0f} ms)")
                charge(b[3], "overlaps")
    # the interval before each one that another process began
    for a, b in zip(ivs, ivs[1:]):
        if b[1] == a[1] or a[5] in ("handoff", "stop", "ended"):
            continue
        # the holder was alive (its history goes on after the take)
        if last_seen.get(a[1], 0) > b[3] + args.lease_ms:
            charge(b[3], "changes")

final_lost = 0
with open(args.report, errors="replace") as f:
    for line in f:
        if re.search(r"LOST: .*final checkpoint", line):
            final_lost += 1
demo_totals = {}
with open(args.report, errors="replace") as f:
    for line in f:
        m = re.match(r"(acknowledged checkpoints lost|double owners): (\d+)", line)
        if m:
            demo_totals[m.group(1)] = int(m.group(2))

print(f"{'#':>3} {'fault':<15} {'where':<8} {'time UTC':<9} {'took s':>6} {'lost':>4} {'overlaps':>8} {'changes':>7} status")
for fl in faults:
    where = ("router " if fl["fault"] == "kill-router" else
             "monitor" if fl["fault"] == "pause-monitor" else "part ") + ("" if fl["fault"] == "pause-monitor" else fl["k"])
    print(f"{fl['n']:>3} {fl['fault']:<15} {where:<8} {fl['wall']:<9} {(fl['t2'] - fl['t0']) / 1000:>6.1f} "
          f"{fl['lost']:>4} {fl['overlaps']:>8} {fl['changes']:>7} {fl['status']}")
print(f"{'':>3} {'(between faults)':<34} {between['lost']:>4} {between['overlaps']:>8} {between['changes']:>7}")
print(f"{'':>3} {'(final)':<34} {final_lost:>4}")

types = sorted({fl["fault"] for fl in faults})
print("per fault type: fired, lost, overlaps, ownership changes (total, per fault)")
for ty in types:
    fs = [fl for fl in faults if fl["fault"] == ty]
    ch = sum(fl["changes"] for fl in fs)
    print(f"  {ty:<15} {len(fs):>3} {sum(fl['lost'] for fl in fs):>4} {sum(fl['overlaps'] for fl in fs):>4} "
          f"{ch:>5} {ch / len(fs):>6.2f}")
lost = sum(fl["lost"] for fl in faults) + between["lost"] + final_lost
overlaps = sum(fl["overlaps"] for fl in faults) + between["overlaps"]
changes = sum(fl["changes"] for fl in faults)
unhealed = [fl for fl in faults if fl["status"] != "ok"]
print(f"totals: {len(faults)} faults, {lost} acknowledged checkpoints lost, {overlaps} overlapping owners, "
      f"{changes} ownership changes in fault windows ({between['changes']} between faults), "
      f"{len(intervals)} ownership intervals, {sum(len(v) for v in acks.values())} acknowledged checkpoints; "
      f"the demo's checker: lost {demo_totals.get('acknowledged checkpoints lost', '?')}, "
      f"double owners {demo_totals.get('double owners', '?')}")
bad = lost > 0 or overlaps > 0 or unhealed or not faults
# A partition stop with the restart grace on moves (near) nothing; with it
# off (the negative control) the first worker back takes the partition's
# expired leases, several of them.
stops = [fl for fl in faults if fl["fault"] == "partition-stop"]
if args.expect == "reshuffle":
    shown = sum(fl["changes"] for fl in stops)
    print(f"negative control: ownership changes caused by the partition stops {shown} (expected at least {RESHUFFLE_MIN})")
    bad = bad or shown < RESHUFFLE_MIN
else:
    loud = [fl for fl in stops if fl["changes"] > QUIET_MAX]
    for fl in loud:
        print(f"partition stop {fl['n']}: {fl['changes']} ownership changes with the restart grace on (at most {QUIET_MAX})")
    bad = bad or bool(loud)
sys.exit(1 if bad else 0)
