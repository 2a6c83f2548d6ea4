#!/usr/bin/env bash
# `make demo`: the main job.  Installs what is missing, builds and installs
# pg_lease, starts a throwaway cluster and walks through a lease lifecycle,
# printing what happened.  The cluster is removed afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."

bash test/lib/deps.sh
# shellcheck source=lib/cluster.sh
. test/lib/cluster.sh
SUDO=()
[ "$(id -u)" -eq 0 ] || SUDO=(sudo)
make -s PG_CONFIG="$PG_BINDIR/pg_config"
"${SUDO[@]}" make -s PG_CONFIG="$PG_BINDIR/pg_config" install >/dev/null

cluster_start
echo "pg_lease demo: throwaway cluster on socket $PGHOST port $PGPORT"
"$PG_BINDIR/psql" -X -q -d postgres -v ON_ERROR_STOP=1 -c "CREATE EXTENSION pg_lease"
"$PG_BINDIR/psql" -X -d postgres -v ON_ERROR_STOP=1 -f test/demo/lifecycle.sql
