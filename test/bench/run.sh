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
    PLOTS=test/bench/results-quick
else
    # 1,000,000 leases would take minutes to load and to list: left out
    T=5; ROUNDS=4; CLIENTS=4; SIZES="1000 10000 100000"; OUT=BENCHMARKS.md
    PLOTS=docs/bench
fi

bash test/lib/deps.sh build test bench peers
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

# "n_tup_upd n_tup_hot_upd" of a table so far
hot_of() {
    "${PSQL[@]}" -At -F ' ' -c "SELECT pg_stat_clear_snapshot(); SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = '$1'::regclass" | tail -n 1
}

# hot_share "UPD HOT" "UPD HOT": "hot of upd (pct)" between two hot_of readings
hot_share() {
    awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, " "); split(b, y, " "); u = y[1] - x[1]; h = y[2] - x[2];
        if (u > 0) printf "%d of %d (%.1f%%)", h, u, 100 * h / u; else print "none" }'
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }

# -- 1 and 2: checkpoint writes ------------------------------------------------
# Variants run round-robin $ROUNDS times (so drift on a noisy machine hits
# them alike); the table shows the median tps of each.
median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

# round_order "V1 V2 ..." ROUND: the variants rotated to start at the ROUND-th
round_order() { echo "$1" | awk -v r="$2" '{ for (i = 0; i < NF; i++) printf "%s ", $((i + r - 1) % NF + 1) }'; }

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
        order=$(round_order "$variants" "$round")
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
        echo "$stream $v $(ratio "$t" "$base")" >>"$WORK/checkpoints.dat"
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
        echo "| leases held | \`renew_leases\` rounds/s | one \`renew_lease\` per lease, rounds/s | ratio | latency per round (ms): batch / per lease | HOT updates during the \`renew_leases\` run: leases / worker row |"
        echo "| ---: | ---: | ---: | ---: | --- | --- |"
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
        local l0 w0 l1 w1
        sleep 1
        l0=$(hot_of lease.shard_leases); w0=$(hot_of lease.stream_workers)
        run_pgbench "renew-batch-$n" "$WORK/renew_batch.sql" 1
        local btps=$TPS blat=$LAT
        sleep 1
        l1=$(hot_of lease.shard_leases); w1=$(hot_of lease.stream_workers)
        run_pgbench "renew-each-$n" "$WORK/renew_each.sql" 1
        printf '| %d | %.1f | %.1f | %s× | %.2f / %.2f | %s / %s |\n' "$n" "$btps" "$TPS" "$(ratio "$btps" "$TPS")" "$blat" "$LAT" \
            "$(hot_share "$l0" "$l1")" "$(hot_share "$w0" "$w1")" >>"$REPORT"
    done
}

# -- 3b: renewal cost by the number of leases held ----------------------------
# At 10, 100 and 1,000 leases: lease.heartbeat (one row written, the answer
# read from it) and renew_leases (the same write, then a row per lease).
# (Up to 0.4.0 this section also ran 0.3.0's renew_leases, which wrote every
# lease; the module no longer serves a 0.3.0 schema.)
bench_renewal_flat() {
    {
        echo
        echo "### 3b. One renewal's cost by the number of leases held"
        echo
        echo "One client. \`lease.heartbeat(...)\`: one heartbeat row written per worker and stream, answered from that row; what a worker calls on every tick while its leases have not changed hands. \`SELECT count(*) FROM lease.renew_leases(...)\`: the same write, then a row per lease (the pinned result). Ratios against 10 leases of the same call; the goal is 1,000 within 1.5× of 10."
        echo
        echo "| leases held | \`heartbeat\` (ms) | vs 10 leases | \`renew_leases\` (ms) | vs 10 leases | \`renew_leases\` / \`heartbeat\` |"
        echo "| ---: | ---: | ---: | ---: | ---: | ---: |"
    } >>"$REPORT"
    local baseh= base4=
    for n in 10 100 1000; do
        step "renewal cost: $n leases, heartbeat and renew_leases"
        "${PSQL[@]}" -c "SELECT bench.make_stream('flat-$n', $n, 1)"
        echo "SELECT * FROM lease.heartbeat('bench', 'flat-$n', 'bench-owner', '7 days');" >"$WORK/heartbeat.sql"
        run_pgbench "heartbeat-$n" "$WORK/heartbeat.sql" 1
        local lath=$LAT
        echo "SELECT count(*) FROM lease.renew_leases('bench', 'flat-$n', 'bench-owner', '7 days');" >"$WORK/renew_flat.sql"
        run_pgbench "renew-flat-$n" "$WORK/renew_flat.sql" 1
        local lat4=$LAT
        [ -n "$base4" ] || { baseh=$lath; base4=$lat4; }
        printf '| %d | %.3f | %s× | %.3f | %s× | %s× |\n' "$n" "$lath" "$(ratio "$lath" "$baseh")" \
            "$lat4" "$(ratio "$lat4" "$base4")" "$(ratio "$lat4" "$lath")" >>"$REPORT"
    done
}

# -- 9: fast failover ---------------------------------------------------------
# test/bench/failover.sh: a SIGKILLed worker's shards, normal mode against
# the fast-failover mode (renew_every), and how the survivors find freed
# leases (short rounds against LISTEN); then the mode's cost on the server:
# one worker's steady balancing round and renewal with 100 workers in the
# stream, every worker in the mode (renew_every 1 hour: never cut short) or
# none.
bench_failover() {
    {
        echo
        echo "### 9. Fast failover: a SIGKILLed worker's shards, and what the mode costs"
        echo
    } >>"$REPORT"
    step "fast failover: SIGKILLs in both modes"
    # --quick: 2 kills a mode; finding freed leases with 4 s leases, one cycle
    if [ "$QUICK" -eq 1 ]; then
        bash test/bench/failover.sh 2 4 1 >>"$REPORT"
    else
        bash test/bench/failover.sh 10 10 5 >>"$REPORT"
    fi
    step "fast failover: the steady round at 100 workers"
    local mode every lat_take lat_renew
    {
        echo
        echo "One client, 1,000 leases over 100 workers, one worker's steady round (\`take_leases\`, nothing to do) and renewal (\`renew_leases\`, 10 leases); in the mode every call also records the caller's session."
        echo
        echo "| mode | steady round (ms) | renewal (ms) |"
        echo "| --- | ---: | ---: |"
    } >>"$REPORT"
    for mode in normal fast; do
        every=NULL
        [ "$mode" = fast ] && every="'1 hour'"
        "${PSQL[@]}" -c "SELECT bench.make_stream('steady-$mode', 1000, 100)" \
            -c "SELECT count(*) FROM generate_series(1, 100) AS w, lease.renew_leases('bench', 'steady-$mode', 'worker-' || w, '7 days', $every)"
        echo "SELECT count(*) FROM lease.take_leases('bench', 'steady-$mode', 'worker-1', '7 days', renew_every => $every);" >"$WORK/steady.sql"
        run_pgbench "steady-$mode" "$WORK/steady.sql" 1
        lat_take=$LAT
        echo "SELECT count(*) FROM lease.renew_leases('bench', 'steady-$mode', 'worker-1', '7 days', $every);" >"$WORK/steady_renew.sql"
        run_pgbench "steady-renew-$mode" "$WORK/steady_renew.sql" 1
        lat_renew=$LAT
        printf '| %s | %.3f | %.3f |\n' "$mode" "$lat_take" "$lat_renew" >>"$REPORT"
    done
}

# -- 4: balancing -------------------------------------------------------------
# A curve over the stream's size: one worker's round at steady state, and a
# round that acts, next to the client-side list-all a KCL-style taker runs
# every round.  Rows for the plot go to $WORK/balancing.dat.
bench_balancing() {
    {
        echo
        echo "### 4. A balancing round, by the size of the stream"
        echo
        echo "One worker's round (\`take_leases\`), one client. *steady*: the stream is balanced, nothing to take, claim or request. *steal*: a newcomer's first round, which asks the most loaded worker to hand a lease over. *take*: a lease released and taken back by the next round (the release is in the same transaction). Both acting rounds are rolled back, so every transaction sees the same stream. *list-all*: a client-side taker's read of the whole lease table (the reference consumer's per-round scan; its client-side work is not even counted). Plot: [$PLOTS/balancing.svg]($PLOTS/balancing.svg)."
        echo
        echo "| leases in stream | workers | steady (ms) | steal (ms) | take (ms) | list-all (ms) | list-all / steady |"
        echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    } >>"$REPORT"
    : >"$WORK/balancing.dat"
    for n in $SIZES; do
        for w in 10 100; do
            step "balancing: $n leases, $w workers"
            local s="bal-$n-$w"
            "${PSQL[@]}" -c "SELECT bench.make_stream('$s', $n, $w)" -c "ANALYZE lease.shard_leases" \
                -c "ANALYZE lease.stream_workers" \
                -c "SELECT count(*) FROM lease.take_leases('bench', '$s', 'worker-1', '7 days')" >/dev/null
            echo "SELECT count(*) FROM lease.take_leases('bench', '$s', 'worker-1', '7 days');" >"$WORK/take.sql"
            run_pgbench "take-$n-$w" "$WORK/take.sql" 1
            local steady=$LAT steal=NaN take=NaN
            if [ "$QUICK" -eq 0 ] || [ "$w" -eq 10 ]; then   # --quick: acting rounds at 10 workers only
            printf '%s\n' "BEGIN;" \
                "SELECT count(*) FROM lease.take_leases('bench', '$s', 'newcomer', '7 days');" \
                "ROLLBACK;" >"$WORK/steal.sql"
            run_pgbench "steal-$n-$w" "$WORK/steal.sql" 1
            steal=$LAT
            printf '%s\n' "BEGIN;" \
                "SELECT lease.release_lease('bench', '$s', 'shard-0', 'worker-1');" \
                "SELECT count(*) FROM lease.take_leases('bench', '$s', 'worker-1', '7 days');" \
                "ROLLBACK;" >"$WORK/retake.sql"
            run_pgbench "retake-$n-$w" "$WORK/retake.sql" 1
            take=$LAT
            fi
            echo "SELECT shard_id, lease_owner, lease_count, lease_expires_at, checkpoint, parent_shard_ids FROM lease.shard_leases WHERE app_name = 'bench' AND stream_name = '$s';" >"$WORK/list.sql"
            run_pgbench "list-$n-$w" "$WORK/list.sql" 1
            printf '| %d | %d | %.3f | %s | %s | %.3f | %s× |\n' "$n" "$w" "$steady" "$(ms_or_dash "$steal")" \
                "$(ms_or_dash "$take")" "$LAT" "$(ratio "$LAT" "$steady")" >>"$REPORT"
            echo "$n $w $steady $steal $take $LAT" >>"$WORK/balancing.dat"
            # one statement: its trigger updates the bookkeeping once
            "${PSQL[@]}" -c "DELETE FROM lease.shard_leases WHERE app_name = 'bench' AND stream_name = '$s'"
        done
    done
    local first last
    first=$(awk '$2 == 10 { print $3; exit }' "$WORK/balancing.dat")
    last=$(awk '$2 == 10 { v = $3 } END { print v }' "$WORK/balancing.dat")
    {
        echo
        echo "Growth of the steady round from $(echo $SIZES | awk '{ print $1 }') to $(echo $SIZES | awk '{ print $NF }') leases (10 workers): $(ratio "$last" "$first")×."
    } >>"$REPORT"
    plot_balancing "$WORK/balancing.dat" "$PLOTS/balancing.svg"
}

ms_or_dash() { if [ "$1" = NaN ]; then echo "–"; else printf '%.3f' "$1"; fi; }

# plot_balancing DATA SVG: latency against the stream's size, log-log.
plot_balancing() {
    mkdir -p "$(dirname "$2")"
    /usr/bin/gnuplot-nox <<GP
set terminal svg size 760,440 dynamic noenhanced font "sans,11"
set output "$2"
set title "One balancing round: take_leases vs a client's list-all"
set logscale xy
set xlabel "leases in the stream"
set ylabel "latency per round (ms)"
set key left top
set grid
plot "< awk '\$2 == 10' $1" using 1:3 with linespoints lw 2 title "take_leases steady, 10 workers", \
     "< awk '\$2 == 100' $1" using 1:3 with linespoints lw 2 title "take_leases steady, 100 workers", \
     "< awk '\$2 == 10' $1" using 1:4 with linespoints dt 2 title "steal round, 10 workers", \
     "< awk '\$2 == 10' $1" using 1:5 with linespoints dt 2 title "take round, 10 workers", \
     "< awk '\$2 == 10' $1" using 1:6 with linespoints lw 2 title "list-all, 10 workers", \
     "< awk '\$2 == 100' $1" using 1:6 with linespoints lw 2 title "list-all, 100 workers"
GP
}

# plot_histogram SVG TITLE YLABEL PLOT: a clustered bar chart (PLOT is
# gnuplot's plot command's arguments), with a dashed line at 1.
plot_histogram() {
    mkdir -p "$(dirname "$1")"
    /usr/bin/gnuplot-nox <<GP
set terminal svg size 760,400 dynamic noenhanced font "sans,11"
set output "$1"
set title "$2"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set yrange [0:*]
set ylabel "$3"
set key outside bottom center horizontal
set grid ytics
plot $4, 1 with lines dt 2 lc rgb "black" notitle
GP
}

# plot_checkpoints DATA SVG: throughput relative to the raw UPDATE, per variant.
plot_checkpoints() {
    plot_histogram "$2" "Checkpoint writes: throughput relative to the raw guarded UPDATE" "tps / raw UPDATE tps" \
        "\"$1\" using 2:xtic(1) title \"1,000 leases\", \"\" using 3 title \"50 leases + a renewer\""
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
        printf '| longest rotation (ms): an upper bound on how long the admission lock is held | %s |\n' "$max"
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

# -- 7: exactly once -----------------------------------------------------------
# The transactional mode of docs/exactly-once.md against the normal mode, one
# output row per record: $CLIENTS workers, each on a lease of its own
# (shard-<client_id>), batches of XONCE_BATCH records, the fenced checkpoint
# in both modes, and beside them one renewer on its own connection renewing
# every lease with renew_leases, as the clients do.
XONCE_BATCH=10
XONCE_WORK=0.2

# xonce_run NAME SCRIPT: the workers for $T s with the renewer beside them;
# sets TPS and LAT; the renewer's latency per renewal (µs) is appended to
# $WORK/renew-<NAME up to its first dash>.lat
xonce_run() {
    local name=$1 script=$2 epoch rpid
    epoch=$("${PSQL[@]}" -At -c "SELECT max(lease_epoch) FROM lease.shard_leases WHERE app_name = 'bench' AND stream_name = 'xonce'")
    "${PSQL[@]}" -c "TRUNCATE bench.output" -c "VACUUM lease.shard_leases" \
        -c "UPDATE lease.shard_leases SET checkpoint = '0' WHERE app_name = 'bench' AND stream_name = 'xonce'"
    "$PG_BINDIR/pgbench" -n -M prepared -T "$T" -c 1 -f test/bench/xonce_renewer.sql -D stream=xonce \
        -l --log-prefix="$WORK/xlat-$name" bench >"$WORK/xren-$name.log" 2>&1 &
    rpid=$!
    run_pgbench "xonce-$name" "$script" "$CLIENTS" -D stream=xonce -D epoch="$epoch" \
        -D batch="$XONCE_BATCH" -D work="$XONCE_WORK"
    wait "$rpid" || { cat "$WORK/xren-$name.log" >&2; return 1; }
    cat "$WORK/xlat-$name".* | awk '{ print $3 }' >>"$WORK/renew-${name%%-*}.lat"
    # the fenced checkpoints must have been accepted: every worker's moved on
    if [ "$("${PSQL[@]}" -At -c "SELECT count(*) FROM lease.shard_leases WHERE app_name = 'bench'
            AND stream_name = 'xonce' AND checkpoint <> '0'")" -ne "$CLIENTS" ]; then
        echo "bench: exactly once, $name: a worker's checkpoint did not move (refused?)" >&2
        return 1
    fi
}

# "avg / max" in ms of a file of latencies in µs
lat_avg_max() { awk '{ s += $1; if ($1 > m) m = $1; n++ } END { if (n) printf "%.1f / %.0f", s / n / 1000, m / 1000; else print "–" }' "$1"; }

bench_exactly_once() {
    local variants="normal tx" round order v base
    declare -A tps_of lat_of
    "${PSQL[@]}" -c "SELECT bench.make_stream('xonce', $CLIENTS, 1)"
    for ((round = 1; round <= ROUNDS; round++)); do
        order=$(round_order "$variants" "$round")
        for v in $order; do
            step "exactly once: $v mode (round $round of $ROUNDS)"
            xonce_run "$v-$round" "test/bench/xonce_$v.sql"
            tps_of[$v]="${tps_of[$v]:-} $TPS"
            lat_of[$v]="${lat_of[$v]:-} $LAT"
        done
    done
    for v in hold_last hold_first; do
        step "exactly once: ${XONCE_WORK} s of work per transaction, $v"
        xonce_run "$v-1" "test/bench/xonce_tx_$v.sql"
        tps_of[$v]=$TPS
        lat_of[$v]=$LAT
    done
    {
        echo
        echo "### 7. Exactly once: the transactional mode against the normal mode"
        echo
        echo "The cost of [docs/exactly-once.md](docs/exactly-once.md). $CLIENTS workers, each on a lease of its own, batches of $XONCE_BATCH records, one output row per record into \`bench.output\` (no unique constraint), the fenced \`update_checkpoint\` in both modes; beside them, on its own connection, one renewer renewing all their leases with \`renew_leases\` back to back. *Normal mode* (the baseline, at least once): the output \`INSERT\` committed, then the checkpoint (two statements, two commits). *Transactional mode*: \`BEGIN\`, the output, \`hold_lease\`, the checkpoint, \`COMMIT\`. The two modes interleaved over $ROUNDS rounds, each round starting at the other; median. Then the transactional mode with $XONCE_WORK s of work in every transaction (\`pg_sleep\`), \`hold_lease\` called last (just before the checkpoint) and first: the renewer waits for the transactions holding a lease, and its latency is the cost (scripts: \`test/bench/xonce_*.sql\`)."
        echo
        echo "| workers | records/s | ratio to the normal mode | batch latency avg (ms) | renewal latency avg / max (ms) |"
        echo "| --- | ---: | ---: | ---: | ---: |"
    } >>"$REPORT"
    base=$(echo "${tps_of[normal]}" | median)
    for v in normal tx hold_last hold_first; do
        local t l label r
        t=$(echo "${tps_of[$v]}" | median)
        l=$(echo "${lat_of[$v]}" | median)
        case "$v" in
            normal) label="normal mode: output committed, then the checkpoint (median of $ROUNDS)" ;;
            tx) label="transactional mode: output, \`hold_lease\`, checkpoint, one commit (median of $ROUNDS)" ;;
            hold_last) label="transactional, $XONCE_WORK s of work per batch, \`hold_lease\` **last**" ;;
            hold_first) label="transactional, $XONCE_WORK s of work per batch, \`hold_lease\` **first**" ;;
        esac
        # with the work, records/s measure the sleep: no ratio
        case "$v" in normal|tx) r=$(ratio "$t" "$base") ;; *) r="–" ;; esac
        printf '| %s | %.0f | %s | %.3f | %s |\n' "$label" "$(awk -v t="$t" -v b="$XONCE_BATCH" 'BEGIN { print t * b }')" \
            "$r" "$l" "$(lat_avg_max "$WORK/renew-$v.lat")" >>"$REPORT"
    done
}

# -- 8: balancing by load ----------------------------------------------------
# The same Zipf stream balanced by count and by load, and the steady round
# of a weighted stream against a count-balanced one of the same size.
bench_weighted() {
    local workers="ARRAY['w1','w2','w3','w4','w5','w6','w7','w8']" caps="ARRAY[2,1,1,1,1,1,1,1]::float8[]"
    local mode row
    {
        echo
        echo "### 8. Balancing by load against balancing by count"
        echo
        echo "64 shards with Zipf weights (exponent 1.1: the heaviest carries a quarter of the load), 8 workers, \`w1\` of capacity 2 (\`bench.converge\`, \`test/bench/setup.sql\`): every worker runs a round, then hands over what it was asked for, until a step changes nothing. *By count*: no weights on the leases, every capacity 1 (the count mode cannot weigh); *by load*: the weights set with \`set_weight\`, \`w1\` declaring capacity 2. Both spreads are measured with the Zipf weights and the capacities. \`test/balance/converge.py\` (suite \`balance\`) checks the weighted fleet's convergence, stillness and moves."
        echo
        echo "| balancing | steps | ownership changes | max(load / target) | max(load) / mean(load) |"
        echo "| --- | ---: | ---: | ---: | ---: |"
    } >>"$REPORT"
    for mode in count load; do
        step "weighted: Zipf stream balanced by $mode"
        local weighted=false
        [ "$mode" = load ] && weighted=true
        "${PSQL[@]}" -c "SELECT bench.make_zipf('zipf-$mode', 64, $weighted)" >/dev/null
        row=$("${PSQL[@]}" -At -F ' ' -c "SELECT steps, moves, max_over_target, max_over_mean FROM bench.converge('zipf-$mode', $workers, $caps, $weighted)")
        printf '| by %s | %d | %d | %.3f | %.3f |\n' "$mode" $row >>"$REPORT"
        "${PSQL[@]}" -c "DELETE FROM lease.shard_leases WHERE app_name = 'bench' AND stream_name = 'zipf-$mode'" >/dev/null
    done
    {
        echo
        echo "The steady round (nothing to take or request; worker-1's round, 10 workers, one client) of a stream whose leases all have weights (1 to 7, round-robin owners: every worker within the tolerance), against the same stream without weights, measured one after the other at each size:"
        echo
        echo "| leases in stream | by count (ms) | by load (ms) | by load / by count |"
        echo "| ---: | ---: | ---: | ---: |"
    } >>"$REPORT"
    local n first last cnt
    for n in $SIZES; do
        step "weighted: steady round, $n leases"
        "${PSQL[@]}" -c "SELECT bench.make_stream('cnt-$n', $n, 10)" -c "SELECT bench.make_weighted_stream('wtd-$n', $n, 10)" \
            -c "ANALYZE lease.shard_leases" -c "ANALYZE lease.stream_workers" \
            -c "SELECT count(*) FROM lease.take_leases('bench', 'cnt-$n', 'worker-1', '7 days')" \
            -c "SELECT count(*) FROM lease.take_leases('bench', 'wtd-$n', 'worker-1', '7 days')" >/dev/null
        echo "SELECT count(*) FROM lease.take_leases('bench', 'cnt-$n', 'worker-1', '7 days');" >"$WORK/cnt.sql"
        echo "SELECT count(*) FROM lease.take_leases('bench', 'wtd-$n', 'worker-1', '7 days');" >"$WORK/wtd.sql"
        run_pgbench "cnt-$n" "$WORK/cnt.sql" 1
        cnt=$LAT
        run_pgbench "wtd-$n" "$WORK/wtd.sql" 1
        printf '| %d | %.3f | %.3f | %s× |\n' "$n" "$cnt" "$LAT" "$(ratio "$LAT" "$cnt")" >>"$REPORT"
        [ -n "${first:-}" ] || first=$LAT
        last=$LAT
        "${PSQL[@]}" -c "DELETE FROM lease.shard_leases WHERE app_name = 'bench' AND stream_name IN ('cnt-$n', 'wtd-$n')" >/dev/null
    done
    {
        echo
        echo "Growth of the weighted steady round from $(echo $SIZES | awk '{ print $1 }') to $(echo $SIZES | awk '{ print $NF }') leases: $(ratio "$last" "$first")×."
    } >>"$REPORT"
}

# -- 10: side by side with etcd, ZooKeeper and Redis ----------------------------
# test/bench/peers/peers.py starts each system itself (its own PostgreSQL
# too, durable) and writes its part of the report and the plot's data: the
# ratios pg_lease ÷ peer of the rates, durable settings.
# -- 11: importing a KCL lease table ------------------------------------------
# import_kcl_dynamodb of synthetic KCL 2.x exports of growing size
# (test/bench/kcl_export.py: split parents that have ended, their children,
# 56-digit checkpoints, owners, hash keys; JSON Lines), each into an empty
# stream.  Wall time and the backend's CPU time (from /proc, so that other
# jobs on a shared machine count less), the CPU per 1,000 items, and each
# size's CPU per item over the smallest size's: 1.0 is linear (0.4.0's
# import was quadratic: 8,000 items took 86 s).  The baseline, measured
# beside it: import_kcl_ex_rows of as many leases (seven arrays, one
# INSERT), and the import's CPU over the baseline's.
import_run() {   # import_run SQL-FILE: sets WALL (s) and CPU (s) of its last statement
    local out
    out=$("${PSQL[@]}" -At -f "$1") || return 1
    WALL=$(printf '%s\n' "$out" | sed -n 's/^wall //p')
    CPU=$(awk '{ c[NR] = $1 + $2 } END { printf "%.2f", (c[2] - c[1]) / 100 }' "$WORK/import.cpu")
}

bench_import() {
    local sizes="1000 10000 100000" n first_cpu="" rows=""
    [ "$QUICK" -eq 1 ] && sizes="1000 10000"
    for n in $sizes; do
        step "import: $n KCL items (import_kcl_dynamodb, and import_kcl_ex_rows as the baseline)"
        /usr/bin/python3 test/bench/kcl_export.py "$n" >"$WORK/kcl-$n.json"
        # psql runs the import between two readings of its backend's CPU
        cat >"$WORK/import.sql" <<SQL
\\set export \`cat $WORK/kcl-$n.json\`
SELECT pg_backend_pid() AS pid \\gset
\\setenv P :pid
\\! cut -d' ' -f14,15 /proc/\$P/stat >"$WORK/import.cpu"
SELECT clock_timestamp() AS t0 \\gset
SELECT count(*) FROM lease.import_kcl_dynamodb('bench-import-$n', 'orders', :'export') \\g /dev/null
\\! cut -d' ' -f14,15 /proc/\$P/stat >>"$WORK/import.cpu"
SELECT 'wall ' || round(extract(epoch FROM clock_timestamp() - :'t0')::numeric, 2);
SQL
        import_run "$WORK/import.sql" || return 1
        local wall=$WALL cpu=$CPU
        cat >"$WORK/import.sql" <<SQL
SELECT pg_backend_pid() AS pid \\gset
\\setenv P :pid
CREATE TEMP TABLE k AS SELECT 'shardId-' || i AS shard, 'worker-' || i % 50 AS owner,
       '4959033827149025660855969254' || lpad(i::text, 28, '0') AS checkpoint
  FROM generate_series(1, $n) AS i;
\\! cut -d' ' -f14,15 /proc/\$P/stat >"$WORK/import.cpu"
SELECT clock_timestamp() AS t0 \\gset
SELECT lease.import_kcl_ex_rows(array_fill('bench-base-$n'::text, ARRAY[$n]), array_fill('orders'::text, ARRAY[$n]),
       (SELECT array_agg(shard) FROM k), (SELECT array_agg(checkpoint) FROM k), (SELECT array_agg(owner) FROM k),
       array_fill(100::bigint, ARRAY[$n]), array_fill(false, ARRAY[$n])) \\g /dev/null
\\! cut -d' ' -f14,15 /proc/\$P/stat >>"$WORK/import.cpu"
SELECT 'wall ' || round(extract(epoch FROM clock_timestamp() - :'t0')::numeric, 2);
SQL
        import_run "$WORK/import.sql" || return 1
        first_cpu=${first_cpu:-$cpu}
        local first_n=${sizes%% *}
        rows="$rows| $n | $wall | $cpu | $(awk -v c="$cpu" -v n="$n" 'BEGIN { printf "%.0f", 1000000 * c / n }') | $(awk -v c="$cpu" -v n="$n" -v f="$first_cpu" -v fn="$first_n" 'BEGIN { if (f > 0) printf "%.2f", (c / n) / (f / fn); else print "n/a" }') | $WALL | $CPU | $(ratio "$cpu" "$CPU") |
"
    done
    {
        echo
        echo "### 11. Importing a KCL lease table (import_kcl_dynamodb)"
        echo
        echo "Synthetic KCL 2.x exports (\`test/bench/kcl_export.py\`: split parents that have ended and their children, 56-digit checkpoints), each into an empty stream. CPU is the server backend's; \"per item vs 1,000\" is the CPU per item over the 1,000-item run's (1.00: linear; 0.4.0's import was quadratic, 8,000 items in 86 s). Baseline: \`import_kcl_ex_rows\` of as many leases (seven arrays, one INSERT), in the same run."
        echo
        echo "| items | import wall (s) | import CPU (s) | CPU per 1,000 items (ms) | per item vs 1,000 | baseline wall (s) | baseline CPU (s) | import ÷ baseline (CPU) |"
        echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
        printf '%s' "$rows"
    } >>"$REPORT"
}

bench_peers() {
    {
        echo
        echo "### 10. Side by side with etcd, ZooKeeper and Redis"
        echo
    } >>"$REPORT"
    if [ "$QUICK" -eq 1 ]; then
        echo "Not run with --quick (it starts etcd, ZooKeeper, Redis and PostgreSQL twice, durable and relaxed): suite \`peers\` of \`make test\` runs its short version." >>"$REPORT"
        return
    fi
    step "peers: pg_lease, etcd, ZooKeeper and Redis (test/bench/peers/peers.py)"
    PG_BINDIR="$PG_BINDIR" /usr/bin/python3 test/bench/peers/peers.py bench --rounds 3 --seconds 4 \
        --out "$WORK/peers.md" --data "$WORK/peers.dat"
    cat "$WORK/peers.md" >>"$REPORT"
    echo "Plot of the rates: [$PLOTS/peers.svg]($PLOTS/peers.svg)." >>"$REPORT"
    plot_peers "$WORK/peers.dat" "$PLOTS/peers.svg"
}

# plot_peers DATA SVG: pg_lease ÷ peer for the rates, durable: the single
# checkpoints, the per-shard rate of batched checkpoints, the renewals.
plot_peers() {
    awk '$1 ~ /^(ckpt4|ckpt16|ckptb10|ckptb100|renewff100|renewff1000)$/' "$1" |
        sed -e 's/^ckpt4 /"checkpoints, 4 clients" /' -e 's/^ckpt16 /"checkpoints, 16 clients" /' \
            -e 's/^ckptb10 /"per shard, batches of 10" /' -e 's/^ckptb100 /"per shard, batches of 100" /' \
            -e 's/^renewff100 /"renewals, 100 leases" /' -e 's/^renewff1000 /"renewals, 1,000 leases" /' >"$1.plot"
    plot_histogram "$2" "pg_lease ÷ peer, durable settings (above 1: pg_lease does more per second)" \
        "pg_lease rate / peer rate" \
        "\"$1.plot\" using 2:xtic(1) title \"÷ etcd\", \"\" using 3 title \"÷ ZooKeeper\", \"\" using 4 title \"÷ Redis\""
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
# the two checkpoint tables side by side: variant, ratio (1,000 leases), ratio (hot)
awk '$1 == "ckpt" { a[$2] = $3; order[++n] = $2 } $1 == "hot" { b[$2] = $3 }
     END { for (i = 1; i <= n; i++) print order[i], a[order[i]], b[order[i]] }' \
    "$WORK/checkpoints.dat" >"$WORK/checkpoints-plot.dat"
plot_checkpoints "$WORK/checkpoints-plot.dat" "$PLOTS/checkpoints.svg"
echo >>"$REPORT"
echo "Plot of sections 1 and 2: [$PLOTS/checkpoints.svg]($PLOTS/checkpoints.svg)." >>"$REPORT"
bench_renewal
bench_renewal_flat
bench_balancing
bench_rotation
bench_scale
bench_exactly_once
bench_weighted
bench_failover
bench_peers
bench_import

cp "$REPORT" "$ROOT/$OUT"
rm -rf "$WORK"
echo "bench: results written to $OUT" >&2
cat "$ROOT/$OUT"
