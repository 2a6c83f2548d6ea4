#!/usr/bin/env bash
# Installs what building and testing pg_lease needs, from Debian's packages,
# when any of it is missing.  Safe to run repeatedly: it does nothing when
# everything is there.
set -euo pipefail

PG_MAJOR=${PG_MAJOR:-15}
need=()
[ -x "/usr/lib/postgresql/$PG_MAJOR/bin/pg_config" ] || need+=("postgresql-server-dev-$PG_MAJOR")
[ -x "/usr/lib/postgresql/$PG_MAJOR/bin/initdb" ] || need+=("postgresql-$PG_MAJOR")
[ -f "/usr/share/postgresql/$PG_MAJOR/extension/pgtap.control" ] || need+=("postgresql-$PG_MAJOR-pgtap")
command -v pg_prove >/dev/null 2>&1 || need+=(pgtap)
[ -f /usr/include/postgresql/libpq-fe.h ] || need+=(libpq-dev)
command -v make >/dev/null 2>&1 || need+=(make)
command -v gcc >/dev/null 2>&1 || need+=(gcc)

[ ${#need[@]} -eq 0 ] && exit 0

echo "pg_lease: installing ${need[*]}" >&2
if [ "$(id -u)" -eq 0 ]; then
    sudo=()
elif command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
else
    echo "pg_lease: missing ${need[*]}; install them as root (apt-get install ${need[*]})" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
# Debian's postgresql-common may create and start a "main" cluster on
# install; the tests never use it, and CI wants no services left running.
if command -v pg_ctlcluster >/dev/null 2>&1; then
    "${sudo[@]}" pg_ctlcluster "$PG_MAJOR" main stop >/dev/null 2>&1 || true
fi
