#!/usr/bin/env bash
# The PGXN release (make dist): META.json passes the PGXN Meta Spec v1.0.0
# (test/packaging/meta_check.py, which must also reject broken copies of
# it), agrees with pg_lease.control and provides every extension of the
# tree (each *.control: pg_lease, pg_lease_router) at its version; the archive
# pg_lease-<version>.zip holds exactly the tracked files (git ls-files)
# under the prefix pg_lease-<version>/; and a build from the unpacked
# archive, installed into PG_BINDIR's PostgreSQL, passes `make installcheck`
# (pg_regress and isolation) against a throwaway cluster.
#
# The installation is left as found: the pg_lease files there before are
# put back afterwards, byte for byte.  Prints TAP; exits non-zero on any
# failure.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=test/lib/release.sh
. test/lib/release.sh
CLUSTER_DIR=
# shellcheck source=test/lib/cluster.sh
. test/lib/cluster.sh
# shellcheck source=test/lib/snapshot.sh
. test/lib/snapshot.sh
PG_CONFIG=$PG_BINDIR/pg_config
CHECK=test/packaging/meta_check.py

# shellcheck source=test/lib/tap.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/tap.sh"
finish() {
    echo "1..$n"
    [ "$fails" -eq 0 ] && [ "$n" -gt 0 ]
    exit
}

bash test/lib/deps.sh build test dist || exit 1
version=$(pg_lease_version) || exit 1
WORK=$(mktemp -d /tmp/pg_lease_disttest.XXXXXX)
SAVED=$WORK/make-install.tar
BEFORE=$(snapshot_manifest "$PG_CONFIG")
saved=0

# Puts the installation back as it was; the EXIT trap.
restore_install() {
    [ -n "${CLUSTER_DIR:-}" ] && cluster_stop
    if [ "$saved" -eq 1 ]; then
        if snapshot_restore "$PG_CONFIG" "$SAVED"; then
            saved=0
        else
            echo "# could not restore the pg_lease files of $PG_CONFIG; they are in $SAVED" >&2
            return
        fi
    fi
    rm -rf "$WORK"
}
trap restore_install EXIT
trap 'exit 130' INT TERM HUP

# --- META.json -------------------------------------------------------------
out=$(python3 "$CHECK" META.json)
ok $? "META.json passes the PGXN Meta Spec v1.0.0${out:+ ($(oneline "$out"))}"
out=$(python3 "$CHECK" META.json --control pg_lease.control)
ok $? "META.json names pg_lease at pg_lease.control's default_version $version, its files exist${out:+ ($(oneline "$out"))}"
controls=$(git ls-files '*.control')
provided=$(python3 -c 'import json; print("\n".join(sorted(json.load(open("META.json"))["provides"])))')
[ "$(sed 's|.*/||; s|\.control$||' <<<"$controls" | sort)" = "$provided" ]
ok $? "META.json provides exactly the extensions of the tracked control files ($(oneline "$controls"); provides: $(oneline "$provided"))"

# The validator must be able to say no: each broken copy is rejected, and
# the complaint names the field broken.  (python expression on d; field)
BROKEN='del d["name"]|/name: required
del d["abstract"]|/abstract: required
del d["maintainer"]|/maintainer: required
del d["license"]|/license: required
del d["provides"]|/provides: required
del d["version"]|/version: required
del d["meta-spec"]|/meta-spec: required
d["version"] = "0.3"|/version:
d["name"] = "pg lease"|/name:
d["license"] = "PostgreSQL License"|/license:
d["maintainer"] = []|/maintainer:
del d["provides"]["pg_lease"]["file"]|/provides/pg_lease/file: required
d["provides"]["pg_lease"]["version"] = "v3"|/provides/pg_lease/version:
d["prereqs"]["runtime"]["requires"]["PostgreSQL"] = "15"|/prereqs/runtime/requires/PostgreSQL:
d["prereqs"]["install"] = {}|/prereqs/install:
d["prereqs"]["runtime"]["needs"] = {}|/prereqs/runtime/needs:
d["tags"] = ["a/b"]|/tags[0]:
d["homepage"] = "https://example.org/"|/homepage:
d["meta-spec"]["version"] = "2.0.0"|/meta-spec/version:
d["resources"] = {"homepage": "pg_lease"}|/resources/homepage:
d["release_status"] = "final"|/release_status:'
mkdir "$WORK/broken"
# Writes a copy of META.json with one edit (Python, on d) to $3 and checks
# that the validator, given $3 and any further arguments, rejects it naming
# $2.
rejects_edit() {   # edit field copy [validator arguments...]
    local edit=$1 field=$2 copy=$3 out
    shift 3
    python3 -c 'import json, sys
d = json.load(open("META.json"))
exec(sys.argv[1])
json.dump(d, open(sys.argv[2], "w"))' "$edit" "$copy" || { ok 1 "could not make a copy with: $edit"; return; }
    out=$(python3 "$CHECK" "$copy" "$@")
    [ $? -eq 1 ] && grep -qF -- "$field" <<<"$out"
    ok $? "${1:+with $1, }the validator rejects META.json with $edit (said: $(oneline "${out#*: }"))"
}
i=0
while IFS='|' read -r edit field; do
    i=$((i + 1))
    rejects_edit "$edit" "$field" "$WORK/broken/$i.json"
done <<<"$BROKEN"
# a provides file that does not exist beside the control file
cp pg_lease.control "$WORK/broken/"
rejects_edit 'd["provides"]["pg_lease"]["file"] = "no_such_file.sql"' \
    '/provides/pg_lease/file: "no_such_file.sql" does not exist' \
    "$WORK/broken/file.json" --control "$WORK/broken/pg_lease.control"

# With --control, provides must cover every *.control of the tree at its
# default_version and name no other extension, and what a control file
# requires must be provided or a runtime prerequisite: broken copies of
# META.json beside copies of the tree's control files and docs.
PROJ=$WORK/project
mkdir -p "$PROJ/docs"
cp pg_lease.control pg_lease_router.control README.md "$PROJ/" && cp docs/scale-out.md "$PROJ/docs/"
cp META.json "$PROJ/"
out=$(python3 "$CHECK" "$PROJ/META.json" --control "$PROJ/pg_lease.control")
ok $? "with --control, the copy of the tree passes (the baseline of the cases below)${out:+ ($(oneline "$out"))}"
PROJECT_BROKEN='del d["provides"]["pg_lease_router"]|/provides/pg_lease_router: the extension pg_lease_router (pg_lease_router.control) is not provided
d["provides"]["pg_lease_router"]["version"] = "0.2.0"|/provides/pg_lease_router/version: "0.2.0", but pg_lease_router.control
del d["prereqs"]["runtime"]["recommends"]["plproxy"]|pg_lease_router.control requires the extension plproxy, which is neither provided nor a runtime prerequisite
d["provides"]["pg_other"] = {"file": "README.md", "version": "0.3.0"}|/provides/pg_other: no pg_other.control'
i=0
while IFS='|' read -r edit field; do
    i=$((i + 1))
    rejects_edit "$edit" "$field" "$PROJ/broken$i.json" --control "$PROJ/pg_lease.control"
done <<<"$PROJECT_BROKEN"

# --- the archive -------------------------------------------------------------
DIST_OUTDIR=$WORK make -s dist >"$WORK/make-dist.log" 2>&1
status=$?
sed 's/^/# /' "$WORK/make-dist.log"
ZIP=$WORK/pg_lease-$version.zip
[ "$status" -eq 0 ] && [ -f "$ZIP" ]
ok $? "make dist makes pg_lease-$version.zip (version from pg_lease.control)"
[ -f "$ZIP" ] || finish

entries=$(unzip -Z1 "$ZIP")
outside=$(grep -v "^pg_lease-$version/" <<<"$entries")
[ -z "$outside" ]
ok $? "every entry is under pg_lease-$version/${outside:+ (not: $(oneline "$outside"))}"
in_zip=$(grep -v '/$' <<<"$entries" | sed "s|^pg_lease-$version/||" | sort)
tracked=$(git ls-files | sort)
diff_out=$(diff <(echo "$tracked") <(echo "$in_zip"))
[ -z "$diff_out" ]
ok $? "the archive holds exactly the tracked files ($(grep -c . <<<"$in_zip") files)${diff_out:+; < tracked only, > archive only: $(oneline "$diff_out")}"

# --- build from the archive and make installcheck ------------------------
unzip -q "$ZIP" -d "$WORK/unpacked"
DIST=$WORK/unpacked/pg_lease-$version
snapshot_save "$PG_CONFIG" "$SAVED" || { echo "Bail out! could not save the pg_lease files of $PG_CONFIG"; exit 1; }
saved=1
(cd "$DIST" && pg_lease_build_install all) >"$WORK/build.log" 2>&1
status=$?
sed 's/^/# /' "$WORK/build.log"
ok "$status" "the unpacked archive builds (WERROR=1) and installs into $($PG_CONFIG --pkglibdir)"

CLUSTER_EXIT_HOOK=restore_install
if [ "$status" -eq 0 ] && cluster_start; then
    make -C "$DIST" installcheck PG_CONFIG="$PG_CONFIG" >"$WORK/installcheck.log" 2>&1
    status=$?
    sed 's/^/# /' "$WORK/installcheck.log"
    want=$(find "$DIST/test/sql" "$DIST/test/specs" -maxdepth 1 \( -name '*.sql' -o -name '*.spec' \) | wc -l)
    passed=$(grep -cE '^(test| ) +[^ ]+ +\.\.\. ok' "$WORK/installcheck.log")
    [ "$status" -eq 0 ] && [ "$passed" -eq "$want" ]
    ok $? "make installcheck in the unpacked archive: $passed of $want tests pass (exit $status)"
    for d in "$DIST/regression.diffs" "$DIST/output_iso/regression.diffs"; do
        [ -f "$d" ] && sed 's/^/# /' "$d"
    done
    cluster_stop
    CLUSTER_DIR=
else
    ok 1 "make installcheck in the unpacked archive (no build or no cluster)"
fi

restore_install
trap - EXIT
AFTER=$(snapshot_manifest "$PG_CONFIG")
[ "$AFTER" = "$BEFORE" ]
ok $? "the pg_lease files of $PG_CONFIG are back as they were ($(grep -c . <<<"$BEFORE") files)"
finish
