#!/usr/bin/env bash
# `make test`: installs what is missing, builds and installs pg_lease, starts
# a throwaway cluster, runs every suite against it, stops it, and closes with
# one line "N passed, N failed" summing every suite.  Exit status is non-zero
# when anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

# Every suite, in the order make test runs them (the default of
# PG_LEASE_SUITES); `test/run.sh --list` prints them and does nothing else
# (make check and the docs-coverage suite read the list from here).
ALL_SUITES="deps regress isolation pgtap settings docs-coverage docs-examples demo clients clients-router clients-pgbouncer torture explore balance bench peers upgrade dump sql-lint planted alerts metrics router scale soak grow coordinator ha-topology dist deb"
if [ "${1:-}" = --list ]; then
    echo "$ALL_SUITES"
    exit 0
fi

# build test: what every suite needs; monitoring: the exporter, promtool
# and curl of the suites `alerts` and `metrics` (docs/monitoring.md);
# scale: PL/Proxy and pg_auto_failover (suites `router` and `scale`).
bash test/lib/deps.sh build test monitoring scale || exit 1
# shellcheck source=lib/cluster.sh
. test/lib/cluster.sh

PG_CONFIG="$PG_BINDIR/pg_config"

# make sanitize (test/sanitize.sh) installs its own build of the module and
# runs a subset of the suites: PG_LEASE_NO_INSTALL=1, PG_LEASE_SUITES.
if [ -z "${PG_LEASE_NO_INSTALL:-}" ]; then
    pg_lease_build_install clients || exit 1
fi
# settings runs before docs-examples: the worker guide's ALTER SYSTEM leaves
# the server a lease.* placeholder (test/docs/examples.sh).  dist and deb
# install other builds of pg_lease (the archive's into PG_BINDIR's
# PostgreSQL, the package into the system one) and put the installed files
# back afterwards; they run last all the same.
SUITES=${PG_LEASE_SUITES:-$ALL_SUITES}

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

# `make installcheck` is the one place pg_regress and pg_isolation_regress
# are invoked (PGXS, the Makefile's REGRESS and ISOLATION); each suite runs
# half of it against this cluster (PGHOST/PGPORT/PGUSER), with the other
# list emptied on the command line.
installcheck() {
    make -s PG_CONFIG="$PG_CONFIG" installcheck "$@"
}

# Runs pg_regress over test/sql/*.sql (expected output in test/expected/,
# results in results/).
suite_regress() {
    rm -rf results regression.diffs regression.out
    installcheck ISOLATION= 2>&1 | tee "$ROOT/regress.log"
    count_regress_output "$ROOT/regress.log" "pg_regress" "$(ls test/sql/*.sql | wc -l)"
    [ -f regression.diffs ] && cat regression.diffs
}

# Runs pg_isolation_regress over test/specs/*.spec (expected output in
# test/expected/, results in output_iso/).
suite_isolation() {
    rm -rf output_iso
    installcheck REGRESS= 2>&1 | tee "$ROOT/isolation.log"
    count_regress_output "$ROOT/isolation.log" "isolation" "$(ls test/specs/*.spec | wc -l)"
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

# The main job, short: the demo fleet against this cluster, then the legacy
# fleet beside it; its exit status says whether every invariant held, and
# its report must show the checkpoint race and the compensation queue.  Then the transactional (exactly-once)
# fleet, and its negative control without hold_lease, which must find
# duplicates: a stale owner's batch lands only when the victim of a steal
# commits a batch before its renewer notices, so up to 3 runs of 10 s.
suite_demo() {
    # the transactional fleet also survives an immediate stop and start of this cluster
    local as_owner=
    [ "$(id -u)" -eq 0 ] && as_owner="runuser -u postgres --"
    local report
    report=$(mktemp)
    if test/demo/pg_lease_demo --dsn "dbname=postgres" --duration 12 --quiet --seed 7 --exactly-once \
        --restart-cmd "$as_owner $PG_BINDIR/pg_ctl -D $PGHOST/data -l $PGHOST/server.log -m immediate -w -t 60 restart >/dev/null" |
        tee "$report"; [ "${PIPESTATUS[0]}" -eq 0 ]; then
        tally 1 0 "demo (make demo, 12 s, the legacy fleet, and --exactly-once)"
    else
        tally 0 1 "demo (make demo, 12 s, the legacy fleet, and --exactly-once)"
    fi
    # The report shows the checkpoint race side by side: pg_lease refuses no
    # owner's checkpoint, the legacy read-then-write does (renewals move
    # lease_count under it; dozens of times in 12 s).
    if awk '/^-- side by side/ { side = 1 }
            side && !found && /spurious checkpoint failures/ { found = 1; ok = ($(NF - 1) == 0 && $NF > 0) }
            END { exit !(found && ok) }' "$report"; then
        tally 1 0 "demo report: the legacy checkpoint fails spuriously, pg_lease's never"
    else
        tally 0 1 "demo report: the legacy checkpoint fails spuriously, pg_lease's never"
    fi
    # ... and the compensation queue: a restore failed and queued, a retry
    # that fails while the cause remains, one that restores, the queue empty.
    if grep -qE '^  restore while a turn holds conversation [0-9]+ +failed after' "$report" &&
        grep -qE '^  pairs queued in lease.compensation_failures +1 ' "$report" &&
        grep -qE '^  retry while the turn still runs +failed ' "$report" &&
        grep -qE '^  retry after the turn committed +restored ' "$report" &&
        grep -qE '^  pairs left in the queue +0 ' "$report"; then
        tally 1 0 "demo report: a failed restore is queued, then retried"
    else
        tally 0 1 "demo report: a failed restore is queued, then retried"
    fi
    rm -f "$report"
    local try out found=0
    for try in 1 2 3; do
        out=$(test/demo/pg_lease_demo --dsn "dbname=postgres" --duration 10 --quiet --seed $((7 + try)) --omit-hold)
        if [ $? -eq 1 ] && grep -q 'BROKEN: records were written to the output more than once' <<<"$out"; then
            grep 'records written exactly once' <<<"$out"
            found=$try
            break
        fi
    done
    if [ "$found" -gt 0 ]; then
        tally 1 0 "demo --omit-hold finds duplicates (run $found of at most 3)"
    else
        tally 0 1 "demo --omit-hold finds duplicates (run $found of at most 3)"
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

# Runs a TAP script ($4...) into $ROOT/$2.log, shows the lines of it that
# match $3 (all when empty), and counts one per TAP line; a run that failed
# without saying which test counts as one failure.  $1 is the suite's name.
suite_tap() {
    local name=$1 log="$ROOT/$2.log" show=$3 status ok bad
    shift 3
    PG_BINDIR="$PG_BINDIR" "$@" 2>&1 | tee "$log" | grep -E "$show"
    status=${PIPESTATUS[0]}
    ok=$(grep -c '^ok ' "$log")
    bad=$(grep -c '^not ok ' "$log")
    if [ "$status" -ne 0 ] && [ "$bad" -eq 0 ]; then
        bad=1
    fi
    tally "$ok" "$bad" "$name"
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

# The alert rules (docs/monitoring/pg_lease_alerts.yml): promtool check
# rules, then its unit tests (every rule firing and not firing); one count
# each.
suite_alerts() {
    local ok=0 bad=0
    if promtool check rules docs/monitoring/pg_lease_alerts.yml; then
        ok=$((ok + 1))
    else
        bad=$((bad + 1))
    fi
    if promtool test rules test/monitoring/pg_lease_alerts_test.yml; then
        ok=$((ok + 1))
    else
        bad=$((bad + 1))
    fi
    tally "$ok" "$bad" "alerts (promtool)"
}

# Runs a script that counts its own checks and closes with "N passed, N
# failed" (test/docs/*.sh), against this cluster; a script that printed no
# such line counts as one failure.
suite_counted() {
    local log="$ROOT/$1.log" summary
    # Its own closing line is kept out of this output: only the total at the
    # end of make test has that shape (.ci/run reads it).
    PG_BINDIR="$PG_BINDIR" bash "$2" 2>&1 | tee "$log" | grep -vE '^[0-9]+ passed, [0-9]+ failed$'
    summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1)
    if [ -n "$summary" ]; then
        tally "$(cut -d' ' -f1 <<<"$summary")" "$(cut -d' ' -f3 <<<"$summary")" "$1"
    else
        tally 0 1 "$1"
    fi
}

# make scale, short: the fleet through the router over two pg_auto_failover
# partitions during a switchover, a SIGKILL and a rejoin (its own cluster).
suite_scale() {
    if PG_BINDIR="$PG_BINDIR" bash test/scale/run.sh --short >"$ROOT/scale.log" 2>&1; then
        grep -E '^(router on port|clients of the killed router|partition [0-9] \(|partition [0-9]: leases taken|errors by|acknowledged|double|channels|scale: ok)' "$ROOT/scale.log"
        tally 1 0 "scale (make scale --short)"
    else
        tail -n 60 "$ROOT/scale.log"
        tally 0 1 "scale (make scale --short)"
    fi
}

# make soak, short: every coordinator fault once under the fleet, judged
# per fault (test/scale/soak.sh --once).  The grace-off negative control
# (soak.sh --grace off --faults partition-stop --expect reshuffle) is not
# run here: the demo's workers renew before a take comes back, so it has
# not shown the reshuffle yet (test/scale/README.md); the coordinator
# suite's restart control shows it.
suite_soak() {
    if PG_BINDIR="$PG_BINDIR" bash test/scale/soak.sh --once --fleet-seconds 600 >"$ROOT/soak.log" 2>&1; then
        sed -n '/^ *# fault /,/^totals:/p' "$ROOT/soak.log"
        tally 1 0 "soak (every coordinator fault once)"
    else
        tail -n 60 "$ROOT/soak.log"
        tally 0 1 "soak (every coordinator fault once)"
    fi
}

# Growing online: partitions added and streams moved under the fleet
# through the router (test/scale/grow.sh, its own cluster).
suite_grow() {
    if PG_BINDIR="$PG_BINDIR" bash test/scale/grow.sh >"$ROOT/grow.log" 2>&1; then
        grep -E '^(grow: (move of|write gap|transactional|ok)|acknowledged|double)' "$ROOT/grow.log"
        tally 1 0 "grow (streams moved, partitions added, under the fleet)"
    else
        tail -n 60 "$ROOT/grow.log"
        tally 0 1 "grow (streams moved, partitions added, under the fleet)"
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
        docs-coverage) suite_counted docs-coverage test/docs/coverage.sh ;;
        docs-examples) suite_counted docs-examples test/docs/examples.sh ;;
        demo) suite_demo ;;
        # the Python, Node, Java, Go and Elixir clients (test/clients/run.sh), and the same
        # through the router during a failover (test/clients/router.sh, its
        # own cluster: test/scale/cluster.sh)
        clients) suite_tap "clients (Python, Node, Java, Go and Elixir workers on one stream)" clients "" \
            bash test/clients/run.sh ;;
        clients-router) suite_tap "clients-router (Python, Node, Elixir, Java and Go workers through the router during a failover)" \
            clients-router '^(ok|not ok) |^#   |^  FAIL' bash test/clients/router.sh ;;
        # the same fleet through PgBouncer in transaction pooling mode
        # (test/clients/pgbouncer.sh, on test/run.sh's cluster)
        clients-pgbouncer) suite_tap "clients-pgbouncer (Python and Node workers through PgBouncer, transaction pooling)" \
            clients-pgbouncer "" bash test/clients/pgbouncer.sh ;;
        torture) suite_torture ;;
        # every interleaving of short programs, both protocols, and the
        # seeded defects it must find (test/explorer/run.sh)
        explore) suite_counted explore test/explorer/run.sh ;;
        # weighted balancing converges, stays still, moves near the minimum
        # and agrees with plan_rebalance (test/balance/converge.py)
        balance) suite_tap "balance (weighted convergence driver)" balance "^(not ok|# )" \
            bash test/balance/run.sh ;;
        bench) suite_bench_quick ;;
        peers) suite_counted peers test/bench/peers/suite.sh ;;
        settings) suite_script "settings (before and after the module loads)" test/settings/settings.sh ;;
        upgrade) suite_script "upgrade" test/upgrade/upgrade.sh ;;
        dump) suite_script "dump/restore" test/upgrade/dump.sh ;;
        sql-lint) suite_counted sql-lint test/lint/sql_lint.sh ;;
        planted) suite_counted planted test/security/planted.sh ;;
        deps) suite_script "dependency detection" test/packaging/deps_test.sh ;;
        alerts) suite_alerts ;;
        metrics) suite_script "metrics end to end (exporter)" test/monitoring/e2e.sh ;;
        dist) suite_script "PGXN archive" test/packaging/dist_test.sh ;;
        deb) suite_script "deb package" test/packaging/deb_test.sh ;;
        router) suite_script "router (pg_lease_router)" test/router/router_test.sh ;;
        scale) suite_scale ;;
        soak) suite_soak ;;
        grow) suite_grow ;;
        # the coordinator's own outage: a restart longer than the leases, a
        # crash reinitialisation (test/coordinator/restart.sh, its own cluster)
        coordinator) suite_tap "coordinator (restart, crash reinitialisation: the restart grace)" \
            coordinator "" bash test/coordinator/restart.sh ;;
        # the production HA topology: pg_auto_failover's 3-node settings
        # pinned, and a 2-node formation losing acknowledged writes that a
        # 3-node one keeps (test/coordinator/ha_topology.sh, its own cluster)
        ha-topology) suite_tap "ha-topology (3 nodes per partition keep what 2 lose)" \
            ha-topology "" bash test/coordinator/ha_topology.sh ;;
        *) tally 0 1 "unknown suite $suite" ;;
    esac
done

cluster_stop
trap - EXIT
echo "${PASSED} passed, ${FAILED} failed"
[ "$FAILED" -eq 0 ] && [ "$PASSED" -gt 0 ]
