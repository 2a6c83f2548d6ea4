#!/usr/bin/env bash
# make scale (docs/scale-out.md): the demo's consumer fleet and chat side
# (test/demo/pg_lease_demo --router: only public functions and views, the
# client rules, a history of what the server acknowledged and a checker
# over it) runs through two pg_lease_router routers over two
# pg_auto_failover partitions (test/scale/cluster.sh), its processes spread
# over the routers (one libpq multi-host string, each process starting at
# another router: demo --spread-hosts), while
#   1. partition 0 does a planned switchover,
#   1b. router 0 is killed (SIGKILL of its postmaster and every backend under
#      it): its clients' reconnects (libpq tries the next host) take them to
#      router 1; the checker reports how long after the kill each was back,
#   2. partition 1's primary is killed with SIGKILL (pg_autoctl and its
#      Postgres, the whole process tree) and a standby takes over,
#   3. the killed node rejoins as a standby;
# then reports per partition the longest write gap, errors by SQLSTATE,
# acknowledged checkpoints lost, double owners, channels left unbound, the
# leases taken early by fast failover (session_ended) and each formation's
# final state.  Workers 1, 3 and 5 run in the fast-failover mode (demo
# --fast-failover: renew_every 1 s, docs/client-rules.md rule 6), 2 and 4
# do not.  Exit status 1 on any violation: a lost acknowledged checkpoint,
# two owners at once, an unbound channel, a lease taken as session_ended
# from any worker but the killed worker-1 or before it was killed (the
# switchover and the primary's kill end every session, and there the lease
# duration rules), none taken so (the mode was not exercised), or a
# formation that is not a primary and two secondaries again (and any invariant
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
    FLEET_SECONDS=32 SWITCH_AT=6 ROUTER_KILL_AT=10 KILL_AT=14
else
    FLEET_SECONDS=75 SWITCH_AT=15 ROUTER_KILL_AT=25 KILL_AT=35
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

env=$(PG_BINDIR="$PG_BINDIR" bash test/scale/cluster.sh up "$DIR" 2) || { echo "scale: cluster up failed"; exit 1; }
eval "$env"
echo "scale: cluster up in $(t) s (monitor, 2 x (primary + 2 standbys), 2 routers)"
echo "$env" | sed 's/^/  /'

# 12 shards per stream (the demo's smallest stream, with its split and
# merge), one stream and one tenant per partition; worker-1 is killed at
# 35 % and worker-5 joins at 55 % of the run, as in make demo.  Workers 1,
# 3 and 5 declare renew_every (fast failover), 2 and 4 keep the lease
# duration alone.
# The processes are spread over the two routers: main, worker-2, worker-4,
# rotator-1 and the turns start at router 0, the others at router 1.
test/demo/pg_lease_demo --router --dsn "$PG_LEASE_ROUTERS_DSN" --spread-hosts --duration "$FLEET_SECONDS" \
    --shards 12 --quiet --history "$OUT/history" --fast-failover 1000 --fast-failover-workers 1,3,5 \
    >"$OUT/report" 2>&1 &
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

at "$ROUTER_KILL_AT"
echo "scale: [$(t) s] SIGKILL of router 0"
# the kill's time on the demo's clock (CLOCK_MONOTONIC), for its checker
router_port=$(. "$DIR/cluster.env" && echo "$ROUTER_PORT_0")
echo "router_killed $(python3 -c 'import time; print("%.1f" % (time.clock_gettime(time.CLOCK_MONOTONIC) * 1000))') $router_port" \
    >"$OUT/history/faults"
bash test/scale/cluster.sh kill-router "$DIR" 0 || failed=1

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
echo "scale: [$(t) s] partition 1 is a primary and two secondaries again"

wait "$FLEET_PID"
fleet_status=$?
FLEET_PID=
echo "scale: [$(t) s] fleet done"
echo "== report"
cat "$OUT/report"
echo "the errors the clients saw, most frequent first:"
grep -h '^error ' "$OUT"/history/*.log | cut -d' ' -f3- | sed -E 's/[0-9]+/N/g' | sort | uniq -c | sort -rn | head -n 8 | cut -c1-200
[ "$fleet_status" -eq 0 ] || failed=1

# Fast failover never hands a lease out early because of a failover: on
# each partition's primary, every lease taken as session_ended was the
# killed worker-1's, taken after it was killed (the demo kills it at 35 %
# of its run, which starts after fleet0); the switchover and the primary's
# kill end every worker's session, but in another server incarnation, where
# the lease duration rules.  And the mode was exercised: worker-1's leases
# were taken so on at least one partition.
killed_after=$(echo "$fleet0 + 0.35 * $FLEET_SECONDS" | bc)
early_total=0
read -r -a partition_dsns <<<"$PG_LEASE_PARTITION_DSNS"
for k in "${!partition_dsns[@]}"; do
    row=$("$PG_BINDIR/psql" -X -q -At -F ' ' -v ON_ERROR_STOP=1 -d "${partition_dsns[$k]}" -c "
        SELECT count(*) FILTER (WHERE event = 'session_ended'),
               count(*) FILTER (WHERE event = 'session_ended'
                                  AND (from_owner IS DISTINCT FROM 'worker-1'
                                       OR occurred_at < pg_catalog.to_timestamp($killed_after))),
               count(*) FILTER (WHERE event = 'expiry_takeover' AND from_owner = 'worker-1'),
               count(*) FILTER (WHERE event = 'expiry_takeover' AND from_owner IS DISTINCT FROM 'worker-1')
          FROM lease.lease_events") || { echo "scale: partition $k: lease.lease_events unreadable"; failed=1; continue; }
    read -r ended bad w1_expired other_expired <<<"$row"
    echo "partition $k: leases taken as session_ended $ended (all worker-1's after its kill: $([ "$bad" -eq 0 ] && echo yes || echo "NO, $bad not")), expiry takeovers of worker-1's $w1_expired, of others' $other_expired"
    [ "$bad" -eq 0 ] || failed=1
    early_total=$((early_total + ended))
done
if [ "$early_total" -eq 0 ]; then
    echo "scale: no lease was taken as session_ended: fast failover was not exercised"
    failed=1
fi
echo "final formation states:"
for k in 0 1; do
    PG_BINDIR="$PG_BINDIR" bash test/scale/cluster.sh wait "$DIR" "$k" 30 >/dev/null 2>&1 || {
        echo "  partition $k is NOT a primary and two secondaries"; failed=1; }
done
bash test/scale/cluster.sh status "$DIR" | sed 's/^/  /'
# On a failure, what the monitor did meanwhile: a primary that went to
# wait_primary (its standby judged unhealthy) acknowledged commits alone,
# which a failover then loses (docs/scale-out.md, "Does not hold").
if [ "$failed" -ne 0 ]; then
    echo "the monitor's events since the fleet started:"
    bash test/scale/cluster.sh events "$DIR" "$fleet0" | sed 's/^/  /'
fi
echo "scale: $(t) s in all"
[ "$failed" -eq 0 ] && echo "scale: ok" || echo "scale: FAILED"
exit "$failed"
