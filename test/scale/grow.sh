#!/usr/bin/env bash
# Growing the cluster online (docs/scale-out.md, "Moving a stream" and
# "Adding partitions"), on test/scale/cluster.sh's cluster (a router over 2
# pg_auto_failover partitions):
#   1. the demo fleet runs through the router (test/demo/pg_lease_demo
#      --router --history: one stream per partition, the client rules, a
#      history of what the server acknowledged and its checker), and beside
#      it two Python workers and a Node one in transactional mode
#      (test/clients/tx_worker.py, tx_worker.js:
#      output rows and checkpoint in one transaction, on the stream's
#      partition, found through lease_router.stream_conninfo);
#   2. two partitions are added (2 -> 4; single servers: the failover of a
#      partition is what make scale tests), and nothing moves;
#   3. the streams move while the fleet runs: the demo's stream 0 to
#      partition 2, stream 1 to partition 3, stream 0 again to partition 1,
#      the transactional stream to partition 3;
# then checks: the demo's checker (0 acknowledged checkpoints lost, 0
# double owners), every epoch acknowledged on a moved stream's target above
# every one acknowledged on its source, each source holding only the
# tombstone and the target the leases, every transactional record written
# exactly once (over all partitions) up to its checkpoint; and reports each
# move's write gap (the longest gap between acknowledged checkpoints of the
# stream around the move) and their median.  Exit status 1 on any
# violation.
#   grow.sh [--keep]
set -uo pipefail
cd "$(dirname "$0")/../.."
keep=0
[ "${1:-}" = --keep ] && keep=1
FLEET_SECONDS=${GROW_FLEET_SECONDS:-45}
PY=/usr/bin/python3

bash test/lib/deps.sh build test scale clients || exit 1
(cd clients/node && npm ci --no-audit --no-fund --loglevel=error >/dev/null) || exit 1
# shellcheck source=../lib/cluster.sh
. test/lib/cluster.sh
pg_lease_build_install scale-client || exit 1

DIR=$(mktemp -d -u /tmp/pg_lease_grow.XXXXXX)
OUT=$(mktemp -d /tmp/pg_lease_grow_out.XXXXXX)
chmod 755 "$OUT"
NEW_PGDATA=()
cleanup() {
    for p in $(jobs -p); do kill "$p" 2>/dev/null; done
    for d in "${NEW_PGDATA[@]}"; do
        runuser -u postgres -- "$PG_BINDIR/pg_ctl" -D "$d" -m fast -w -t 30 stop >/dev/null 2>&1
    done
    if [ "$keep" -eq 1 ]; then
        echo "grow: cluster left up in $DIR, output in $OUT"
    else
        bash test/scale/cluster.sh down "$DIR"
        rm -rf "$OUT"
    fi
}
trap cleanup EXIT
mono() { $PY -c 'import time; print("%.1f" % (time.monotonic() * 1000))'; }
psql_do() { "$PG_BINDIR/psql" -X -q -At -v ON_ERROR_STOP=1 "$@"; }
failed=0
fail() { echo "grow: FAIL: $*"; failed=1; }

env=$(PG_BINDIR="$PG_BINDIR" bash test/scale/cluster.sh up "$DIR") || { echo "grow: cluster up failed"; exit 1; }
eval "$env"
R=$PG_LEASE_ROUTER_DSN
read -r -a PART <<<"$PG_LEASE_PARTITION_DSNS"
echo "grow: cluster up (monitor, 2 x (primary + 2 standbys), router)"

# The transactional workers' stream, its output table on every partition
# (they write where the stream lives), created through the router.
TX_APP=grow TX_STREAM=tx-orders
tx_out_sql="CREATE TABLE IF NOT EXISTS public.tx_out (shard text, seq bigint, worker text)"
for dsn in "${PART[@]}"; do psql_do "$dsn" -c "$tx_out_sql" || exit 1; done
for i in 1 2 3 4; do
    psql_do "$R" -c "SELECT lease.create_lease('$TX_APP', '$TX_STREAM', 'tx-$i')" >/dev/null || exit 1
done

# The two partitions to add: single servers, pg_lease in database pg_lease,
# made before the fleet starts (only adding them to the router is timed).
conns=()
for k in 2 3; do
    d="$DIR/n$k"
    port=$((20000 + RANDOM % 10000))
    runuser -u postgres -- "$PG_BINDIR/initdb" -D "$d" -U postgres --auth=trust -E UTF8 --locale=C --no-sync >/dev/null 2>&1 ||
        { fail "initdb of partition $k"; continue; }
    cat >>"$d/postgresql.conf" <<CONF
unix_socket_directories = '$DIR'
listen_addresses = '127.0.0.1'
port = $port
shared_buffers = 16MB
max_connections = 60
fsync = off
CONF
    runuser -u postgres -- "$PG_BINDIR/pg_ctl" -D "$d" -l "$DIR/logs/n$k.log" -w -t 60 start >/dev/null ||
        { fail "partition $k did not start"; continue; }
    NEW_PGDATA+=("$d")
    psql_do -h "$DIR" -p "$port" -U postgres -d postgres -c "CREATE DATABASE pg_lease" &&
        psql_do -h "$DIR" -p "$port" -U postgres -d pg_lease -c "CREATE EXTENSION pg_lease" -c "$tx_out_sql" ||
        fail "partition $k: pg_lease"
    PART[$k]="host=127.0.0.1 port=$port dbname=pg_lease user=postgres"
    conns+=("host=127.0.0.1 port=$port dbname=pg_lease connect_timeout=2")
done
mkdir -p "$OUT/history"
test/demo/pg_lease_demo --router --dsn "$R" --duration "$FLEET_SECONDS" --shards 12 --quiet \
    --history "$OUT/history" >"$OUT/report" 2>&1 &
FLEET_PID=$!
mkdir -p "$OUT/tx"
# the workers connect to the router as a libpq URI with a user, as clients do
TX_DSN="postgresql://postgres@127.0.0.1:$(sed -E 's/.*port=([0-9]+).*/\1/' <<<"$R")/pg_lease"
for w in tx-py-1 tx-py-2 tx-node-1; do
    case $w in
        tx-py-*) $PY test/clients/tx_worker.py "$TX_DSN" "$TX_APP" "$TX_STREAM" "$w" "$OUT/tx" 3 2>"$OUT/tx/$w.stderr" & ;;
        tx-node-*) /usr/bin/node test/clients/tx_worker.js "$TX_DSN" "$TX_APP" "$TX_STREAM" "$w" "$OUT/tx" 3 2>"$OUT/tx/$w.stderr" & ;;
    esac
done
fleet0=$(date +%s)
at() { local s=$(( $1 - ($(date +%s) - fleet0) )); [ "$s" -gt 0 ] && sleep "$s"; }

# The demo's streams, as it named them: its stream k is on partition k.
at 3
STREAMS=()
for k in 0 1; do
    STREAMS[$k]=$(psql_do "${PART[$k]}" -c "SELECT DISTINCT app_name || '|' || stream_name FROM lease.shard_leases
                                            WHERE app_name LIKE 'pg\_lease\_demo\_%' ORDER BY 1 DESC LIMIT 1")
    [ -n "${STREAMS[$k]}" ] || fail "no demo stream on partition $k"
done
echo "grow: the demo's streams: ${STREAMS[*]}"

# 2. Add the two partitions to the router.
at 6
before=$(psql_do "$R" -c "SELECT string_agg((lease_router.stream_partition(a, s) & 1)::text, ',' ORDER BY a, s)
                            FROM (VALUES ('${STREAMS[0]%|*}', '${STREAMS[0]#*|}'), ('${STREAMS[1]%|*}', '${STREAMS[1]#*|}'),
                                         ('$TX_APP', '$TX_STREAM')) AS v(a, s)")
count=$(psql_do "$R" -c "SELECT lease_router.add_partitions('${conns[0]}', '${conns[1]}')")
after=$(psql_do "$R" -c "SELECT string_agg((lease_router.stream_partition(a, s) & 3)::text, ',' ORDER BY a, s)
                           FROM (VALUES ('${STREAMS[0]%|*}', '${STREAMS[0]#*|}'), ('${STREAMS[1]%|*}', '${STREAMS[1]#*|}'),
                                        ('$TX_APP', '$TX_STREAM')) AS v(a, s)")
echo "grow: [$(( $(date +%s) - fleet0 )) s] added partitions 2 and 3: the router has $count; the streams' partitions $before before, $after after"
[ "$count" = 4 ] || fail "the router has $count partitions, not 4"
[ "$before" = "$after" ] || fail "adding partitions moved a stream ($before -> $after)"
TX_FROM=${after##*,}

# 3. The moves.
moves=()
move() {   # app|stream to_partition
    local app=${1%|*} stream=${1#*|} to=$2 t0 t1 row
    t0=$(mono)
    row=$(psql_do -F ' ' "$R" -c "SELECT from_partition, generation, leases, extract(epoch FROM frozen_for)
                                  FROM lease_router.move_stream('$app', '$stream', $to)") || { fail "move of $stream to $to"; return; }
    t1=$(mono)
    echo "grow: [$(( $(date +%s) - fleet0 )) s] moved $stream: partition ${row%% *} -> $to (generation, leases, seconds frozen: ${row#* })"
    moves+=("$stream ${row%% *} $to $t0 $t1")
}
at 10; move "${STREAMS[0]}" 2
at 16; move "$TX_APP|$TX_STREAM" 3
at 22; move "${STREAMS[1]}" 3
at 30; move "${STREAMS[0]}" 1

wait "$FLEET_PID"
fleet_status=$?
# the transactional workers stop gracefully (they release their leases), within 20 s
tx_pids=$(jobs -p)
for p in $tx_pids; do kill -TERM "$p" 2>/dev/null; done
for i in $(seq 1 80); do
    alive=0
    for p in $tx_pids; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" -eq 0 ] && break
    sleep 0.25
done
for p in $tx_pids; do kill -0 "$p" 2>/dev/null && { fail "transactional worker $p did not stop on SIGTERM"; kill -KILL "$p"; }; done
wait
echo "== the demo's report"
grep -vE '^$' "$OUT/report"
[ "$fleet_status" -eq 0 ] || fail "the demo's checker found a violation (exit $fleet_status)"
grep -qE '^acknowledged checkpoints lost: 0' "$OUT/report" || fail "acknowledged checkpoints were lost"
grep -qE '^double owners: 0' "$OUT/report" || fail "a lease had two owners"

# Per move: the write gap and the fencing tokens, from the histories
# (ack S LAST EPOCH T: shard index S, the demo's stream S / 12).
gaps=()
for m in "${moves[@]}"; do
    read -r stream from to t0 t1 <<<"$m"
    k=-1
    for j in 0 1; do [ "${STREAMS[$j]#*|}" = "$stream" ] && k=$j; done
    [ "$k" -ge 0 ] || continue
    read -r gap before_max after_min <<<"$(awk -v k="$k" '$1 == "ack" && int($2 / 12) == k { print $5, $4 }' "$OUT"/history/*.log |
        sort -n | awk -v t0="$t0" -v t1="$t1" '
        # the longest gap between acknowledged checkpoints that spans the move
        { if (NR > 1 && $1 >= t0 && prev <= t1 && $1 - prev > gap) gap = $1 - prev; prev = $1 }
        $1 < t0 && $2 > bm { bm = $2 }
        $1 > t1 && (am == "" || $2 < am) { am = $2 }
        END { printf "%.2f %d %d\n", gap / 1000, (bm == "" ? -1 : bm), (am == "" ? -1 : am) }')"
    echo "grow: move of $stream $from -> $to: write gap ${gap} s; highest epoch acknowledged before ${before_max}, lowest after ${after_min}"
    gaps+=("$gap")
    [ "$after_min" -gt "$before_max" ] || fail "move of $stream: an epoch acknowledged after the move ($after_min) is not above one acknowledged before ($before_max)"
done
median=$(printf '%s\n' "${gaps[@]}" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
echo "grow: write gap per move: ${gaps[*]} s; median $median s (goal: at most 2 s)"

# Where the leases are: each source keeps only the tombstone.
for m in "${moves[@]}"; do
    read -r stream from to _ <<<"$m"
    row=$(psql_do -F ' ' "${PART[$from]}" -c "SELECT (SELECT count(*) FROM lease.shard_leases WHERE stream_name = '$stream'),
                                                  (SELECT count(*) FROM lease.lease_events WHERE stream_name = '$stream'),
                                                  (SELECT state FROM lease.stream_placements WHERE stream_name = '$stream')")
    echo "grow: partition $from after the move of $stream: leases, events, record: $row"
    [ "${row% *}" = "0 0" ] || fail "partition $from still holds rows of $stream"
done
for k in 0 1 2 3; do
    echo "grow: partition $k holds $(psql_do "${PART[$k]}" -c "SELECT count(*) || ' leases of ' || count(DISTINCT stream_name) || ' streams' FROM lease.shard_leases")"
done

# The balancing command: moves streams one at a time while that narrows
# the gap between the partitions holding the most and the fewest leases.
spread_sql="SELECT max(n) - min(n) FROM (SELECT k, coalesce(sum(m.leases), 0) AS n
              FROM generate_series(0, 3) AS k
              LEFT JOIN lease.monitoring_leases() AS m
                ON m.state <> 'ended' AND (lease_router.stream_partition(m.app_name, m.stream_name) & 3) = k
             GROUP BY k) AS p"
spread0=$(psql_do "$R" -c "$spread_sql")
rebalanced=$(psql_do -F ' ' "$R" -c "SELECT stream_name, from_partition, to_partition, leases FROM lease_router.rebalance_streams(4)")
spread1=$(psql_do "$R" -c "$spread_sql")
echo "grow: rebalance_streams(4) moved: ${rebalanced:-nothing}; leases per partition, most minus fewest: $spread0 before, $spread1 after"
[ -n "$rebalanced" ] && [ "$spread1" -lt "$spread0" ] || fail "rebalance_streams did not narrow the spread"

# Exactly once through the router: every record of the transactional
# stream written once, over all partitions, up to each shard's checkpoint.
for dsn in "${PART[@]}"; do
    psql_do "$dsn" -c "COPY (SELECT shard, seq, worker FROM public.tx_out) TO STDOUT" >>"$OUT/tx_out.tsv"
done
psql_do "$R" -c "SELECT shard_id, checkpoint FROM lease.lease_status WHERE app_name = '$TX_APP'" -F ' ' >"$OUT/tx_ckpt"
verdict=$(awk 'NR == FNR { split($0, f, " "); ck[f[1]] = (f[2] == "TRIM_HORIZON" ? 0 : f[2]); next }
    { c[$1 " " $2]++; if ($2 > ck[$1]) past++ }
    END {
        for (s in ck) for (i = 1; i <= ck[s]; i++) { n++; if (c[s " " i] == 1) ok++; else if (c[s " " i] > 1) dup++; else gap++ }
        printf "records written exactly once: %d of %d, %d duplicates, %d gaps, %d past a checkpoint\n", ok, n, dup, gap, past
    }' "$OUT/tx_ckpt" FS='\t' "$OUT/tx_out.tsv")
echo "grow: transactional stream (through the router, moved $TX_FROM -> 3): $verdict"
grep -qE '^records written exactly once: ([0-9]+) of \1, 0 duplicates, 0 gaps, 0 past a checkpoint$' <<<"$verdict" &&
    ! grep -q '^records written exactly once: 0 of' <<<"$verdict" || fail "transactional output is not exactly once"
grep -h 'transactions of' "$OUT"/tx/*.stderr 2>/dev/null | head -n 4 | sed 's/^/  /'

[ "$failed" -eq 0 ] && echo "grow: ok" || echo "grow: FAILED"
exit "$failed"
