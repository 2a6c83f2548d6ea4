# shellcheck shell=bash
# A throwaway PostgreSQL cluster for tests and the demo.  Source this file,
# then call cluster_start; the cluster is stopped and removed on exit.
#
# PostgreSQL refuses to run as root, so when we are root the server runs as
# the `postgres` OS user on a data directory under /tmp that it owns; the
# clients (psql, pg_regress, pg_isolation_regress, pg_prove) run as the
# caller and connect over a Unix socket in that directory, so the checkout
# itself never has to be readable by `postgres`.  The system cluster is never
# touched: the server listens on no TCP address at all.

PG_MAJOR=${PG_MAJOR:-15}
PG_BINDIR=${PG_BINDIR:-/usr/lib/postgresql/$PG_MAJOR/bin}

# Runs a command as the cluster's OS user.
cluster_as_owner() {
    if [ "$(id -u)" -eq 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

# Stops the cluster and removes its directory (the EXIT trap).
cluster_stop() {
    if [ -n "${CLUSTER_DIR:-}" ] && [ -d "$CLUSTER_DIR/data" ]; then
        # A fast shutdown arriving during crash recovery can stall under
        # valgrind; an immediate one then ends it.
        cluster_as_owner "$PG_BINDIR/pg_ctl" -D "$CLUSTER_DIR/data" -m fast -w -t 120 stop >/dev/null 2>&1 ||
            cluster_as_owner "$PG_BINDIR/pg_ctl" -D "$CLUSTER_DIR/data" -m immediate -w -t 120 stop >/dev/null 2>&1 || true
        if [ -n "${KEEP_CLUSTER_LOG:-}" ] && [ -f "$CLUSTER_DIR/server.log" ]; then
            cp "$CLUSTER_DIR/server.log" "$KEEP_CLUSTER_LOG" 2>/dev/null || true
        fi
        rm -rf "$CLUSTER_DIR"
    fi
}

# Starts the postmaster under $CLUSTER_SERVER_WRAPPER (a command prefix, e.g.
# "env UBSAN_OPTIONS=... valgrind --log-file=..."; make sanitize sets it),
# directly rather than through pg_ctl: pg_ctl runs `postgres -V` first, and
# the wrapper would apply to that too.  Waits up to 300 s for connections
# (a server under valgrind starts slowly).  pg_ctl stop works as usual.
cluster_start_wrapped() {
    local i
    # shellcheck disable=SC2086 # the wrapper is a word list on purpose
    cluster_as_owner $CLUSTER_SERVER_WRAPPER "$PG_BINDIR/postgres" -D "$CLUSTER_DIR/data" \
        >"$CLUSTER_DIR/server.log" 2>&1 </dev/null &
    for i in $(seq 1 300); do
        if "$PG_BINDIR/pg_isready" -q -h "$CLUSTER_DIR" -p "$PGPORT" -U postgres -d postgres; then
            return 0
        fi
        sleep 1
    done
    cat "$CLUSTER_DIR/server.log" >&2
    return 1
}

# Creates and starts a cluster; exports PGHOST, PGPORT, PGUSER for clients.
# It replaces the caller's EXIT trap with one that stops the cluster and then
# runs $CLUSTER_EXIT_HOOK, where a caller with cleanup of its own puts it
# (set before cluster_start, the hook runs even if initdb is interrupted).
cluster_start() {
    CLUSTER_DIR=$(mktemp -d /tmp/pg_lease.XXXXXX)
    chmod 755 "$CLUSTER_DIR"
    if [ "$(id -u)" -eq 0 ]; then
        chown postgres: "$CLUSTER_DIR"
    fi
    trap 'cluster_stop; eval "${CLUSTER_EXIT_HOOK:-}"' EXIT
    # The port only names the socket file in our private directory.
    PGPORT=$((20000 + RANDOM % 20000))
    cluster_as_owner "$PG_BINDIR/initdb" -D "$CLUSTER_DIR/data" -U postgres \
        --auth=trust -E UTF8 --locale=C --no-sync >"$CLUSTER_DIR/initdb.log" 2>&1 || {
        cat "$CLUSTER_DIR/initdb.log" >&2
        return 1
    }
    cat >>"$CLUSTER_DIR/data/postgresql.conf" <<CONF
listen_addresses = ''
unix_socket_directories = '$CLUSTER_DIR'
port = $PGPORT
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 200
log_line_prefix = '%m [%p] %q%a '
CONF
    if [ -n "${CLUSTER_SERVER_WRAPPER:-}" ]; then
        cluster_start_wrapped || return 1
    else
        cluster_as_owner "$PG_BINDIR/pg_ctl" -D "$CLUSTER_DIR/data" -l "$CLUSTER_DIR/server.log" \
            -w -t 60 start >/dev/null || {
            cat "$CLUSTER_DIR/server.log" >&2
            return 1
        }
    fi
    export PGHOST=$CLUSTER_DIR PGPORT PGUSER=postgres
    unset PGDATABASE PGPASSWORD PGSERVICE
}

# Builds pg_lease (warnings are errors, as in CI) plus any further make
# targets given, and installs the module and its scripts into $PG_BINDIR's
# installation.  Refuses headers of another major version than the server
# the tests will start: a minor-version difference is fine, a major one is
# not.
pg_lease_build_install() {
    local pg_config="$PG_BINDIR/pg_config" headers server sudo=()
    [ "$(id -u)" -eq 0 ] || sudo=(sudo)
    headers=$("$pg_config" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
    server=$("$PG_BINDIR/postgres" -V | sed -E 's/^postgres \(PostgreSQL\) ([0-9]+).*/\1/')
    if [ "$headers" != "$server" ]; then
        echo "pg_lease: $pg_config is PostgreSQL $headers but $PG_BINDIR/postgres is PostgreSQL $server;" \
            "build and test against one major version (set PG_BINDIR)" >&2
        return 1
    fi
    make -s PG_CONFIG="$pg_config" WERROR=1 all "$@" || return 1
    "${sudo[@]}" make -s PG_CONFIG="$pg_config" WERROR=1 install >/dev/null
}
