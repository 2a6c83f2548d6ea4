#!/usr/bin/env bash
# Torture and crash recovery for pg_lease (test/torture/README.md).
#
#   test/torture/run.sh --phase torture|crash   one phase against the running
#       test cluster (CLUSTER_DIR, PG_BINDIR, PGHOST, PGPORT set: `make test`)
#   test/torture/run.sh --long [options]        `make torture`: dependencies,
#       build, install, its own throwaway cluster, both phases, long defaults
#
# Options: --clients N, --seconds S (torture phase), --crash-seconds S,
# --crashes N (immediate stops during the crash phase), --kills N (backends
# terminated mid-rotation/mid-restore, restores failing against a held lock), --seed N (reproduce a run),
# --shared-channels N (clients that also rotate, restore and end on the shared
# channels; 0: none), --serial-seed N (the serial replay's seed),
# --txn-clients N (transactional clients: output, hold_lease and the fenced
# checkpoint in one transaction, checked exactly once; 0: none).
#
# The torture phase first replays SERIAL_STEPS shared-channel calls one at a
# time, the order fixed by the serial seed (deterministic: seed 32 reaches an
# unbound channel with a restorable chain at step 36 under the 0.3.0
# restore), then runs the driver concurrently on a fresh database; the crash phase runs
# it with --expect-crash and stops the server with `pg_ctl stop -m immediate`
# under the load, restarts it, and lets the driver check that everything it
# saw acknowledged survived.  The torture phase ends with the negative
# control of the transactional clients: without hold_lease (--omit-hold) the
# exactly-once check must find duplicates.  Exit status is non-zero when a
# phase failed.
set -uo pipefail
cd "$(dirname "$0")/../.."

LONG=0
PHASE=all
CLIENTS=8
TORTURE_SECONDS=20
CRASH_SECONDS=16
CRASHES=1
KILLS=3
SEED=
SHARED=4
SERIAL_SEED=32
SERIAL_STEPS=400
TXN=3
while [ $# -gt 0 ]; do
    case "$1" in
        --long) LONG=1; CLIENTS=12; TORTURE_SECONDS=180; CRASH_SECONDS=120; CRASHES=4; KILLS=20; SHARED=6 ;;
        --phase) PHASE=$2; shift ;;
        --clients) CLIENTS=$2; shift ;;
        --seconds) TORTURE_SECONDS=$2; shift ;;
        --crash-seconds) CRASH_SECONDS=$2; shift ;;
        --crashes) CRASHES=$2; shift ;;
        --kills) KILLS=$2; shift ;;
        --seed) SEED=$2; shift ;;
        --shared-channels) SHARED=$2; shift ;;
        --serial-seed) SERIAL_SEED=$2; shift ;;
        --txn-clients) TXN=$2; shift ;;
        *) echo "usage: $0 [--long] [--phase torture|crash|all] [--clients N] [--seconds S]" \
                "[--crash-seconds S] [--crashes N] [--kills N] [--seed N] [--shared-channels N]" \
                "[--serial-seed N] [--txn-clients N]" >&2
           exit 2 ;;
    esac
    shift
done

DRIVER=test/torture/pg_lease_torture
DB=pg_lease_torture
# shellcheck source=../lib/cluster.sh
. test/lib/cluster.sh

if [ "$LONG" -eq 1 ] || [ -z "${CLUSTER_DIR:-}" ]; then
    # Our own throwaway cluster (make torture).
    bash test/lib/deps.sh || exit 1
    pg_lease_build_install "$DRIVER" || exit 1
    cluster_start || exit 1
    echo "pg_lease torture: throwaway cluster on socket $PGHOST port $PGPORT"
fi
[ -x "$DRIVER" ] || make -s PG_CONFIG="$PG_BINDIR/pg_config" WERROR=1 "$DRIVER" || exit 1

# Drops and creates the driver's database with the extension.
fresh_db() {
    "$PG_BINDIR/psql" -X -q -d postgres -c "SET client_min_messages = warning" \
        -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB" || return 1
    "$PG_BINDIR/psql" -X -q -d "$DB" -v ON_ERROR_STOP=1 -c "CREATE EXTENSION pg_lease" || return 1
}

seed_args=(--shared-channels "$SHARED" --txn-clients "$TXN")
[ -n "$SEED" ] && seed_args+=(--seed "$SEED")

# The torture phase: the serial replay on the shared channels, then every
# function from N clients, kills included.
phase_torture() {
    local status=0
    if [ "$SHARED" -gt 0 ]; then
        echo "== serial replay: $SERIAL_STEPS shared-channel calls of 3 clients, seed $SERIAL_SEED"
        fresh_db || return 1
        "$DRIVER" --dbname "$DB" --clients 3 --shared-channels 3 --serial "$SERIAL_STEPS" \
            --seed "$SERIAL_SEED" || status=1
    fi
    echo "== torture: $CLIENTS clients ($SHARED on shared channels), $TORTURE_SECONDS s, $KILLS kills"
    fresh_db || return 1
    "$DRIVER" --dbname "$DB" --clients "$CLIENTS" --seconds "$TORTURE_SECONDS" --kills "$KILLS" \
        "${seed_args[@]}" || status=1
    [ "$TXN" -gt 0 ] && { omit_hold_control || status=1; }
    return "$status"
}

# The negative control: transactional clients without hold_lease (and
# committing a refused checkpoint) must make the exactly-once check find
# duplicates; a passing check would prove nothing.
omit_hold_control() {
    local out
    echo "== negative control: $TXN transactional clients without hold_lease, 4 s: must find duplicates"
    fresh_db || return 1
    out=$("$DRIVER" --dbname "$DB" --clients 1 --shared-channels 0 --txn-clients "$TXN" --omit-hold \
        --seconds 4 ${SEED:+--seed "$SEED"} 2>&1)
    if grep -qE '^  FAILED +transactional clients' <<<"$out" &&
        grep -qE 'exactly once: .* [1-9][0-9]* duplicates' <<<"$out"; then
        grep -m 2 'exactly once:' <<<"$out"
        echo "== negative control: the check found the duplicates (as it must)"
        return 0
    fi
    echo "$out" | tail -n 30
    echo "== negative control FAILED: without hold_lease the exactly-once check found no duplicates"
    return 1
}

# The crash phase: immediate stops of the whole server under the load.
phase_crash() {
    local pid i status
    echo "== crash recovery: $CLIENTS clients ($SHARED on shared channels), $CRASH_SECONDS s, $CRASHES immediate stops"
    fresh_db || return 1
    "$DRIVER" --dbname "$DB" --clients "$CLIENTS" --seconds "$CRASH_SECONDS" --expect-crash \
        "${seed_args[@]}" &
    pid=$!
    for ((i = 1; i <= CRASHES; i++)); do
        sleep "$(awk -v s="$CRASH_SECONDS" -v n="$CRASHES" 'BEGIN { printf "%.1f", s / (n + 1) - 0.5 }')"
        echo "== crash $i: pg_ctl stop -m immediate"
        cluster_as_owner "$PG_BINDIR/pg_ctl" -D "$CLUSTER_DIR/data" -m immediate stop >/dev/null || {
            kill "$pid" 2>/dev/null
            return 1
        }
        sleep 0.5
        cluster_as_owner "$PG_BINDIR/pg_ctl" -D "$CLUSTER_DIR/data" -l "$CLUSTER_DIR/server.log" \
            -w -t 120 start >/dev/null || {
            tail -n 30 "$CLUSTER_DIR/server.log" >&2
            kill "$pid" 2>/dev/null
            return 1
        }
        echo "== crash $i: restarted"
    done
    wait "$pid"
    status=$?
    return "$status"
}

failed=0
if [ "$PHASE" = all ] || [ "$PHASE" = torture ]; then
    phase_torture || failed=1
fi
if [ "$PHASE" = all ] || [ "$PHASE" = crash ]; then
    phase_crash || failed=1
fi
if [ "$failed" -eq 0 ]; then
    echo "pg_lease torture: passed"
else
    echo "pg_lease torture: FAILED (reproduce with the printed --seed)"
fi
exit "$failed"
