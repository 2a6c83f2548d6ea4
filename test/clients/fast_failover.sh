# shellcheck shell=bash
# Section 8 of the clients suite (sourced by test/clients/run.sh): the
# fast-failover mode (docs/client-rules.md, rule 6) on a database of its
# own, Python, Node, Elixir, Java and Go workers with renew_every 0.5 s and 10 s leases,
# these faults overlapping in one run of the fleet:
#   - an immediate stop and restart of the server: no lease is taken early
#     (the sessions died with the old server incarnation);
#   - SIGKILL of a worker: its leases are taken early (event session_ended),
#     and how long until each of its shards is checkpointed again is printed;
#   - SIGSTOP of a Python and a Node worker for 12 s (longer than the lease),
#     then SIGCONT: their sessions stay open, so the others take their leases
#     at expiry (expiry_takeover, no session_ended); after SIGCONT neither
#     starts a batch on, nor sends a checkpoint for, a shard before an
#     acknowledgement sent after SIGCONT (a renewal or a take) says it holds
#     it, and both take leases and process again.  Each is stopped while
#     its main thread waits in a sleep or a poll (x86-64 system call
#     numbers; retried otherwise): a pause that falls inside a batch's
#     record writes finishes that batch after the pause, which no client
#     rule can prevent (its checkpoint is then refused by the fencing token,
#     and only transactional mode fences the output);
#   - a dropped connection while the worker lives: a Python, a Node, a Java,
#     an Elixir and a Go worker reach the server through
#     test/clients/tcp_relay.py, which drops their connections half-open (the server's side closed, the worker's side open
#     and silent, so its calls hang) and refuses new ones for 9 s; the server
#     sees its session end and the others take its leases early
#     (session_ended), after each worker's last record, which is within
#     renew_every + margin of the drop; their hung calls are given up (the
#     clients' call timeouts), and once the relay lets them reconnect they
#     hold leases and process again;
#   - a worker cut off from the database while alive (its renewals hang, its
#     checkpoints fail, its backends are terminated): it stops processing by
#     itself, before the others take its leases (--failover: its failed
#     checkpoints are allowed);
#   - pg_terminate_backend of a live worker's connections: it reconnects;
# (a second Elixir worker, ex-ff-2, has a relay of its own that never drops)
# then test/clients/check.py over the journals (no two owners at once, among
# the rest).  The negative control: the cut-off worker and the Python,
# Elixir and Go workers whose connections dropped, with rule 6 disabled, process on
# after their leases were taken, and the checker must say so of each.
# Uses PY, NODE, PSQL, OUT, PGHOST, PGPORT, ok and the fleet harness.
FF_DB=pg_lease_ff
FF_RENEW=0.5
FF_LEASE=10
ff_db() {   # a fresh database for one run: the stream, the worker role's grants
    "$PSQL" -X -q -v ON_ERROR_STOP=1 -d postgres <<SQL >/dev/null
DROP DATABASE IF EXISTS $FF_DB;
CREATE DATABASE $FF_DB;
-- the throwaway cluster runs with synchronous_commit off; here every
-- acknowledged commit (a renewal, a checkpoint) must survive the restart
ALTER DATABASE $FF_DB SET synchronous_commit = on;
\c $FF_DB
SET client_min_messages = warning;
CREATE EXTENSION pg_lease;
GRANT USAGE ON SCHEMA lease TO clients_worker;
GRANT EXECUTE ON FUNCTION $FLEET_WORKER_FUNCTIONS TO clients_worker;
SELECT lease.grant_app('clients', 'clients_worker');
SELECT lease.create_lease('clients', 'orders', pg_catalog.format('s%s', pg_catalog.lpad(i::text, 2, '0')))
  FROM pg_catalog.generate_series(1, 12) AS i;
SQL
}
ff_sql() { "$PSQL" -X -qAt -d $FF_DB -c "$1"; }
ff_cut_off() {   # name: its renewals hang from now on, and its backends are terminated
    kill -USR1 "${PIDS[$1]}"
    sleep 0.2
    ff_sql "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name LIKE '$1%'" >/dev/null
}
# SIGSTOP, and SIGCONT again unless the main thread waits in one of these
# (x86-64: poll, select, nanosleep, clock_nanosleep, epoll_wait, pselect6,
# ppoll, epoll_pwait); prints the wall-clock time of the stop
FF_WAITS=" 7 23 35 230 232 270 271 281 "
ff_pause() {   # name
    local pid=${PIDS[$1]} call='' tries stat
    for tries in $(seq 1 100); do
        kill -STOP "$pid"
        for _ in $(seq 1 100); do   # until it has stopped
            read -r stat <"/proc/$pid/stat"
            stat=${stat##*) }
            [ "${stat%% *}" = T ] && break
        done
        read -r call _ <"/proc/$pid/syscall"
        case $FF_WAITS in *" $call "*) break ;; esac
        [ "$tries" -eq 100 ] && break     # another architecture: stopped wherever it was
        kill -CONT "$pid"
        sleep 0.01
    done
    date +%s.%N
    echo "# ff: $1 stopped in system call $call (try $tries)" >&2
}
ff_relay_start() {   # a relay to the cluster (test/clients/tcp_relay.py): sets ff_relay, FF_RELAY_DSN
    $PY test/clients/tcp_relay.py "$PGHOST/.s.PGSQL.$PGPORT" >"$FF_OUT/relay.port" &
    ff_relay=$!
    for _ in $(seq 1 50); do [ -s "$FF_OUT/relay.port" ] && break; sleep 0.1; done
    FF_RELAY_DSN="postgresql://clients_worker@127.0.0.1:$(cat "$FF_OUT/relay.port")/$FF_DB?sslmode=disable"
    rm "$FF_OUT/relay.port"
}
FF_DSN="postgresql:///$FF_DB?host=$PGHOST&port=$PGPORT&user=clients_worker"
FF_ADMIN="postgresql:///$FF_DB?host=$PGHOST&port=$PGPORT&user=postgres"

# The run.
ff_db
ok $? "fast failover: a database with a 12-shard stream"
FF_OUT=$OUT/ff && mkdir -p "$FF_OUT"
OUT_SAVED=$OUT; OUT=$FF_OUT
t0=$SECONDS
# py-ff-5, node-ff-3 and ex-ff-1 reach the server through a relay that drops
# them later; ex-ff-2 through one of its own that never does
ff_relay_start
steady_relay=$ff_relay; steady_dsn=$FF_RELAY_DSN
ff_relay_start
for w in py-ff-1 py-ff-2 py-ff-3 node-ff-1 node-ff-2; do ff_start $w; done
ff_start py-ff-5 "" "$FF_RELAY_DSN"
ff_start node-ff-3 "" "$FF_RELAY_DSN"
ff_start ex-ff-1 "" "$FF_RELAY_DSN"
ff_start ex-ff-2 "" "$steady_dsn"
# java-*: a Java worker direct, and one through the relay that drops
ff_start java-ff-1
ff_start java-ff-2 "" "$FF_RELAY_DSN"
ff_start go-ff-1 "" "$FF_RELAY_DSN"    # go-*: dropped with them
sleep 3
as_owner=()
[ "$(id -u)" -eq 0 ] && as_owner=(runuser -u postgres --)
restarted=no
"${as_owner[@]}" "${PG_BINDIR:-/usr/lib/postgresql/15/bin}/pg_ctl" -D "$PGHOST/data" -l "$PGHOST/server.log" \
    -m immediate -w -t 60 restart >/dev/null && restarted=yes
echo "# ff: $((SECONDS - t0)) s: the server stopped (immediate) and restarted: $restarted"
sleep 3
kill_at=$(ff_sql "SELECT clock_timestamp()")
kill_wall=$(date +%s.%N)
kill -KILL "${PIDS[py-ff-1]}"; wait "${PIDS[py-ff-1]}" 2>/dev/null
echo "# ff: $((SECONDS - t0)) s: py-ff-1 killed"
stop_py=$(ff_pause py-ff-3)
stop_node=$(ff_pause node-ff-2)
echo "# ff: $((SECONDS - t0)) s: py-ff-3 and node-ff-2 stopped (SIGSTOP)"
early=$(ff_sql "SELECT count(*) FROM lease.lease_events WHERE event = 'session_ended' AND occurred_at < '$kill_at'")
[ "$restarted" = yes ] && [ "$early" -eq 0 ]
ok $? "fast failover: no lease taken early after an immediate restart of the server ($early session_ended before the kill)"
sleep 3
# a BEAM is slow to start on a busy machine: ex-ff-1 processes before its connections drop
for _ in $(seq 1 40); do [ -s "$FF_OUT/ex-ff-1.records" ] && break; sleep 0.25; done
for _ in $(seq 1 40); do [ -s "$FF_OUT/java-ff-2.records" ] && break; sleep 0.25; done    # and a JVM
ff_cut_off py-ff-2
drop_at=$(date +%s.%N)
kill -USR1 "$ff_relay"
echo "# ff: $((SECONDS - t0)) s: py-ff-2 cut off (renewals hang, backends terminated); py-ff-5's, node-ff-3's and ex-ff-1's connections dropped half-open, new ones refused"
sleep 3
ff_sql "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name LIKE 'node-ff-1%'" >/dev/null
ff_start py-ff-4
echo "# ff: $((SECONDS - t0)) s: node-ff-1's connections terminated; py-ff-4 joined"
# SIGCONT 12 s after the stops (each 2 s past the lease duration)
sleep "$($PY -c "import sys, time; print(max(0, float(sys.argv[1]) + 12 - time.time()))" "$stop_node")"
cont_py=$(date +%s.%N); kill -CONT "${PIDS[py-ff-3]}"
cont_node=$(date +%s.%N); kill -CONT "${PIDS[node-ff-2]}"
heal_at=$(date +%s.%N); kill -USR2 "$ff_relay"
echo "# ff: $((SECONDS - t0)) s: py-ff-3 and node-ff-2 continued (SIGCONT); py-ff-5, node-ff-3 and ex-ff-1 may connect again"
LIVE="ex-ff-1 ex-ff-2 go-ff-1 java-ff-1 java-ff-2 node-ff-1 node-ff-2 node-ff-3 py-ff-3 py-ff-4 py-ff-5"
sleep 2
settle_and_stop 16 -d "$FF_DB"
kill -KILL "${PIDS[py-ff-2]}"; wait "${PIDS[py-ff-2]}" 2>/dev/null
kill "$ff_relay" "$steady_relay"; wait "$ff_relay" "$steady_relay" 2>/dev/null
[ "$stopped" -eq 11 ]
ok $? "fast failover: the eleven live workers stopped gracefully on SIGTERM"
$PY test/clients/check.py "$FF_OUT" "$FF_ADMIN" --killed py-ff-1,py-ff-2 --joined py-ff-4 --failover
ok $? "fast failover: fleet invariants (check.py) through a restart, a SIGKILL, SIGSTOP past the lease duration, a dropped connection, a cut-off worker, terminated backends"
# SIGSTOP: taken at expiry, not as session_ended; after SIGCONT nothing before a fresh acknowledgement
for pair in "py-ff-3 $stop_py $cont_py" "node-ff-2 $stop_node $cont_node"; do
    read -r w stop_at cont_at <<<"$pair"
    moved=$(ff_sql "SELECT count(*) FILTER (WHERE event = 'expiry_takeover' AND occurred_at
                                              BETWEEN to_timestamp($stop_at) AND to_timestamp($cont_at))
                           || ' ' || count(*) FILTER (WHERE event = 'session_ended')
                      FROM lease.lease_events WHERE from_owner = '$w'")
    $PY - "$FF_OUT" "$w" "$stop_at" "$cont_at" $moved <<'PYEOF'
import json, sys
out, w, stop, cont, expired, ended = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), \
    int(sys.argv[5]), int(sys.argv[6])
journal = [json.loads(l) for l in open("%s/%s.journal" % (out, w)) if l.endswith("\n")]
records = [json.loads(l) for l in open("%s/%s.records" % (out, w)) if l.endswith("\n")]
held = [e["leases"] for e in journal if e["ev"] == "renewed" and e["sent"] < stop][-1:] or [{}]
# what an acknowledgement sent after SIGCONT said this worker holds, and when it learned it
fresh = [(e["t"], e["shard"], e["epoch"]) for e in journal if e["ev"] == "taken" and e["sent"] >= cont]
fresh += [(e["t"], s, ep) for e in journal if e["ev"] == "renewed" and e["sent"] >= cont
          for s, ep in e["leases"].items()]
stale_checkpoints = [e for e in journal if e["ev"] in ("checkpoint", "checkpoint_failed") and e["sent"] >= cont
                     and not any(t <= e["sent"] and s == e["shard"] and ep == e["epoch"] for t, s, ep in fresh)]
stale_records = [r for r in records if r["t"] >= cont and not any(t <= r["t"] and s == r["shard"] for t, s, _ in fresh)]
skipped = sum(1 for e in journal if e["ev"] == "checkpoint_skipped" and e["t"] >= cont)
after = sum(1 for r in records if r["t"] >= cont)
retaken = len({s for _, s, _ in fresh})
print("# ff: %s held %d leases when stopped; while stopped %d taken at expiry, %d as session_ended; after"
      " SIGCONT: %d checkpoints skipped past the deadline, %d checkpoints and %d records before a fresh"
      " acknowledgement, then %d leases held again and %d records processed"
      % (w, len(held[0]), expired, ended, skipped, len(stale_checkpoints), len(stale_records), retaken, after))
sys.exit(0 if held[0] and expired > 0 and ended == 0 and not stale_checkpoints and not stale_records
         and retaken > 0 and after > 0 else 1)
PYEOF
    ok $? "fast failover: $w stopped 12 s (SIGSTOP): its leases taken at expiry; after SIGCONT no batch or checkpoint before a fresh renewal, then it processes again"
done
# the dropped connections: taken early, after each worker stopped by itself
for w in py-ff-5 node-ff-3 ex-ff-1 java-ff-2 go-ff-1; do
    ended=$(ff_sql "SELECT count(*) || ' ' || coalesce(extract(epoch FROM min(occurred_at)), 0)
                      FROM lease.lease_events WHERE event = 'session_ended' AND from_owner = '$w'")
    $PY - "$FF_OUT" "$w" "$drop_at" "$heal_at" $ended <<'PYEOF'
import json, sys
out, w, drop, heal, n_ended, first_ended = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), \
    int(sys.argv[5]), float(sys.argv[6])
journal = [json.loads(l) for l in open("%s/%s.journal" % (out, w)) if l.endswith("\n")]
started = next(e for e in journal if e["ev"] == "started")
limit = drop + 0.5 + started["margin"]            # renew_every + margin
records = [json.loads(l)["t"] for l in open("%s/%s.records" % (out, w)) if l.endswith("\n")]
before = sum(1 for t in records if t < drop)
last = max([t for t in records if t < heal], default=0)
after = sum(1 for t in records if t >= heal)
failed = sum(1 for e in journal if e["ev"].endswith("_failed") and drop <= e["t"] < heal)
print("# ff: %s processed %d records before the drop, its last %.2f s after it (its deadline: %.2f s);"
      " %d of its leases taken as session_ended, the first %.2f s after the drop; %d calls failed while cut"
      " off; %d records after it could connect again"
      % (w, before, last - drop, limit - drop, n_ended, first_ended - drop, failed, after))
sys.exit(0 if before > 0 and last < limit and n_ended > 0 and last < first_ended and failed > 0 and after > 0
         else 1)
PYEOF
    ok $? "fast failover: $w, its connections dropped half-open, stops by its deadline; its leases are taken early (session_ended), after its last record; it recovers"
done
taken=$(ff_sql "SELECT count(*) FROM lease.lease_events WHERE event = 'session_ended' AND from_owner = 'py-ff-1'")
# how long until each of py-ff-1's shards had a new acknowledged checkpoint
recovery=$(ff_recovery py-ff-1 "$kill_wall")
echo "# ff: py-ff-1's leases taken as session_ended: $taken; from its SIGKILL to a new acknowledged checkpoint: $recovery"
[ "$taken" -gt 0 ] && grep -q "median" <<<"$recovery"
ok $? "fast failover: a SIGKILLed worker's leases are taken before their expiry (session_ended)"

# The negative control: the same cut-off, and the same dropped connection
# (py-ff-5 and ex-ff-3, through a relay of their own), rule 6 disabled.
ff_db
FF_OUT=$OUT_SAVED/ff-nocontract && mkdir -p "$FF_OUT"
OUT=$FF_OUT
ff_relay_start
for w in py-ff-1 py-ff-3 node-ff-1; do ff_start $w; done
ff_start py-ff-2 nocontract
ff_start py-ff-5 nocontract "$FF_RELAY_DSN"
ff_start ex-ff-3 nocontract "$FF_RELAY_DSN"
ff_start java-ff-3 nocontract "$FF_RELAY_DSN"
ff_start go-ff-3 nocontract "$FF_RELAY_DSN"    # go-*
sleep 4
for _ in $(seq 1 40); do [ -s "$FF_OUT/ex-ff-3.records" ] && break; sleep 0.25; done   # a BEAM starts slowly
for _ in $(seq 1 40); do [ -s "$FF_OUT/java-ff-3.records" ] && break; sleep 0.25; done   # and a JVM
ff_cut_off py-ff-2
kill -USR1 "$ff_relay"
sleep 3
ff_start py-ff-4
LIVE="node-ff-1 py-ff-1 py-ff-3 py-ff-4"
sleep 2
settle_and_stop 16 -d "$FF_DB"
for w in py-ff-2 py-ff-5 ex-ff-3 java-ff-3 go-ff-3; do kill -KILL "${PIDS[$w]}"; wait "${PIDS[$w]}" 2>/dev/null; done
kill "$ff_relay"; wait "$ff_relay" 2>/dev/null
verdict=$($PY test/clients/check.py "$FF_OUT" "$FF_ADMIN" --killed py-ff-2,py-ff-5,ex-ff-3,java-ff-3,go-ff-3 --joined py-ff-4 --failover 2>&1)
status=$?
grep -E '^  FAIL' <<<"$verdict" | head -5 | sed 's/^/# negative control: /'
[ "$status" -eq 1 ] && grep 'FAIL no two owners at once' <<<"$verdict" | grep -q "the earlier owners: .*py-ff-2" &&
    grep 'FAIL no two owners at once' <<<"$verdict" | grep -q "the earlier owners: .*py-ff-5"
ok $? "fast failover, negative control: a cut-off worker and one whose connections dropped, both ignoring rule 6, overlap the next owners, and the checker says so"
grep 'FAIL no two owners at once' <<<"$verdict" | grep -q "the earlier owners: .*ex-ff-3"
ok $? "fast failover, negative control: an Elixir worker whose connections dropped, ignoring rule 6, overlaps the next owners, and the checker says so"
grep 'FAIL no two owners at once' <<<"$verdict" | grep -q "the earlier owners: .*java-ff-3"
ok $? "fast failover, negative control: a Java worker whose connections dropped, ignoring rule 6, overlaps the next owners, and the checker says so"
grep 'FAIL no two owners at once' <<<"$verdict" | grep -q "the earlier owners: .*go-ff-3"
ok $? "fast failover, negative control: a Go worker whose connections dropped, ignoring rule 6, overlaps the next owners, and the checker says so"
OUT=$OUT_SAVED
