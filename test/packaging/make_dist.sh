#!/usr/bin/env bash
# make dist: the PGXN release archive, build/pg_lease-<version>.zip (DIST_OUTDIR
# to choose another directory), made the way PGXN expects:
#   git archive --format=zip --prefix=pg_lease-<version>/ HEAD
# <version> is pg_lease.control's default_version.  The archive is of HEAD:
# uncommitted changes are left out, with a warning.  The META.json inside
# it is validated against the PGXN Meta Spec (test/packaging/meta_check.py);
# an invalid one fails the target and no archive is left.  A META.json whose
# version is not default_version is reported and the archive kept (the
# version in pg_lease.control is bumped first while a release is prepared).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
ROOT=$(pwd)
# shellcheck source=test/lib/release.sh
. test/lib/release.sh

bash test/lib/deps.sh dist || exit 1
version=$(pg_lease_version) || exit 1
OUT=${DIST_OUTDIR:-$ROOT/build}
ZIP=$OUT/pg_lease-$version.zip
release_warn_uncommitted "make dist"

mkdir -p "$OUT"
rm -f "$ZIP"
git archive --format=zip --prefix="pg_lease-$version/" -o "$ZIP" HEAD || exit 1

WORK=$(mktemp -d /tmp/pg_lease_dist.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
unzip -q "$ZIP" -d "$WORK" || exit 1
DIST=$WORK/pg_lease-$version
if ! spec=$(python3 test/packaging/meta_check.py "$DIST/META.json"); then
    echo "$spec" | sed "s|$WORK/||" >&2
    rm -f "$ZIP"
    echo "pg_lease: META.json does not pass the PGXN Meta Spec; no archive made" >&2
    exit 1
fi
if ! project=$(python3 test/packaging/meta_check.py "$DIST/META.json" --control "$DIST/pg_lease.control"); then
    echo "$project" | sed "s|$WORK/||; s/^/pg_lease: warning: /" >&2
fi
echo "pg_lease: built $ZIP ($(unzip -Z1 "$ZIP" | grep -vc '/$') files, HEAD $(git rev-parse --short HEAD))"
