#!/usr/bin/env bash
# The production HA topology of a partition (docs/scale-out.md, "Three nodes
# per partition"): pins the pg_auto_failover behaviour pg_lease relies on,
# and shows that a 2-node formation loses acknowledged lease writes where a
# 3-node one keeps them.
#
# One monitor and two formations, on loopback and Unix sockets in a
# directory of its own, every server as the `postgres` OS user:
#   two:   t1 (primary) + t2, pg_auto_failover's 2-node group
#          (number_sync_standbys forced to 0);
#   three: h1 (primary) + h2 + h3, replication-quorum true on each,
#          number-sync-standbys 1.
# In each the same fault: one standby's host crashes (SIGKILL of its
# pg_autoctl and Postgres), a client writes checkpoints and records which
# the server acknowledged, the primary is SIGKILLed too, the standby starts
# again and the monitor fails over.  A
# checker compares the client's record with what the new primary holds.
# The 2-node case must lose acknowledged checkpoints (the negative
# control), the 3-node case none.  Prints TAP.
set -uo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=../lib/tap.sh
. test/lib/tap.sh

PG_BINDIR=${PG_BINDIR:-/usr/lib/postgresql/15/bin}
PG_AUTOCTL=${PG_AUTOCTL:-/usr/bin/pg_autoctl}
DB=pg_lease
START=$(date +%s)
[ "$(id -u)" -eq 0 ] || { echo "ha_topology.sh: run as root (servers run as the postgres OS user)" >&2; exit 1; }
DIR=$(mktemp -d /tmp/pg_lease_ha.XXXXXX) || exit 1
mkdir -p "$DIR"/{pids,logs,run,config,share}
chown -R postgres: "$DIR"
chmod 755 "$DIR"

# A command as postgres, pg_autoctl's config, state and pid files under DIR.
as_pg() {
    runuser -u postgres -- env HOME="$DIR" XDG_CONFIG_HOME="$DIR/config" \
        XDG_DATA_HOME="$DIR/share" XDG_RUNTIME_DIR="$DIR/run" PGHOST="$DIR" "$@"
}
psql_at() {
    local port=$1
    shift
    "$PG_BINDIR/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$DIR" -p "$port" -U postgres "$@"
}
mon() { psql_at "$MONITOR_PORT" -d pg_auto_failover -c "$1"; }
monitor_uri() { echo "postgres://autoctl_node@127.0.0.1:$MONITOR_PORT/pg_auto_failover?sslmode=disable"; }

# A free loopback port below the ephemeral range (no outgoing connection
# can take it before the server binds it).
free_port() {
    local p low
    read -r low _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || low=32768
    [ "$low" -gt 12000 ] || low=32768
    while :; do
        p=$((10000 + RANDOM % (low - 10000)))
        grep -qx "$p" "$DIR/ports.used" 2>/dev/null && continue
        ss -Htan "sport = :$p" 2>/dev/null | grep -q . && continue
        echo "$p" >>"$DIR/ports.used"
        echo "$p"
        return
    done
}

# Every PID below $1, then $1.
tree() {
    local child
    for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do tree "$child"; done
    echo "$1"
}

# Node $1's processes: its pg_autoctl and everything under it, and its
# postmaster's tree should that not be below pg_autoctl.
node_pids() {
    local pid pm
    pid=$(cat "$DIR/pids/$1" 2>/dev/null)
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && tree "$pid"
    pm=$(head -n 1 "$DIR/$1/postmaster.pid" 2>/dev/null)
    [ -n "$pm" ] && [ "$(readlink "/proc/$pm/cwd" 2>/dev/null)" = "$DIR/$1" ] && tree "$pm"
}

# Stops everything started here, by PID, and removes DIR.
cleanup() {
    local f name pids="" pid i alive
    for f in "$DIR"/pids/*; do
        [ -s "$f" ] || continue
        name=$(basename "$f")
        pids="$pids $(node_pids "$name")"
    done
    # pg_autoctl stops its Postgres on SIGTERM; the monitor last
    for f in "$DIR"/pids/[th]* "$DIR"/pids/monitor; do
        [ -s "$f" ] && kill -TERM "$(cat "$f")" 2>/dev/null
    done
    for i in $(seq 1 80); do
        alive=0
        for pid in $pids; do kill -0 "$pid" 2>/dev/null && alive=1; done
        [ "$alive" -eq 0 ] && break
        sleep 0.25
    done
    for pid in $pids; do kill -KILL "$pid" 2>/dev/null; done
    rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# `pg_autoctl ARGS...` in the background as postgres; its PID (the shell
# execs it) goes to $DIR/pids/$1.
start_autoctl() {
    local name=$1 i
    shift
    rm -f "$DIR/pids/$name"
    as_pg bash -c 'echo $$ >"$0"; exec "$@"' "$DIR/pids/$name" "$PG_AUTOCTL" "$@" \
        >>"$DIR/logs/$name.log" 2>&1 </dev/null &
    for i in $(seq 1 50); do
        [ -s "$DIR/pids/$name" ] && return 0
        sleep 0.1
    done
    return 1
}

init_pgdata() {
    as_pg "$PG_BINDIR/initdb" -D "$1" -U postgres --auth=trust -E UTF8 --locale=C --no-sync \
        >"$DIR/logs/initdb.$(basename "$1").log" 2>&1 || return 1
    cat >>"$1/postgresql.conf" <<CONF
unix_socket_directories = '$DIR'
listen_addresses = '127.0.0.1'
shared_buffers = 16MB
max_connections = 40
fsync = off
wal_keep_size = 64MB
checkpoint_completion_target = 0
CONF
}

# Waits up to $2 seconds (4 checks a second) until the shell test $1 holds.
wait_for() {
    local i
    for i in $(seq 1 $(($2 * 4))); do
        eval "$1" && return 0
        sleep 0.25
    done
    return 1
}

# Formation $1's settled states, sorted ("primary secondary secondary").
states() {
    mon "SELECT string_agg(reportedstate::text, ' ' ORDER BY reportedstate::text)
           FROM pgautofailover.node WHERE formationid = '$1' AND reportedstate = goalstate"
}
state_of() { mon "SELECT reportedstate || '/' || goalstate FROM pgautofailover.node WHERE nodename = '$1'"; }
port_of() { eval echo "\$PORT_$1"; }

# The node of formation $1 that is a settled, writable primary now.
primary_of() {
    mon "SELECT nodename FROM pgautofailover.node
          WHERE formationid = '$1' AND reportedstate IN ('single', 'primary', 'wait_primary')
            AND goalstate = reportedstate ORDER BY nodeid LIMIT 1"
}

create_node() {
    local name=$1 formation=$2
    start_autoctl "$name" create postgres --pgdata "$DIR/$name" --pgport "$(port_of "$name")" \
        --pghost "$DIR" --listen 127.0.0.1 --hostname 127.0.0.1 --name "$name" \
        --formation "$formation" --monitor "$(monitor_uri)" --auth trust --no-ssl \
        --dbname "$DB" --replication-quorum true --candidate-priority 50 \
        --pgctl "$PG_BINDIR/pg_ctl" --run
}

MONITOR_PORT=$(free_port)
for name in t1 t2 h1 h2 h3; do eval "PORT_$name=$(free_port)"; done

# 1. The monitor (health checks tuned for failover in seconds, as in
# test/scale/cluster.sh), the formations, the primaries with pg_lease.
up() {
    init_pgdata "$DIR/monitor" || return 1
    cat >>"$DIR/monitor/postgresql.conf" <<CONF
pgautofailover.health_check_period = 1000
pgautofailover.health_check_timeout = 1000
pgautofailover.health_check_max_retries = 1
pgautofailover.health_check_retry_delay = 500
pgautofailover.node_considered_unhealthy_timeout = 2000
pgautofailover.startup_grace_period = 3000
pgautofailover.primary_demote_timeout = 4000
CONF
    as_pg "$PG_AUTOCTL" create monitor --pgdata "$DIR/monitor" --pgport "$MONITOR_PORT" \
        --hostname 127.0.0.1 --listen 127.0.0.1 --auth trust --no-ssl \
        --pgctl "$PG_BINDIR/pg_ctl" >"$DIR/logs/monitor.create.log" 2>&1 || return 1
    start_autoctl monitor run --pgdata "$DIR/monitor" || return 1
    wait_for '"$PG_BINDIR/pg_isready" -q -h "$DIR" -p "$MONITOR_PORT"' 30 || return 1
    local f
    for f in two three; do
        as_pg "$PG_AUTOCTL" create formation --monitor "$(monitor_uri)" --formation "$f" \
            --kind pgsql --dbname "$DB" --enable-secondary >>"$DIR/logs/monitor.create.log" 2>&1 || return 1
    done
    init_pgdata "$DIR/t1" && init_pgdata "$DIR/h1" || return 1
    create_node t1 two && create_node h1 three || return 1
    for name in t1 h1; do
        wait_for '[ "$(state_of $name)" = single/single ]' 90 || return 1
        wait_for 'psql_at "$(port_of $name)" -d "$DB" -c "SELECT 1" >/dev/null 2>&1' 30 || return 1
        psql_at "$(port_of $name)" -d "$DB" -c "CREATE EXTENSION pg_lease" >/dev/null || return 1
    done
    create_node t2 two && create_node h2 three || return 1
    # h3 after h2 has its base backup: two copies at once on a 2-core machine
    wait_for '[ -f "$DIR/h2/postmaster.pid" ]' 60
    create_node h3 three || return 1
    wait_for '[ "$(states two)" = "primary secondary" ]' 120 || return 1
    wait_for '[ "$(states three)" = "primary secondary secondary" ]' 120 || return 1
    as_pg "$PG_AUTOCTL" set formation number-sync-standbys 1 --formation three \
        --monitor "$(monitor_uri)" >>"$DIR/logs/monitor.create.log" 2>&1 || return 1
    wait_for '[ "$(states three)" = "primary secondary secondary" ]' 60
}
up
ok_show $? "a monitor, a 2-node formation and a 3-node formation (number-sync-standbys 1), pg_lease on both primaries ($(($(date +%s) - START)) s)" \
    "$DIR/logs/monitor.create.log"
if [ "$fails" -ne 0 ]; then
    for f in "$DIR"/logs/*.log; do echo "# == $f"; tail -n 15 "$f" | sed 's/^/#   /'; done
    echo "1..$n"
    exit 1
fi

# 2. The behaviour pg_lease relies on, pinned.
got=$(mon "SELECT formationid || '=' || number_sync_standbys FROM pgautofailover.formation
            WHERE formationid IN ('two', 'three') ORDER BY formationid")
got=$(oneline "$got")
[ "$got" = "three=1 two=0" ]
ok $? "the monitor's formations: number_sync_standbys 1 on three nodes, 0 on two (got $got)"
got=$(mon "SELECT formationid || ':' || count(*) || ':' || bool_and(replicationquorum) || ':' || min(candidatepriority)
             FROM pgautofailover.node WHERE formationid IN ('two', 'three') GROUP BY formationid ORDER BY formationid")
got=$(oneline "$got")
[ "$got" = "three:3:true:50 two:2:true:50" ]
ok $? "replication quorum true and candidate priority 50 on every node (got $got)"
settings=$(as_pg "$PG_AUTOCTL" show settings --formation three --monitor "$(monitor_uri)" 2>&1)
grep -Eq '^ *formation \| +three \| +number_sync_standbys \| +1 *$' <<<"$settings" &&
    [ "$(grep -Ec '^ *node \| +h[123] \| +replication quorum \| +true *$' <<<"$settings")" = 3 ]
ok $? "pg_autoctl show settings: number_sync_standbys 1, replication quorum true on h1, h2 and h3"
[ "$fails" -eq 0 ] || sed 's/^/#   /' <<<"$settings"
standby_name() { echo "pgautofailover_standby_$(mon "SELECT nodeid FROM pgautofailover.node WHERE nodename = '$1'")"; }
ssn() { psql_at "$(port_of "$1")" -d postgres -c "SHOW synchronous_standby_names"; }
want3="ANY 1 ($(standby_name h2), $(standby_name h3))"
got=$(ssn h1)
[ "$got" = "$want3" ]
ok $? "the 3-node primary's synchronous_standby_names names both standbys: $got"
got=$(psql_at "$PORT_h1" -d postgres -c "SELECT string_agg(application_name || '=' || sync_state, ' ' ORDER BY application_name) FROM pg_stat_replication")
[ "$got" = "$(standby_name h2)=quorum $(standby_name h3)=quorum" ]
ok $? "both standbys stream to it as quorum standbys ($got)"
got=$(ssn t1)
[ "$got" = "ANY 1 ($(standby_name t2))" ]
ok $? "the 2-node primary's synchronous_standby_names while its standby is healthy: $got"
as_pg "$PG_AUTOCTL" set formation number-sync-standbys 1 --formation two --monitor "$(monitor_uri)" \
    >"$DIR/logs/set.two.log" 2>&1
st=$?
got=$(mon "SELECT number_sync_standbys FROM pgautofailover.formation WHERE formationid = 'two'")
[ "$st" -ne 0 ] && [ "$got" = 0 ]
ok_show $? "a 2-node formation refuses number-sync-standbys 1 (exit $st, still $got)" "$DIR/logs/set.two.log" 5

# 3. The fault, the same in both formations:
#  a. a checkpoint while all is healthy (shard-0);
#  b. the standby STANDBY crashes (SIGKILL of its pg_autoctl and Postgres);
#     the monitor marks it unhealthy and no longer a candidate (goal
#     catchingup);
#     on two nodes the primary goes to wait_primary and empties
#     synchronous_standby_names, on three it stays primary;
#  c. the client writes checkpoints (shard-1 .. shard-K) and records which
#     the server acknowledged;
#  d. the primary is SIGKILLed (its whole process tree), the standby
#     starts again (pg_autoctl run), the monitor fails over if it can (WAIT
#     seconds).
# The checker reads the new primary or, when there is none, the standby
# STANDBY (the only copy left once the primary's host is gone).  Sets LOST
# (acknowledged checkpoints missing there), ACKED, AMBIGUOUS, NEWPRIMARY
# (empty: no failover), SURVIVOR, SSN_DURING and PSTATE (the primary's state
# while the standby was down).
K=20
fault() {
    local formation=$1 primary=$2 standby=$3 port i out v
    PSTATE= SSN_DURING= NEWPRIMARY= SURVIVOR= SURVIVOR_STATE= LOST= ACKED=0
    port=$(port_of "$primary")
    STEP="set up the leases"
    psql_at "$port" -d "$DB" -c "SELECT count(lease.create_lease('ha', 's', 'shard-' || i)) FROM generate_series(0, $K) AS i" \
        -c "SELECT count(lease.take_lease('ha', 's', 'shard-' || i, 'w1', NULL, '1 hour')) FROM generate_series(0, $K) AS i" >/dev/null ||
        return 1
    # the client's record: one line per acknowledged checkpoint, "shard value"
    : >"$DIR/told.$formation"
    write() {
        out=$(psql_at "$port" -d "$DB" -c "SET statement_timeout = '20s'" \
            -c "SELECT lease.update_checkpoint('ha', 's', 'shard-$1', 'w1', '$2')" 2>"$DIR/err") || return 1
        # a commit whose sync wait was cancelled is ambiguous, not acknowledged
        if grep -q 'canceling wait for synchronous replication' "$DIR/err"; then
            AMBIGUOUS=$((AMBIGUOUS + 1))
            return 1
        fi
        [ "$out" = t ] && echo "shard-$1 $2" >>"$DIR/told.$formation"
    }
    AMBIGUOUS=0
    STEP="checkpoint shard-0"
    write 0 "before-$formation" || return 1
    STEP="find the standby's walreceiver"
    # shellcheck disable=SC2046
    kill -KILL $(node_pids "$standby") 2>/dev/null
    STEP="wait for the monitor to react to the crashed standby"
    if [ "$formation" = two ]; then
        wait_for '[ "$(state_of "$primary")" = wait_primary/wait_primary ] && [ -z "$(ssn "$primary")" ]' 60 || return 1
    else
        wait_for '[ "$(state_of "$standby")" = secondary/catchingup ]' 60 || return 1
    fi
    PSTATE=$(state_of "$primary")
    SSN_DURING=$(ssn "$primary")
    for i in $(seq 1 "$K"); do write "$i" "during-$formation-$i"; done
    ACKED=$(wc -l <"$DIR/told.$formation")
    # the primary's keeper reports its LSN every second
    sleep 1.5
    # shellcheck disable=SC2046
    kill -KILL $(node_pids "$primary") 2>/dev/null
    STEP="start the standby again"
    start_autoctl "$standby" run --pgdata "$DIR/$standby" || return 1
    STEP="wait for a failover"
    wait_for 'NEWPRIMARY=$(primary_of "$formation"); [ -n "$NEWPRIMARY" ] && [ "$NEWPRIMARY" != "$primary" ] &&
              [ "$(psql_at "$(port_of "$NEWPRIMARY")" -d "$DB" -c "SELECT pg_is_in_recovery()" 2>/dev/null)" = f ]' "$4" ||
        NEWPRIMARY=
    SURVIVOR=${NEWPRIMARY:-$standby}
    SURVIVOR_STATE=$(state_of "$SURVIVOR")
    if [ -z "$NEWPRIMARY" ]; then
        # no failover: the standby's keeper keeps trying to follow the dead
        # primary and leaves its Postgres down; stop the keeper and start
        # that Postgres alone (a hot standby) to read the copy it holds
        STEP="stop $standby's keeper and start its Postgres alone"
        kill -TERM "$(cat "$DIR/pids/$standby")" 2>/dev/null
        wait_for '! kill -0 "$(cat "$DIR/pids/$standby")" 2>/dev/null' 30 || return 1
        as_pg "$PG_BINDIR/pg_ctl" -D "$DIR/$standby" -l "$DIR/logs/$standby.alone.log" -w -t 60 start >/dev/null ||
            return 1
    fi
    STEP="read $SURVIVOR"
    wait_for 'psql_at "$(port_of "$SURVIVOR")" -d "$DB" -c "SELECT 1" >/dev/null 2>&1' 60 || return 1
    # the checker: every checkpoint the client was told was written, on the new primary
    LOST=0
    while read -r shard v; do
        [ "$(psql_at "$(port_of "$SURVIVOR")" -d "$DB" -c "SELECT checkpoint FROM lease.shard_leases
              WHERE app_name = 'ha' AND stream_name = 's' AND shard_id = '$shard'")" = "$v" ] || LOST=$((LOST + 1))
    done <"$DIR/told.$formation"
    [ -n "$NEWPRIMARY" ] || as_pg "$PG_BINDIR/pg_ctl" -D "$DIR/$standby" -m fast -w -t 60 stop >/dev/null
}

# the monitor's events for formation $1, as TAP comments
events() {
    mon "SELECT to_char(eventtime, 'HH24:MI:SS.MS') || ' ' || nodename || ' ' || reportedstate || '/' || goalstate || ' ' || description
           FROM pgautofailover.event WHERE formationid = '$1' ORDER BY eventid" | tail -n "${2:-25}" | sed 's/^/#   /'
}

# 2 nodes: pg_auto_failover 2.0 promotes no standby in catchingup, and the
# standby's keeper cannot leave secondary for catchingup while the primary
# it follows is dead (nor starts its Postgres), so the formation is left
# with no primary; the standby's data, the only copy left, lacks what the
# primary acknowledged alone (it was never sent there).
t0=$(date +%s)
fault two t1 t2 20
st=$?
[ $st -eq 0 ] || echo "# failed at: $STEP"
ok_show $st "2-node: standby t2 crashed, primary t1 went to $PSTATE (synchronous_standby_names '$SSN_DURING'), acknowledged $ACKED checkpoints, was killed; after the failover wait: ${NEWPRIMARY:-no primary}, t2 $SURVIVOR_STATE (reported/goal) ($(($(date +%s) - t0)) s)" \
    "$DIR/logs/t2.log"
[ $st -eq 0 ] || events two
if [ $st -eq 0 ]; then
    grep -q '^shard-0 ' "$DIR/told.two" && [ "$ACKED" -gt 1 ] && [ "$LOST" -gt 0 ]
    ok $? "negative control: the 2-node formation loses acknowledged checkpoints: $LOST of $ACKED missing on $SURVIVOR, the only node left ($AMBIGUOUS ambiguous)"
    [ "$LOST" -gt 0 ] || events two
fi

t0=$(date +%s)
fault three h1 h2 120
st=$?
[ $st -eq 0 ] && [ -n "$NEWPRIMARY" ]
st=$?
[ $st -eq 0 ] || echo "# failed at: $STEP"
ok_show $st "3-node: standby h2 crashed, primary h1 stayed $PSTATE (synchronous_standby_names '$SSN_DURING'), acknowledged $ACKED checkpoints, was killed; ${NEWPRIMARY:-no node} promoted ($(($(date +%s) - t0)) s)" \
    "$DIR/logs/h2.log"
[ $st -eq 0 ] || events three
if [ $st -eq 0 ]; then
    [ "$ACKED" = $((K + 1)) ] && [ "$LOST" = 0 ]
    ok $? "the 3-node formation loses no acknowledged checkpoint: $LOST of $ACKED missing on the new primary $NEWPRIMARY ($AMBIGUOUS ambiguous)"
    [ "$LOST" = 0 ] || events three
fi

echo "# ha_topology: $(($(date +%s) - START)) s"
echo "1..$n"
[ "$fails" -eq 0 ]
