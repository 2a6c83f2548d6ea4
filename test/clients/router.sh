#!/usr/bin/env bash
# The clients-router suite (make test, PG_LEASE_SUITES=clients-router): the
# Python, Node, Elixir and Java workers through the router (pg_lease_router, PL/Proxy)
# over two pg_auto_failover partitions (test/scale/cluster.sh, its own
# cluster) while the partition holding their stream fails over:
#
#   py-1 py-2 node-1 node-2 ex-1 java-1 go-1 start on one stream (3 s leases), and
#   py-ff-1 py-ff-2 node-ff-1 ex-ff-1 java-ff-1 go-ff-1 in the fast-failover mode (ff_worker.py,
#   ff_worker.js, ff_worker.exs, the Java SuiteWorker, go_worker ff: renew_every 0.5 s, 10 s leases) on a second
#   stream of the same partition (the Elixir workers reach the router through
#   test/clients/tcp_relay.py: their driver speaks TCP only);
#   at 4 s the partition's primary is SIGKILLed (its whole process tree):
#     calls through the router fail with PL/Proxy's XX000 until the standby
#     is promoted (docs/client-rules.md, "Through the router");
#   at 6 s node-1 is SIGKILLed;
#   once the standby is primary: the fast-failover workers' router backends
#     have reconnected and recorded new sessions in the new incarnation;
#     py-ff-1 is SIGKILLed, and the partition backend recorded as its
#     session ends (its router backend exited);
#   the killed node rejoins as a standby; py-3 and node-3 join, then py-ff-3;
#   both fleets stop once the shares are fair;
# then test/clients/check.py --failover over what each fleet recorded (no
# acknowledged checkpoint lost, no two owners, nothing processed twice but a
# killed worker's or a lost lease's unacknowledged tail, ...), that the
# workers did see PL/Proxy's lost connection and carried on, that py-ff-1's
# leases were taken early (session_ended, on the partition) with the time
# until its shards were checkpointed again, and that the failover took
# nothing early (every session_ended is py-ff-1's, after its SIGKILL).
# Prints TAP; exits non-zero on any failure.  About 60 s.
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

# Partitions of a primary and ONE standby: the clients give an ambiguous
# call five tries (clients/rules.json), which outlast a 2-node failover (a
# few seconds) but not a 3-node one, where the monitor waits for both
# standbys to report before it promotes one (about 10 s without a primary
# here); the 3-node partitions run in the scale and soak suites.
env=$(PG_LEASE_SCALE_STANDBYS=1 PG_BINDIR="$PG_BINDIR" bash test/scale/cluster.sh up "$DIR")
ok $? "test/scale/cluster.sh up: a router over two partitions of a primary and a standby ($((SECONDS - started)) s)" ||
    { echo "1..$n"; exit 1; }
eval "$env"
read -r -a PARTITIONS <<<"$PG_LEASE_PARTITION_DSNS"
router_port=$(sed -E 's/.*port=([0-9]+).*/\1/' <<<"$PG_LEASE_ROUTER_DSN")
router_sql() { "$PSQL" -X -q -At -v ON_ERROR_STOP=1 "$PG_LEASE_ROUTER_DSN" "$@"; }

# The worker role on the router and on every partition (roles are per
# cluster), per docs/scale-out.md: EXECUTE on what the worker calls there,
# USAGE on the router's foreign server; grant_app once through the router.
# shellcheck source=test/clients/fleet.sh
. test/clients/fleet.sh
setup=0
for dsn in "${PARTITIONS[@]}" "$PG_LEASE_ROUTER_DSN"; do
    "$PSQL" -X -q -v ON_ERROR_STOP=1 "$dsn" >/dev/null <<SQL || setup=1
CREATE ROLE clients_worker LOGIN;
GRANT USAGE ON SCHEMA lease TO clients_worker;
GRANT EXECUTE ON FUNCTION $FLEET_WORKER_FUNCTIONS TO clients_worker;
SQL
done
router_sql -c "GRANT USAGE ON FOREIGN SERVER pg_lease TO clients_worker" \
    -c "SELECT lease.grant_app('clients', 'clients_worker')" >/dev/null || setup=1
# the leases of docs' fleet (test/clients/run.sh), created through the router
fleet_leases_sql | router_sql >/dev/null || setup=1
# the partition of the stream (PL/Proxy: the hash's low bits, 2 partitions)
K=$(router_sql -c "SELECT lease_router.stream_partition('clients', 'orders') & 1")
PART_DSN=${PARTITIONS[$K]}
part_sql() { "$PSQL" -X -qAt "$PART_DSN" -c "$1"; }
# the fast-failover workers' stream: 12 leases on the first of orders-ff1,
# orders-ff2, ... that lands on the same partition
FF_STREAM=$(router_sql -c "SELECT s FROM (SELECT 'orders-ff' || i AS s, i FROM generate_series(1, 32) AS i) AS c
                            WHERE lease_router.stream_partition('clients', s) & 1 = $K ORDER BY i LIMIT 1")
router_sql -c "SELECT lease.create_lease('clients', '$FF_STREAM', format('s%s', lpad(i::text, 2, '0')))
                 FROM generate_series(1, 12) AS i" >/dev/null || setup=1
[ "$setup" -eq 0 ] && [ "$(part_sql "SELECT count(*) FILTER (WHERE stream_name = 'orders') || ' ' ||
                                            count(*) FILTER (WHERE stream_name = '$FF_STREAM')
                                       FROM lease.shard_leases WHERE app_name = 'clients'")" = "17 12" ]
ok $? "the worker role on the router and both partitions; 17 + 12 ($FF_STREAM) leases through the router, on partition $K" ||
    { echo "1..$n"; exit 1; }

WORKER_DSN="postgresql:///pg_lease?host=$DIR&port=$router_port&user=clients_worker"
# the Elixir client, built offline, and a relay to the router's socket for it
(cd clients/elixir && MIX_HOME="$OUT/mix/home" HEX_HOME="$OUT/mix/hex" HEX_OFFLINE=1 MIX_BUILD_PATH="$OUT/mix/build" \
    mix compile --warnings-as-errors) >"$OUT/mix.log" 2>&1
ok $? "the Elixir client builds offline with Debian's elixir" || sed 's/^/#   /' "$OUT/mix.log"
EX_EBIN=$OUT/mix/build/lib/pg_lease/ebin
$PY test/clients/tcp_relay.py "$DIR/.s.PGSQL.$router_port" >"$OUT/relay.port" &
for _ in $(seq 1 50); do [ -s "$OUT/relay.port" ] && break; sleep 0.1; done
EX_DSN="postgresql://clients_worker@127.0.0.1:$(cat "$OUT/relay.port")/pg_lease"
# java-*: the Java client, built offline (its jar, the example worker, the suite's SuiteWorker)
JDK=/usr/lib/jvm/default-java
JAVA="$JDK/bin/java -XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
java_build=$(JAVA_HOME=$JDK sh clients/java/build.sh --tests 2>&1)
ok $? "the Java client builds offline from Debian's packages" || sed 's/^/#   /' <<<"$java_build"
JAR=clients/java/$(tail -n 1 <<<"$java_build")
JAVA_CP=$JAR:clients/java/build/examples
JAVA_TEST_CP=$JAR:clients/java/build/test-classes
# go-*: the Go example worker and test/clients/go_worker, built offline out
# of the tree (GOPATH mode over Debian's pgx v4, as test/clients/run.sh)
GODIR=$OUT/go
mkdir -p "$GODIR/src/github.com/pg-lease" && ln -s "$(pwd)" "$GODIR/src/github.com/pg-lease/pg_lease"
GO_WORKER=$GODIR/example_worker
GO_TEST_WORKER=$GODIR/go_worker
(cd "$GODIR/src/github.com/pg-lease/pg_lease" &&
    export GO111MODULE=off GOPATH="$GODIR:/usr/share/gocode" GOCACHE="$GODIR/cache" GOPROXY=off GOFLAGS= &&
    /usr/bin/go build -o "$GO_WORKER" ./clients/go/cmd/example_worker &&
    /usr/bin/go build -o "$GO_TEST_WORKER" ./test/clients/go_worker) >"$OUT/go.log" 2>&1
ok $? "the Go example worker and test/clients/go_worker build offline" || sed 's/^/#   /' "$OUT/go.log"

# The fast-failover workers (test/clients/ff_worker.*: renew_every 0.5 s,
# 10 s leases) on $FF_STREAM, through the router too.
FF_DSN=$WORKER_DSN
FF_OUT=$OUT/ff && mkdir "$FF_OUT" && chmod 755 "$FF_OUT"
FF_LEASE=10
FF_RENEW=0.5
FF_WORKERS="py-ff-1 py-ff-2 node-ff-1 ex-ff-1 java-ff-1 go-ff-1"
FF_N=$(wc -w <<<"$FF_WORKERS")
# The sessions that the fast-failover workers $1 (an array literal) last
# recorded on the partition, as worker=pid@incarnation, of the rows whose
# incarnation matches the condition $2.
ff_sessions() {
    part_sql "SELECT string_agg(worker || '=' || session_pid || '@' || server_incarnation, ' ' ORDER BY worker)
                FROM lease.stream_workers
               WHERE app_name = 'clients' AND stream_name = '$FF_STREAM' AND worker = ANY ('$1')
                 AND server_incarnation $2"
}

echo "# fleet through the router: py-1 py-2 node-1 node-2 ex-1 java-1 go-1, and $FF_WORKERS in the fast-failover mode;" \
     "partition $K's primary killed at 4 s, node-1 at 6 s; once the standby is primary py-ff-1 is killed," \
     "the node rejoins, py-3 and node-3 join, then py-ff-3"
t0=$SECONDS
for w in java-1 py-1 py-2 node-1 node-2 ex-1 go-1; do start_worker $w; done     # the JVM first: the slowest to start
for w in $FF_WORKERS; do ff_start "$w" "" "$([ "${w#ex-}" != "$w" ] && echo "$EX_DSN" || echo "$FF_DSN")"; done
sleep 4
for _ in $(seq 1 75); do   # and each of them renewed (a worker may take a few seconds to start; a BEAM longer)
    ff_before=$(ff_sessions "{${FF_WORKERS// /,}}" "IS NOT NULL")
    [ "$(wc -w <<<"$ff_before")" -eq "$FF_N" ] && break
    sleep 0.2
done
old_incarnation=$(part_sql "SELECT max(server_incarnation) FROM lease.stream_workers
                             WHERE app_name = 'clients' AND stream_name = '$FF_STREAM'")
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

# Fast failover through the router.  The failover ended every partition
# session: each router backend's next call reconnects (PL/Proxy drops a
# broken connection) and records a new session, in the new primary's
# incarnation.
for _ in $(seq 1 50); do
    ff_after=$(ff_sessions "{${FF_WORKERS// /,}}" "IS DISTINCT FROM '$old_incarnation'")
    [ "$(wc -w <<<"$ff_after")" -eq "$FF_N" ] && break
    sleep 0.2
done
echo "#   $((SECONDS - t0)) s: the fast-failover workers' sessions on partition $K before its failover: $ff_before;" \
     "after: $ff_after"
[ "$(wc -w <<<"$ff_before")" -eq "$FF_N" ] && [ "$(wc -w <<<"$ff_after")" -eq "$FF_N" ]
ok $? "fast failover: $FF_WORKERS renewed through the router on the new primary, as new sessions of a new incarnation"
# The session recorded for py-ff-1 is a partition backend that its router
# backend holds: SIGKILL the worker, and the partition sees that session end.
victim=$(part_sql "SELECT session_pid FROM lease.stream_workers
                    WHERE app_name = 'clients' AND stream_name = '$FF_STREAM' AND worker = 'py-ff-1'")
alive=$(part_sql "SELECT count(*) FROM pg_stat_activity WHERE pid = ${victim:-0}")
kill_at=$(part_sql "SELECT clock_timestamp()")
kill_wall=$(date +%s.%N)
kill -KILL "${PIDS[py-ff-1]}"; wait "${PIDS[py-ff-1]}" 2>/dev/null
ended="not within 5 s of"
for _ in $(seq 1 50); do
    if [ "$(part_sql "SELECT count(*) FROM pg_stat_activity WHERE pid = ${victim:-0}")" = 0 ]; then
        ended=$(awk -v a="$kill_wall" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f s after", b - a }')
        break
    fi
    sleep 0.1
done
echo "# $((SECONDS - t0)) s: py-ff-1 killed; its recorded session, partition $K's backend $victim, ended $ended the SIGKILL"
[ "$alive" = 1 ] && [ "${ended#not}" = "$ended" ]
ok $? "fast failover: the SIGKILLed worker's recorded session (its router backend's partition connection) ended $ended the SIGKILL"

PG_BINDIR="$PG_BINDIR" bash test/scale/cluster.sh rejoin "$DIR" "$K"
start_worker py-3
start_worker node-3
echo "# $((SECONDS - t0)) s: $killed rejoins; py-3 and node-3 joined"
LIVE="ex-1 go-1 java-1 node-2 node-3 py-1 py-2 py-3"
sleep 3
ff_start py-ff-3
echo "# $((SECONDS - t0)) s: py-ff-3 joined"
sleep 5
settle_and_stop 24 "$PART_DSN"
[ "$stopped" -eq "$(wc -w <<<"$LIVE")" ]
ok $? "the $(wc -w <<<"$LIVE") live workers stopped gracefully on SIGTERM (none raised PL/Proxy's XX000)"
LIVE="ex-ff-1 go-ff-1 java-ff-1 node-ff-1 py-ff-2 py-ff-3"
OUT=$FF_OUT FLEET_STREAM=$FF_STREAM settle_and_stop 16 "$PART_DSN"
[ "$stopped" -eq "$(wc -w <<<"$LIVE")" ]
ok $? "the $(wc -w <<<"$LIVE") live fast-failover workers stopped gracefully on SIGTERM"

# The workers met the failover as PL/Proxy's XX000 and handled it as an
# ambiguous call (repeated, then left to the next tick and the local deadline).
seen=$(grep -h -o '"error": *"[^"]*PL/Proxy function[^"]*' "$OUT"/*.journal | wc -l)
grep -h -o '"error": *"[^"]*' "$OUT"/*.journal | sed -E 's/"error": *"//; s/[0-9]+/N/g' | cut -c1-150 |
    sort | uniq -c | sort -rn | head -n 6 | sed 's/^/#   /'
[ "$seen" -gt 0 ]
ok $? "the workers saw the partition's lost connection as PL/Proxy's XX000 ($seen failed calls named it) and carried on"

$PY test/clients/check.py "$OUT" "$PART_DSN" --killed node-1 --joined py-3,node-3 --failover
ok $? "fleet invariants through the router during the failover (test/clients/check.py --failover)"

# py-ff-1's leases went early (session_ended, on the partition that holds
# the stream), and the failover handed out nothing early: every
# session_ended there is from the worker killed, after its SIGKILL.
$PY test/clients/check.py "$FF_OUT" "$PART_DSN" --stream "$FF_STREAM" --killed py-ff-1 --joined py-ff-3 --failover
ok $? "fast failover: fleet invariants through the router, a partition failover and a SIGKILL (check.py --failover)"
taken=$(part_sql "SELECT count(*) FROM lease.lease_events WHERE event = 'session_ended' AND from_owner = 'py-ff-1'
                     AND app_name = 'clients' AND stream_name = '$FF_STREAM' AND occurred_at >= '$kill_at'")
wrong=$(part_sql "SELECT coalesce(string_agg(format('%s %s from %s at %s', stream_name, shard_id, from_owner, occurred_at),
                                             '; ' ORDER BY event_id), '')
                    FROM lease.lease_events
                   WHERE event = 'session_ended' AND (from_owner <> 'py-ff-1' OR occurred_at < '$kill_at')")
recovery=$(ff_recovery py-ff-1 "$kill_wall")
grace=$("$PSQL" -X -qAt "$PART_DSN" -c "LOAD 'pg_lease'" -c "SHOW lease.liveness_grace")
echo "#   from py-ff-1's SIGKILL to a new acknowledged checkpoint of each of its shards: $recovery;" \
     "about renew_every ($FF_RENEW s) + lease.liveness_grace ($grace) + a round ($FF_RENEW s)"
[ -n "$wrong" ] && echo "#   session_ended not caused by the SIGKILL: $wrong"
[ "$taken" -gt 0 ] && grep -q "median" <<<"$recovery"
ok $? "fast failover: the SIGKILLed worker's $taken leases were taken before their expiry (session_ended); its shards checkpointed again: $recovery"
[ -z "$wrong" ]
ok $? "fast failover: the partition's failover handed nothing out early (every session_ended is from py-ff-1, after its SIGKILL)"

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
ok $? "partition $K is a primary and its secondary again"
echo "# $((SECONDS - started)) s in all"
echo "1..$n"
[ "$fails" -eq 0 ]
