#!/usr/bin/env bash
# The clients-router suite (make test, PG_LEASE_SUITES=clients-router): the
# Python and Node workers through the router (pg_lease_router, PL/Proxy)
# over two pg_auto_failover partitions (test/scale/cluster.sh, its own
# cluster) while the partition holding their stream fails over:
#
#   py-1 py-2 node-1 node-2 start on one stream (3 s leases);
#   at 4 s the partition's primary is SIGKILLed (its whole process tree):
#     calls through the router fail with PL/Proxy's XX000 until the standby
#     is promoted (docs/client-rules.md, "Through the router");
#   at 6 s node-1 is SIGKILLed;
#   once the standby is primary, the killed node rejoins as a standby;
#   py-3 and node-3 join; the fleet stops once the shares are fair;
# then test/clients/check.py --failover over what the workers recorded (no
# acknowledged checkpoint lost, no two owners, nothing processed twice but a
# killed worker's or a lost lease's unacknowledged tail, ...), and that the
# workers did see PL/Proxy's lost connection and carried on.  Prints TAP;
# exits non-zero on any failure.  About 60 s.
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
NODE=/usr/bin/node
PG_BINDIR=${PG_BINDIR:-/usr/lib/postgresql/15/bin}
PSQL="$PG_BINDIR/psql"
LEASE_SECONDS=3

# shellcheck source=test/lib/tap.sh
. test/lib/tap.sh

bash test/lib/deps.sh clients scale || { ok 1 "install the clients' and the router's Debian packages"; echo "1..$n"; exit 1; }
(cd clients/node && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
ok $? "npm ci installs node-postgres from clients/node/package-lock.json" || true
[ -d clients/node/node_modules/pg ] || { echo "1..$n"; exit 1; }

DIR=$(mktemp -d -u /tmp/pg_lease_clients_router.XXXXXX)
OUT=$(mktemp -d /tmp/pg_lease_clients_router_out.XXXXXX)
chmod 755 "$OUT"
cleanup() {
    for p in $(jobs -p); do kill -9 "$p" 2>/dev/null; done
    PG_BINDIR="$PG_BINDIR" bash test/scale/cluster.sh down "$DIR"
    if [ -n "${CLIENTS_ROUTER_KEEP:-}" ]; then echo "# kept $OUT"; else rm -rf "$OUT"; fi
}
trap cleanup EXIT
started=$SECONDS

env=$(PG_BINDIR="$PG_BINDIR" bash test/scale/cluster.sh up "$DIR")
ok $? "test/scale/cluster.sh up: a router over two partitions of a primary and a standby ($((SECONDS - started)) s)" ||
    { echo "1..$n"; exit 1; }
eval "$env"
read -r -a PARTITIONS <<<"$PG_LEASE_PARTITION_DSNS"
router_port=$(sed -E 's/.*port=([0-9]+).*/\1/' <<<"$PG_LEASE_ROUTER_DSN")
router_sql() { "$PSQL" -X -q -At -v ON_ERROR_STOP=1 "$PG_LEASE_ROUTER_DSN" "$@"; }

# The worker role on the router and on every partition (roles are per
# cluster), per docs/scale-out.md: EXECUTE on what the worker calls there,
# USAGE on the router's foreign server; grant_app once through the router.
FUNCS="lease.update_checkpoint(text, text, text, text, text, bigint, bigint),
       lease.release_lease(text, text, text, text),
       lease.close_shard(text, text, text, text),
       lease.take_leases(text, text, text, interval, integer, integer, double precision, interval),
       lease.renew_leases(text, text, text, interval, interval),
       lease.my_leases(text, text, text)"
setup=0
for dsn in "${PARTITIONS[@]}" "$PG_LEASE_ROUTER_DSN"; do
    "$PSQL" -X -q -v ON_ERROR_STOP=1 "$dsn" >/dev/null <<SQL || setup=1
CREATE ROLE clients_worker LOGIN;
GRANT USAGE ON SCHEMA lease TO clients_worker;
GRANT EXECUTE ON FUNCTION $FUNCS TO clients_worker;
SQL
done
router_sql -c "GRANT USAGE ON FOREIGN SERVER pg_lease TO clients_worker" \
    -c "SELECT lease.grant_app('clients', 'clients_worker')" >/dev/null || setup=1
# the leases of docs' fleet (test/clients/run.sh), created through the router
router_sql >/dev/null <<'SQL' || setup=1
SELECT lease.create_lease('clients', 'orders', pg_catalog.format('s%s', pg_catalog.lpad(i::text, 2, '0')))
  FROM pg_catalog.generate_series(1, 13) AS i;
SELECT lease.create_lease('clients', 'orders', 'p-end40');
SELECT lease.create_lease('clients', 'orders', 'q-end60');
SELECT lease.create_lease('clients', 'orders', 'c1', '{p-end40}');
SELECT lease.create_lease('clients', 'orders', 'c2', '{p-end40}');
SQL
# the partition of the stream (PL/Proxy: the hash's low bits, 2 partitions)
K=$(router_sql -c "SELECT lease_router.stream_partition('clients', 'orders') & 1")
PART_DSN=${PARTITIONS[$K]}
[ "$setup" -eq 0 ] && [ "$("$PSQL" -X -qAt "$PART_DSN" -c \
    "SELECT count(*) FROM lease.shard_leases WHERE app_name = 'clients' AND stream_name = 'orders'")" = 17 ]
ok $? "the worker role on the router and both partitions; 17 leases through the router, on partition $K" ||
    { echo "1..$n"; exit 1; }

WORKER_DSN="postgresql:///pg_lease?host=$DIR&port=$router_port&user=clients_worker"
# shellcheck source=test/clients/fleet.sh
. test/clients/fleet.sh

echo "# fleet through the router: py-1 py-2 node-1 node-2; partition $K's primary killed at 4 s, node-1 at 6 s;" \
     "the node rejoins once the standby is primary; py-3 and node-3 join then"
t0=$SECONDS
for w in py-1 py-2 node-1 node-2; do start_worker $w; done
sleep 4
PG_BINDIR="$PG_BINDIR" bash test/scale/cluster.sh kill "$DIR" "$K" | sed 's/^/# /'
killed=$(cat "$DIR/killed.$K")
echo "# $((SECONDS - t0)) s: partition $K's primary ($killed) killed"
sleep 2
kill -KILL "${PIDS[node-1]}"; wait "${PIDS[node-1]}" 2>/dev/null
echo "# $((SECONDS - t0)) s: node-1 killed"
promoted=1
for _ in $(seq 1 160); do
    if bash test/scale/cluster.sh status "$DIR" | grep -E "^partition $K " |
        awk -v k="$killed" '$3 != k && $6 == $8 && ($6 == "wait_primary" || $6 == "primary")' | grep -q .; then
        promoted=0
        break
    fi
    sleep 0.25
done
echo "# $((SECONDS - t0)) s: the standby is primary"
ok $promoted "partition $K failed over to its standby while the workers ran"
PG_BINDIR="$PG_BINDIR" bash test/scale/cluster.sh rejoin "$DIR" "$K"
start_worker py-3
start_worker node-3
echo "# $((SECONDS - t0)) s: $killed rejoins; py-3 and node-3 joined"
LIVE="node-2 node-3 py-1 py-2 py-3"
sleep 8
settle_and_stop 24 "$PART_DSN"
[ "$stopped" -eq 5 ]
ok $? "the five live workers stopped gracefully on SIGTERM (none raised PL/Proxy's XX000)"

# The workers met the failover as PL/Proxy's XX000 and handled it as an
# ambiguous call (repeated, then left to the next tick and the local deadline).
seen=$(grep -h -o '"error": *"[^"]*PL/Proxy function[^"]*' "$OUT"/*.journal | wc -l)
grep -h -o '"error": *"[^"]*' "$OUT"/*.journal | sed -E 's/"error": *"//; s/[0-9]+/N/g' | cut -c1-150 |
    sort | uniq -c | sort -rn | head -n 6 | sed 's/^/#   /'
[ "$seen" -gt 0 ]
ok $? "the workers saw the partition's lost connection as PL/Proxy's XX000 ($seen failed calls named it) and carried on"

$PY test/clients/check.py "$OUT" "$PART_DSN" --killed node-1 --joined py-3,node-3 --failover
ok $? "fleet invariants through the router during the failover (test/clients/check.py --failover)"

# The allowances of --failover do not hide a violation: the same history with
# an acknowledged record processed again by a live worker, a refused
# checkpoint, and a processor started behind an acknowledged checkpoint
# overlapping another owner's span (test/clients/tamper.py).
mkdir "$OUT/tampered" && cp "$OUT"/*.journal "$OUT"/*.records "$OUT/fairness" "$OUT/tampered/" &&
    $PY test/clients/tamper.py "$OUT/tampered"
verdict=$($PY test/clients/check.py "$OUT/tampered" "$PART_DSN" --killed node-1 --joined py-3,node-3 --failover 2>&1)
status=$?
[ "$status" -eq 1 ] && grep -q 'FAIL nothing processed twice' <<<"$verdict" &&
    grep -q 'FAIL no checkpoint refused' <<<"$verdict" && grep -q 'FAIL no two owners at once' <<<"$verdict" &&
    grep -q 'FAIL no acknowledged checkpoint lost' <<<"$verdict"
ok $? "check.py --failover rejects a repeat of an acknowledged record, a refused checkpoint, a lost checkpoint, two owners"

PG_BINDIR="$PG_BINDIR" bash test/scale/cluster.sh wait "$DIR" "$K" 60 >/dev/null
ok $? "partition $K is a primary and a secondary again"
echo "# $((SECONDS - started)) s in all"
echo "1..$n"
[ "$fails" -eq 0 ]
