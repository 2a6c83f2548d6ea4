#!/usr/bin/env bash
# make scale (docs/scale-out.md): the demo's consumer fleet and chat side
# (test/demo/pg_lease_demo --router: only public functions and views, the
# client rules, a history of what the server acknowledged and a checker
# over it) runs through the pg_lease_router router over two
# pg_auto_failover partitions (test/scale/cluster.sh) while
#   1. partition 0 does a planned switchover,
#   2. partition 1's primary is killed with SIGKILL (pg_autoctl and its
#      Postgres, the whole process tree) and its standby takes over,
#   3. the killed node rejoins as a standby;
# then reports per partition the longest write gap, errors by SQLSTATE,
# acknowledged checkpoints lost, double owners, channels left unbound and
# each formation's final state.  Exit status 1 on any violation: a lost
# acknowledged checkpoint, two owners at once, an unbound channel, or a
# formation that is not a primary and a secondary again (and any invariant
# of the demo's own report that holds through failovers).
#
#   run.sh [--short] [--keep]   --short: the shorter run make test does;
#                               --keep: leave the cluster up (prints its DIR)
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
short=0
keep=0
for a in "$@"; do
    case $a in
        --short) short=1 ;;
        --keep) keep=1 ;;
        *) echo "run.sh: unknown argument $a" >&2; exit 2 ;;
    esac
done
if [ "$short" -eq 1 ]; then
    FLEET_SECONDS=32 SWITCH_AT=6 KILL_AT=14
else
    FLEET_SECONDS=75 SWITCH_AT=15 KILL_AT=35
fi

bash test/lib/deps.sh build test scale || exit 1
# shellcheck source=../lib/cluster.sh
. test/lib/cluster.sh
pg_lease_build_install scale-client || exit 1

DIR=$(mktemp -d -u /tmp/pg_lease_scale.XXXXXX)
OUT=$(mktemp -d /tmp/pg_lease_scale_out.XXXXXX)
cleanup() {
    [ -n "${FLEET_PID:-}" ] && kill "$FLEET_PID" 2>/dev/null
    if [ "$keep" -eq 1 ]; then
        echo "scale: cluster left up in $DIR (test/scale/cluster.sh down $DIR)"
    else
        bash test/scale/cluster.sh down "$DIR"
    fi
    rm -rf "$OUT"
}
trap cleanup EXIT
started=$(date +%s)
t() { echo "$(( $(date +%s) - started ))"; }

env=$(PG_BINDIR="$PG_BINDIR" bash test/scale/cluster.sh up "$DIR") || { echo "scale: cluster up failed"; exit 1; }
eval "$env"
echo "scale: cluster up in $(t) s (monitor, 2 x (primary + standby), router)"
echo "$env" | sed 's/^/  /'

# 12 shards per stream (the demo's smallest stream, with its split and
# merge), one stream and one tenant per partition; worker-1 is killed at
# 35 % and worker-5 joins at 55 % of the run, as in make demo.
test/demo/pg_lease_demo --router --dsn "$PG_LEASE_ROUTER_DSN" --duration "$FLEET_SECONDS" \
    --shards 12 --quiet --history "$OUT/history" >"$OUT/report" 2>&1 &
FLEET_PID=$!
fleet0=$(date +%s)
at() { local s=$(( $1 - ($(date +%s) - fleet0) )); [ "$s" -gt 0 ] && sleep "$s"; }

failed=0
at "$SWITCH_AT"
echo "scale: [$(t) s] switchover of partition 0"
s0=$(date +%s.%N)
PG_BINDIR="$PG_BINDIR" bash test/scale/cluster.sh switchover "$DIR" 0 || failed=1
echo "scale: [$(t) s] switchover done in $(echo "$(date +%s.%N) - $s0" | bc | cut -c1-4) s"
bash test/scale/cluster.sh status "$DIR" | sed 's/^/  /'

at "$KILL_AT"
echo "scale: [$(t) s] SIGKILL of partition 1's primary"
s1=$(date +%s.%N)
PG_BINDIR="$PG_BINDIR" bash test/scale/cluster.sh kill "$DIR" 1 || failed=1
killed=$(cat "$DIR/killed.1")
# the standby takes over: wait until another node than the killed one is a
# writable primary on partition 1
promoted=
for i in $(seq 1 240); do
    if bash test/scale/cluster.sh status "$DIR" | grep -E '^partition 1 ' |
        awk -v k="$killed" '$3 != k && $6 == $8 && ($6 == "wait_primary" || $6 == "primary")' | grep -q .; then
        promoted=yes
        break
    fi
    sleep 0.25
done
[ -n "$promoted" ] || { echo "scale: partition 1 was not failed over"; failed=1; }
echo "scale: [$(t) s] partition 1 failed over in $(echo "$(date +%s.%N) - $s1" | bc | cut -c1-4) s"
sleep 2
echo "scale: [$(t) s] the killed node rejoins"
PG_BINDIR="$PG_BINDIR" bash test/scale/cluster.sh rejoin "$DIR" 1 || failed=1
PG_BINDIR="$PG_BINDIR" bash test/scale/cluster.sh wait "$DIR" 1 90 || failed=1
echo "scale: [$(t) s] partition 1 is a primary and a secondary again"

wait "$FLEET_PID"
fleet_status=$?
FLEET_PID=
echo "scale: [$(t) s] fleet done"
echo "== report"
cat "$OUT/report"
echo "the errors the clients saw, most frequent first:"
grep -h '^error ' "$OUT"/history/*.log | cut -d' ' -f3- | sed -E 's/[0-9]+/N/g' | sort | uniq -c | sort -rn | head -n 8 | cut -c1-200
[ "$fleet_status" -eq 0 ] || failed=1
echo "final formation states:"
for k in 0 1; do
    PG_BINDIR="$PG_BINDIR" bash test/scale/cluster.sh wait "$DIR" "$k" 30 >/dev/null 2>&1 || {
        echo "  partition $k is NOT a primary and a secondary"; failed=1; }
done
bash test/scale/cluster.sh status "$DIR" | sed 's/^/  /'
echo "scale: $(t) s in all"
[ "$failed" -eq 0 ] && echo "scale: ok" || echo "scale: FAILED"
exit "$failed"
