#!/usr/bin/env bash
# Where a fenced checkpoint's server CPU goes: the instructions one
# checkpoint costs the backend, counted by valgrind's callgrind (repeatable,
# unlike a timer on a shared machine; perf's hardware counters are not
# available in most VMs), split by the PostgreSQL functions that stand for
# each part (docs/comparison.md, "Where the server's time goes").
#
#   PG_BINDIR=... bash test/bench/profile_checkpoint.sh [N]
#
# pg_lease must be installed in PG_BINDIR's PostgreSQL.  Makes a throwaway
# cluster (test/lib/cluster.sh) with fsync on, 10,000 leases in one stream
# and 100 held by worker w1 in another, stops it, then runs a single-user
# backend (postgres --single) under callgrind over scripts of N (default
# 1000) shard checkpoints: one fenced update_checkpoint a statement, then
# update_checkpoints of 10 and of 100 shards.  Each script starts with the
# same 100 warm-up calls, and a run of the warm-up alone is subtracted, so
# the start-up, the first plans and the shutdown drop out.  Prints, per
# shard checkpoint, the instructions of the whole statement and of each
# part.  Needs valgrind and callgrind_annotate (Debian: valgrind).
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-1000}
PG_BINDIR=${PG_BINDIR:-/usr/lib/postgresql/15/bin}
command -v valgrind >/dev/null || { echo "profile_checkpoint: needs valgrind" >&2; exit 1; }
# shellcheck source=../lib/cluster.sh
. test/lib/cluster.sh
cluster_start
WORK=$CLUSTER_DIR/profile
mkdir "$WORK"
chmod 755 "$WORK"
if [ "$(id -u)" -eq 0 ]; then
    chown postgres: "$WORK"   # the backend writes callgrind's output there
fi
PSQL=("$PG_BINDIR/psql" -X -q -v ON_ERROR_STOP=1 -d postgres)
"${PSQL[@]}" >/dev/null <<'SQL'
CREATE EXTENSION pg_lease;
SELECT count(lease.create_lease('prof', 'other', 'o-' || i)) FROM generate_series(0, 9999) i;
SELECT count(lease.create_lease('prof', 's', 's-' || i)) FROM generate_series(0, 99) i;
SELECT count(*) FROM lease.take_leases('prof', 's', 'w1', '100 hours', 100, 0);
VACUUM ANALYZE lease.shard_leases;
SQL
cluster_as_owner "$PG_BINDIR/pg_ctl" -D "$CLUSTER_DIR/data" -w stop >/dev/null
# the checkpoints under test, with their durability: fsync and a WAL flush
# at every commit, as in production
sed -i -e 's/^fsync = off/fsync = on/' -e 's/^synchronous_commit = off/synchronous_commit = on/' \
    "$CLUSTER_DIR/data/postgresql.conf"

# scripts: one statement a line (single-user mode reads a statement a line)
/usr/bin/python3 - "$WORK" "$N" <<'PY'
import sys
work, n = sys.argv[1], int(sys.argv[2])
def single(i):
    return "SELECT lease.update_checkpoint('prof', 's', 's-%d', 'w1', '%d', 0, 1);\n" % (i % 100, 1000 + i)
def batch(i, b):
    ids = ", ".join("'s-%d'" % ((i * b + j) % 100) for j in range(b))
    vals = ", ".join("'%d'" % (100000 + i * b + j) for j in range(b))
    return ("SELECT count(*) FROM lease.update_checkpoints('prof', 's', 'w1', ARRAY[%s], ARRAY[%s],"
            " array_fill(0::bigint, ARRAY[%d]), array_fill(1::bigint, ARRAY[%d]));\n" % (ids, vals, b, b))
warm = "".join(single(i) for i in range(100))
scripts = {"warm": warm, "single": warm + "".join(single(i) for i in range(n)),
           "batch10": warm + "".join(batch(i, 10) for i in range(n // 10)),
           "batch100": warm + "".join(batch(i, 100) for i in range(n // 100))}
for name, text in scripts.items():
    with open("%s/%s.sql" % (work, name), "w") as f:
        f.write(text)
PY

for run in warm single batch10 batch100; do
    rm -rf "$WORK/data-$run"
    cp -a "$CLUSTER_DIR/data" "$WORK/data-$run"
    chmod 644 "$WORK/$run.sql"
    cluster_as_owner valgrind --tool=callgrind --callgrind-out-file="$WORK/$run.cg" \
        "$PG_BINDIR/postgres" --single -D "$WORK/data-$run" postgres <"$WORK/$run.sql" >"$WORK/$run.out" 2>&1
    if grep -q ERROR "$WORK/$run.out"; then
        grep -m 3 ERROR "$WORK/$run.out" >&2
        exit 1
    fi
    callgrind_annotate --inclusive=yes --threshold=100 "$WORK/$run.cg" >"$WORK/$run.txt" 2>/dev/null
    rm -rf "$WORK/data-$run"
done

/usr/bin/python3 - "$WORK" "$N" <<'PY'
import re, sys
work, n = sys.argv[1], int(sys.argv[2])
def load(run):
    d = {}
    for line in open("%s/%s.txt" % (work, run)):
        m = re.match(r"\s*([\d,]+) \([ \d.]+%\)\s+(\S+)", line)
        if m:
            name = m.group(2).split(":")[-1]
            d[name] = max(d.get(name, 0), int(m.group(1).replace(",", "")))
    return d
parts = [("the whole statement", ("PostgresMain",)),
         ("the client's statement: parse, analyze, plan", ("pg_parse_query", "pg_analyze_and_rewrite_fixedparams", "pg_plan_queries")),
         ("pg_lease's statement (SPI), all of it", ("SPI_execute_plan",)),
         ("  its plan from the cache", ("GetCachedPlan",)),
         ("  executor start-up", ("standard_ExecutorStart",)),
         ("  CHECK constraints (built for each statement)", ("ExecConstraints",)),
         ("  BEFORE row triggers (WHEN clauses, bodies)", ("ExecBRUpdateTriggersNew",)),
         ("  AFTER row triggers (WHEN clauses, queueing)", ("ExecARUpdateTriggers",)),
         ("  index entries (non-HOT updates)", ("ExecInsertIndexTuples",)),
         ("  the new row version", ("heap_update",)),
         ("  WAL records", ("XLogInsert",)),
         ("commit (with the WAL flush's own CPU)", ("CommitTransactionCommand",))]
warm = load("warm")
runs = [(r, load(r)) for r in ("single", "batch10", "batch100")]
print("instructions per shard checkpoint (callgrind, %d shard checkpoints a run, warm-up subtracted)" % n)
print("| part | single fenced update_checkpoint | update_checkpoints, 10 shards | update_checkpoints, 100 shards |")
print("| --- | ---: | ---: | ---: |")
for label, fns in parts:
    cells = ["{:,}".format(sum(d.get(f, 0) - warm.get(f, 0) for f in fns) // n) for _, d in runs]
    print("| %s | %s |" % (label, " | ".join(cells)))
PY
