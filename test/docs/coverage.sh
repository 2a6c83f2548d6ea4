#!/usr/bin/env bash
# The docs-coverage suite: everything a user can call, set or be told is
# documented, once.  Conventions (test/docs/README.md):
#   - each function of schema lease (pg_proc, after CREATE EXTENSION) has
#     exactly one reference heading, a line starting with "### `lease.NAME(";
#     overloads share it; no such heading names a missing function;
#   - each lease.* setting (pg_settings after LOAD 'pg_lease') has exactly
#     one settings-table row, a line starting with "| `lease.NAME` |";
#   - each SQLSTATE the C code raises (errcode(ERRCODE_...) in src/, mapped
#     through the server's utils/errcodes.h; XX000 for elog(ERROR)) has
#     exactly one heading "### `CODE`";
#   - every relative link in the pages names a file that exists (or one of
#     the pages PLANNED below matches, a path or a glob);
#   - a recipe a test copies from a page (the lines between "-- recipe: PAGE"
#     and "-- end of recipe" in test/pgtap/*.sql, or a file of its own in
#     test/pgtap/recipes/ that a test includes with \ir) is in PAGE as it is
#     in the test, so the test proves what the page tells a reader to run;
#   - CONTRIBUTING.md's layout table names every tracked top-level entry and
#     folder of src/ and test/, every path it names exists, and each test/
#     folder's README names its files; every suite is in a README
#     (test/docs/layout.py).
# One count per function, setting, SQLSTATE, page, recipe and layout check
# (test/docs/layout.py's lines); closes with
# "N passed, N failed".  Runs against $PGHOST/$PGPORT when set (test/run.sh's
# cluster), otherwise starts a throwaway cluster.
set -uo pipefail
cd "$(dirname "$0")/../.."
PG_BINDIR=${PG_BINDIR:-/usr/lib/postgresql/15/bin}
PSQL=("$PG_BINDIR/psql" -X -q -v ON_ERROR_STOP=1)
PAGES=(README.md docs/*.md CONTRIBUTING.md)
# Pages checked for their links only: the suites' READMEs.
LINK_PAGES=("${PAGES[@]}" test/README.md test/*/README.md)
# Pages other changes add; linking to them ahead of time is fine.  Remove
# a page from here once it exists.
PLANNED=(docs/taker-internals.md docs/packaging.md docs/scale-out.md 'docs/clients/*.md')

if [ -z "${PGHOST:-}" ]; then
    # shellcheck source=../lib/cluster.sh
    . test/lib/cluster.sh
    cluster_start || exit 1
fi

passed=0
failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "docs-coverage: $*"; }

# Lines of every page, prefixed with the page's name.
all=$(grep -H '' "${PAGES[@]}")

db=docs_coverage
"${PSQL[@]}" -d postgres -c "SET client_min_messages = warning" \
    -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" &&
    "${PSQL[@]}" -d "$db" -c "CREATE EXTENSION pg_lease" || { echo "docs-coverage: no database"; exit 1; }
functions=$("${PSQL[@]}" -At -d "$db" -c "SELECT DISTINCT proname FROM pg_catalog.pg_proc
    WHERE pronamespace = 'lease'::regnamespace ORDER BY 1")
settings=$("${PSQL[@]}" -At -d "$db" -c "LOAD 'pg_lease'" -c "SELECT name FROM pg_catalog.pg_settings
    WHERE name LIKE 'lease.%' ORDER BY 1")
"${PSQL[@]}" -d postgres -c "DROP DATABASE $db"

[ -n "$functions" ] || bad "no function found in schema lease"
for f in $functions; do
    n=$(grep -cE "^[^:]+:### \`lease\.$f\(" <<<"$all")
    if [ "$n" -eq 1 ]; then ok; else bad "function lease.$f has $n reference headings (### \`lease.$f(...), want 1"; fi
done
# Headings naming functions that do not exist (renamed, dropped, misspelt).
for f in $(grep -oE "^[^:]+:### \`lease\.[a-z_0-9]+\(" <<<"$all" | sed -E 's/.*lease\.([a-z_0-9]+)\(/\1/' | sort -u); do
    grep -qx "$f" <<<"$functions" || bad "a heading documents lease.$f, which is not in pg_proc"
done

[ -n "$settings" ] || bad "no lease.* setting found after LOAD 'pg_lease'"
for s in $settings; do
    n=$(grep -cE "^[^:]+:\| \`${s//./\\.}\` \|" <<<"$all")
    if [ "$n" -eq 1 ]; then ok; else bad "setting $s has $n settings-table rows (| \`$s\` |), want 1"; fi
done

# SQLSTATEs raised by the C code, via the server's errcodes.h (and pg_lease's
# own, #defined in src/ headers: 40L01).
errcodes_h=$("$PG_BINDIR/pg_config" --includedir-server)/utils/errcodes.h
[ -f "$errcodes_h" ] || { bad "$errcodes_h not found"; errcodes_h=/dev/null; }
codes=$(grep -rhoE 'errcode\(ERRCODE_[A-Z0-9_]+\)' src | sed -E 's/errcode\((.*)\)/\1/' | sort -u |
    while read -r name; do
        code=$(sed -nE "s/^#define $name[[:space:]]+MAKE_SQLSTATE\('(.)', *'(.)', *'(.)', *'(.)', *'(.)'\).*/\1\2\3\4\5/p" "$errcodes_h" src/*.h src/*/*.h | head -n 1)
        [ -n "$code" ] && echo "$code" || echo "unknown:$name"
    done)
grep -rqE '\belog\((ERROR|FATAL)' src && codes=$(printf '%s\nXX000\n' "$codes")
[ -n "$codes" ] || bad "no errcode(ERRCODE_...) found in src/"
for c in $(sort -u <<<"$codes"); do
    case $c in unknown:*) bad "${c#unknown:} is not in $errcodes_h"; continue ;; esac
    n=$(grep -cE "^[^:]+:### \`$c\`" <<<"$all")
    if [ "$n" -eq 1 ]; then ok; else bad "SQLSTATE $c (raised in src/) has $n headings (### \`$c\`), want 1"; fi
done

# Whether $1 is one of the PLANNED pages.
planned() {
    local p
    for p in "${PLANNED[@]}"; do
        # shellcheck disable=SC2053  # $p is a glob on purpose
        [[ $1 == $p ]] && return 0
    done
    return 1
}

# Relative links, per page.
for page in "${LINK_PAGES[@]}"; do
    dir=$(dirname "$page")
    broken=0
    while read -r target; do
        [ -n "$target" ] || continue
        path=${target%%#*}
        [ -n "$path" ] || continue
        resolved=$(realpath -m --relative-to=. "$dir/$path")
        if [ ! -e "$resolved" ] && ! planned "$resolved"; then
            bad "$page links to $target, which does not exist"
            broken=1
        fi
    done < <(grep -oE '\]\([^)#][^)]*\)' "$page" | sed -E 's/^\]\((.*)\)$/\1/' | grep -vE '^[a-z]+:')
    [ "$broken" -eq 0 ] && ok
done

# Recipes copied into tests: each copy to a file of its own, $recipes/N.K
# (the K-th of the N-th test file), whose first line is "PAGE TEST:LINE".
# (No trap of its own: cluster_start's EXIT trap stops the cluster.)
recipes=$(mktemp -d)
i=0
for t in test/pgtap/*.sql test/pgtap/recipes/*.sql; do
    i=$((i + 1))
    awk -v out="$recipes/$i" -v test="$t" '
        /^-- recipe: / { n++; f = out "." n; print substr($0, 12) " " test ":" FNR > f; next }
        /^-- end of recipe$/ { f = ""; next }
        f != "" { print > f }
        END { if (f != "") print "" > (f ".open") }' "$t"
done
for copy in "$recipes"/*; do
    [ -f "$copy" ] || continue
    case $copy in *.open) continue ;; esac
    read -r page where <"$copy"
    body=$(tail -n +2 "$copy")
    if [ -f "$copy.open" ]; then
        bad "the recipe at $where has no \"-- end of recipe\" line"
    elif [ ! -f "$page" ]; then
        bad "the recipe at $where names $page, which does not exist"
    elif [ -z "$body" ] || [[ $(cat "$page") != *"$body"* ]]; then
        bad "the recipe at $where is not in $page as written there"
    else
        ok
    fi
done
rm -rf "$recipes"

# test/README.md's "When you change X, run Y" names every suite test/run.sh
# runs (test/run.sh --list), each as `name`.
suites=$(bash test/run.sh --list)
map=$(sed -n '/^## When you change X, run Y/,/^## [^W]/p' test/README.md)
[ -n "$suites" ] && [ -n "$map" ] || bad "test/run.sh's SUITES or test/README.md's \"When you change X, run Y\" not found"
for s in $suites; do
    if grep -q "\`$s\`" <<<"$map"; then
        ok
    else
        bad "test/README.md's \"When you change X, run Y\" names no change that runs the suite $s"
    fi
done

# The guide matches the tree (test/docs/layout.py: CONTRIBUTING.md's layout
# table, the suites' READMEs), after proving the check can fail.
while IFS= read -r line; do
    case $line in
        "ok: "*) ok ;;
        *) bad "${line#not ok: }" ;;
    esac
done < <(python3 test/docs/layout.py --self-test; python3 test/docs/layout.py || echo "not ok: the layout table and the tree disagree, or test/docs/layout.py failed")

echo "${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
