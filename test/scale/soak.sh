#!/usr/bin/env bash
# make soak MINUTES=N (docs/scale-out.md, "Soak"): the make scale fleet
# (test/demo/pg_lease_demo --router --history: consumers, rotators and
# turns, the client rules, a history of what each client was told) runs
# through two routers over two 3-node pg_auto_failover partitions
# (test/scale/cluster.sh) for N minutes while a nemesis fires faults at the
# coordinator at random intervals, seeded (the seed is printed), in rounds
# that each fire every fault type once in a shuffled order:
#   switchover       planned switchover of a partition
#   kill-primary     SIGKILL of a primary's node (pg_autoctl and its
#                    Postgres); the monitor fails over; the node rejoins
#   kill-standby     SIGKILL of a standby's node; it restarts and rejoins
#   pause-primary    SIGSTOP of every process of a primary's node for
#                    longer than the lease duration, then SIGCONT
#   pause-monitor    SIGSTOP of the monitor for longer than the lease
#                    duration, then SIGCONT
#   partition-stop   all three nodes of a partition stopped for longer
#                    than the lease duration, then started
#   kill-router      SIGKILL of a router (its clients move to the other
#                    router), then it is started again
# After each fault the nemesis waits until both partitions are a primary
# and two secondaries again, with synchronous_standby_names ANY 1 (...).
# Then test/scale/soak_check.py judges what the clients were told
# (acknowledged checkpoints, ownership intervals from take and renew
# acknowledgements with the clients' local deadlines) per fault: lost
# acknowledged checkpoints, overlapping owners, and ownership changes in
# the fault's window (a live holder's lease that went to another worker).
# Exit status 1 on any lost acknowledged checkpoint or overlap, on a fault
# that did not heal, on the demo's own checker failing, or (with --expect
# reshuffle) when no fault caused an ownership change.
#
#   soak.sh [--minutes N] [--seed S] [--faults F,F...] [--grace on|off]
#           [--once] [--fleet-seconds S] [--expect quiet|reshuffle] [--keep]
#     --minutes N     the fleet's run (default $MINUTES or 10)
#     --fleet-seconds S  the same in seconds (overrides --minutes)
#     --faults        which faults (default all seven)
#     --grace off     lease.restart_grace = off on every partition node
#                     (ALTER SYSTEM): the negative control
#     --once          one round: each fault once, then the fleet ends 20 s
#                     later (the fleet's length is then only its longest)
#     --expect        quiet (default): nothing more; reshuffle: at least one
#                     fault must show ownership changes (the control)
#     --keep          leave the cluster up
#     --out DIR       keep the histories, the nemesis's record and the
#                     reports in DIR (test/scale/soak_check.py can judge
#                     them again)
set -uo pipefail
cd "$(dirname "$0")/../.."
MINUTES=${MINUTES:-10}
seed=$(( $(date +%s) % 100000 ))
faults="switchover kill-primary kill-standby pause-primary pause-monitor partition-stop kill-router"
grace=on
once=0
keep=0
expect=quiet
fleet_seconds=
out_dir=
while [ $# -gt 0 ]; do
    case $1 in
        --minutes) MINUTES=$2; shift ;;
        --fleet-seconds) fleet_seconds=$2; shift ;;
        --seed) seed=$2; shift ;;
        --faults) faults=$(echo "$2" | tr ',' ' '); shift ;;
        --grace) grace=$2; shift ;;
        --once) once=1 ;;
        --expect) expect=$2; shift ;;
        --keep) keep=1 ;;
        --out) out_dir=$2; shift ;;
        *) echo "soak.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
for f in $faults; do
    case $f in switchover|kill-primary|kill-standby|pause-primary|pause-monitor|partition-stop|kill-router) ;;
        *) echo "soak.sh: unknown fault $f" >&2; exit 2 ;; esac
done
case $grace in on|off) ;; *) echo "soak.sh: --grace on|off" >&2; exit 2 ;; esac
case $expect in quiet|reshuffle) ;; *) echo "soak.sh: --expect quiet|reshuffle" >&2; exit 2 ;; esac
FLEET_SECONDS=${fleet_seconds:-$((MINUTES * 60))}
LEASE_MS=3000             # the demo's lease duration
PAUSE_S=5                 # a pause, longer than the lease duration
STOP_S=7                  # a partition stop, longer than the lease duration
# between faults a random pause of GAP_MIN..GAP_MAX s (2..5 with --once);
# no fault starts later than TAIL s before the fleet ends, so the last one
# heals while the fleet still runs
if [ "$once" -eq 1 ]; then
    GAP_MIN=${SOAK_GAP_MIN:-2} GAP_MAX=${SOAK_GAP_MAX:-5} TAIL=30
else
    GAP_MIN=${SOAK_GAP_MIN:-3} GAP_MAX=${SOAK_GAP_MAX:-12} TAIL=60
fi
RANDOM=$seed

bash test/lib/deps.sh build test scale || exit 1
# shellcheck source=../lib/cluster.sh
. test/lib/cluster.sh
pg_lease_build_install scale-client || exit 1

DIR=$(mktemp -d -u /tmp/pg_lease_soak.XXXXXX)
if [ -n "$out_dir" ]; then
    mkdir -p "$out_dir" || exit 1
    OUT=$(cd "$out_dir" && pwd)
else
    OUT=$(mktemp -d /tmp/pg_lease_soak_out.XXXXXX)
fi
C() { PG_BINDIR="$PG_BINDIR" bash test/scale/cluster.sh "$@"; }
cleanup() {
    # the demo and its worker processes (they outlive it otherwise)
    # shellcheck disable=SC2046
    [ -n "${FLEET_PID:-}" ] && kill "$FLEET_PID" $(ps -o pid= --ppid "$FLEET_PID" 2>/dev/null) 2>/dev/null
    if [ "$keep" -eq 1 ]; then
        echo "soak: cluster left up in $DIR, output in $OUT"
    else
        C down "$DIR"
        [ -n "$out_dir" ] || rm -rf "$OUT"
    fi
}
trap cleanup EXIT
started=$(date +%s)
t() { echo "$(( $(date +%s) - started ))"; }
mono() { python3 -c 'import time; print("%.1f" % (time.clock_gettime(time.CLOCK_MONOTONIC) * 1000))'; }

echo "soak: seed $seed, fleet $FLEET_SECONDS s, faults: $faults, lease.restart_grace $grace, load $(cut -d' ' -f1-3 /proc/loadavg)"
env=$(C up "$DIR" 2) || { echo "soak: cluster up failed"; exit 1; }
eval "$env"
echo "soak: cluster up in $(t) s (monitor, 2 x (primary + 2 standbys, number_sync_standbys 1), 2 routers)"
if [ "$grace" = off ]; then
    # shellcheck disable=SC1091
    . "$DIR/cluster.env"
    for k in 0 1; do
        for n in a b c; do
            port=$(eval echo "\$PORT_p$k$n")
            "$PG_BINDIR/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$DIR" -p "$port" -U postgres -d pg_lease \
                -c "LOAD 'pg_lease'" -c "ALTER SYSTEM SET lease.restart_grace = off" -c "SELECT pg_catalog.pg_reload_conf()" \
                >/dev/null || { echo "soak: p$k$n: lease.restart_grace = off failed"; exit 1; }
        done
    done
    echo "soak: lease.restart_grace = off on every partition node (the negative control)"
fi

test/demo/pg_lease_demo --router --dsn "$PG_LEASE_ROUTERS_DSN" --spread-hosts --duration "$FLEET_SECONDS" \
    --shards 12 --quiet --history "$OUT/history" --fast-failover 1000 --fast-failover-workers 1,3,5 \
    --seed "$seed" >"$OUT/report" 2>&1 &
FLEET_PID=$!
fleet0=$(date +%s)
failed=0
: >"$OUT/nemesis"

# Waits until both partitions are settled primary + 2 secondaries (asked
# twice, 2 s apart: the monitor may not have seen a fault yet) and partition
# $1's primary has synchronous_standby_names ANY 1 (...).
heal() {
    local k=$1 j
    sleep 4
    for j in 1 2; do
        C wait "$DIR" 0 240 >/dev/null 2>&1 && C wait "$DIR" 1 240 >/dev/null 2>&1 || return 1
        sleep 2
    done
    C check-sync "$DIR" "$k" 120 >/dev/null
}

# Fires fault $1 at partition $2 (router $2 for kill-router); returns when
# the fault is over (not yet healed).
fire() {
    local f=$1 k=$2 killed i
    case $f in
        switchover) C switchover "$DIR" "$k" ;;
        kill-primary)
            C kill "$DIR" "$k" || return 1
            killed=$(cat "$DIR/killed.$k")
            for i in $(seq 1 480); do
                C status "$DIR" | grep -E "^partition $k " |
                    awk -v n="$killed" '$3 != n && $6 == $8 && ($6 == "wait_primary" || $6 == "primary")' | grep -q . && break
                sleep 0.25
            done
            sleep 2
            C rejoin "$DIR" "$k" ;;
        kill-standby) C kill-standby "$DIR" "$k" || return 1; sleep 3; C rejoin "$DIR" "$k" ;;
        pause-primary) C pause "$DIR" "$k" || return 1; sleep "$PAUSE_S"; C resume "$DIR" "$k" ;;
        pause-monitor) C pause-monitor "$DIR" || return 1; sleep "$PAUSE_S"; C resume-monitor "$DIR" ;;
        partition-stop) C stop-partition "$DIR" "$k" || return 1; sleep "$STOP_S"; C start-partition "$DIR" "$k" ;;
        kill-router) C kill-router "$DIR" "$k" || return 1; sleep 2; C start-router "$DIR" "$k" ;;
    esac
}

# the fleet settles first (every worker has taken its leases and the first
# balancing is over), so what the first fault changes is the fault's
sleep 20
read -r -a pool <<<"$faults"
round=()
n=0
while :; do
    gap=$((GAP_MIN + RANDOM % (GAP_MAX - GAP_MIN + 1)))
    sleep "$gap"
    [ $(( $(date +%s) - fleet0 )) -lt $((FLEET_SECONDS - TAIL)) ] || break
    if [ "${#round[@]}" -eq 0 ]; then
        [ "$once" -eq 1 ] && [ "$n" -gt 0 ] && break
        # a new round: every fault once, shuffled (Fisher-Yates on $RANDOM)
        round=("${pool[@]}")
        for ((i = ${#round[@]} - 1; i > 0; i--)); do
            j=$((RANDOM % (i + 1)))
            tmp=${round[$i]}; round[$i]=${round[$j]}; round[$j]=$tmp
        done
    fi
    f=${round[0]}
    round=("${round[@]:1}")
    k=$((RANDOM % 2))
    n=$((n + 1))
    echo "soak: [$(t) s] fault $n: $f ($([ "$f" = kill-router ] && echo router || echo partition) $k)"
    t0=$(mono)
    status=ok
    fire "$f" "$k" >>"$OUT/nemesis.log" 2>&1 || status=fault-failed
    t1=$(mono)
    heal "$k" >>"$OUT/nemesis.log" 2>&1 || status=not-healed
    t2=$(mono)
    echo "$n $f $k $t0 $t1 $t2 $status $(date -u +%H:%M:%S)" >>"$OUT/nemesis"
    if [ "$status" != ok ]; then
        echo "soak: [$(t) s] fault $n ($f): $status"
        C status "$DIR" | sed 's/^/  /'
        tail -n 20 "$OUT/nemesis.log" | sed 's/^/  /'
        failed=1
        break
    fi
done
if [ "$once" -eq 1 ]; then
    [ "$n" -lt "${#pool[@]}" ] && { echo "soak: only $n of ${#pool[@]} faults fired before the fleet ran out"; failed=1; }
    # the round is over: the fleet ends 20 s from now (the demo's SIGUSR1)
    kill -USR1 "$FLEET_PID" 2>/dev/null
fi
echo "soak: [$(t) s] $n faults fired; waiting for the fleet"
wait "$FLEET_PID"
fleet_status=$?
FLEET_PID=
echo "== the demo's report"
cat "$OUT/report"
[ "$fleet_status" -eq 0 ] || { echo "soak: the demo's checker failed (exit $fleet_status)"; failed=1; }
echo "== per fault (test/scale/soak_check.py)"
python3 test/scale/soak_check.py --history "$OUT/history" --nemesis "$OUT/nemesis" --report "$OUT/report" \
    --lease-ms "$LEASE_MS" --expect "$expect" | tee "$OUT/table" || failed=1
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "$failed" -ne 0 ]; then
    echo "the monitor's events since the fleet started:"
    bash test/scale/cluster.sh events "$DIR" "$fleet0" | tail -n 80 | sed 's/^/  /'
    [ "$keep" -eq 1 ] || { cp -r "$OUT" "/tmp/pg_lease_soak_failed.$seed" 2>/dev/null && echo "soak: histories kept in /tmp/pg_lease_soak_failed.$seed"; }
fi
echo "soak: seed $seed, $(t) s in all"
[ "$failed" -eq 0 ] && echo "soak: ok" || echo "soak: FAILED"
exit "$failed"
