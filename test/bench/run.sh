#!/usr/bin/env bash
# `make bench [ARGS=--quick]`: pg_lease side by side with what users would
# write instead, measured in the same run on a throwaway cluster, reported as
# ratios with the absolute figures beside them.  Writes BENCHMARKS.md (or,
# with --quick, test/bench/results-quick.md).  A speed is never a pass/fail
# test here: the script fails only when a benchmark could not run.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)

QUICK=0
for a in "$@"; do
    case "$a" in
        --quick) QUICK=1 ;;
        *) echo "usage: test/bench/run.sh [--quick]" >&2; exit 2 ;;
    esac
done
if [ "$QUICK" -eq 1 ]; then
    T=2; ROUNDS=1; CLIENTS=2; SIZES="1000 10000"; OUT=test/bench/results-quick.md
else
    T=5; ROUNDS=4; CLIENTS=4; SIZES="1000 10000 100000"; OUT=BENCHMARKS.md
fi

bash test/lib/deps.sh
# shellcheck source=../lib/cluster.sh
. test/lib/cluster.sh
pg_lease_build_install
cluster_start
PSQL=("$PG_BINDIR/psql" -X -q -v ON_ERROR_STOP=1 -d bench)
"$PG_BINDIR/psql" -X -q -d postgres -c "CREATE DATABASE bench"
"${PSQL[@]}" -f test/bench/setup.sql

WORK=$(mktemp -d)
REPORT=$WORK/report.md
step() { echo "bench: $*" >&2; }

# The transactions a pgbench log counts.
transactions_in() {
    sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$1"
}

# Reads a pgbench log: sets TPS, LAT (ms) and TX.
pgbench_figures() {
    TPS=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$1" | tail -n 1)
    LAT=$(sed -n 's/^latency average = \([0-9.]*\) ms/\1/p' "$1")
    TX=$(transactions_in "$1")
}

# pgbench NAME SCRIPT CLIENTS [pgbench options ...]: runs for $T seconds with
# the prepared protocol; sets TPS, LAT (ms) and TX.
run_pgbench() {
    local name=$1 script=$2 clients=$3
    shift 3
    local log=$WORK/$name.log
    "$PG_BINDIR/pgbench" -n -M prepared -T "$T" -c "$clients" -j "$clients" \
        -f "$script" "$@" bench >"$log" 2>&1 || { cat "$log" >&2; return 1; }
    pgbench_figures "$log"
}

updates_of() {   # n_tup_upd of lease.shard_leases so far
    "${PSQL[@]}" -At -c "SELECT pg_stat_clear_snapshot(); SELECT n_tup_upd FROM pg_stat_user_tables WHERE relid = 'lease.shard_leases'::regclass" | tail -n 1
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }

# -- 1 and 2: checkpoint writes ------------------------------------------------
# Variants run round-robin $ROUNDS times (so drift on a noisy machine hits
# them alike); the table shows the median tps of each.
median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

bench_checkpoints() {
    local stream=$1 nleases=$2 with_renewer=$3 title=$4
    local variants="raw pg_lease plpgsql client"
    declare -A tps_of lat_of tx_of fail_of
    "${PSQL[@]}" -c "SELECT bench.make_stream('$stream', $nleases, 1)"
    local order
    for ((round = 1; round <= ROUNDS; round++)); do
        # each round starts at a different variant, and every measurement
        # starts from a vacuumed table, so neither order nor the bloat of
        # the previous measurement favours one variant
        order=$(echo $variants | awk -v r="$round" '{ for (i = 0; i < NF; i++) printf "%s ", $((i + r - 1) % NF + 1) }')
        for v in $order; do
            "${PSQL[@]}" -c "VACUUM lease.shard_leases"
            step "$title: $v (round $round of $ROUNDS)"
            local before renew_pid="" renew_tx=0 after ok
            before=$(updates_of)
            if [ "$with_renewer" -eq 1 ]; then
                "$PG_BINDIR/pgbench" -n -M prepared -T "$T" -c 1 -f test/bench/renewer.sql \
                    -D stream="$stream" -D nleases="$nleases" bench >"$WORK/renew-$v.log" 2>&1 &
                renew_pid=$!
            fi
            run_pgbench "ckpt-$stream-$v" "test/bench/ckpt_$v.sql" "$CLIENTS" -D stream="$stream" -D nleases="$nleases"
            if [ -n "$renew_pid" ]; then
                wait "$renew_pid"
                renew_tx=$(transactions_in "$WORK/renew-$v.log")
            fi
            sleep 0.5
            after=$(updates_of)
            # every successful checkpoint and renewal updates one row; the
            # renewal client never fails (it alone changes lease_count)
            ok=$((after - before - renew_tx))
            tps_of[$v]="${tps_of[$v]:-} $TPS"
            lat_of[$v]="${lat_of[$v]:-} $LAT"
            tx_of[$v]=$(( ${tx_of[$v]:-0} + TX ))
            fail_of[$v]=$(( ${fail_of[$v]:-0} + TX - ok ))
        done
    done
    {
        echo
        echo "### $title"
        echo
        echo "| variant | tps (median of $ROUNDS) | ratio to raw UPDATE | latency avg (ms) | checkpoints refused although owner |"
        echo "| --- | ---: | ---: | ---: | ---: |"
    } >>"$REPORT"
    local base
    base=$(echo "${tps_of[raw]}" | median)
    for v in $variants; do
        local t l
        t=$(echo "${tps_of[$v]}" | median)
        l=$(echo "${lat_of[$v]}" | median)
        printf '| %s | %.0f | %s | %.3f | %d of %d |\n' "$(label_of "$v")" "$t" "$(ratio "$t" "$base")" \
            "$l" "${fail_of[$v]}" "${tx_of[$v]}" >>"$REPORT"
    done
}

label_of() {
    case "$1" in
        raw) echo 'raw `UPDATE … RETURNING` (the floor)' ;;
        pg_lease) echo '`lease.update_checkpoint`' ;;
        plpgsql) echo 'the same logic in PL/pgSQL' ;;
        client) echo 'client-side read, then `UPDATE … WHERE lease_count = <read>` (2 statements in a transaction)' ;;
    esac
}

# -- 3: renewal ---------------------------------------------------------------
bench_renewal() {
    {
        echo
        echo "### 3. Renewing every lease a worker holds"
        echo
        echo "One client; one transaction = one renewal round over all the worker's leases."
        echo
        echo "| leases held | \`renew_leases\` rounds/s | one \`renew_lease\` per lease, rounds/s | ratio | latency per round (ms): batch / per lease |"
        echo "| ---: | ---: | ---: | ---: | --- |"
    } >>"$REPORT"
    for n in 100 1000; do
        step "renewal: $n leases"
        "${PSQL[@]}" -c "SELECT bench.make_stream('renew-$n', $n, 1)"
        echo "SELECT count(*) FROM lease.renew_leases('bench', 'renew-$n', 'bench-owner', '7 days');" >"$WORK/renew_batch.sql"
        # a client that knows each lease's count sends one renew_lease per lease;
        # here the count is looked up inside the same statement (one round trip each)
        : >"$WORK/renew_each.sql"
        for ((i = 0; i < n; i++)); do
            echo "SELECT lease.renew_lease('bench', 'renew-$n', 'shard-$i', 'bench-owner', (SELECT lease_count FROM lease.shard_leases WHERE app_name = 'bench' AND stream_name = 'renew-$n' AND shard_id = 'shard-$i'), '7 days');" >>"$WORK/renew_each.sql"
        done
        run_pgbench "renew-batch-$n" "$WORK/renew_batch.sql" 1
        local btps=$TPS blat=$LAT
        run_pgbench "renew-each-$n" "$WORK/renew_each.sql" 1
        printf '| %d | %.1f | %.1f | %s× | %.2f / %.2f |\n' "$n" "$btps" "$TPS" "$(ratio "$btps" "$TPS")" "$blat" "$LAT" >>"$REPORT"
    done
}

# -- 4: balancing -------------------------------------------------------------
bench_balancing() {
    {
        echo
        echo "### 4. A balancing round at steady state"
        echo
        echo "One worker's round when the stream is balanced (nothing to take, nothing to hand off): \`take_leases\` vs a client-side taker's list of the whole lease table (the reference consumer's per-round scan; its client-side work is not even counted)."
        echo
        echo "| leases in stream | workers | \`take_leases\` latency (ms) | list-all latency (ms) | ratio |"
        echo "| ---: | ---: | ---: | ---: | ---: |"
    } >>"$REPORT"
    for n in $SIZES; do
        for w in 10 100; do
            step "balancing: $n leases, $w workers"
            "${PSQL[@]}" -c "SELECT bench.make_stream('bal-$n-$w', $n, $w)" -c "ANALYZE lease.shard_leases"
            echo "SELECT count(*) FROM lease.take_leases('bench', 'bal-$n-$w', 'worker-1', '7 days');" >"$WORK/take.sql"
            echo "SELECT shard_id, lease_owner, lease_count, lease_expires_at, checkpoint, parent_shard_ids FROM lease.shard_leases WHERE app_name = 'bench' AND stream_name = 'bal-$n-$w';" >"$WORK/list.sql"
            run_pgbench "take-$n-$w" "$WORK/take.sql" 1
            local tlat=$LAT
            run_pgbench "list-$n-$w" "$WORK/list.sql" 1
            printf '| %d | %d | %.3f | %.3f | %s× faster |\n' "$n" "$w" "$tlat" "$LAT" "$(ratio "$LAT" "$tlat")" >>"$REPORT"
            "${PSQL[@]}" -c "DELETE FROM lease.shard_leases WHERE stream_name = 'bal-$n-$w'"
        done
    done
}

# -- 5: rotation --------------------------------------------------------------
bench_rotation() {
    local tenants=100
    step "rotation: $tenants tenants"
    "${PSQL[@]}" <<SQL
SELECT count(*) FROM generate_series(1, $tenants) t,
       LATERAL lease.start_conversation('tenant-' || t, 'agent', NULL, NULL, 'channel') s
 WHERE s.outcome = 'started';
SQL
    cat >"$WORK/rotate.sql" <<'SQL'
\set t random(1, 100)
WITH r AS (SELECT * FROM lease.rotate_channel('tenant-' || :t, 'agent', NULL, NULL, 'channel', lease.find_channel_conversation('tenant-' || :t, 'agent', NULL, NULL, 'channel')))
SELECT r.outcome, CASE WHEN r.outcome = 'rotated' THEN lease.end_conversation(r.previous_conversation_id) END FROM r;
SQL
    run_pgbench rotate "$WORK/rotate.sql" "$CLIENTS" -l --log-prefix="$WORK/rot"
    local tps=$TPS lat=$LAT max
    max=$(cat "$WORK"/rot.* | awk 'BEGIN { m = 0 } { if ($3 > m) m = $3 } END { printf "%.2f", m / 1000 }')
    # time to a `busy` answer while another session holds the old conversation (a turn in progress)
    local conv busy_sum=0 busy_max=0 ms
    for i in 1 2 3; do
        conv=$("${PSQL[@]}" -At -c "SELECT lease.find_channel_conversation('tenant-1', 'agent', NULL, NULL, 'channel')")
        "$PG_BINDIR/psql" -X -q -d bench -c "BEGIN" -c "SELECT lease.admit_turn($conv)" -c "SELECT pg_sleep(2)" -c "COMMIT" >/dev/null &
        local holder=$!
        sleep 0.5
        ms=$("$PG_BINDIR/psql" -X -d bench -c '\timing on' \
            -c "SELECT outcome FROM lease.rotate_channel('tenant-1', 'agent', NULL, NULL, 'channel', $conv)" |
            sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p')
        wait "$holder"
        busy_sum=$(awk -v a="$busy_sum" -v b="$ms" 'BEGIN { print a + b }')
        busy_max=$(awk -v a="$busy_max" -v b="$ms" 'BEGIN { print (b > a) ? b : a }')
    done
    {
        echo
        echo "### 5. Channel rotation"
        echo
        echo "$CLIENTS clients rotating the channels of $tenants tenants at random (each rotation also ends the previous conversation, as a platform does once the replacement runs)."
        echo
        echo "| figure | value |"
        echo "| --- | ---: |"
        printf '| rotations per second (any outcome) | %.0f |\n' "$tps"
        printf '| latency average (ms) | %.3f |\n' "$lat"
        printf '| longest rotation (ms): an upper bound on how long the fleet lock is held | %s |\n' "$max"
        printf '| time to a `busy` answer while a turn holds the old conversation (ms, mean of 3 / max), with `lease.rotation_lock_timeout` = 250ms | %.1f / %.1f |\n' \
            "$(awk -v a="$busy_sum" 'BEGIN { print a / 3 }')" "$busy_max"
    } >>"$REPORT"
}

# -- 6: scale-out --------------------------------------------------------------
# test/scale/bench.sh on its own test/scale/cluster.sh cluster: the router's
# cost (update_checkpoint, renew_leases through pg_lease_router vs direct to
# the partition) and the write gaps of a switchover and of a SIGKILL.
bench_scale() {
    {
        echo
        echo "### 6. Scale-out: the router's cost and failover write gaps"
        echo
    } >>"$REPORT"
    if [ "$QUICK" -eq 1 ]; then
        echo "Not run with --quick (it starts a monitor, two partitions of two nodes and a router): \`make bench\` runs \`test/scale/bench.sh\`." >>"$REPORT"
        return
    fi
    step "scale-out: test/scale/bench.sh"
    {
        echo "On a test/scale/cluster.sh cluster (docs/scale-out.md): pgbench with 1 client through the router and directly against the partition that owns the stream, then the make scale fleet through the router during a switchover of partition 0 and a SIGKILL of partition 1's primary."
        echo
        PG_BINDIR="$PG_BINDIR" bash test/scale/bench.sh "$((T * 2))"
    } >>"$REPORT"
}

{
    echo "# pg_lease benchmarks"
    echo
    echo "Reproduce: \`make bench\`$([ "$QUICK" -eq 1 ] && echo ' ARGS=--quick')  (\`test/bench/run.sh\`). Every comparison is measured side by side in the same run; ratios matter, absolute figures depend on the machine."
    echo
    echo "- machine: $(nproc) cores, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n 1), $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo); shared and noisy"
    echo "- server: $("${PSQL[@]}" -At -c 'SELECT version()')"
    echo "- settings: throwaway cluster (test/lib/cluster.sh): fsync=off, synchronous_commit=off, full_page_writes=off, Unix socket; pgbench -M prepared, $T s per measurement, $CLIENTS clients unless stated; checkpoint variants interleaved over $ROUNDS rounds, each round starting at a different variant, the table vacuumed before each measurement"
    echo "- date: $(date -u +%Y-%m-%d)"
    echo
    echo "## Results"
} >"$REPORT"

bench_checkpoints ckpt 1000 0 "1. Checkpoint write, 1,000 leases, $CLIENTS clients"
bench_checkpoints hot 50 1 "2. Checkpoint write with a renewer on the same 50 leases ($CLIENTS checkpoint clients + 1 renewal client)"
bench_renewal
bench_balancing
bench_rotation
bench_scale

cp "$REPORT" "$ROOT/$OUT"
rm -rf "$WORK"
echo "bench: results written to $OUT" >&2
cat "$ROOT/$OUT"
