#!/usr/bin/env bash
# Suite `peers` of make test: test/bench/peers/peers.py's short version, one
# round per back end (pg_lease, etcd, ZooKeeper, Redis).  Pass/fail: no
# checkpoint of an owner refused, the fault run's checker (no acknowledged
# checkpoint lost, never two owners at once, no stale write accepted) on each
# back end, and the checker failing the two negative controls (pg_lease with
# its ownership guard removed, Redis without fencing).  Speeds are printed
# as ratios, never judged.  A back end whose packages cannot be installed is
# skipped with a message saying so.  Closes with "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/../../.."
: "${PG_BINDIR:?set PG_BINDIR (pg_lease must be installed in its PostgreSQL)}"
if ! bash test/lib/deps.sh peers >&2; then
    echo "# peers: test/lib/deps.sh peers could not install: $(bash test/lib/deps.sh --check peers | tr '\n' ' ')"
    echo "# peers: the back ends that lack a package are skipped"
fi
PG_BINDIR="$PG_BINDIR" exec /usr/bin/python3 test/bench/peers/peers.py test
