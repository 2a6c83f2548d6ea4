#!/usr/bin/env bash
# `make test`: installs what is missing, builds and installs pg_lease, starts
# a throwaway cluster, runs every suite against it, stops it, and closes with
# one line "N passed, N failed" summing every suite.  Exit status is non-zero
# when anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

bash test/lib/deps.sh build test scale || exit 1
# shellcheck source=lib/cluster.sh
. test/lib/cluster.sh

PG_CONFIG="$PG_BINDIR/pg_config"
PGXS_DIR=$(dirname "$("$PG_CONFIG" --pgxs)")/../..

# make sanitize (test/sanitize.sh) installs its own build of the module and
# runs a subset of the suites: PG_LEASE_NO_INSTALL=1, PG_LEASE_SUITES.
if [ -z "${PG_LEASE_NO_INSTALL:-}" ]; then
    pg_lease_build_install clients || exit 1
fi
SUITES=${PG_LEASE_SUITES:-deps regress isolation pgtap demo torture bench upgrade dump router scale}

cluster_start || exit 1
echo "pg_lease: throwaway cluster on socket $PGHOST port $PGPORT"

PASSED=0
FAILED=0

# Adds one suite's counts.
tally() {
    PASSED=$((PASSED + $1))
    FAILED=$((FAILED + $2))
    echo "== $3: $1 passed, $2 failed"
}

# pg_regress and pg_isolation_regress print "test NAME ... ok" per passing
# test.  Every test that did not print "ok" counts as failed, so a runner
# that crashed or never started cannot make a suite look green.
count_regress_output() {
    local log=$1 name=$2 total=$3
    local ok
    ok=$(grep -cE '^(test| ) +[^ ]+ +\.\.\. ok' "$log")
    tally "$ok" "$((total - ok))" "$name"
}

# Runs pg_regress over sql/*.sql.
suite_regress() {
    local tests
    tests=$(for f in sql/*.sql; do basename "$f" .sql; done | sort)
    rm -rf results regression.diffs regression.out
    "$PGXS_DIR/src/test/regress/pg_regress" --inputdir=. --bindir="$PG_BINDIR" \
        --load-extension=pg_lease --dbname=pg_lease_regression \
        --host="$PGHOST" --port="$PGPORT" --user=postgres \
        $tests 2>&1 | tee "$ROOT/regress.log"
    count_regress_output "$ROOT/regress.log" "pg_regress" "$(echo "$tests" | wc -w)"
    [ -f regression.diffs ] && cat regression.diffs
}

# Runs pg_isolation_regress over test/specs/*.spec.
suite_isolation() {
    local tests
    tests=$(for f in test/specs/*.spec; do basename "$f" .spec; done | sort)
    rm -rf output_iso
    "$PGXS_DIR/src/test/isolation/pg_isolation_regress" --inputdir=test --outputdir=output_iso \
        --bindir="$PG_BINDIR" --load-extension=pg_lease --dbname=pg_lease_isolation \
        --host="$PGHOST" --port="$PGPORT" --user=postgres \
        $tests 2>&1 | tee "$ROOT/isolation.log"
    count_regress_output "$ROOT/isolation.log" "isolation" "$(echo "$tests" | wc -w)"
    [ -f output_iso/regression.diffs ] && cat output_iso/regression.diffs
}

# Runs every pgTAP file in test/pgtap with pg_prove, one count per file.
suite_pgtap() {
    local ok=0 bad=0 f
    "$PG_BINDIR/psql" -X -q -d postgres -c "DROP DATABASE IF EXISTS pg_lease_tap" \
        -c "CREATE DATABASE pg_lease_tap" || { tally 0 1 "pgTAP"; return; }
    "$PG_BINDIR/psql" -X -q -d pg_lease_tap -v ON_ERROR_STOP=1 \
        -c "CREATE EXTENSION pgtap" -c "CREATE EXTENSION pg_lease" || { tally 0 1 "pgTAP"; return; }
    for f in test/pgtap/*.sql; do
        if pg_prove --host "$PGHOST" --port "$PGPORT" --username postgres \
            --dbname pg_lease_tap --verbose "$f"; then
            ok=$((ok + 1))
        else
            bad=$((bad + 1))
        fi
    done
    tally "$ok" "$bad" "pgTAP"
}

# The main job, short: the demo fleet against this cluster; its exit status
# says whether every invariant held.
suite_demo() {
    if test/demo/pg_lease_demo --dsn "dbname=postgres" --duration 12 --quiet --seed 7; then
        tally 1 0 "demo (make demo, 12 s)"
    else
        tally 0 1 "demo (make demo, 12 s)"
    fi
}

# make bench --quick: proves every benchmark still runs (its own throwaway
# cluster); speeds are reported, never judged.
suite_bench_quick() {
    if PG_BINDIR="$PG_BINDIR" bash test/bench/run.sh --quick >"$ROOT/bench-quick.log" 2>&1; then
        tally 1 0 "bench --quick"
    else
        tail -n 40 "$ROOT/bench-quick.log"
        tally 0 1 "bench --quick"
    fi
}

# Runs the short torture and crash-recovery phases (test/torture/run.sh),
# one count per driver run.  The crash phase restarts this cluster.
suite_torture() {
    local ok=0 bad=0 phase
    for phase in torture crash; do
        if CLUSTER_DIR="$CLUSTER_DIR" PG_BINDIR="$PG_BINDIR" bash test/torture/run.sh --phase "$phase"; then
            ok=$((ok + 1))
        else
            bad=$((bad + 1))
        fi
    done
    tally "$ok" "$bad" "torture"
}

# make scale, short: the fleet through the router over two pg_auto_failover
# partitions during a switchover, a SIGKILL and a rejoin (its own cluster).
suite_scale() {
    if PG_BINDIR="$PG_BINDIR" bash test/scale/run.sh --short >"$ROOT/scale.log" 2>&1; then
        grep -E '^(partition [0-9] \(|errors by|acknowledged|double|channels|scale: ok)' "$ROOT/scale.log"
        tally 1 0 "scale (make scale --short)"
    else
        tail -n 60 "$ROOT/scale.log"
        tally 0 1 "scale (make scale --short)"
    fi
}

# Runs one script suite (test/upgrade/*.sh): one pass or one failure.
suite_script() {
    if PG_BINDIR="$PG_BINDIR" bash "$2"; then
        tally 1 0 "$1"
    else
        tally 0 1 "$1"
    fi
}

for suite in $SUITES; do
    case $suite in
        regress) suite_regress ;;
        isolation) suite_isolation ;;
        pgtap) suite_pgtap ;;
        demo) suite_demo ;;
        torture) suite_torture ;;
        bench) suite_bench_quick ;;
        upgrade) suite_script "upgrade" test/upgrade/upgrade.sh ;;
        dump) suite_script "dump/restore" test/upgrade/dump.sh ;;
        deps) suite_script "dependency detection" test/packaging/deps_test.sh ;;
        router) suite_script "router (pg_lease_router)" test/router/router_test.sh ;;
        scale) suite_scale ;;
        *) tally 0 1 "unknown suite $suite" ;;
    esac
done

cluster_stop
trap - EXIT
echo "${PASSED} passed, ${FAILED} failed"
[ "$FAILED" -eq 0 ] && [ "$PASSED" -gt 0 ]
