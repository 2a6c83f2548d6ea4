#!/usr/bin/env bash
# make deb: builds the Debian packages postgresql-<major>-pg-lease and
# postgresql-<major>-pg-lease-router (the router extension, Architecture:
# all) the way Debian and apt.postgresql.org build extensions (debian/:
# pg_buildext, dh --with pgxs_loop), from an archive of HEAD in a directory
# under /tmp, so the checkout is never written to.  Puts the .debs (with
# the source package, .changes, .buildinfo, build log and lintian report)
# into build/deb/ (git-ignored; DEB_OUTDIR to choose another place), and fails
# unless lintian reports no error and no warning.
#
# The upstream version is pg_lease.control's default_version.  When the top
# entry of debian/changelog names another one, the build says so and builds
# default_version with that entry's Debian revision.
#
# Tests are not run during the build (the nocheck profile, so the build
# needs only the packages test/lib/deps.sh installs): test/packaging/deb_test.sh
# installs the package and runs the suites against it.  DEB_BUILD_CHECK=1
# runs them at build time as a Debian buildd does (dh_pgxs_test:
# make installcheck in a pg_virtualenv cluster; needs postgresql-all).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
ROOT=$(pwd)
# shellcheck source=test/lib/release.sh
. test/lib/release.sh

bash test/lib/deps.sh build deb || exit 1
version=$(pg_lease_version) || exit 1
OUT=${DEB_OUTDIR:-$ROOT/build/deb}
release_warn_uncommitted "make deb"

WORK=$(mktemp -d /tmp/pg_lease_deb.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
SRC=$WORK/pg-lease-$version
mkdir "$SRC"
git archive HEAD | tar -x -C "$SRC" || exit 1
# The upstream tarball is the tree without debian/ (3.0 (quilt) adds it
# from the .debian.tar.xz).
git archive --format=tar --prefix="pg-lease-$version/" HEAD -- . ':(exclude)debian' |
    gzip -n -9 >"$WORK/pg-lease_$version.orig.tar.gz" || exit 1

changelog_version=$(cd "$SRC" && dpkg-parsechangelog -SVersion) || exit 1
revision=${changelog_version##*-}
if [ "${changelog_version%-*}" != "$version" ]; then
    echo "pg_lease: warning: debian/changelog's top entry is $changelog_version but" \
        "pg_lease.control's default_version is $version; building $version-$revision" \
        "(add a changelog entry for the release)" >&2
    sed -i "1s/($changelog_version)/($version-$revision)/" "$SRC/debian/changelog"
fi

if [ -n "${DEB_BUILD_CHECK:-}" ]; then
    build_opts=(-us -uc)
else
    export DEB_BUILD_OPTIONS="nocheck${DEB_BUILD_OPTIONS:+ $DEB_BUILD_OPTIONS}"
    build_opts=(-us -uc -Pnocheck)
fi
echo "pg_lease: building pg-lease $version-$revision in $SRC (log: $OUT/build.log)"
mkdir -p "$OUT"
rm -f "$OUT"/*
# Called from make (make deb), the build must not inherit its flags: a
# `make -s deb` would silence the compile lines of the build log.  Nor the
# caller's PATH: Debian's tools, Debian's python3 (pybuild builds the
# python3-pg-lease wheel with it; a pyenv or venv python3 first on PATH
# lacks Debian's build module), as a build daemon has them.
(cd "$SRC" && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    dpkg-buildpackage "${build_opts[@]}") \
    >"$OUT/build.log" 2>&1
status=$?
cp "$WORK"/*.deb "$WORK"/*.dsc "$WORK"/*.changes "$WORK"/*.buildinfo \
    "$WORK"/*.debian.tar.* "$WORK"/*.orig.tar.gz "$OUT"/ 2>/dev/null
if [ "$status" -ne 0 ]; then
    tail -n 60 "$OUT/build.log" >&2
    echo "pg_lease: dpkg-buildpackage failed (exit $status); full log in $OUT/build.log" >&2
    exit 1
fi

# lintian over the source and binary packages (the .changes names both);
# overrides, each with its reason, are in debian/.
changes=$(find "$OUT" -maxdepth 1 -name '*.changes')
lintian --fail-on error,warning --display-info "$changes" >"$OUT/lintian.log" 2>&1
status=$?
cat "$OUT/lintian.log"
if [ "$status" -ne 0 ]; then
    echo "pg_lease: lintian found errors or warnings (exit $status)" >&2
    exit 1
fi
for deb in "$OUT"/*.deb; do
    echo "pg_lease: built $deb"
done
