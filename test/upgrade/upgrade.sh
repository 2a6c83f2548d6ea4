#!/usr/bin/env bash
# The upgrade test (docs/operations.md, "Upgrades"): for every released
# version X.Y.Z older than the control file's default_version (each <from>
# of an upgrade script sql/pg_lease--<from>--<to>.sql, and the oldest
# release's frozen full script: test/lib/release.sh, pg_lease_releases),
# CREATE EXTENSION pg_lease VERSION 'X.Y.Z' (the full script of 0.1.0, then
# the upgrade chain), run ALTER EXTENSION pg_lease UPDATE, and check that the
# result equals a fresh CREATE EXTENSION pg_lease of the default version:
#   1. a schema dump of each database (pg_dump --schema-only --binary-upgrade,
#      the one mode in which pg_dump prints every object of an extension
#      rather than just CREATE EXTENSION), with OIDs and the like removed;
#   2. test/upgrade/catalog.sql: functions with their proconfig, prosecdef and
#      ACLs, columns with defaults, constraints, indexes with predicates,
#      views, sequences, comments, extconfig/extcondition, and pg_depend
#      membership of every object in schema lease.
# Before each update it checks the support window (docs/operations.md,
# "Upgrades"): on the previous release's schema a call runs; on an older one
# it raises 55000 with the hint to update (updating needs only the scripts).
# It also checks that no released script changed: test/upgrade/released.sha256
# lists the checksum of each one.
#
# Runs against the cluster in PGHOST/PGPORT (test/run.sh's throwaway one)
# with the scripts already installed (make install).  Exit status 0 when
# everything matched; the differences are printed otherwise.
set -uo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=../lib/release.sh
. test/lib/release.sh
PG_BINDIR=${PG_BINDIR:-/usr/lib/postgresql/15/bin}
WORK=$(mktemp -d /tmp/pg_lease_upgrade.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
failed=0

psql_do() {
    PGOPTIONS="-c client_min_messages=warning ${PGOPTIONS:-}" \
    "$PG_BINDIR/psql" -X -q -v ON_ERROR_STOP=1 "$@"
}

# Prints a schema dump of database $1 with everything that differs between
# two equal schemas removed: comments and blank lines, the dump's session
# key, OIDs and relfilenodes, and what an upgrade leaves physically behind
# without changing the schema (dropped columns, "missing" values of added
# columns), the frozen-xid horizons of tables.  Trailing commas go too, so a dropped last column does not show.
schema_dump() {
    "$PG_BINDIR/pg_dump" --schema-only --binary-upgrade -d "$1" 2>/dev/null |
        grep -vE '^--|^$|^\\(un)?restrict |binary_upgrade_set_next_|binary_upgrade_set_missing_value|pg\.dropped\.|^UPDATE pg_catalog\.pg_(attribute|class)$|^SET relfrozenxid = |^WHERE oid = |^SET attlen = |^  AND attrelid = ' |
        sed -E "s/(binary_upgrade_create_empty_extension\('pg_lease', 'lease', (true|false), '[^']*', )'\{[0-9,]*\}'/\1'{oids}'/; s/,\$//"
}

# Compares file $2 (upgraded) with $3 (fresh); prints the difference.
compare() {
    if diff -u "$3" "$2" >"$WORK/diff"; then
        echo "upgrade: $1 identical"
    else
        echo "upgrade: $1 DIFFERS (--- fresh install, +++ upgraded):"
        cat "$WORK/diff"
        failed=1
    fi
}

# 1. Released scripts are frozen.
while read -r sum file; do
    if [ ! -f "$file" ]; then
        echo "upgrade: released script $file is missing"
        failed=1
    elif [ "$(sha256sum "$file" | cut -d' ' -f1)" != "$sum" ]; then
        echo "upgrade: released script $file was edited; a released script is never edited (add an upgrade script instead)"
        failed=1
    fi
done < test/upgrade/released.sha256

# 2. Every released version older than the default version, upgraded.
default=$(pg_lease_version) || exit 1
releases=$(pg_lease_releases) || exit 1
# the previous release: the oldest schema the module serves
previous=$(tail -n 1 <<<"$releases")
echo "upgrade: default version $default; released versions: $(echo $releases)"

psql_do -d postgres -c "DROP DATABASE IF EXISTS pg_lease_fresh" -c "CREATE DATABASE pg_lease_fresh" &&
    psql_do -d pg_lease_fresh -c "CREATE EXTENSION pg_lease" || exit 1
schema_dump pg_lease_fresh >"$WORK/fresh.dump"
psql_do -d pg_lease_fresh -f test/upgrade/catalog.sql >"$WORK/fresh.catalog" || exit 1
[ -s "$WORK/fresh.dump" ] && [ -s "$WORK/fresh.catalog" ] || { echo "upgrade: empty dump"; exit 1; }

tested=0
for from in $releases; do
    [ "$from" = "$default" ] && continue
    [ "$(printf '%s\n%s\n' "$from" "$default" | sort -V | head -n 1)" = "$from" ] || continue
    tested=$((tested + 1))
    db=pg_lease_from_${from//[^0-9a-zA-Z]/_}
    echo "upgrade: $from -> $default"
    psql_do -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" &&
        psql_do -d "$db" -c "CREATE EXTENSION pg_lease VERSION '$from'" || { failed=1; continue; }
    call=$(psql_do -d "$db" -At -v VERBOSITY=verbose -c "BEGIN" \
        -c "SELECT lease.create_lease('upgrade', 's', 'window')" -c "ROLLBACK" 2>&1)
    if [ "$from" = "$previous" ]; then
        want=t
    else
        want="ERROR:  55000: pg_lease schema version $from is too old for this module"
        call=$(grep -E '^ERROR|^HINT' <<<"$call" | tr '\n' '|')
        want="$want|HINT:  Update the extension with ALTER EXTENSION pg_lease UPDATE.|"
    fi
    if [ "$call" = "$want" ]; then
        echo "upgrade: a call on the $from schema: ${want%%|*}"
    else
        echo "upgrade: a call on the $from schema FAILED: got '$call', want '$want'"
        failed=1
    fi
    psql_do -d "$db" -c "ALTER EXTENSION pg_lease UPDATE" ||
        { failed=1; continue; }
    got=$(psql_do -d "$db" -Atc "SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'pg_lease'")
    if [ "$got" != "$default" ]; then
        echo "upgrade: ALTER EXTENSION pg_lease UPDATE from $from left version $got, not $default"
        failed=1
    fi
    schema_dump "$db" >"$WORK/upgraded.dump"
    psql_do -d "$db" -f test/upgrade/catalog.sql >"$WORK/upgraded.catalog" || { failed=1; continue; }
    compare "schema dump ($from -> $default vs fresh $default)" "$WORK/upgraded.dump" "$WORK/fresh.dump"
    compare "catalog ($from -> $default vs fresh $default)" "$WORK/upgraded.catalog" "$WORK/fresh.catalog"
    psql_do -d postgres -c "DROP DATABASE $db"
done
[ "$tested" -eq 0 ] && echo "upgrade: $default is the only release; nothing to upgrade from yet"
psql_do -d postgres -c "DROP DATABASE pg_lease_fresh"

[ "$failed" -eq 0 ] && echo "upgrade: ok" || echo "upgrade: FAILED"
exit "$failed"
