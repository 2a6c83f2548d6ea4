#!/usr/bin/env bash
# The router's cost and the failover write gaps (docs/scale-out.md,
# "Numbers"), side by side in one run on one test/scale/cluster.sh cluster:
#   1. update_checkpoint and renew_leases with pgbench, through the
#      pg_lease_router router and directly against the partition that owns
#      the stream;
#   2. the make scale fleet (test/demo/pg_lease_demo --router) through the router
#      while partition 0 does a planned switchover and partition 1's primary
#      is SIGKILLed: the longest gap between acknowledged checkpoints on
#      each partition.
# Prints markdown tables.  test/bench/run.sh (make bench) calls it.
#   bench.sh [SECONDS]   seconds per pgbench measurement (default 10)
set -uo pipefail
cd "$(dirname "$0")/../.."
SECS=${1:-10}
bash test/lib/deps.sh build test scale || exit 1
# shellcheck source=../lib/cluster.sh
. test/lib/cluster.sh
pg_lease_build_install scale-client || exit 1
DIR=$(mktemp -d -u /tmp/pg_lease_scale_bench.XXXXXX)
WORK=$(mktemp -d /tmp/pg_lease_scale_bench_w.XXXXXX)
FLEET_PID=
trap '[ -n "$FLEET_PID" ] && kill "$FLEET_PID" 2>/dev/null; bash test/scale/cluster.sh down "$DIR" >/dev/null; rm -rf "$WORK"' EXIT
eval "$(PG_BINDIR="$PG_BINDIR" bash test/scale/cluster.sh up "$DIR")" || exit 1
psql() { "$PG_BINDIR/psql" -X -q -At -v ON_ERROR_STOP=1 "$@"; }
part=$(psql "$PG_LEASE_ROUTER_DSN" -c "SELECT lease_router.stream_partition('bench', 'b') & 1")
direct=$(echo "$PG_LEASE_PARTITION_DSNS" | cut -d' ' -f$((part + 1)))
psql "$PG_LEASE_ROUTER_DSN" -c "SELECT lease.create_lease('bench', 'b', 'shard-1')" \
    -c "SELECT lease.take_lease('bench', 'b', 'shard-1', 'bench-worker', NULL, '1 hour')" >/dev/null || exit 1
echo "SELECT lease.update_checkpoint('bench', 'b', 'shard-1', 'bench-worker', (random() * 1e9)::bigint::text);" >"$WORK/ckpt.sql"
echo "SELECT * FROM lease.renew_leases('bench', 'b', 'bench-worker', '1 hour');" >"$WORK/renew.sql"
tps() {
    "$PG_BINDIR/pgbench" -n -c 1 -T "$SECS" -f "$WORK/$2.sql" "$1" 2>&1 |
        sed -nE 's/^tps = ([0-9.]+) .*/\1/p' | head -n 1
}
echo "| call | direct to the partition (tps) | through the router (tps) | router / direct |"
echo "|---|---|---|---|"
for f in ckpt renew; do
    d=$(tps "$direct" $f)
    r=$(tps "$PG_LEASE_ROUTER_DSN" $f)
    name=$([ $f = ckpt ] && echo update_checkpoint || echo renew_leases)
    printf '| %s | %.0f | %.0f | %.2f |\n' "$name" "$d" "$r" "$(echo "scale=4; $r / $d" | bc)"
done
echo
echo "(1 client, $SECS s each, synchronous standby, fsync off; $(nproc) cores shared with other work)"

# 2. Write gaps: the fleet through the router, a switchover of partition 0
# at 6 s, a SIGKILL of partition 1's primary at 16 s, its rejoin.
mkdir -p "$WORK/fleet"
test/demo/pg_lease_demo --router --dsn "$PG_LEASE_ROUTER_DSN" --duration 32 --shards 12 --quiet \
    --history "$WORK/fleet" >"$WORK/fleet.report" 2>&1 &
FLEET_PID=$!
sleep 6
s0=$(date +%s.%N)
PG_BINDIR="$PG_BINDIR" bash test/scale/cluster.sh switchover "$DIR" 0 >/dev/null 2>&1
sw=$(echo "$(date +%s.%N) - $s0" | bc)
sleep 8
PG_BINDIR="$PG_BINDIR" bash test/scale/cluster.sh kill "$DIR" 1 >/dev/null 2>&1
killed=$(cat "$DIR/killed.1")
# rejoin once another node is partition 1's writable primary (as run.sh)
for i in $(seq 1 240); do
    bash test/scale/cluster.sh status "$DIR" | grep -E '^partition 1 ' |
        awk -v k="$killed" '$3 != k && $6 == $8 && ($6 == "wait_primary" || $6 == "primary")' | grep -q . && break
    sleep 0.25
done
sleep 2
PG_BINDIR="$PG_BINDIR" bash test/scale/cluster.sh rejoin "$DIR" 1 >/dev/null 2>&1
wait "$FLEET_PID"
fleet_status=$?
FLEET_PID=
gap() { sed -nE "s/^partition $1 .*longest write gap ([0-9.]+) s.*/\1/p" "$WORK/fleet.report"; }
echo
echo "| event (the demo fleet through the router: 4 consumers + 1 joining, 2 rotators, turns) | longest gap between acknowledged checkpoints |"
echo "|---|---|"
echo "| planned switchover, partition 0 (\`pg_autoctl perform switchover\` took $(printf '%.1f' "$sw") s) | $(gap 0) s |"
echo "| SIGKILL of partition 1's primary process tree, standby promoted | $(gap 1) s |"
echo
echo "(test-tuned monitor timings, docs/scale-out.md \"The test cluster\"; the fleet's checker: $(grep -E '^(acknowledged checkpoints lost|double owners):' "$WORK/fleet.report" | tr '\n' ';' | sed 's/;$//; s/;/, /'))"
[ "$fleet_status" -eq 0 ] || { echo "bench.sh: the fleet reported a violation:" >&2; cat "$WORK/fleet.report" >&2; exit 1; }
