#!/usr/bin/env bash
# The clients-pgbouncer suite (make test, PG_LEASE_SUITES=clients-pgbouncer):
# the mixed fleet of test/clients/run.sh (Python and Node example workers on
# one stream) through PgBouncer in transaction pooling mode, with fewer
# server connections than workers (docs/operations.md, "Connection
# poolers"), against test/run.sh's cluster (PGHOST, PGPORT):
#
#   PgBouncer (Debian's pgbouncer) is started here, on a Unix socket in a
#   temporary directory, pool_mode = transaction, default_pool_size = 2;
#   py-1 py-2 node-1 node-2 start (8 client connections on 2 server
#   connections); py-1 is SIGKILLed at 4 s, py-3 and node-3 join at 6 s; the
#   fleet stops once the shares are fair;
# then test/clients/check.py over what the workers recorded (no two owners,
# no acknowledged checkpoint lost, nothing processed twice but a killed
# worker's unacknowledged tail, fair shares), and the server connections
# sampled during the run never exceeded the pool.  PgBouncer is killed by
# its PID on every exit path.  Prints TAP; exits non-zero on any failure.
# About 30 s.
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
NODE=/usr/bin/node
PG_BINDIR=${PG_BINDIR:-/usr/lib/postgresql/15/bin}
PSQL="$PG_BINDIR/psql"
DB=pg_lease_pgbouncer
LEASE_SECONDS=3
POOL=2
export PG_LEASE_LOG_LEVEL=${PG_LEASE_LOG_LEVEL:-WARNING}

# shellcheck source=test/lib/tap.sh
. test/lib/tap.sh
# shellcheck source=test/clients/fleet.sh
. test/clients/fleet.sh

bash test/lib/deps.sh clients pgbouncer || { ok 1 "install the clients' Debian packages and pgbouncer"; echo "1..$n"; exit 1; }
[ -n "${PGHOST:-}" ] || { ok 1 "PGHOST is set (run through test/run.sh)"; echo "1..$n"; exit 1; }
(cd clients/node && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
ok $? "npm ci installs node-postgres from clients/node/package-lock.json" || true

OUT=$(mktemp -d /tmp/pg_lease_clients_pgbouncer.XXXXXX)
chmod 755 "$OUT"
BOUNCER_PID=
cleanup() {
    [ -n "$BOUNCER_PID" ] && kill -TERM "$BOUNCER_PID" 2>/dev/null && wait "$BOUNCER_PID" 2>/dev/null
    for p in $(jobs -p); do kill -9 "$p" 2>/dev/null; done
    if [ -n "${CLIENTS_PGBOUNCER_KEEP:-}" ]; then echo "# kept $OUT"; else rm -rf "$OUT"; fi
}
trap cleanup EXIT

# The database, the worker role of the README recipe, the fleet's leases.
"$PSQL" -X -q -v ON_ERROR_STOP=1 -d postgres <<SQL >/dev/null
SET client_min_messages = warning;
DROP DATABASE IF EXISTS $DB;
CREATE DATABASE $DB;
\c $DB
SET client_min_messages = warning;
CREATE EXTENSION pg_lease;
DO \$\$ BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'clients_worker') THEN
        CREATE ROLE clients_worker LOGIN;
    END IF;
END \$\$;
GRANT USAGE ON SCHEMA lease TO clients_worker;
GRANT EXECUTE ON FUNCTION $FLEET_WORKER_FUNCTIONS TO clients_worker;
SELECT lease.grant_app('clients', 'clients_worker');
$(fleet_leases_sql)
SQL
ok $? "a database with pg_lease, the worker role and the fleet's 17 leases"

# PgBouncer on a Unix socket in $OUT/bouncer (the port only names the
# socket file), transaction pooling, $POOL server connections for the pair
# (database, user).  It refuses to run as root: -u switches to the
# cluster's owner, keeping the PID.
mkdir "$OUT/bouncer"
BPORT=6432
as_user=()
if [ "$(id -u)" -eq 0 ]; then
    chown postgres "$OUT/bouncer"
    as_user=(-u postgres)
fi
cat >"$OUT/bouncer/pgbouncer.ini" <<INI
[databases]
$DB = host=$PGHOST port=$PGPORT dbname=$DB

[pgbouncer]
listen_addr =
listen_port = $BPORT
unix_socket_dir = $OUT/bouncer
auth_type = trust
auth_file = $OUT/bouncer/userlist.txt
pool_mode = transaction
default_pool_size = $POOL
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = 100
max_db_connections = $POOL
server_reset_query =
ignore_startup_parameters = extra_float_digits
logfile = $OUT/bouncer/pgbouncer.log
INI
echo '"clients_worker" ""' >"$OUT/bouncer/userlist.txt"
/usr/sbin/pgbouncer -q "${as_user[@]}" "$OUT/bouncer/pgbouncer.ini" &
BOUNCER_PID=$!
up=1
for _ in $(seq 1 50); do
    [ -S "$OUT/bouncer/.s.PGSQL.$BPORT" ] && { up=0; break; }
    sleep 0.1
done
WORKER_DSN="postgresql:///$DB?host=$OUT/bouncer&port=$BPORT&user=clients_worker"
[ "$up" -eq 0 ] && [ "$("$PSQL" -X -qAt "$WORKER_DSN" -c 'SELECT 1')" = 1 ]
ok $? "PgBouncer $(/usr/sbin/pgbouncer --version | head -1 | cut -d' ' -f2) listens on $OUT/bouncer (transaction pooling, $POOL server connections, PID $BOUNCER_PID)" ||
    { sed 's/^/#   /' "$OUT/bouncer/pgbouncer.log" | tail -10; echo "1..$n"; exit 1; }

# The server connections PgBouncer holds for the workers, sampled every
# 0.2 s while they run (the highest count in $OUT/server_max).
sample_servers() {
    local max=0 c
    while :; do
        c=$("$PSQL" -X -qAt -d postgres -c "SELECT count(*) FROM pg_stat_activity
            WHERE datname = '$DB' AND usename = 'clients_worker'") || c=0
        [ "$c" -gt "$max" ] && { max=$c; echo "$max" >"$OUT/server_max"; }
        sleep 0.2
    done
}
echo 0 >"$OUT/server_max"
sample_servers &
SAMPLER=$!

echo "# fleet through PgBouncer: py-1 py-2 node-1 node-2 start; py-1 killed at 4 s; py-3 and node-3 join at 6 s"
t0=$SECONDS
for w in py-1 py-2 node-1 node-2; do start_worker $w; done
sleep 4
kill -KILL "${PIDS[py-1]}"; wait "${PIDS[py-1]}" 2>/dev/null
echo "# $((SECONDS - t0)) s: py-1 killed"
sleep 2
start_worker py-3
start_worker node-3
echo "# $((SECONDS - t0)) s: py-3 and node-3 joined"
LIVE="node-1 node-2 node-3 py-2 py-3"
sleep 8
settle_and_stop 24 -d "$DB"
kill "$SAMPLER" 2>/dev/null; wait "$SAMPLER" 2>/dev/null
[ "$stopped" -eq 5 ]
ok $? "the five live workers stopped gracefully on SIGTERM"
max=$(cat "$OUT/server_max")
[ "$max" -ge 1 ] && [ "$max" -le "$POOL" ]
ok $? "at most $POOL server connections for 6 workers (12 client connections): $max seen"

$PY test/clients/check.py "$OUT" "postgresql:///$DB?host=$PGHOST&port=$PGPORT&user=postgres" --killed py-1 --joined py-3,node-3
ok $? "fleet invariants through PgBouncer (test/clients/check.py over the workers' journals and record logs)"
echo "1..$n"
[ "$fails" -eq 0 ]
