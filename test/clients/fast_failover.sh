# shellcheck shell=bash
# Section 6 of the clients suite (sourced by test/clients/run.sh): the
# fast-failover mode (docs/client-rules.md, rule 6) on a database of its
# own, Python and Node workers with renew_every 0.5 s and 10 s leases:
#   - an immediate stop and restart of the server: no lease is taken early
#     (the sessions died with the old server incarnation);
#   - SIGKILL of a worker: its leases are taken early (event session_ended),
#     and how long until each of its shards is checkpointed again is printed;
#   - a worker cut off from the database while alive (its renewals hang, its
#     checkpoints fail, its backends are terminated): it stops processing by
#     itself, before the others take its leases (--failover: its failed
#     checkpoints are allowed);
#   - pg_terminate_backend of a live worker's connections: it reconnects;
# then test/clients/check.py over the journals (no two owners at once, among
# the rest).  The negative control: the cut-off worker with rule 6 disabled
# processes on after its leases were taken, and the checker must say so.
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
FF_DSN="postgresql:///$FF_DB?host=$PGHOST&port=$PGPORT&user=clients_worker"
FF_ADMIN="postgresql:///$FF_DB?host=$PGHOST&port=$PGPORT&user=postgres"

# The run.
ff_db
ok $? "fast failover: a database with a 12-shard stream"
FF_OUT=$OUT/ff && mkdir -p "$FF_OUT"
OUT_SAVED=$OUT; OUT=$FF_OUT
t0=$SECONDS
for w in py-ff-1 py-ff-2 py-ff-3 node-ff-1; do ff_start $w; done
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
early=$(ff_sql "SELECT count(*) FROM lease.lease_events WHERE event = 'session_ended' AND occurred_at < '$kill_at'")
[ "$restarted" = yes ] && [ "$early" -eq 0 ]
ok $? "fast failover: no lease taken early after an immediate restart of the server ($early session_ended before the kill)"
sleep 3
ff_cut_off py-ff-2
echo "# ff: $((SECONDS - t0)) s: py-ff-2 cut off (renewals hang, backends terminated)"
sleep 3
ff_sql "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name LIKE 'node-ff-1%'" >/dev/null
ff_start py-ff-4
echo "# ff: $((SECONDS - t0)) s: node-ff-1's connections terminated; py-ff-4 joined"
LIVE="node-ff-1 py-ff-3 py-ff-4"
sleep 4
settle_and_stop 16 -d "$FF_DB"
kill -KILL "${PIDS[py-ff-2]}"; wait "${PIDS[py-ff-2]}" 2>/dev/null
[ "$stopped" -eq 3 ]
ok $? "fast failover: the three live workers stopped gracefully on SIGTERM"
$PY test/clients/check.py "$FF_OUT" "$FF_ADMIN" --killed py-ff-1,py-ff-2 --joined py-ff-4 --failover
ok $? "fast failover: fleet invariants (check.py) through a restart, a SIGKILL, a cut-off worker, terminated backends"
taken=$(ff_sql "SELECT count(*) FROM lease.lease_events WHERE event = 'session_ended' AND from_owner = 'py-ff-1'")
# how long until each of py-ff-1's shards had a new acknowledged checkpoint
recovery=$(ff_recovery py-ff-1 "$kill_wall")
echo "# ff: py-ff-1's leases taken as session_ended: $taken; from its SIGKILL to a new acknowledged checkpoint: $recovery"
[ "$taken" -gt 0 ] && grep -q "median" <<<"$recovery"
ok $? "fast failover: a SIGKILLed worker's leases are taken before their expiry (session_ended)"

# The negative control: the same cut-off, rule 6 disabled.
ff_db
FF_OUT=$OUT_SAVED/ff-nocontract && mkdir -p "$FF_OUT"
OUT=$FF_OUT
for w in py-ff-1 py-ff-3 node-ff-1; do ff_start $w; done
ff_start py-ff-2 nocontract
sleep 4
ff_cut_off py-ff-2
sleep 3
ff_start py-ff-4
LIVE="node-ff-1 py-ff-1 py-ff-3 py-ff-4"
sleep 2
settle_and_stop 16 -d "$FF_DB"
kill -KILL "${PIDS[py-ff-2]}"; wait "${PIDS[py-ff-2]}" 2>/dev/null
verdict=$($PY test/clients/check.py "$FF_OUT" "$FF_ADMIN" --killed py-ff-2 --joined py-ff-4 --failover 2>&1)
status=$?
grep -E '^  FAIL' <<<"$verdict" | head -5 | sed 's/^/# negative control: /'
[ "$status" -eq 1 ] && grep -q 'FAIL no two owners at once' <<<"$verdict"
ok $? "fast failover, negative control: a worker ignoring rule 6 overlaps the next owner, and the checker says so"
OUT=$OUT_SAVED
