#!/usr/bin/env bash
# The coordinator's own outage (docs/worker-guide.md, "After a restart"):
# a server stopped for longer than the leases, a crash reinitialisation,
# with the first call back a taker's.  Runs its own throwaway cluster (it
# restarts and crashes it) and prints TAP; every check reads what the
# workers' own calls returned, not only what the server says about itself.
set -uo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=../lib/tap.sh
. test/lib/tap.sh
# shellcheck source=../lib/cluster.sh
. test/lib/cluster.sh
bash test/lib/deps.sh coordinator >&2 || { ok 1 "dependencies (test/lib/deps.sh coordinator)"; echo "1..$n"; exit 1; }
PY=/usr/bin/python3          # Debian's python3-psycopg2 is for Debian's python3
cluster_start || { ok 1 "start a throwaway cluster"; echo "1..$n"; exit 1; }
# every write flushed at its commit: the crash below must lose nothing that
# was acknowledged (the cluster's own default is synchronous_commit = off)
export PGOPTIONS="-c synchronous_commit=on"
DB=pg_lease_coordinator
q() { psql -X -q -At -v ON_ERROR_STOP=1 -d "$DB" -c "$1"; }
pgctl() { cluster_as_owner "$PG_BINDIR/pg_ctl" -D "$CLUSTER_DIR/data" -l "$CLUSTER_DIR/server.log" -w -t 60 "$@" >/dev/null; }

psql -X -q -d postgres -c "CREATE DATABASE $DB" && q "CREATE EXTENSION pg_lease"
ok $? "a database with pg_lease"

# Three workers hold six leases of 4 s: w1 and w2 renew with renew_leases
# (their heartbeat row), w3 with renew_lease per lease.
setup() {
    q "DELETE FROM lease.shard_leases WHERE app_name = 'rs';
       SELECT lease.create_lease('rs', 's', 'shard-' || i) FROM generate_series(1, 6) AS i;
       SELECT lease.take_lease('rs', 's', 'shard-' || i, 'w' || ((i + 1) / 2), NULL, '4 s')
         FROM generate_series(1, 6) AS i;
       SELECT count(*) FROM lease.renew_leases('rs', 's', 'w1', '4 s');
       SELECT count(*) FROM lease.renew_leases('rs', 's', 'w2', '4 s');" >/dev/null
}
owners() { q "SELECT string_agg(shard_id || '=' || lease_owner, ' ' ORDER BY shard_id) FROM lease.shard_leases WHERE app_name = 'rs'"; }
initial="shard-1=w1 shard-2=w1 shard-3=w2 shard-4=w2 shard-5=w3 shard-6=w3"

setup
ok $? "three workers hold six leases of 4 s"
got=$(q "SELECT count(*), count(follows) FROM lease.server_incarnations")
[ "$got" = "1|0" ]
ok $? "the first incarnation pg_lease sees follows none, so no grace runs (got $got)"

# 1. The server stops for 9 s (more than two lease durations) and starts again.
pgctl stop -m fast && sleep 9 && pgctl start
ok $? "the server stops for 9 s and starts again"
# (max_steal => 0: a new worker's round would also ask a live holder to hand
# a lease over, which is balancing, not the outage)
took=$(q "SELECT count(*) FROM lease.take_leases('rs', 's', 'w4', '4 s', max_steal => 0) WHERE action = 'taken'")
[ "$took" = 0 ] && [ "$(owners)" = "$initial" ]
ok $? "the first call back, a fourth worker's take_leases, takes nothing (took $took)"
got=$(q "SELECT count(*) FROM lease.lease_events WHERE app_name = 'rs' AND event = 'restart_grace' AND from_owner = to_owner")
[ "$got" = 6 ]
ok $? "each of the six leases has a restart_grace event, its owner unchanged (got $got)"
got=$(q "SELECT count(*) || '|' || bool_and(m.follows IS NOT NULL OR m.first_seen = (SELECT min(first_seen) FROM lease.server_incarnations))
           || '|' || (SELECT leases_extended_total FROM lease.monitoring_incarnations() LIMIT 1) FROM lease.monitoring_incarnations() AS m")
[ "$got" = "2|true|6" ]
ok $? "monitoring_incarnations: a second incarnation that follows the first, with 6 leases extended (got $got)"
w1=$(q "SELECT string_agg(shard_id, ',' ORDER BY shard_id) FROM lease.renew_leases('rs', 's', 'w1', '4 s')")
w2=$(q "SELECT string_agg(shard_id, ',' ORDER BY shard_id) FROM lease.renew_leases('rs', 's', 'w2', '4 s')")
[ "$w1" = "shard-1,shard-2" ] && [ "$w2" = "shard-3,shard-4" ]
ok $? "the holders that renew promptly keep every lease (w1: $w1, w2: $w2)"
took=$(q "SELECT count(*) FROM lease.take_leases('rs', 's', 'w4', '4 s', max_steal => 0) WHERE action = 'taken'")
[ "$took" = 0 ] && [ "$(owners)" = "$initial" ]
ok $? "within the grace a second round takes nothing either: $(owners)"
# w3 never comes back: its leases move once the grace (4 s from the first
# call back) is over, and no later than that plus a round
sleep 4.5
q "SELECT count(*) FROM lease.renew_leases('rs', 's', 'w1', '4 s'); SELECT count(*) FROM lease.renew_leases('rs', 's', 'w2', '4 s')" >/dev/null
took=
for _ in 1 2 3; do
    took="$took$(q "SELECT string_agg(shard_id, ',' ORDER BY shard_id) FROM lease.take_leases('rs', 's', 'w4', '4 s', max_steal => 0) WHERE action = 'taken'"),"
done
[ "$(owners)" = "shard-1=w1 shard-2=w1 shard-3=w2 shard-4=w2 shard-5=w4 shard-6=w4" ]
ok $? "after the grace the dead worker's leases move, and only those (rounds took $took): $(owners)"

# 2. Negative control: with lease.restart_grace off the same outage
# reshuffles the fleet.
setup
pgctl stop -m fast && sleep 9 && pgctl start
took=$(psql -X -q -At -v ON_ERROR_STOP=1 -d "$DB" -c "SET lease.restart_grace = off" \
    -c "SELECT count(*) FROM lease.take_leases('rs', 's', 'w4', '4 s', max_steal => 0) WHERE action = 'taken'")
[ "$took" = 6 ]
ok $? "negative control: with lease.restart_grace off the first taker back takes all six leases (took $took)"

# 3. A crash reinitialisation (another backend SIGKILLed): the postmaster
# and the timeline stay, the incarnation changes, so a live fast-failover
# worker's leases are not taken as session_ended, nor by expiry.
q "DELETE FROM lease.shard_leases WHERE app_name = 'rs';
   SELECT lease.create_lease('rs', 's', 'shard-' || i) FROM generate_series(1, 4) AS i;
   SELECT lease.take_lease('rs', 's', 'shard-' || i, 'w1', NULL, '4 s', renew_every => '1 s') FROM generate_series(1, 4) AS i;
   SELECT count(*) FROM lease.heartbeat('rs', 's', 'w1', '4 s', renew_every => '1 s')" >/dev/null
before=$(q "SELECT count(*) FROM lease.server_incarnations")
psql -X -q -d "$DB" -c "SELECT pg_sleep(60)" >/dev/null 2>&1 &
victim_client=$!
for _ in $(seq 1 50); do
    victim=$(q "SELECT pid FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(60)' LIMIT 1")
    [ -n "$victim" ] && break
    sleep 0.1
done
kill -KILL "$victim"
wait "$victim_client" 2>/dev/null
for _ in $(seq 1 100); do
    "$PG_BINDIR/pg_isready" -q -h "$PGHOST" -p "$PGPORT" -d "$DB" && psql -X -q -At -d "$DB" -c "SELECT 1" >/dev/null 2>&1 && break
    sleep 0.1
done
sleep 2.5
took=$(q "SELECT count(*) FROM lease.take_leases('rs', 's', 'w2', '4 s', max_steal => 0) WHERE action = 'taken'")
after=$(q "SELECT count(*) FROM lease.server_incarnations")
[ "$took" = 0 ] && [ "$after" = $((before + 1)) ]
ok $? "2.5 s after a crash reinitialisation w2 takes none of live w1's four leases (took $took; incarnations $before -> $after)"
kept=$(q "SELECT leases FROM lease.heartbeat('rs', 's', 'w1', '4 s', renew_every => '1 s')")
[ "$kept" = 4 ]
ok $? "w1's heartbeat after the crash still holds its four leases (got $kept)"

# 4. Lease writes are durable whatever the session says: a session with
# synchronous_commit = off checkpoints, and the server stops at once (no
# shutdown checkpoint, the WAL buffers lost; the WAL writer made to wait
# 10 s so it flushes nothing meanwhile).  Every acknowledged checkpoint is
# there after the restart.  Negative control: with lease.min_synchronous_commit
# = off (superuser only) the same write is lost.
psql -X -q -d postgres -c "ALTER SYSTEM SET wal_writer_delay = '10s'" -c "SELECT pg_reload_conf()" >/dev/null
q "DELETE FROM lease.shard_leases WHERE app_name = 'rs';
   SELECT lease.create_lease('rs', 's', 'shard-1');
   SELECT lease.take_lease('rs', 's', 'shard-1', 'w1', NULL, '1 hour')" >/dev/null
# checkpoint VALUE with the session's synchronous_commit = off and the given
# extra settings, then an immediate stop and a start; prints the checkpoint
# the restarted server has
async_checkpoint() {
    local value=$1
    shift
    PGOPTIONS="-c synchronous_commit=off $*" psql -X -q -At -v ON_ERROR_STOP=1 -d "$DB" \
        -c "SELECT lease.update_checkpoint('rs', 's', 'shard-1', 'w1', '$value')" >/dev/null &&
        pgctl stop -m immediate && pgctl start &&
        q "SELECT checkpoint FROM lease.shard_leases WHERE app_name = 'rs' AND shard_id = 'shard-1'"
}
kept=0
for i in 1 2 3; do
    [ "$(async_checkpoint "4959033827149025660855969253836157109592157598913658889$i")" = \
        "4959033827149025660855969253836157109592157598913658889$i" ] && kept=$((kept + 1))
done
[ "$kept" = 3 ]
ok $? "a session with synchronous_commit = off, then an immediate stop: every acknowledged checkpoint survives ($kept of 3)"
lost=0
for i in 4 5 6; do
    [ "$(async_checkpoint "4959033827149025660855969253836157109592157598913658889$i" -c lease.min_synchronous_commit=off)" = \
        "4959033827149025660855969253836157109592157598913658889$i" ] || lost=$((lost + 1))
done
[ "$lost" -gt 0 ]
ok $? "negative control: with lease.min_synchronous_commit = off the same acknowledged checkpoint is lost ($lost of 3)"
got=$(PGOPTIONS="-c synchronous_commit=off" psql -X -q -At -d "$DB" -c "BEGIN" \
    -c "SELECT count(*) FROM lease.my_leases('rs', 's', 'w1')" -c "SHOW synchronous_commit" -c "COMMIT" -c "SHOW synchronous_commit" | tr '\n' ' ')
[ "$got" = "1 on off " ]
ok $? "inside a lease function's transaction synchronous_commit is on, after it the session's own again (got $got)"

# 5. Heartbeats without a flush (lease.flush_heartbeats off, the default):
# a transaction that only sends a heartbeat commits without waiting for
# the WAL flush, so an immediate stop loses the last ones (the WAL writer
# still waits 10 s).  The grace covers them: test/coordinator/flush_free.py
# journals what the holders were told (their local deadlines) and what a
# taker first back was told it took, and its checker counts the takes
# before a holder's deadline.  Negative control: the same heartbeats lost
# with no grace (lease.restart_grace off, the heartbeats made asynchronous
# by lease.min_synchronous_commit = off, as the grace's absence keeps them
# flushed) hand the leases out early.
export PG_LEASE_DB=$DB
journal=$CLUSTER_DIR/flush_free.json
flush_free_run() {
    local holders=$1 taker=$2
    PGOPTIONS="$PGOPTIONS $holders" $PY test/coordinator/flush_free.py beat "$journal" &&
        pgctl stop -m immediate && pgctl start &&
        PGOPTIONS="$PGOPTIONS $taker" $PY test/coordinator/flush_free.py take "$journal" &&
        $PY test/coordinator/flush_free.py check "$journal"
}
got=$(flush_free_run "" "")
read -r early lost taken <<<"$got"
[ "$early" = 0 ] && [ "$lost" = yes ] && [ "${taken:-0}" -ge 4 ]
ok $? "flush-free heartbeats lost in an immediate stop: no lease taken before its holder's local deadline, all four after the grace (violations, heartbeats lost, taken: $got)"
got=$(flush_free_run "-c synchronous_commit=off -c lease.min_synchronous_commit=off" "-c lease.restart_grace=off")
case "$got" in 0\ *|*\ no\ *|"") false ;; esac
ok $? "negative control: the same heartbeats lost without the grace hand leases out before their holders' deadlines (violations, heartbeats lost, taken: $got)"
# The caller's own writes in a heartbeat's transaction keep the durable
# commit, whichever comes first; lease.flush_heartbeats = on flushes the
# heartbeat itself.
q "CREATE TABLE IF NOT EXISTS flush_own (v int); TRUNCATE flush_own" >/dev/null
q "BEGIN; INSERT INTO flush_own VALUES (1); SELECT lease.heartbeat('ff', 's', 'h1', '3 s'); COMMIT;
   BEGIN; SELECT lease.heartbeat('ff', 's', 'h1', '3 s'); INSERT INTO flush_own VALUES (2); COMMIT" >/dev/null &&
    pgctl stop -m immediate && pgctl start
got=$(q "SELECT string_agg(v::text, ',' ORDER BY v) FROM flush_own")
[ "$got" = "1,2" ]
ok $? "a heartbeat inside the caller's transaction leaves its own writes durable, before it and after it (rows kept: $got)"
before=$(q "SELECT renewed_at FROM lease.stream_workers WHERE app_name = 'ff' AND worker = 'h1'")
after=$(PGOPTIONS="$PGOPTIONS -c lease.flush_heartbeats=on" psql -X -q -At -v ON_ERROR_STOP=1 -d "$DB" \
    -c "SELECT pg_sleep(0.1)" -c "SELECT lease.heartbeat('ff', 's', 'h1', '3 s')" \
    -c "SELECT renewed_at FROM lease.stream_workers WHERE app_name = 'ff' AND worker = 'h1'" | tail -n 1)
pgctl stop -m immediate && pgctl start
kept=$(q "SELECT renewed_at FROM lease.stream_workers WHERE app_name = 'ff' AND worker = 'h1'")
[ -n "$after" ] && [ "$after" != "$before" ] && [ "$kept" = "$after" ]
ok $? "with lease.flush_heartbeats = on a heartbeat survives an immediate stop (renewed_at $before -> $after, after the restart $kept)"
psql -X -q -d postgres -c "ALTER SYSTEM RESET wal_writer_delay" -c "SELECT pg_reload_conf()" >/dev/null

# 6. The synchronous replication this server reports against what it
# should have (lease.monitoring_replication, PgLeaseSyncStandbysMissing):
# what synchronous_standby_names asks for, and the shortfall, here with no
# standby at all.
repl() {
    psql -X -q -d postgres -c "ALTER SYSTEM SET synchronous_standby_names = '$1'" -c "SELECT pg_reload_conf()" >/dev/null
    sleep 0.3
    q "SELECT sync_standbys_configured || '/' || sync_standbys_missing FROM lease.monitoring_replication()"
}
psql -X -q -d postgres -c "LOAD 'pg_lease'" -c "ALTER SYSTEM SET lease.expected_sync_standbys = 1" >/dev/null
got="$(repl '') $(repl 'ANY 2 (node_2, node_3)') $(repl 'FIRST 1 (node_2)') $(repl '3 (a, b, c)') $(repl 'node_2, node_3') $(repl '*')"
[ "$got" = "0/1 2/1 1/1 3/1 1/1 1/1" ]
ok $? "monitoring_replication: what synchronous_standby_names asks for, and one expected standby missing (got $got)"
psql -X -q -d postgres -c "ALTER SYSTEM RESET synchronous_standby_names" -c "ALTER SYSTEM RESET lease.expected_sync_standbys" \
    -c "SELECT pg_reload_conf()" >/dev/null
sleep 0.3
got=$(q "SELECT sync_standbys_expected || '/' || sync_standbys_missing FROM lease.monitoring_replication()")
[ "$got" = "0/0" ]
ok $? "monitoring_replication: expecting none, none is missing (got $got)"

echo "1..$n"
[ "$fails" -eq 0 ]
