#!/usr/bin/env bash
# The scale-out cluster on one machine (docs/scale-out.md): a pg_auto_failover
# monitor, 2 partitions each a formation of a primary and two standbys
# (every node --replication-quorum true, the formation number-sync-standbys
# 1: every commit waits for one of the two standbys) running pg_lease, and
# R routers (1 unless told) running pg_lease_router whose partition
# connection strings list the three nodes of each formation with
# target_session_attrs=read-write.
#
#   cluster.sh up DIR [R]        start everything under DIR (which must not
#                                exist) with R routers (1-4, default 1);
#                                fails unless each formation has
#                                number_sync_standbys 1 and its primary
#                                synchronous_standby_names ANY 1 (...);
#                                prints export lines: PG_LEASE_ROUTER_DSN
#                                (router 0), PG_LEASE_ROUTERS_DSN (every
#                                router, a libpq multi-host string),
#                                PG_LEASE_PARTITION_DSNS (space-separated
#                                multi-host URIs, partition 0 first),
#                                PG_LEASE_MONITOR_DSN
#   cluster.sh kill-router DIR R SIGKILL router R's postmaster and every
#                                backend under it, by PID (a crashed host)
#   cluster.sh start-router DIR R  start router R again
#   cluster.sh switchover DIR K  planned switchover of partition K (waits)
#   cluster.sh kill DIR K        SIGKILL the whole process tree (pg_autoctl
#                                and its Postgres) of partition K's primary
#   cluster.sh kill-standby DIR K  the same for one of its secondaries
#   cluster.sh rejoin DIR K      restart the node killed in partition K; it
#                                rejoins as a standby
#   cluster.sh pause DIR K       SIGSTOP every process of partition K's
#                                primary node (pg_autoctl and Postgres: a
#                                paused machine); resume DIR K: SIGCONT
#   cluster.sh pause-monitor DIR   the same for the monitor; resume-monitor DIR
#   cluster.sh stop-partition DIR K  stop all three nodes of partition K at
#                                once (SIGTERM to each pg_autoctl, waits);
#                                start-partition DIR K starts them again
#   cluster.sh status DIR        every node: partition, name, port,
#                                reported and goal state
#   cluster.sh events DIR [T]    the monitor's events since Unix time T
#   cluster.sh wait DIR K [S]    wait up to S seconds (60) until partition K
#                                is a primary plus two secondaries again
#   cluster.sh check-sync DIR K [S]  wait up to S seconds (60) until
#                                partition K has number_sync_standbys 1 and
#                                its primary ANY 1 (...), fail otherwise
#   cluster.sh down DIR          stop everything it started, by PID, and
#                                remove DIR
#
# Every signal goes to a PID this script started or read from a
# postmaster.pid it checked to be in DIR.
# Servers run as the `postgres` OS user on 127.0.0.1 (TCP ports picked at
# random in 10000 up to the ephemeral range and checked free) and Unix
# sockets in DIR; nothing listens elsewhere.  PG_BINDIR names the PostgreSQL
# installation (with pg_lease, pg_lease_router, plproxy and pgautofailover
# installed in it); pg_autoctl is Debian's (pg-auto-failover-cli), told
# that pg_ctl.  Tuned for a small shared machine and for failover in
# seconds: 16MB shared_buffers, fsync off, monitor health checks every
# second.
set -uo pipefail

PG_MAJOR=${PG_MAJOR:-15}
PG_BINDIR=${PG_BINDIR:-/usr/lib/postgresql/$PG_MAJOR/bin}
PG_AUTOCTL=${PG_AUTOCTL:-/usr/bin/pg_autoctl}
NPART=2
# PG_LEASE_SCALE_STANDBYS=1: partitions of a primary and one standby (the
# 2-node formation, number_sync_standbys 0) for suites whose clients must
# ride through a failover within their tries (test/clients/router.sh); the
# default, 2, is the production topology of docs/scale-out.md.
STANDBYS=${PG_LEASE_SCALE_STANDBYS:-2}
case $STANDBYS in
    1) NODES="a b"; HEALTHY="primary secondary" ;;
    2) NODES="a b c"; HEALTHY="primary secondary secondary" ;;
    *) echo "cluster.sh: PG_LEASE_SCALE_STANDBYS must be 1 or 2" >&2; exit 2 ;;
esac
DB=pg_lease

die() { echo "cluster.sh: $*" >&2; exit 1; }

# Runs a command as postgres with pg_autoctl's files (config, state, pid
# files) kept under DIR.
as_pg() {
    runuser -u postgres -- env HOME="$DIR" XDG_CONFIG_HOME="$DIR/config" \
        XDG_DATA_HOME="$DIR/share" XDG_RUNTIME_DIR="$DIR/run" PGHOST="$DIR" \
        PG_AUTOCTL_DEBUG= "$@"
}

psql_at() {
    local port=$1
    shift
    "$PG_BINDIR/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$DIR" -p "$port" -U postgres "$@"
}

# A free loopback port: no TCP socket uses it, no socket file is there, and
# it lies below the kernel's ephemeral range, so no outgoing connection (the
# nodes' own, to the monitor and to each other) can take it between now and
# the server's start (a port from inside that range failed to bind once).
free_port() {
    local p low
    read -r low _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || low=32768
    [ "$low" -gt 12000 ] || low=32768
    while :; do
        p=$((10000 + RANDOM % (low - 10000)))
        grep -qx "$p" "$DIR/ports.used" 2>/dev/null && continue
        ss -Htan "sport = :$p" 2>/dev/null | grep -q . && continue
        [ -e "$DIR/.s.PGSQL.$p" ] && continue
        echo "$p" >>"$DIR/ports.used"
        echo "$p"
        return
    done
}

load() {
    [ -f "$DIR/cluster.env" ] || die "$DIR is not a cluster (no cluster.env)"
    # shellcheck disable=SC1091
    . "$DIR/cluster.env"
}

monitor_uri() { echo "postgres://autoctl_node@127.0.0.1:$MONITOR_PORT/pg_auto_failover?sslmode=disable"; }

# The PID of node (or monitor) $1's pg_autoctl, from the file start_autoctl
# wrote, when that process still runs on $DIR/$1 (a PID whose process died
# may be another's by now); else nothing.
autoctl_pid() {
    local pid
    pid=$(cat "$DIR/pids/$1" 2>/dev/null)
    [ -n "$pid" ] && { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null | grep -q -- "--pgdata $DIR/$1\( \|$\)" &&
        echo "$pid"
}

# True when process $1 runs for this cluster: its command line names DIR or
# it runs in a directory under DIR (a postmaster and its backends).
ours() {
    { tr '\0' ' ' <"/proc/$1/cmdline"; } 2>/dev/null | grep -qF -- "$DIR" ||
        case $(readlink "/proc/$1/cwd" 2>/dev/null) in "$DIR"/*) true ;; *) false ;; esac
}

# Every PID below $1 (children, grandchildren, ...), then $1.
tree() {
    local pid=$1 child
    for child in $(ps -o pid= --ppid "$pid" 2>/dev/null); do
        tree "$child"
    done
    echo "$pid"
}

# Starts `pg_autoctl ARGS...` in the background as postgres; its PID (the
# pg_autoctl process itself: the shell execs it) goes to $DIR/pids/$1.
start_autoctl() {
    local name=$1
    shift
    as_pg bash -c 'echo $$ >"$0"; exec "$@"' "$DIR/pids/$name" "$PG_AUTOCTL" "$@" \
        >>"$DIR/logs/$name.log" 2>&1 </dev/null &
    local i
    for i in $(seq 1 50); do
        [ -s "$DIR/pids/$name" ] && return 0
        sleep 0.1
    done
    die "pg_autoctl for $name did not start"
}

# initdb with the settings every server here gets.
init_pgdata() {
    local pgdata=$1
    as_pg "$PG_BINDIR/initdb" -D "$pgdata" -U postgres --auth=trust -E UTF8 --locale=C --no-sync \
        >"$DIR/logs/initdb.$(basename "$pgdata").log" 2>&1 || die "initdb $pgdata failed"
    cat >>"$pgdata/postgresql.conf" <<CONF
# cluster.sh: a small, fast test cluster
unix_socket_directories = '$DIR'
listen_addresses = '127.0.0.1'
shared_buffers = 16MB
max_connections = 60
fsync = off
full_page_writes = on
wal_keep_size = 64MB
# pg_basebackup (a standby joining) waits for a spread checkpoint otherwise
checkpoint_completion_target = 0
log_line_prefix = '%m [%p] %q%a '
CONF
}

# Nodes of the monitor: partition, name, port, reported and goal state.
nodes_sql="SELECT substr(formationid, 5), nodename, nodeport, reportedstate, goalstate
             FROM pgautofailover.node ORDER BY formationid, nodename"

# The name of partition $1's current primary (empty when none).
primary_of() {
    psql_at "$MONITOR_PORT" -d pg_auto_failover -c "
        SELECT nodename FROM pgautofailover.node
         WHERE formationid = 'part$1'
           AND reportedstate IN ('single', 'primary', 'wait_primary', 'join_primary')
           AND goalstate = reportedstate
         ORDER BY nodeid LIMIT 1"
}

# True when partition $1 is a primary and two secondaries, all settled.
healthy() {
    [ "$(psql_at "$MONITOR_PORT" -d pg_auto_failover -c "
        SELECT string_agg(reportedstate::text, ' ' ORDER BY reportedstate::text)
          FROM pgautofailover.node
         WHERE formationid = 'part$1' AND reportedstate = goalstate")" = "$HEALTHY" ]
}

wait_healthy() {
    local k=$1 secs=${2:-60} i
    for i in $(seq 1 $((secs * 4))); do
        healthy "$k" && return 0
        sleep 0.25
    done
    return 1
}

# Waits up to $3 seconds until partition $1's settled states are $2.
wait_states() {
    local k=$1 want=$2 secs=${3:-60} i
    for i in $(seq 1 $((secs * 4))); do
        [ "$(psql_at "$MONITOR_PORT" -d pg_auto_failover -c "
            SELECT string_agg(reportedstate::text, ' ' ORDER BY reportedstate::text)
              FROM pgautofailover.node
             WHERE formationid = 'part$k' AND reportedstate = goalstate")" = "$want" ] && return 0
        sleep 0.25
    done
    return 1
}

# True (within $2 seconds) when partition $1's formation has
# number_sync_standbys 1 and its primary's synchronous_standby_names is
# ANY 1 (...); else SYNC_PROBLEM says what was found.
check_sync() {
    local k=$1 secs=${2:-60} i nss name port ssn
    for i in $(seq 1 $((secs * 2))); do
        nss=$(psql_at "$MONITOR_PORT" -d pg_auto_failover -c "
            SELECT number_sync_standbys FROM pgautofailover.formation WHERE formationid = 'part$k'")
        name=$(primary_of "$k")
        ssn=
        if [ -n "$name" ]; then
            port=$(eval echo "\$PORT_$name")
            ssn=$(psql_at "$port" -d "$DB" -c "SHOW synchronous_standby_names" 2>/dev/null)
        fi
        [ "$nss" = 1 ] && case $ssn in "ANY 1 ("*")") true ;; *) false ;; esac && return 0
        sleep 0.5
    done
    SYNC_PROBLEM="number_sync_standbys is '$nss' (want 1), primary ${name:-none}'s synchronous_standby_names is '$ssn' (want ANY 1 (...))"
    return 1
}

cmd_up() {
    [ -e "$DIR" ] && die "$DIR exists; pick a new directory"
    mkdir -p "$DIR"/{pids,logs,run,config,share} || die "cannot create $DIR"
    chown -R postgres: "$DIR"
    chmod 755 "$DIR"
    MONITOR_PORT=$(free_port)
    ROUTER_PORT=$(free_port)
    local k n r
    {
        echo "PG_BINDIR='$PG_BINDIR'"
        echo "STANDBYS=$STANDBYS NODES='$NODES' HEALTHY='$HEALTHY'"
        echo "MONITOR_PORT=$MONITOR_PORT"
        echo "ROUTER_PORT=$ROUTER_PORT"
        echo "ROUTERS=$ROUTERS"
        echo "ROUTER_PORT_0=$ROUTER_PORT"
        for r in $(seq 1 $((ROUTERS - 1))); do echo "ROUTER_PORT_$r=$(free_port)"; done
        for k in $(seq 0 $((NPART - 1))); do
            for n in $NODES; do echo "PORT_p$k$n=$(free_port)"; done
        done
    } >"$DIR/cluster.env"
    load

    # The monitor, with health checks tuned for failover in seconds.
    init_pgdata "$DIR/monitor"
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
        --pgctl "$PG_BINDIR/pg_ctl" >"$DIR/logs/monitor.create.log" 2>&1 ||
        { cat "$DIR/logs/monitor.create.log" >&2; die "monitor creation failed"; }
    start_autoctl monitor run --pgdata "$DIR/monitor"
    for i in $(seq 1 100); do
        "$PG_BINDIR/pg_isready" -q -h "$DIR" -p "$MONITOR_PORT" && break
        sleep 0.2
    done
    for k in $(seq 0 $((NPART - 1))); do
        as_pg "$PG_AUTOCTL" create formation --monitor "$(monitor_uri)" --formation "part$k" \
            --kind pgsql --dbname "$DB" --enable-secondary >>"$DIR/logs/monitor.create.log" 2>&1 ||
            die "formation part$k failed"
    done

    # The primaries (initdb'd here, so they get the settings above; the
    # standbys copy them with pg_basebackup).
    create_node() {
        local k=$1 n=$2 port
        port=$(eval echo "\$PORT_p$k$n")
        start_autoctl "p$k$n" create postgres --pgdata "$DIR/p$k$n" --pgport "$port" \
            --pghost "$DIR" --listen 127.0.0.1 --hostname 127.0.0.1 --name "p$k$n" \
            --formation "part$k" --monitor "$(monitor_uri)" --auth trust --no-ssl \
            --replication-quorum true \
            --dbname "$DB" --pgctl "$PG_BINDIR/pg_ctl" --run
    }
    for k in $(seq 0 $((NPART - 1))); do
        init_pgdata "$DIR/p${k}a"
        create_node "$k" a
    done
    for k in $(seq 0 $((NPART - 1))); do
        for i in $(seq 1 240); do
            [ "$(primary_of "$k")" = "p${k}a" ] && break
            sleep 0.25
        done
        [ "$(primary_of "$k")" = "p${k}a" ] || { cat "$DIR/logs/p${k}a.log" >&2; die "partition $k: no primary"; }
        port=$(eval echo "\$PORT_p${k}a")
        for i in $(seq 1 100); do
            psql_at "$port" -d "$DB" -c "SELECT 1" >/dev/null 2>&1 && break
            sleep 0.2
        done
        # pg_lease, and this partition's conversation ids (stride = partition count)
        psql_at "$port" -d "$DB" -c "CREATE EXTENSION IF NOT EXISTS pg_lease" \
            -c "INSERT INTO lease.conversation_id_partition (id_stride, id_offset) VALUES ($NPART, $k)" \
            >/dev/null || die "partition $k: pg_lease failed"
    done
    # the two standbys, one at a time (each pg_basebackups the primary)
    for k in $(seq 0 $((NPART - 1))); do
        create_node "$k" b
    done
    for k in $(seq 0 $((NPART - 1))); do
        wait_states "$k" "primary secondary" 120 || { cmd_status >&2; die "partition $k: no first standby after 120 s"; }
        [ "$STANDBYS" = 2 ] && create_node "$k" c
    done

    # The routers: each the same, with the same partitions in the same order.
    local opts="" name port
    for k in $(seq 0 $((NPART - 1))); do
        opts="$opts${opts:+, }p$k '$(partition_kv "$k")'"
    done
    for r in $(seq 0 $((ROUTERS - 1))); do
        name=$(router_name "$r")
        port=$(eval echo "\$ROUTER_PORT_$r")
        init_pgdata "$DIR/$name"
        as_pg "$PG_BINDIR/pg_ctl" -D "$DIR/$name" -l "$DIR/logs/$name.log" -o "-p $port" -w -t 120 start \
            >/dev/null || { tail -n 20 "$DIR/logs/$name.log" >&2; die "$name failed to start"; }
        psql_at "$port" -d postgres -c "CREATE DATABASE $DB" >/dev/null || die "$name database"
        psql_at "$port" -d "$DB" -c "CREATE EXTENSION pg_lease_router CASCADE" \
            -c "CREATE SERVER pg_lease FOREIGN DATA WRAPPER plproxy OPTIONS ($opts)" \
            -c "CREATE USER MAPPING FOR PUBLIC SERVER pg_lease" \
            -c "GRANT USAGE ON FOREIGN SERVER pg_lease TO PUBLIC" >/dev/null 2>&1 ||
            die "$name: pg_lease_router failed"
    done

    for k in $(seq 0 $((NPART - 1))); do
        wait_healthy "$k" 120 || { cmd_status >&2; die "partition $k: not a primary and two secondaries after 120 s"; }
    done
    # Every commit waits for one of the two standbys: the formation's
    # number_sync_standbys 1 (pg_auto_failover allows it with two quorum
    # standbys), which the keeper writes into the primary's
    # synchronous_standby_names as ANY 1 (...).
    for k in $(seq 0 $((NPART - 1))); do
        [ "$STANDBYS" = 2 ] || break
        as_pg "$PG_AUTOCTL" set formation number-sync-standbys 1 --monitor "$(monitor_uri)" \
            --formation "part$k" >>"$DIR/logs/monitor.create.log" 2>&1 || die "partition $k: number-sync-standbys 1 failed"
    done
    for k in $(seq 0 $((NPART - 1))); do
        [ "$STANDBYS" = 2 ] || break
        check_sync "$k" 60 || die "partition $k: $SYNC_PROBLEM"
    done
    # A primary cut off from the monitor and its standby demotes itself
    # after network_partition_timeout (default 20 s); it must do so before
    # the monitor promotes the standby (unhealthy 2 s + demote timeout 4 s),
    # or a partitioned old primary could still take writes.
    for k in $(seq 0 $((NPART - 1))); do
        for n in $NODES; do
            as_pg "$PG_AUTOCTL" config set --pgdata "$DIR/p$k$n" timeout.network_partition_timeout 3 \
                >/dev/null 2>&1 || die "p$k$n: config set failed"
        done
    done
    cmd_env
}

# Router $1's data directory: router, router1, router2, ...
router_name() {
    if [ "$1" -eq 0 ]; then echo router; else echo "router$1"; fi
}

# Partition $1 for PL/Proxy (key=value: PL/Proxy appends user=...).
partition_kv() {
    local n hosts="" ports=""
    for n in $NODES; do
        hosts="$hosts${hosts:+,}127.0.0.1"
        ports="$ports${ports:+,}$(eval echo "\$PORT_p$1$n")"
    done
    echo "host=$hosts port=$ports dbname=$DB target_session_attrs=read-write connect_timeout=2"
}

# Partition $1 as a URI for clients and tools.
partition_uri() {
    local n hosts=""
    for n in $NODES; do
        hosts="$hosts${hosts:+,}127.0.0.1:$(eval echo "\$PORT_p$1$n")"
    done
    echo "postgresql://postgres@$hosts/$DB?target_session_attrs=read-write&connect_timeout=2"
}

cmd_env() {
    local k r dsns="" hosts="" ports=""
    for k in $(seq 0 $((NPART - 1))); do
        dsns="$dsns${dsns:+ }$(partition_uri "$k")"
    done
    for r in $(seq 0 $((${ROUTERS:-1} - 1))); do
        hosts="$hosts${hosts:+,}$DIR"
        ports="$ports${ports:+,}$(eval echo "\${ROUTER_PORT_$r:-$ROUTER_PORT}")"
    done
    echo "export PG_LEASE_ROUTER_DSN='host=$DIR port=$ROUTER_PORT dbname=$DB user=postgres'"
    echo "export PG_LEASE_ROUTERS_DSN='host=$hosts port=$ports dbname=$DB user=postgres'"
    echo "export PG_LEASE_PARTITION_DSNS='$dsns'"
    echo "export PG_LEASE_MONITOR_DSN='host=$DIR port=$MONITOR_PORT dbname=pg_auto_failover user=postgres'"
}

cmd_status() {
    psql_at "$MONITOR_PORT" -d pg_auto_failover -F ' ' -c "$nodes_sql" |
        awk '{ printf "partition %s %-4s port %-5s %-14s goal %s\n", $1, $2, $3, $4, $5 }'
}

# The monitor's events since Unix time $1, one a line.
cmd_events() {
    psql_at "$MONITOR_PORT" -d pg_auto_failover -F ' ' -c "
        SELECT to_char(eventtime, 'HH24:MI:SS.MS'), formationid, nodename,
               reportedstate || ' -> ' || goalstate, left(description, 120)
          FROM pgautofailover.event
         WHERE eventtime >= pg_catalog.to_timestamp(${1:-0})
         ORDER BY eventid"
}

cmd_switchover() {
    local k=$1
    as_pg "$PG_AUTOCTL" perform switchover --monitor "$(monitor_uri)" --formation "part$k" --wait 60 \
        >>"$DIR/logs/switchover.log" 2>&1 || { tail -n 20 "$DIR/logs/switchover.log" >&2; die "switchover of partition $k failed"; }
}

cmd_kill() {
    local k=$1 name pids pid pm
    name=$(primary_of "$k")
    [ -n "$name" ] || die "partition $k has no primary"
    pid=$(autoctl_pid "$name")
    pids=
    [ -n "$pid" ] && pids=$(tree "$pid")
    # the postmaster too, should it not be below pg_autoctl
    pm=$(head -n 1 "$DIR/$name/postmaster.pid" 2>/dev/null)
    [ -n "$pm" ] && pids="$pids $(tree "$pm")"
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null
    echo "$name" >"$DIR/killed.$k"
    echo "cluster.sh: killed $name (partition $k primary): $(echo $pids | wc -w) processes"
}

# SIGKILL of router $1: its postmaster (the PID of its postmaster.pid,
# checked to be running in that data directory) and every process under it.
cmd_kill_router() {
    local r=$1 name pm pids
    name=$(router_name "$r")
    pm=$(head -n 1 "$DIR/$name/postmaster.pid" 2>/dev/null)
    [ -n "$pm" ] && [ "$(readlink "/proc/$pm/cwd" 2>/dev/null)" = "$DIR/$name" ] || die "$name is not running"
    pids=$(tree "$pm")
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null
    echo "cluster.sh: killed $name (port $(eval echo "\$ROUTER_PORT_$r"), postmaster $pm): $(echo $pids | wc -w) processes"
}

cmd_rejoin() {
    local k=$1 name
    [ -f "$DIR/killed.$k" ] || die "no killed node in partition $k"
    name=$(cat "$DIR/killed.$k")
    unstick
    start_autoctl "$name" run --pgdata "$DIR/$name"
    rm -f "$DIR/killed.$k"
}

# Every PID of node $1: its pg_autoctl's process tree and its postmaster's
# (should the postmaster not be below pg_autoctl), each once.
node_pids() {
    local name=$1 pid pm pids=""
    pid=$(autoctl_pid "$name")
    [ -n "$pid" ] && pids=$(tree "$pid")
    pm=$(head -n 1 "$DIR/$name/postmaster.pid" 2>/dev/null)
    [ -n "$pm" ] && [ "$(readlink "/proc/$pm/cwd" 2>/dev/null)" = "$DIR/$name" ] && pids="$pids $(tree "$pm")"
    echo "$pids" | tr ' ' '\n' | grep . | sort -un | tr '\n' ' '
}

# SIGKILL of one of partition $1's secondaries (its whole process tree); rejoin restarts it.
cmd_kill_standby() {
    local k=$1 name pids
    name=$(psql_at "$MONITOR_PORT" -d pg_auto_failover -c "
        SELECT nodename FROM pgautofailover.node
         WHERE formationid = 'part$k' AND reportedstate = 'secondary' AND goalstate = 'secondary'
         ORDER BY random() LIMIT 1")
    [ -n "$name" ] || die "partition $k has no secondary"
    pids=$(node_pids "$name")
    [ -n "$pids" ] || die "$name is not running"
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null
    echo "$name" >"$DIR/killed.$k"
    echo "cluster.sh: killed $name (partition $k standby): $(echo $pids | wc -w) processes"
}

# SIGSTOP of every process of node or monitor $2 (a paused machine), the
# PIDs kept in $DIR/paused.$1 for resume.
pause_node() {
    local tag=$1 name=$2 pids parent
    [ -f "$DIR/paused.$tag" ] && die "$tag is paused already"
    pids=$(node_pids "$name")
    [ -n "$pids" ] || die "$name is not running"
    # and the runuser above pg_autoctl: it stops itself when its child
    # stops, and would stay stopped (its child never reaped) without a SIGCONT
    parent=$(ps -o ppid= -p "$(autoctl_pid "$name")" 2>/dev/null | tr -d ' ')
    [ -n "$parent" ] && [ "$(ps -o comm= -p "$parent" 2>/dev/null)" = runuser ] && pids="$pids $parent"
    echo "$pids" >"$DIR/paused.$tag"
    # shellcheck disable=SC2086
    kill -STOP $pids 2>/dev/null
    echo "cluster.sh: paused $name: $(echo $pids | wc -w) processes"
}

resume_node() {
    local tag=$1 i pid
    [ -f "$DIR/paused.$tag" ] || die "nothing paused as $tag"
    # shellcheck disable=SC2046
    kill -CONT $(cat "$DIR/paused.$tag") 2>/dev/null
    # a runuser may stop itself only after that SIGCONT (it follows its
    # child's stop when it sees it): continue it again until it runs
    for i in 1 2 3 4 5 6; do
        sleep 0.5
        for pid in $(cat "$DIR/paused.$tag"); do
            [ "$(ps -o comm= -p "$pid" 2>/dev/null)" = runuser ] &&
                [ "$(ps -o stat= -p "$pid" 2>/dev/null | cut -c1)" = T ] && kill -CONT "$pid"
        done
    done
    rm -f "$DIR/paused.$tag"
}

# Continues every runuser of this cluster that stopped itself (it follows
# a stopped child) and so never reaps its child: pg_autoctl refuses to start
# while its old PID is a zombie.
unstick() {
    local pid
    for pid in $(ps -C runuser -o pid=,stat= 2>/dev/null | awk '$2 ~ /^T/ { print $1 }'); do
        ours "$pid" && kill -CONT "$pid"
    done
    sleep 0.5
}

# Stops every node of partition $1 at once (SIGTERM to each pg_autoctl,
# which stops its Postgres), waits until all are gone.
cmd_stop_partition() {
    local k=$1 n pid pids="" i alive
    [ -f "$DIR/stopped.$k" ] && die "partition $k is stopped already"
    for n in $NODES; do
        pids="$pids $(node_pids "p$k$n")"
        pid=$(autoctl_pid "p$k$n")
        [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null
    done
    echo "$NODES" >"$DIR/stopped.$k"
    for i in $(seq 1 240); do
        alive=0
        for pid in $pids; do kill -0 "$pid" 2>/dev/null && alive=1; done
        [ "$alive" -eq 0 ] && return 0
        sleep 0.25
    done
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null
    echo "cluster.sh: partition $k did not stop in 60 s: killed"
}

cmd_start_partition() {
    local k=$1 n
    [ -f "$DIR/stopped.$k" ] || die "partition $k is not stopped"
    unstick
    for n in $NODES; do
        start_autoctl "p$k$n" run --pgdata "$DIR/p$k$n"
    done
    rm -f "$DIR/stopped.$k"
}

cmd_down() {
    [ -d "$DIR" ] || return 0
    local f pid pids="" i
    # a paused process ignores SIGTERM until continued
    for f in "$DIR"/paused.*; do
        [ -f "$f" ] || continue
        # shellcheck disable=SC2046
        kill -CONT $(cat "$f") 2>/dev/null
    done
    for f in "$DIR"/router*/postmaster.pid; do
        [ -f "$f" ] || continue
        as_pg "$PG_BINDIR/pg_ctl" -D "$(dirname "$f")" -m fast -w -t 30 stop >/dev/null 2>&1
    done
    # pg_autoctl stops its Postgres on SIGTERM; the monitor last.
    for f in "$DIR"/pids/p* "$DIR"/pids/monitor; do
        [ -s "$f" ] || continue
        pid=$(autoctl_pid "$(basename "$f")")
        [ -n "$pid" ] || continue
        pids="$pids $(tree "$pid")"
        kill -TERM "$pid" 2>/dev/null
    done
    for i in $(seq 1 60); do
        local alive=0
        for pid in $pids; do kill -0 "$pid" 2>/dev/null && alive=1; done
        [ "$alive" -eq 0 ] && break
        sleep 0.25
    done
    # whatever is left, and any postmaster still running on a data dir here
    for f in "$DIR"/*/postmaster.pid; do
        [ -f "$f" ] || continue
        pid=$(head -n 1 "$f")
        [ -n "$pid" ] && [ "$(readlink "/proc/$pid/cwd" 2>/dev/null)" = "$(dirname "$f")" ] &&
            pids="$pids $(tree "$pid")"
    done
    # only what still runs here: a PID that exited meanwhile may be another's
    for pid in $pids; do ours "$pid" && kill -KILL "$pid" 2>/dev/null; done
    rm -rf "$DIR"
}

cmd=${1:-}
DIR=${2:-}
[ -n "$cmd" ] && [ -n "$DIR" ] || die "usage: cluster.sh up|switchover|kill|kill-standby|pause|resume|pause-monitor|resume-monitor|stop-partition|start-partition|kill-router|start-router|rejoin|status|events|wait|check-sync|env|down DIR [K]"
[ "$(id -u)" -eq 0 ] || die "run as root (servers run as the postgres OS user)"
case $DIR in /*) ;; *) DIR=$(pwd)/$DIR ;; esac
case $cmd in
    up)
        ROUTERS=${3:-1}
        case $ROUTERS in 1|2|3|4) ;; *) die "up: R routers must be 1..4" ;; esac
        cmd_up ;;
    kill-router)
        load
        [ -n "${3:-}" ] && [ "$3" -ge 0 ] 2>/dev/null && [ "$3" -lt "${ROUTERS:-1}" ] || die "kill-router: router R must be 0..$((${ROUTERS:-1} - 1))"
        cmd_kill_router "$3" ;;
    start-router)
        load
        [ -n "${3:-}" ] && [ "$3" -ge 0 ] 2>/dev/null && [ "$3" -lt "${ROUTERS:-1}" ] || die "start-router: router R must be 0..$((${ROUTERS:-1} - 1))"
        name=$(router_name "$3")
        # the killed postmaster must be gone: a process that still exists
        # (even a zombie not yet reaped) under its PID makes the new one
        # refuse the lock file; a zombie's lock file is stale
        pm=$(head -n 1 "$DIR/$name/postmaster.pid" 2>/dev/null)
        for i in $(seq 1 80); do
            [ -n "$pm" ] && [ -e "/proc/$pm" ] || break
            if [ "$(awk '{ print $3 }' "/proc/$pm/stat" 2>/dev/null)" = Z ]; then
                rm -f "$DIR/$name/postmaster.pid"
                break
            fi
            sleep 0.25
        done
        as_pg "$PG_BINDIR/pg_ctl" -D "$DIR/$name" -l "$DIR/logs/$name.log" -o "-p $(eval echo "\$ROUTER_PORT_$3")" -w -t 120 start \
            >/dev/null || { tail -n 20 "$DIR/logs/$name.log" >&2; die "$name failed to start"; } ;;
    env) load; cmd_env ;;
    status) load; cmd_status ;;
    events) load; cmd_events "${3:-0}" ;;
    pause-monitor) load; pause_node monitor monitor ;;
    resume-monitor) load; resume_node monitor ;;
    switchover|kill|kill-standby|pause|resume|stop-partition|start-partition|rejoin|wait|check-sync)
        [ -n "${3:-}" ] && [ "$3" -ge 0 ] 2>/dev/null && [ "$3" -lt "$NPART" ] || die "$cmd: partition K must be 0..$((NPART - 1))"
        load
        case $cmd in
            switchover) cmd_switchover "$3" ;;
            kill) cmd_kill "$3" ;;
            kill-standby) cmd_kill_standby "$3" ;;
            pause)
                name=$(primary_of "$3")
                [ -n "$name" ] || die "partition $3 has no primary"
                pause_node "$3" "$name" ;;
            resume) resume_node "$3" ;;
            stop-partition) cmd_stop_partition "$3" ;;
            start-partition) cmd_start_partition "$3" ;;
            check-sync) check_sync "$3" "${4:-60}" || die "partition $3: $SYNC_PROBLEM" ;;
            rejoin) cmd_rejoin "$3" ;;
            wait) wait_healthy "$3" "${4:-60}" || { cmd_status >&2; die "partition $3 not primary + 2 secondaries"; } ;;
        esac ;;
    down) cmd_down ;;
    *) die "unknown command $cmd" ;;
esac
