#!/usr/bin/env bash
# The dependency detection (test/lib/deps.sh) against a fake root: with every
# proving file present nothing is missing; with one proving file removed, the
# one package that ships it is named, and only it.  The expected package of
# each file is written here independently of deps.sh's table, and every row
# of that table must be one this test knows, so a new dependency cannot go
# untested.  Prints TAP; exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/../.."
DEPS=test/lib/deps.sh

# proving file -> the Debian package that ships it (dpkg -S on Debian 12)
EXPECTED="
/usr/lib/postgresql/15/lib/pgxs/src/makefiles/pgxs.mk              postgresql-client-15
/usr/lib/postgresql/15/lib/pgxs/src/test/regress/pg_regress        postgresql-client-15
/usr/lib/postgresql/15/lib/pgxs/src/test/isolation/pg_isolation_regress postgresql-client-15
/usr/include/postgresql/15/server/postgres.h                       postgresql-server-dev-15
/usr/include/postgresql/libpq-fe.h                                 libpq-dev
/usr/bin/gcc                                                       gcc
/usr/bin/make                                                      make
/usr/lib/postgresql/15/bin/postgres                                postgresql-15
/usr/share/postgresql/15/extension/pgtap.control                   postgresql-15-pgtap
/usr/bin/pg_prove                                                  libtap-parser-sourcehandler-pgtap-perl
/usr/bin/git                                                       git
/usr/bin/unzip                                                     unzip
/usr/lib/python3/dist-packages/psycopg2/__init__.py                python3-psycopg2
/usr/bin/node                                                      nodejs
/usr/bin/npm                                                       nodejs
/usr/lib/python3.11/ensurepip/__init__.py                          python3.11-venv
/usr/lib/python3/dist-packages/setuptools/build_meta.py            python3-setuptools
/usr/lib/python3/dist-packages/wheel/bdist_wheel.py                python3-wheel
/usr/sbin/pgbouncer                                                pgbouncer
/usr/bin/go                                                        golang-go
/usr/share/gocode/src/github.com/jackc/pgx/v4/conn.go              golang-github-jackc-pgx-v4-dev
/usr/lib/elixir/lib/ex_unit/ebin/Elixir.ExUnit.beam                elixir
/usr/lib/erlang/lib/p1_pgsql-1.1.20/ebin/pgsql.beam                erlang-p1-pgsql
/usr/lib/jvm/default-java/bin/javac                                default-jdk-headless
/usr/share/java/postgresql.jar                                     libpostgresql-jdbc-java
/usr/share/java/junit-platform-console-standalone.jar              junit5
/usr/bin/valgrind                                                  valgrind
/usr/bin/cppcheck                                                  cppcheck
/usr/bin/clang-tidy                                                clang-tidy
/usr/share/postgresql/15/extension/plproxy.control                 postgresql-15-plproxy
/usr/share/postgresql/15/extension/pgautofailover.control          postgresql-15-auto-failover
/usr/bin/pg_autoctl                                                pg-auto-failover-cli
/usr/bin/dh                                                        debhelper
/usr/bin/dpkg-buildpackage                                         dpkg-dev
/usr/share/perl5/Debian/Debhelper/Sequence/pgxs.pm                 postgresql-server-dev-all
/usr/bin/pg_buildext                                               postgresql-common
/usr/bin/lintian                                                   lintian
/usr/bin/pybuild                                                   dh-python
/usr/share/doc/pybuild-plugin-pyproject/copyright                  pybuild-plugin-pyproject
/usr/bin/prometheus-postgres-exporter                              prometheus-postgres-exporter
/usr/bin/promtool                                                  prometheus
/usr/bin/curl                                                      curl
/usr/bin/python3                                                   python3-minimal
/usr/lib/python3.11/json/__init__.py                               libpython3.11-stdlib
/usr/bin/gnuplot-nox                                               gnuplot-nox
/usr/bin/etcd                                                      etcd-server
/usr/lib/python3/dist-packages/etcd3/__init__.py                   python3-etcd3
/usr/share/java/zookeeper.jar                                      libzookeeper-java
/usr/lib/jvm/default-java                                          default-jre-headless
/usr/lib/python3/dist-packages/kazoo/__init__.py                   python3-kazoo
/usr/bin/redis-server                                              redis-server
/usr/lib/python3/dist-packages/redis/__init__.py                   python3-redis
"

# shellcheck source=test/lib/tap.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/tap.sh"

ROOT=$(mktemp -d /tmp/pg_lease_deps.XXXXXX)
trap 'rm -rf "$ROOT"' EXIT
table=$(bash "$DEPS" --list)
groups=$(awk '{ print $1 }' <<<"$table" | sort -u)

# Every row of deps.sh's table names the package this test expects.
while read -r group package file; do
    want=$(awk -v f="$file" '$1 == f { print $2 }' <<<"$EXPECTED")
    [ "$want" = "$package" ]
    ok $? "deps.sh ($group) proves $package by $file (expected: ${want:-nothing})"
done <<<"$table"

# Everything present: nothing missing for any group.
while read -r file _; do
    [ -n "$file" ] || continue
    mkdir -p "$ROOT$(dirname "$file")"
    touch "$ROOT$file"
done <<<"$EXPECTED"
for g in $groups; do
    out=$(bash "$DEPS" --check --root "$ROOT" "$g")
    ok $? "group $g: nothing missing on a complete root${out:+ (said: $out)}"
done

# One file missing at a time: exactly its package, for every group using it.
while read -r file package; do
    [ -n "$file" ] || continue
    mv "$ROOT$file" "$ROOT$file.away"
    for g in $(awk -v f="$file" '$3 == f { print $1 }' <<<"$table" | sort -u); do
        out=$(bash "$DEPS" --check --root "$ROOT" "$g")
        status=$?
        [ "$status" -eq 1 ] && [ "$out" = "$package" ]
        ok $? "group $g without $file names exactly $package (said: $(echo $out))"
    done
    mv "$ROOT$file.away" "$ROOT$file"
done <<<"$EXPECTED"

# A misspelt group is an error, not "nothing missing".
bash "$DEPS" --check --root "$ROOT" nosuchgroup >/dev/null 2>&1
[ $? -eq 2 ]
ok $? "an unknown group is refused (exit 2)"

echo "1..$n"
[ "$fails" -eq 0 ]
