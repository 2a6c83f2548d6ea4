#!/usr/bin/env bash
# The router's cost (docs/scale-out.md, "Numbers"): update_checkpoint and
# renew_leases with pgbench, through the pg_lease_router router and directly
# against the partition that owns the stream, side by side in one run on a
# test/scale/cluster.sh cluster.  Prints a markdown table.
#   bench.sh [SECONDS]   seconds per measurement (default 10)
set -uo pipefail
cd "$(dirname "$0")/../.."
SECS=${1:-10}
bash test/lib/deps.sh build test scale || exit 1
# shellcheck source=../lib/cluster.sh
. test/lib/cluster.sh
pg_lease_build_install || exit 1
DIR=$(mktemp -d -u /tmp/pg_lease_scale_bench.XXXXXX)
WORK=$(mktemp -d /tmp/pg_lease_scale_bench_w.XXXXXX)
trap 'bash test/scale/cluster.sh down "$DIR"; rm -rf "$WORK"' EXIT
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
    echo "| $name | $d | $r | $(echo "scale=2; $r / $d" | bc) |"
done
echo
echo "(1 client, $SECS s each, synchronous standby, fsync off; $(nproc) cores shared with other work)"
