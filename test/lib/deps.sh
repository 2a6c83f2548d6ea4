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
sanitize valgrind                                   /usr/bin/valgrind
lint    cppcheck                                    /usr/bin/cppcheck
lint    clang-tidy                                  /usr/bin/clang-tidy
deb     debhelper                                   /usr/bin/dh
deb     dpkg-dev                                    /usr/bin/dpkg-buildpackage
deb     postgresql-server-dev-all                   /usr/share/perl5/Debian/Debhelper/Sequence/pgxs.pm
deb     postgresql-common                           /usr/bin/pg_buildext
deb     lintian                                     /usr/bin/lintian
dist    git                                         /usr/bin/git
dist    unzip                                       /usr/bin/unzip
bench   gnuplot-nox                                 /usr/bin/gnuplot-nox
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
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
# Debian's postgresql-common may create and start a "main" cluster on
# install; the tests never use it, and CI wants no services left running.
# Packaged services (the exporter, prometheus) are stopped likewise.
if command -v pg_ctlcluster >/dev/null 2>&1; then
    "${sudo[@]}" pg_ctlcluster "$PG_MAJOR" main stop >/dev/null 2>&1 || true
fi
