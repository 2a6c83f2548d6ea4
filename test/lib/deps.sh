#!/usr/bin/env bash
# Installs what a target of pg_lease needs, from Debian's packages, when any
# of it is missing.  Safe to run repeatedly: it does nothing when everything
# is there.
#
#   deps.sh [--check] [--root DIR] [GROUP...]
#
# GROUP is one or more of the groups in the table below (default: build test,
# what `make test` and `make demo` need).  --check only prints the missing
# packages, one a line, and exits 1 when any is missing; --root DIR looks for
# the proving files under DIR instead of / (test/packaging/deps_test.sh runs
# the detection against a fake root that way); --list prints the table.
#
# Each package is proven by a file that the build or the tests actually use
# and that only that package ships, never by a file another package also
# ships: /usr/lib/postgresql/15/bin/pg_config, for one, comes with
# postgresql-client-15 and says nothing about the server headers.
set -euo pipefail

PG_MAJOR=${PG_MAJOR:-15}
PGLIB=/usr/lib/postgresql/$PG_MAJOR
PGSHARE=/usr/share/postgresql/$PG_MAJOR

# group  package  proving file
# (default-jdk-headless is a metapackage: its doc directory is all it ships; the JDK
# it pulls in is what the java group's tests run, as /usr/lib/jvm/default-java.)
DEPS_TABLE="
build   postgresql-client-$PG_MAJOR                 $PGLIB/lib/pgxs/src/makefiles/pgxs.mk
build   postgresql-server-dev-$PG_MAJOR             /usr/include/postgresql/$PG_MAJOR/server/postgres.h
build   libpq-dev                                   /usr/include/postgresql/libpq-fe.h
build   gcc                                         /usr/bin/gcc
build   make                                        /usr/bin/make
test    postgresql-$PG_MAJOR                        $PGLIB/bin/postgres
test    postgresql-client-$PG_MAJOR                 $PGLIB/lib/pgxs/src/test/regress/pg_regress
test    postgresql-client-$PG_MAJOR                 $PGLIB/lib/pgxs/src/test/isolation/pg_isolation_regress
test    postgresql-$PG_MAJOR-pgtap                  $PGSHARE/extension/pgtap.control
test    libtap-parser-sourcehandler-pgtap-perl      /usr/bin/pg_prove
test    git                                         /usr/bin/git
test    unzip                                       /usr/bin/unzip
clients python3-psycopg2                            /usr/lib/python3/dist-packages/psycopg2/__init__.py
clients nodejs                                      /usr/bin/node
explore python3-psycopg2                            /usr/lib/python3/dist-packages/psycopg2/__init__.py
balance python3-psycopg2                            /usr/lib/python3/dist-packages/psycopg2/__init__.py
coordinator python3-psycopg2                        /usr/lib/python3/dist-packages/psycopg2/__init__.py
clients nodejs                                      /usr/bin/npm
elixir  elixir                                      /usr/lib/elixir/lib/ex_unit/ebin/Elixir.ExUnit.beam
elixir  erlang-p1-pgsql                             /usr/lib/erlang/lib/p1_pgsql-1.1.20/ebin/pgsql.beam
go      golang-go                                   /usr/bin/go
go      golang-github-jackc-pgx-v4-dev              /usr/share/gocode/src/github.com/jackc/pgx/v4/conn.go
clients python3.11-venv                             /usr/lib/python3.11/ensurepip/__init__.py
clients python3-setuptools                          /usr/lib/python3/dist-packages/setuptools/build_meta.py
clients python3-wheel                               /usr/lib/python3/dist-packages/wheel/bdist_wheel.py
pgbouncer pgbouncer                                 /usr/sbin/pgbouncer
java    default-jdk-headless                        /usr/lib/jvm/default-java/bin/javac
java    libpostgresql-jdbc-java                     /usr/share/java/postgresql.jar
java    junit5                                      /usr/share/java/junit-platform-console-standalone.jar
sanitize valgrind                                   /usr/bin/valgrind
lint    cppcheck                                    /usr/bin/cppcheck
lint    clang-tidy                                  /usr/bin/clang-tidy
scale   postgresql-$PG_MAJOR-plproxy                $PGSHARE/extension/plproxy.control
scale   postgresql-$PG_MAJOR-auto-failover          $PGSHARE/extension/pgautofailover.control
scale   pg-auto-failover-cli                        /usr/bin/pg_autoctl
deb     debhelper                                   /usr/bin/dh
deb     dpkg-dev                                    /usr/bin/dpkg-buildpackage
deb     postgresql-server-dev-all                   /usr/share/perl5/Debian/Debhelper/Sequence/pgxs.pm
deb     postgresql-common                           /usr/bin/pg_buildext
deb     lintian                                     /usr/bin/lintian
deb     dh-python                                   /usr/bin/pybuild
deb     pybuild-plugin-pyproject                    /usr/share/doc/pybuild-plugin-pyproject/copyright
debtest postgresql-$PG_MAJOR-plproxy                $PGSHARE/extension/plproxy.control
dist    git                                         /usr/bin/git
dist    unzip                                       /usr/bin/unzip
monitoring prometheus-postgres-exporter             /usr/bin/prometheus-postgres-exporter
monitoring prometheus                               /usr/bin/promtool
monitoring curl                                     /usr/bin/curl
dist    python3-minimal                             /usr/bin/python3
dist    libpython3.11-stdlib                        /usr/lib/python3.11/json/__init__.py
bench   gnuplot-nox                                 /usr/bin/gnuplot-nox
peers   python3-psycopg2                            /usr/lib/python3/dist-packages/psycopg2/__init__.py
peers   etcd-server                                 /usr/bin/etcd
peers   python3-etcd3                               /usr/lib/python3/dist-packages/etcd3/__init__.py
peers   libzookeeper-java                           /usr/share/java/zookeeper.jar
peers   default-jre-headless                        /usr/lib/jvm/default-java
peers   python3-kazoo                               /usr/lib/python3/dist-packages/kazoo/__init__.py
peers   redis-server                                /usr/bin/redis-server
peers   python3-redis                               /usr/lib/python3/dist-packages/redis/__init__.py
"

check_only=0
root=
groups=()
while [ $# -gt 0 ]; do
    case $1 in
        --check) check_only=1 ;;
        --list) sed '/^$/d' <<<"$DEPS_TABLE"; exit 0 ;;
        --root) root=$2; shift ;;
        --root=*) root=${1#--root=} ;;
        -*) echo "deps.sh: unknown option $1" >&2; exit 2 ;;
        *) groups+=("$1") ;;
    esac
    shift
done
[ ${#groups[@]} -gt 0 ] || groups=(build test)

# Every group named must be in the table: a typo must not pass as "nothing
# missing".
for g in "${groups[@]}"; do
    if ! awk -v g="$g" '$1 == g { found = 1 } END { exit !found }' <<<"$DEPS_TABLE"; then
        echo "deps.sh: unknown group '$g'" >&2
        exit 2
    fi
done

need=()
while read -r group package file; do
    [ -n "$group" ] || continue
    case " ${groups[*]} " in *" $group "*) ;; *) continue ;; esac
    [ -e "$root$file" ] && continue
    case " ${need[*]-} " in *" $package "*) ;; *) need+=("$package") ;; esac
done <<<"$DEPS_TABLE"

if [ "$check_only" -eq 1 ]; then
    [ ${#need[@]} -eq 0 ] && exit 0
    printf '%s\n' "${need[@]}"
    exit 1
fi
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
# Packaged services must not start: the postinst scripts of
# prometheus-postgres-exporter and prometheus start their services
# (invoke-rc.d, deb-systemd-invoke) unless /usr/sbin/policy-rc.d refuses.
# When the machine has no policy-rc.d, one that refuses every start (exit
# 101) is in place for this install only.
policy=/usr/sbin/policy-rc.d
own_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# pg_lease test/lib/deps.sh: no service starts during this install\nexit 101\n' |
        "${sudo[@]}" tee "$policy" >/dev/null && "${sudo[@]}" chmod 755 "$policy" && own_policy=1
fi
status=0
"${sudo[@]}" apt-get update -qq || status=$?
[ "$status" -ne 0 ] ||
    "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null || status=$?
[ "$own_policy" -eq 0 ] || "${sudo[@]}" rm -f "$policy"
[ "$status" -eq 0 ] || exit "$status"
# Debian's postgresql-common may create and start a "main" cluster on
# install; the tests never use it, and CI wants no services left running.
if command -v pg_ctlcluster >/dev/null 2>&1; then
    "${sudo[@]}" pg_ctlcluster "$PG_MAJOR" main stop >/dev/null 2>&1 || true
fi
# Should a service of a package installed just now have started anyway (a
# policy-rc.d of the machine's own that allows it), it is stopped: the
# tests start their own exporter and Redis on loopback ports.  (Group peers
# takes ZooKeeper's server from libzookeeper-java, not zookeeperd, which is
# only its service, and needs no etcdctl: test/bench/peers/peers.py starts
# etcd, ZooKeeper and Redis itself.)
for svc in prometheus-postgres-exporter prometheus pgbouncer redis-server etcd zookeeper; do
    case " ${need[*]} " in *" $svc "*) ;; *) continue ;; esac
    if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet "$svc" 2>/dev/null; then
        "${sudo[@]}" systemctl stop "$svc" || true
    elif [ -x "/etc/init.d/$svc" ]; then
        "${sudo[@]}" "/etc/init.d/$svc" stop >/dev/null 2>&1 || true
    fi
done
