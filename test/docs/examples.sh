#!/usr/bin/env bash
# The docs-examples suite: every page's examples run as written.
#
# Convention (test/docs/README.md, "docs-examples"):
#   - every ```sql block of a page (fence at column 0) is run, in page order,
#     in ONE psql session on a fresh database in which CREATE EXTENSION
#     pg_lease has run (as a superuser, as on a throwaway cluster);
#   - a ```text block that follows a ```sql block (only blank lines between)
#     is that block's expected output: what psql prints for it, errors,
#     notices and command tags included, compared after removing trailing
#     white space and leading/trailing blank lines;
#   - a ```sql block without a ```text block must print no ERROR or WARNING;
#   - other blocks (```sh, ```json, plain ```) are not run.
# Ids come from \gset, never literals; values that vary from run to run
# (timestamps, intervals, random ids) are not displayed.
#
# Each page gets its own database; roles a page creates are dropped after it
# (roles are cluster-wide), and what it changed with ALTER SYSTEM is put back
# (so that the suites after it, and the next page, see the cluster's own
# configuration).  One trace stays: once a reload has read a lease.* setting
# from postgresql.auto.conf, the server keeps a placeholder of that name
# (empty after the RESET; the module's default once it loads), so a later
# session can ALTER SYSTEM SET it without loading the module.  That is why
# test/run.sh runs the settings suite, which checks the refusal, before
# this one.  Prints one line per page and closes with
# "N passed, N failed" (one per page).  Runs against $PGHOST/$PGPORT when set
# (test/run.sh's cluster), otherwise starts a throwaway cluster.
#
#   bash test/docs/examples.sh [PAGE.md...]
set -uo pipefail
cd "$(dirname "$0")/../.."
PG_BINDIR=${PG_BINDIR:-/usr/lib/postgresql/15/bin}
PSQL=("$PG_BINDIR/psql" -X)

if [ -z "${PGHOST:-}" ]; then
    # shellcheck source=../lib/cluster.sh
    . test/lib/cluster.sh
    cluster_start || exit 1
fi

if [ $# -gt 0 ]; then
    pages=("$@")
else
    # and the client page whose switch-over is SQL run by an operator (its
    # roles, grants and import, word for word)
    pages=(README.md docs/*.md docs/clients/elixir.md CONTRIBUTING.md)
fi

# DOCS_EXAMPLES_WORK=DIR keeps each page's script and psql output there.
if [ -n "${DOCS_EXAMPLES_WORK:-}" ]; then
    work=$DOCS_EXAMPLES_WORK
    mkdir -p "$work"
    trap 'declare -F cluster_stop >/dev/null && cluster_stop' EXIT
else
    work=$(mktemp -d)
    trap 'rm -rf "$work"; declare -F cluster_stop >/dev/null && cluster_stop' EXIT
fi
passed=0
failed=0

# Writes $2/script.sql (the page's sql blocks, each preceded by a marker),
# $2/exp.N (expected output of block N, when the page shows one) and
# $2/line.N (the block's line in the page).  Prints the number of blocks.
extract() {
    awk -v dir="$2" '
        function start_sql() {
            n++; state = "sql"
            printf "\\echo @@docs-block %d@@\n", n > (dir "/script.sql")
            print FNR > (dir "/line." n)
        }
        state == "out" {
            if ($0 ~ /^```sql[ \t]*$/) { start_sql(); next }
            if ($0 ~ /^```/) { state = "other" }
            next
        }
        state == "other" { if ($0 ~ /^```[ \t]*$/) state = "out"; next }
        state == "sql" {
            if ($0 ~ /^```[ \t]*$/) { state = "after"; next }
            print > (dir "/script.sql"); next
        }
        state == "after" {
            if ($0 ~ /^[ \t]*$/) next
            if ($0 ~ /^```text[ \t]*$/) { state = "exp"; printf "" > (dir "/exp." n); next }
            state = "out"
            if ($0 ~ /^```sql[ \t]*$/) { start_sql(); next }
            if ($0 ~ /^```/) state = "other"
            next
        }
        state == "exp" {
            if ($0 ~ /^```[ \t]*$/) { state = "out"; next }
            print > (dir "/exp." n); next
        }
        BEGIN { state = "out"; n = 0; printf "" > (dir "/script.sql") }
        END { print "\\echo @@docs-end@@" > (dir "/script.sql"); print n }
    ' "$1"
}

# Removes trailing white space and leading/trailing blank lines.
normalise() {
    sed -e 's/[[:space:]]*$//' "$1" | awk '
        NF { for (i = 0; i < blank; i++) print ""; blank = 0; seen = 1; print; next }
        seen { blank++ }'
}

roles() {
    "${PSQL[@]}" -At -d postgres -c "SELECT rolname FROM pg_catalog.pg_roles ORDER BY 1"
}

# The settings of postgresql.auto.conf (ALTER SYSTEM), NAME<tab>VALUE.
auto_conf() {
    "${PSQL[@]}" -AtF $'\t' -d postgres -c "SELECT name, setting FROM pg_catalog.pg_file_settings
        WHERE sourcefile LIKE '%/postgresql.auto.conf' ORDER BY seqno"
}

# Puts back the ALTER SYSTEM settings of $1 (an auto_conf listing) where
# they differ now, and reloads.  RESET of a lease.* setting needs the module
# loaded in the session (PostgreSQL 15), hence the LOAD.
restore_auto_conf() {
    local now name value
    now=$(auto_conf)
    [ "$now" = "$(cat "$1")" ] && return 0
    {
        echo "LOAD 'pg_lease';"
        cut -f1 "$1" <(printf '%s\n' "$now") | sort -u | while read -r name; do
            [ -n "$name" ] || continue
            if grep -q "^$name"$'\t' "$1"; then
                value=$(grep "^$name"$'\t' "$1" | tail -n 1 | cut -f2-)
                printf 'ALTER SYSTEM SET "%s" = %s;\n' "$name" "$(printf '%s' "$value" | sed "s/'/''/g; s/.*/'&'/")"
            else
                printf 'ALTER SYSTEM RESET "%s";\n' "$name"
            fi
        done
        echo "SELECT pg_catalog.pg_reload_conf();"
    } | "${PSQL[@]}" -q -d postgres -v ON_ERROR_STOP=1 >/dev/null ||
        echo "== could not put back the ALTER SYSTEM settings of $2"
}

for page in "${pages[@]}"; do
    dir=$work/$(echo "$page" | tr '/.' '__')
    rm -rf "$dir"
    mkdir -p "$dir"
    blocks=$(extract "$page" "$dir")
    [ "$blocks" -gt 0 ] || continue
    db=docs_$(basename "$page" .md | tr -c 'a-zA-Z0-9\n' '_' | tr 'A-Z' 'a-z')
    roles >"$dir/roles.before"
    auto_conf >"$dir/auto_conf.before"
    "${PSQL[@]}" -q -d postgres -c "SET client_min_messages = warning" \
        -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" &&
        "${PSQL[@]}" -q -d "$db" -c "CREATE EXTENSION pg_lease" || {
        failed=$((failed + 1)); echo "== $page: could not create its database"; continue; }
    # One session, as a reader pasting the blocks in order; stdout and
    # stderr line-buffered into one file so that errors stay in place.
    stdbuf -oL -eL "${PSQL[@]}" -v ON_ERROR_STOP=0 -d "$db" -f "$dir/script.sql" >"$dir/out" 2>&1
    sed -E 's/^psql:[^:]*:[0-9]+: //' "$dir/out" | awk -v dir="$dir" '
        /^@@docs-block [0-9]+@@$/ { n = $0; gsub(/[^0-9]/, "", n); f = dir "/got." n; printf "" > f; next }
        /^@@docs-end@@$/ { f = ""; next }
        f != "" { print > f }'
    bad=0
    for i in $(seq 1 "$blocks"); do
        [ -f "$dir/got.$i" ] || : >"$dir/got.$i"
        where="$page:$(cat "$dir/line.$i")"
        if [ -f "$dir/exp.$i" ]; then
            if ! diff -u --label "$where (shown)" --label "$where (psql printed)" \
                <(normalise "$dir/exp.$i") <(normalise "$dir/got.$i") >"$dir/diff.$i"; then
                cat "$dir/diff.$i"
                bad=$((bad + 1))
            fi
        elif grep -qE '^(ERROR|WARNING|FATAL|PANIC):' "$dir/got.$i"; then
            echo "--- $where: a block showing no output printed:"
            cat "$dir/got.$i"
            bad=$((bad + 1))
        fi
    done
    "${PSQL[@]}" -q -d postgres -c "DROP DATABASE $db" >/dev/null
    roles | comm -13 "$dir/roles.before" - | while read -r r; do
        echo 'DROP ROLE :"r"' | "${PSQL[@]}" -q -d postgres -v r="$r" >/dev/null
    done
    restore_auto_conf "$dir/auto_conf.before" "$page"
    if [ "$bad" -eq 0 ]; then
        passed=$((passed + 1)); echo "== $page: $blocks example blocks as shown"
    else
        failed=$((failed + 1)); echo "== $page: $bad of $blocks example blocks differ from the page"
    fi
done
echo "${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
