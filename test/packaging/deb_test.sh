#!/usr/bin/env bash
# The Debian packages (make deb), built, installed and removed on this
# machine: postgresql-15-pg-lease (pg_lease) and postgresql-15-pg-lease-router
# (pg_lease_router, Architecture: all).  lintian is clean and the build
# passes no -Werror even with WERROR=1 in the environment; each package holds
# its own extension's files and nothing of the other's; dpkg -i installs
# both into the system PostgreSQL (the router's needs postgresql-15-plproxy,
# deps.sh group debtest), where CREATE EXTENSION pg_lease, CREATE EXTENSION
# pg_lease_router CASCADE (another database) and the pg_regress suite
# (test/sql/, test/expected/) pass against a throwaway cluster; dpkg -r and dpkg -P
# take every file away again.
#
# The packages install into the system PostgreSQL, so this test uses that
# one whatever PG_BINDIR says.  It leaves the machine as it found it: the
# pg_lease files a `make install` put there are moved aside before dpkg -i
# and put back, byte for byte, afterwards (also when the test fails or is
# interrupted).  It refuses to run when dpkg already knows either package.
# Needs root (or sudo) for dpkg.  Prints TAP; exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
ROOT=$(pwd)
# shellcheck source=test/lib/release.sh
. test/lib/release.sh

PG_MAJOR=${PG_MAJOR:-15}
PG_BINDIR=/usr/lib/postgresql/$PG_MAJOR/bin
PKG=postgresql-$PG_MAJOR-pg-lease
ROUTER_PKG=postgresql-$PG_MAJOR-pg-lease-router
PKGS=("$PKG" "$ROUTER_PKG")
SYS_PG_CONFIG=$PG_BINDIR/pg_config
CLUSTER_DIR=
# shellcheck source=test/lib/cluster.sh
. test/lib/cluster.sh
# shellcheck source=test/lib/snapshot.sh
. test/lib/snapshot.sh
sudo=()
[ "$(id -u)" -eq 0 ] || sudo=(sudo)

# shellcheck source=test/lib/tap.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/tap.sh"
finish() {
    echo "1..$n"
    [ "$fails" -eq 0 ] && [ "$n" -gt 0 ]
    exit
}

# dpkg's status of a package: "installed", "config-files", ... or nothing.
pkg_status() {
    dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null
}

# debtest: PL/Proxy, which the router's package depends on.
bash test/lib/deps.sh build test deb debtest || exit 1
for p in "${PKGS[@]}"; do
    status=$(pkg_status "$p")
    if [ -n "$status" ] && [ "$status" != "not-installed" ]; then
        echo "Bail out! dpkg already knows $p (status: $status); this test installs and purges it," \
            "so it leaves it alone: remove it first (dpkg -P $p)"
        exit 1
    fi
done

version=$(pg_lease_version) || exit 1
changelog_version=$(dpkg-parsechangelog -l debian/changelog -SVersion) || exit 1
deb_version=$version-${changelog_version##*-}
arch=$(dpkg --print-architecture)
OUT=$(mktemp -d /tmp/pg_lease_debtest.XXXXXX)
SAVED=$OUT/make-install.tar
BEFORE=$(snapshot_manifest "$SYS_PG_CONFIG")
saved=0

# Puts the machine back: no package, the make-install files as they were.
# Idempotent; the EXIT trap.
restore_machine() {
    [ -n "${CLUSTER_DIR:-}" ] && cluster_stop
    local p
    for p in "${PKGS[@]}"; do
        status=$(pkg_status "$p")
        if [ -n "$status" ] && [ "$status" != "not-installed" ]; then
            "${sudo[@]}" dpkg -P "$p" >/dev/null 2>&1 || echo "# could not purge $p" >&2
        fi
    done
    if [ "$saved" -eq 1 ]; then
        if snapshot_restore "$SYS_PG_CONFIG" "$SAVED"; then
            saved=0
        else
            echo "# could not restore the make-install files; they are in $SAVED" >&2
            return
        fi
    fi
    rm -rf "$OUT"
}
trap restore_machine EXIT
trap 'exit 130' INT TERM HUP

# --- build ---------------------------------------------------------------
# WERROR=1 exported on purpose: debian/rules must keep it out of the build.
WERROR=1 DEB_OUTDIR=$OUT/deb make -s deb >"$OUT/make-deb.log" 2>&1
status=$?
sed 's/^/# /' "$OUT/make-deb.log"
ok "$status" "make deb builds $PKG and $ROUTER_PKG $deb_version and lintian reports no error or warning"
DEB=$OUT/deb/${PKG}_${deb_version}_$arch.deb
ROUTER_DEB=$OUT/deb/${ROUTER_PKG}_${deb_version}_all.deb
[ -f "$DEB" ]
ok $? "the package is ${PKG}_${deb_version}_$arch.deb (version from pg_lease.control)"
[ -f "$ROUTER_DEB" ]
ok $? "the router's package is ${ROUTER_PKG}_${deb_version}_all.deb (Architecture: all: no C)"
if [ "$status" -ne 0 ] || [ ! -f "$DEB" ] || [ ! -f "$ROUTER_DEB" ]; then finish; fi

! grep -E '^[EW]: ' "$OUT/deb/lintian.log" >/dev/null
ok $? "lintian.log holds no E: or W: line"
# lintian checked the .changes: the source and every binary package it names.
changes_pkgs=$(sed -n 's/^Binary: //p' "$OUT"/deb/*.changes)
for p in "${PKGS[@]}"; do
    case " $changes_pkgs " in *" $p "*) true ;; *) false ;; esac
    ok $? "the .changes lintian checked names $p (Binary: $changes_pkgs)"
done

compiles=$(grep -cE '^(gcc|cc|clang) .* -c -o src/' "$OUT/deb/build.log")
werror=$(grep -E '^(gcc|cc|clang) ' "$OUT/deb/build.log" | grep -cE -- '-Werror( |$)')
[ "$compiles" -gt 0 ] && [ "$werror" -eq 0 ]
ok $? "the package build compiles without -Werror, WERROR=1 notwithstanding ($compiles compiles, $werror with -Werror)"

# --- contents ------------------------------------------------------------
# The files of a .deb, one path a line (no directories, no leading ./).
deb_files() {
    dpkg-deb -c "$1" | awk '$1 !~ /^d/ { sub(/^\.\//, "", $6); print $6 }' | sort
}
EXT=usr/share/postgresql/$PG_MAJOR/extension
contents=$(deb_files "$DEB")
router_contents=$(deb_files "$ROUTER_DEB")

want="usr/lib/postgresql/$PG_MAJOR/lib/pg_lease.so
$EXT/pg_lease.control
$EXT/pg_lease--$version.sql
usr/share/doc/$PKG/copyright"
for f in $(git ls-tree --name-only HEAD sql/ | sed 's#^sql/##' | grep -E '^pg_lease--.*\.sql$'); do
    want+=$'\n'"$EXT/$f"
done
missing=$(comm -23 <(sort -u <<<"$want") <(echo "$contents"))
[ -z "$missing" ]
ok $? "$PKG holds the module, the control file and every install script${missing:+ (missing: $(oneline "$missing"))}"

router_want="$EXT/pg_lease_router.control
usr/share/doc/$ROUTER_PKG/scale-out.md.gz
usr/share/doc/$ROUTER_PKG/copyright"
for f in $(git ls-tree --name-only HEAD sql/ | sed 's#^sql/##' | grep -E '^pg_lease_router--.*\.sql$'); do
    router_want+=$'\n'"$EXT/$f"
done
missing=$(comm -23 <(sort -u <<<"$router_want") <(echo "$router_contents"))
[ -z "$missing" ]
ok $? "$ROUTER_PKG holds the router's control file, its install scripts and scale-out.md${missing:+ (missing: $(oneline "$missing"))}"

# The Python client's package: the pg_lease package and its metadata, its
# docs, nothing else; psycopg2 from Debian (dh_python3).
PY_DEB=$OUT/deb/python3-pg-lease_${deb_version}_all.deb
py_contents=$(deb_files "$PY_DEB" 2>/dev/null)
py_depends=$(dpkg-deb -f "$PY_DEB" Depends 2>/dev/null)
[ -f "$PY_DEB" ] && grep -qx 'usr/lib/python3/dist-packages/pg_lease/worker.py' <<<"$py_contents" &&
    [ -z "$(grep -vE '^usr/(lib/python3/dist-packages/pg_lease(/|-[0-9.]+\.dist-info/)|share/(doc|lintian)/)' <<<"$py_contents")" ] &&
    grep -q 'python3-psycopg2' <<<"$py_depends"
ok $? "python3-pg-lease_${deb_version}_all.deb holds the Python client and nothing else, and depends on python3-psycopg2 ($py_depends)"

# Each package's extension files are its own extension's, and nothing else.
other=$(grep -E "^($EXT/|usr/lib/)" <<<"$contents" |
    grep -vE "^($EXT/pg_lease(\.control|--[^/]*\.sql)|usr/lib/postgresql/$PG_MAJOR/lib/(pg_lease\.so|bitcode/pg_lease(/.*|\.index\.bc)))$")
[ -z "$other" ] && ! grep -qE 'pg_lease_router|scale-out' <<<"$contents"
ok $? "$PKG holds nothing of the router's${other:+ (also: $(oneline "$other"))}"
other=$(grep -E "^($EXT/|usr/lib/)" <<<"$router_contents" | grep -vE "^$EXT/pg_lease_router(\.control|--[^/]*\.sql)$")
docs=$(grep "^usr/share/doc/$ROUTER_PKG/" <<<"$router_contents" |
    grep -vE "/(copyright|changelog(\.Debian)?\.gz|scale-out\.md\.gz)$")
[ -z "$other" ] && [ -z "$docs" ]
ok $? "$ROUTER_PKG holds nothing of pg_lease's (no module, no pg_lease script, no other page)${other:+ (also: $(oneline "$other"))}${docs:+ (docs: $(oneline "$docs"))}"

for p in "${PKGS[@]}"; do
    if [ "$p" = "$PKG" ]; then files=$contents; else files=$router_contents; fi
    stray=$(grep -vE "^usr/(lib/postgresql/$PG_MAJOR/lib|share/postgresql/$PG_MAJOR/extension|share/doc/$p|share/lintian/overrides)/" <<<"$files")
    [ -z "$stray" ]
    ok $? "$p installs nothing outside PostgreSQL's directories and its doc directory${stray:+ (also: $(oneline "$stray"))}"
done
depends=$(dpkg-deb -f "$ROUTER_DEB" Depends)
grep -qE "(^|, )postgresql-$PG_MAJOR-plproxy(,|$| )" <<<"$depends" &&
    grep -qE "(^|, )postgresql-$PG_MAJOR(,|$| )" <<<"$depends"
ok $? "$ROUTER_PKG depends on postgresql-$PG_MAJOR-plproxy and postgresql-$PG_MAJOR (Depends: $depends)"

# --- install -------------------------------------------------------------
# The make-install files go aside, so only the packages' can serve
# CREATE EXTENSION below, and so the purge can be seen to remove them all.
snapshot_save "$SYS_PG_CONFIG" "$SAVED" || { echo "Bail out! could not save the make-install files"; exit 1; }
saved=1
snapshot_clear "$SYS_PG_CONFIG"
echo "# moved $(grep -c . <<<"$BEFORE") make-install files aside; they are put back at the end"
"${sudo[@]}" dpkg -i "$DEB" "$ROUTER_DEB" >"$OUT/dpkg-i.log" 2>&1
status=$?
sed 's/^/# /' "$OUT/dpkg-i.log"
[ "$status" -eq 0 ] && [ "$(pkg_status "$PKG")" = installed ] && [ "$(pkg_status "$ROUTER_PKG")" = installed ]
ok $? "dpkg -i installs $PKG and $ROUTER_PKG"
for f in "/usr/lib/postgresql/$PG_MAJOR/lib/pg_lease.so" "/$EXT/pg_lease.control"; do
    dpkg -S "$f" 2>/dev/null | grep -q "^$PKG: "
    ok $? "$f belongs to $PKG"
done
dpkg -S "/$EXT/pg_lease_router.control" 2>/dev/null | grep -q "^$ROUTER_PKG: "
ok $? "/$EXT/pg_lease_router.control belongs to $ROUTER_PKG"

# --- CREATE EXTENSION and pg_regress against the installed packages ------
# lease.* functions, one identity signature a line (trigger functions belong
# to pg_lease's tables, which a router has not).
lease_functions() {
    "$PG_BINDIR/psql" -X -q -At -v ON_ERROR_STOP=1 -d "$1" -c "
SELECT p.oid::pg_catalog.regprocedure::pg_catalog.text COLLATE \"C\" AS f
  FROM pg_catalog.pg_proc AS p
 WHERE p.pronamespace OPERATOR(pg_catalog.=) 'lease'::pg_catalog.regnamespace
   AND p.prorettype OPERATOR(pg_catalog.<>) 'pg_catalog.trigger'::pg_catalog.regtype
   -- nor pg_lease's internal liveness test (src/router/generate.sql)
   AND p.proname OPERATOR(pg_catalog.<>) 'liveness_cutoff'
   -- nor the steps of a stream move, which the router's move_stream calls
   -- on named partitions (src/router/placement.sql)
   AND p.proname NOT LIKE 'move\\_stream\\_%'
 ORDER BY f"
}
CLUSTER_EXIT_HOOK=restore_machine
if cluster_start; then
    psql=("$PG_BINDIR/psql" -X -q -At -v ON_ERROR_STOP=1 -d postgres)
    "${psql[@]}" -c "CREATE DATABASE pg_lease_deb" -c "CREATE DATABASE pg_lease_deb_router" >/dev/null
    got=$("$PG_BINDIR/psql" -X -q -At -v ON_ERROR_STOP=1 -d pg_lease_deb \
        -c "CREATE EXTENSION pg_lease" \
        -c "SELECT extversion FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'pg_lease'" 2>&1)
    [ "$got" = "$version" ]
    ok $? "CREATE EXTENSION pg_lease from the package installs $version (got: $got)"

    got=$("$PG_BINDIR/psql" -X -q -At -v ON_ERROR_STOP=1 -d pg_lease_deb_router \
        -c "SET client_min_messages = warning" \
        -c "CREATE EXTENSION pg_lease_router CASCADE" \
        -c "SELECT pg_catalog.string_agg(extname || ' ' || extversion, ', ' ORDER BY extname) FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.<>) 'plpgsql'" 2>&1)
    [[ "$got" == "pg_lease_router $version, plproxy "[0-9]* ]]
    ok $? "CREATE EXTENSION pg_lease_router CASCADE from the package installs it and plproxy (got: $(oneline "$got"))"
    lease_functions pg_lease_deb >"$OUT/pg_lease.functions" 2>&1
    lease_functions pg_lease_deb_router >"$OUT/router.functions" 2>&1
    nfun=$(grep -c . "$OUT/pg_lease.functions")
    fdiff=$(diff "$OUT/pg_lease.functions" "$OUT/router.functions")
    [ "$nfun" -gt 0 ] && [ -z "$fdiff" ]
    ok $? "the router defines the same $nfun lease.* functions as pg_lease, trigger functions, liveness_cutoff and the move steps aside${fdiff:+ (< pg_lease, > router: $(oneline "$fdiff"))}"

    tests=$(for f in test/sql/*.sql; do basename "$f" .sql; done | sort)
    regress=$(dirname "$("$PG_BINDIR/pg_config" --pgxs)")/../../src/test/regress/pg_regress
    mkdir -p "$OUT/regress"
    # shellcheck disable=SC2086 # one argument per test
    "$regress" --inputdir="$ROOT/test" --outputdir="$OUT/regress" --bindir="$PG_BINDIR" \
        --load-extension=pg_lease --dbname=pg_lease_deb_regression \
        --host="$PGHOST" --port="$PGPORT" --user=postgres $tests >"$OUT/regress.log" 2>&1
    sed 's/^/# /' "$OUT/regress.log"
    passed=$(grep -cE '^(test| ) +[^ ]+ +\.\.\. ok' "$OUT/regress.log")
    total=$(wc -w <<<"$tests")
    [ "$passed" -eq "$total" ]
    ok $? "pg_regress against the installed package: $passed of $total tests pass"
    [ -f "$OUT/regress/regression.diffs" ] && sed 's/^/# /' "$OUT/regress/regression.diffs"
    cluster_stop
    CLUSTER_DIR=
else
    ok 1 "a throwaway cluster of the system PostgreSQL starts"
fi

# --- remove --------------------------------------------------------------
for p in "${PKGS[@]}"; do
    "${sudo[@]}" dpkg -r "$p" >/dev/null 2>&1
    ok $? "dpkg -r $p"
    "${sudo[@]}" dpkg -P "$p" >/dev/null 2>&1
    status=$(pkg_status "$p")
    [ -z "$status" ] || [ "$status" = "not-installed" ]
    ok $? "dpkg -P $p leaves dpkg no record of it (status: ${status:-none})"
done
left=$(snapshot_files "$SYS_PG_CONFIG")
[ -z "$left" ]
ok $? "no pg_lease or pg_lease_router file is left in the system PostgreSQL after the purge${left:+ (left: $(oneline "$left"))}"

# --- restore -------------------------------------------------------------
restore_machine
trap - EXIT
AFTER=$(snapshot_manifest "$SYS_PG_CONFIG")
[ "$AFTER" = "$BEFORE" ]
ok $? "the make-install files are back as they were ($(grep -c . <<<"$BEFORE") files)"
finish
