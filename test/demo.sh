#!/usr/bin/env bash
# `make demo`: the main job.  Installs what is missing, builds and installs
# pg_lease and the demo client, starts a throwaway cluster (unless --dsn is
# given) and runs the fleet: stream consumers sharing a stream, one killed,
# one joining, channels rotating while turns run; then the report.  Arguments
# go to the client (test/demo/pg_lease_demo --help).
set -euo pipefail
cd "$(dirname "$0")/.."

bash test/lib/deps.sh
# shellcheck source=lib/cluster.sh
. test/lib/cluster.sh
pg_lease_build_install clients

case " $* " in
    *" --dsn "*|*" --dsn="*)
        exec test/demo/pg_lease_demo "$@" ;;
esac

cluster_start
echo "pg_lease demo: throwaway cluster on socket $PGHOST port $PGPORT"
test/demo/pg_lease_demo --dsn "dbname=postgres" "$@"
