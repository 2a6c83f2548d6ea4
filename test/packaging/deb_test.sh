#!/usr/bin/env bash
# The Debian package (make deb), built, installed and removed on this
# machine: lintian is clean and the build passes no -Werror even with
# WERROR=1 in the environment; the package holds the module and every
# install script; dpkg -i installs it into the system PostgreSQL, where
# CREATE EXTENSION pg_lease and the pg_regress suite (sql/, expected/) pass
# against a throwaway cluster; dpkg -r and dpkg -P take every file away
# again.
#
# The package installs into the system PostgreSQL, so this test uses that
# one whatever PG_BINDIR says.  It leaves the machine as it found it: the
# pg_lease files a `make install` put there are moved aside before dpkg -i
# and put back, byte for byte, afterwards (also when the test fails or is
# interrupted).  It refuses to run when dpkg already knows the package.
# Needs root (or sudo) for dpkg.  Prints TAP; exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
ROOT=$(pwd)
# shellcheck source=test/lib/release.sh
. test/lib/release.sh

PG_MAJOR=${PG_MAJOR:-15}
PG_BINDIR=/usr/lib/postgresql/$PG_MAJOR/bin
PKG=postgresql-$PG_MAJOR-pg-lease
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

# dpkg's status of the package: "installed", "config-files", ... or nothing.
pkg_status() {
    dpkg-query -W -f='${db:Status-Status}' "$PKG" 2>/dev/null
}

bash test/lib/deps.sh build test deb || exit 1
status=$(pkg_status)
if [ -n "$status" ] && [ "$status" != "not-installed" ]; then
    echo "Bail out! dpkg already knows $PKG (status: $status); this test installs and purges it," \
        "so it leaves it alone: remove it first (dpkg -P $PKG)"
    exit 1
fi

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
    status=$(pkg_status)
    if [ -n "$status" ] && [ "$status" != "not-installed" ]; then
        "${sudo[@]}" dpkg -P "$PKG" >/dev/null 2>&1 || echo "# could not purge $PKG" >&2
    fi
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
ok "$status" "make deb builds $PKG $deb_version and lintian reports no error or warning"
DEB=$OUT/deb/${PKG}_${deb_version}_$arch.deb
[ -f "$DEB" ]
ok $? "the package is ${PKG}_${deb_version}_$arch.deb (version from pg_lease.control)"
if [ "$status" -ne 0 ] || [ ! -f "$DEB" ]; then finish; fi

! grep -E '^[EW]: ' "$OUT/deb/lintian.log" >/dev/null
ok $? "lintian.log holds no E: or W: line"

compiles=$(grep -cE '^(gcc|cc|clang) .* -c -o src/' "$OUT/deb/build.log")
werror=$(grep -E '^(gcc|cc|clang) ' "$OUT/deb/build.log" | grep -cE -- '-Werror( |$)')
[ "$compiles" -gt 0 ] && [ "$werror" -eq 0 ]
ok $? "the package build compiles without -Werror, WERROR=1 notwithstanding ($compiles compiles, $werror with -Werror)"

# --- contents ------------------------------------------------------------
contents=$(dpkg-deb -c "$DEB" | awk '$1 !~ /^d/ { sub(/^\.\//, "", $6); print $6 }' | sort)
want="usr/lib/postgresql/$PG_MAJOR/lib/pg_lease.so
usr/share/postgresql/$PG_MAJOR/extension/pg_lease.control
usr/share/doc/$PKG/copyright"
for f in $(git ls-tree --name-only HEAD | grep -E '^pg_lease--.*\.sql$'); do
    want+=$'\n'"usr/share/postgresql/$PG_MAJOR/extension/$f"
done
missing=$(comm -23 <(sort <<<"$want") <(echo "$contents"))
[ -z "$missing" ]
ok $? "the package holds the module, the control file and every install script${missing:+ (missing: $(oneline "$missing"))}"
stray=$(grep -vE "^usr/(lib/postgresql/$PG_MAJOR/lib|share/postgresql/$PG_MAJOR/extension|share/doc/$PKG|share/lintian/overrides)/" <<<"$contents")
[ -z "$stray" ]
ok $? "the package installs nothing outside PostgreSQL's directories and its doc directory${stray:+ (also: $(oneline "$stray"))}"

# --- install -------------------------------------------------------------
# The make-install files go aside, so only the package's can serve
# CREATE EXTENSION below, and so the purge can be seen to remove them all.
snapshot_save "$SYS_PG_CONFIG" "$SAVED" || { echo "Bail out! could not save the make-install files"; exit 1; }
saved=1
snapshot_clear "$SYS_PG_CONFIG"
echo "# moved $(grep -c . <<<"$BEFORE") make-install files aside; they are put back at the end"
"${sudo[@]}" dpkg -i "$DEB" >"$OUT/dpkg-i.log" 2>&1
status=$?
sed 's/^/# /' "$OUT/dpkg-i.log"
[ "$status" -eq 0 ] && [ "$(pkg_status)" = installed ]
ok $? "dpkg -i installs $PKG"
for f in "/usr/lib/postgresql/$PG_MAJOR/lib/pg_lease.so" "/usr/share/postgresql/$PG_MAJOR/extension/pg_lease.control"; do
    dpkg -S "$f" 2>/dev/null | grep -q "^$PKG: "
    ok $? "$f belongs to $PKG"
done

# --- CREATE EXTENSION and pg_regress against the installed package -------
CLUSTER_EXIT_HOOK=restore_machine
if cluster_start; then
    psql=("$PG_BINDIR/psql" -X -q -At -v ON_ERROR_STOP=1 -d postgres)
    "${psql[@]}" -c "CREATE DATABASE pg_lease_deb" >/dev/null
    got=$("$PG_BINDIR/psql" -X -q -At -v ON_ERROR_STOP=1 -d pg_lease_deb \
        -c "CREATE EXTENSION pg_lease" \
        -c "SELECT extversion FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'pg_lease'" 2>&1)
    [ "$got" = "$version" ]
    ok $? "CREATE EXTENSION pg_lease from the package installs $version (got: $got)"

    tests=$(for f in sql/*.sql; do basename "$f" .sql; done | sort)
    regress=$(dirname "$("$PG_BINDIR/pg_config" --pgxs)")/../../src/test/regress/pg_regress
    mkdir -p "$OUT/regress"
    # shellcheck disable=SC2086 # one argument per test
    "$regress" --inputdir="$ROOT" --outputdir="$OUT/regress" --bindir="$PG_BINDIR" \
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
"${sudo[@]}" dpkg -r "$PKG" >/dev/null 2>&1
ok $? "dpkg -r $PKG"
"${sudo[@]}" dpkg -P "$PKG" >/dev/null 2>&1
status=$(pkg_status)
[ -z "$status" ] || [ "$status" = "not-installed" ]
ok $? "dpkg -P $PKG leaves dpkg no record of it (status: ${status:-none})"
left=$(snapshot_files "$SYS_PG_CONFIG")
[ -z "$left" ]
ok $? "no pg_lease file is left in the system PostgreSQL after the purge${left:+ (left: $(oneline "$left"))}"

# --- restore -------------------------------------------------------------
restore_machine
trap - EXIT
AFTER=$(snapshot_manifest "$SYS_PG_CONFIG")
[ "$AFTER" = "$BEFORE" ]
ok $? "the make-install files are back as they were ($(grep -c . <<<"$BEFORE") files)"
finish
