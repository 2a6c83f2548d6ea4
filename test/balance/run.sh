#!/usr/bin/env bash
# The convergence driver of weighted balancing (test/balance/converge.py;
# what it runs and checks is in its header), suite `balance` of make test,
# against the running test cluster (PGHOST, PGPORT, PG_BINDIR set by
# test/run.sh), in a database of its own.  Prints TAP.
set -uo pipefail
cd "$(dirname "$0")/../.."

PY=/usr/bin/python3          # Debian's python3-psycopg2 is for Debian's python3
DB=pg_lease_balance

bash test/lib/deps.sh balance >&2 || { echo "not ok 1 - dependencies (test/lib/deps.sh balance)"; exit 1; }
"$PG_BINDIR/psql" -X -q -d postgres -v ON_ERROR_STOP=1 \
    -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB" >&2 || exit 1
"$PG_BINDIR/psql" -X -q -d "$DB" -v ON_ERROR_STOP=1 -c "CREATE EXTENSION pg_lease" >&2 || exit 1
"$PY" test/balance/converge.py --dsn "host=$PGHOST port=$PGPORT user=${PGUSER:-postgres} dbname=$DB"
status=$?
"$PG_BINDIR/psql" -X -q -d postgres -c "DROP DATABASE IF EXISTS $DB" >&2
exit $status
