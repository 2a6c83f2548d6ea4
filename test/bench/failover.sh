#!/usr/bin/env bash
# make bench, section 9: how long a SIGKILLed worker's shards sit
# idle, in the normal mode and in the fast-failover mode (renew_every), with
# 10 s leases; then how the surviving workers find freed leases, short rounds
# against LISTEN (test/bench/find_freed.py).  Prints a Markdown fragment.
#
#   failover.sh KILLS [FIND_LEASE_SECONDS FIND_CYCLES]
#
# Runs against PGHOST/PGPORT (test/bench/run.sh's cluster).  A fleet of three
# Python workers (test/clients/ff_worker.py, or the example worker in the
# normal mode) on a 12-shard stream; KILLS times: the holder of the most
# shards is SIGKILLed and replaced by a fresh worker, and the time from the
# kill until every one of its shards has a newer checkpoint written by
# another worker (lease.shard_leases.checkpointed_at, the database clock) is
# recorded.  Only what the workers acknowledged counts: a checkpoint is
# written by the owner's fenced update_checkpoint.
set -uo pipefail
cd "$(dirname "$0")/../.."
KILLS=${1:-10}
FIND_LEASE=${2:-10}
FIND_CYCLES=${3:-5}
PSQL="$PG_BINDIR/psql"
PY=/usr/bin/python3
LEASE=10
RENEW=0.5
DB=bench_failover
OUT=$(mktemp -d /tmp/pg_lease_failover.XXXXXX)
declare -A PIDS
trap 'for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$OUT"' EXIT
q() { "$PSQL" -X -qAt -d $DB -c "$1"; }
DSN="postgresql:///$DB?host=$PGHOST&port=$PGPORT&user=postgres"

start() {   # mode name
    if [ "$1" = fast ]; then
        $PY test/clients/ff_worker.py "$DSN" clients orders "$2" "$OUT" $LEASE $RENEW 2>>"$OUT/stderr" &
    else
        (cd clients/python && exec $PY example_worker.py "$DSN" clients orders "$2" "$OUT" $LEASE) 2>>"$OUT/stderr" &
    fi
    PIDS[$2]=$!
}

# one mode: KILLS kills; prints "median max" of the seconds to recovery
run_mode() {   # mode
    local mode=$1 k victim n=3 i t0 gaps=()
    "$PSQL" -X -q -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB" >/dev/null
    q "ALTER DATABASE $DB SET synchronous_commit = on" >/dev/null
    q "CREATE EXTENSION pg_lease" >/dev/null
    q "SELECT count(lease.create_lease('clients', 'orders', 's' || i)) FROM generate_series(1, 12) AS i" >/dev/null
    for i in 1 2 3; do start "$mode" "$mode-$i"; done
    for k in $(seq 1 "$KILLS"); do
        # settled: three owners, every shard checkpointed in the last second
        for _ in $(seq 1 120); do
            [ "$(q "SELECT count(DISTINCT lease_owner) = 3 AND bool_and(checkpointed_at > clock_timestamp() - interval '1 s')
                      FROM lease.shard_leases WHERE lease_owner IS NOT NULL HAVING count(*) = 12")" = t ] && break
            sleep 0.5
        done
        victim=$(q "SELECT lease_owner FROM lease.shard_leases GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 1")
        local at shards
        at=$(q "SELECT clock_timestamp()")
        kill -KILL "${PIDS[$victim]}"; wait "${PIDS[$victim]}" 2>/dev/null; unset "PIDS[$victim]"
        shards=$(q "SELECT string_agg(quote_literal(shard_id), ',') FROM lease.shard_leases WHERE lease_owner = '$victim'")
        t0=$SECONDS
        local gap=
        while [ $((SECONDS - t0)) -lt $((LEASE * 3)) ]; do
            gap=$(q "SELECT extract(epoch FROM max(checkpointed_at) - '$at'::timestamptz)
                       FROM lease.shard_leases WHERE shard_id IN ($shards)
                     HAVING bool_and(lease_owner IS DISTINCT FROM '$victim' AND checkpointed_at > '$at')")
            [ -n "$gap" ] && break
            sleep 0.05
        done
        gaps+=("${gap:-nan}")
        n=$((n + 1))
        start "$mode" "$mode-$n"
    done
    for w in "${!PIDS[@]}"; do kill -TERM "${PIDS[$w]}" 2>/dev/null; done
    for w in "${!PIDS[@]}"; do wait "${PIDS[$w]}" 2>/dev/null; done
    PIDS=()
    printf '%s\n' "${gaps[@]}" | sort -g | awk '{ a[NR] = $1 } END { printf "%.2f %.2f %d", a[int((NR + 1) / 2)], a[NR], NR }'
}

bash test/lib/deps.sh clients >/dev/null || exit 1
normal=$(run_mode normal)
fast=$(run_mode fast)
read -r nmed nmax nk <<<"$normal"
read -r fmed fmax fk <<<"$fast"
echo "Three Python workers on a 12-shard stream, 10 s leases; the holder of the most shards SIGKILLed $nk times per mode (a fresh worker joins after each kill); the time from the kill until every one of its shards has a newer checkpoint written by another worker (database clock). Fast failover: \`renew_every\` 0.5 s, \`lease.liveness_grace\` 1 s, the workers balance every 0.5 s (normal mode: every lease duration / 3)."
echo
echo "| mode | median (s) | max (s) | kills | rounds per second per worker (renewals + balancing) |"
echo "| --- | ---: | ---: | ---: | ---: |"
printf '| normal | %s | %s | %s | %.1f |\n' "$nmed" "$nmax" "$nk" "$(awk -v l=$LEASE 'BEGIN { print 2 * 3 / l }')"
printf '| fast failover | %s | %s | %s | %.1f |\n' "$fmed" "$fmax" "$fk" "$(awk -v r=$RENEW 'BEGIN { print 2 / r }')"

# how the survivors find freed leases: short rounds against LISTEN
"$PSQL" -X -q -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS bench_find" -c "CREATE DATABASE bench_find" >/dev/null
"$PSQL" -X -q -d bench_find -c "CREATE EXTENSION pg_lease" >/dev/null
echo
$PY test/bench/find_freed.py "postgresql:///bench_find?host=$PGHOST&port=$PGPORT&user=postgres" "$FIND_LEASE" "$FIND_CYCLES"
