#!/usr/bin/env bash
# Part of suite sql-lint: the SQL literals the install sources share with the
# C are the C's.  The C writes them once (src/pg_lease.h: the checkpoint
# sentinels; every ORDER BY and index of the C collates pg_catalog."C"), the
# SQL parts and the current upgrade script write them again as literals, so
# this checks every one of those:
#   1. every quoted word compared with or defaulting a checkpoint is one of
#      the sentinels src/pg_lease.h defines (LEASE_CHECKPOINT_*);
#   2. every COLLATE names the collation the C uses, pg_catalog."C".
# Self-test first: a wrong sentinel and a wrong collation must be flagged.
# Prints "N passed, N failed" (the self-test one, each check one).
cd "$(dirname "$0")/../.." || exit 1
passed=0
failed=0
sentinels=$(sed -nE 's/^#define LEASE_CHECKPOINT_[A-Z_]+[[:space:]]+"([A-Z_]+)".*/\1/p' src/pg_lease.h)
c_collation=$(grep -ohE 'COLLATE pg_catalog\.\\"[^\\]+\\"' src/*/*.c src/*/*.h | sort -u | sed 's/\\//g')

# Prints one line per literal in the files named that is not the C's.
check() {
    grep -onE "checkpoint[^;']{0,40}'[A-Z][A-Z_]*'" "$@" | while IFS= read -r hit; do
        word=${hit%\'}; word=${word##*\'}
        grep -qx "$word" <<<"$sentinels" || echo "$hit: '$word' is not a sentinel of src/pg_lease.h ($(echo $sentinels))"
    done
    grep -onE 'COLLATE [^ ,)]+' "$@" | while IFS= read -r hit; do
        [ "${hit#*:*:}" = "$c_collation" ] || echo "$hit: the C collates $c_collation"
    done
}

if [ -z "$sentinels" ] || [ "$c_collation" != 'COLLATE pg_catalog."C"' ]; then
    echo "shared literals: could not read the C's (sentinels: '$sentinels', collation: '$c_collation')"
    failed=$((failed + 1))
fi
bad=$(mktemp); trap 'rm -f "$bad"' EXIT
printf '%s\n' "WHERE checkpoint = 'SHARD_ENDS'" 'ORDER BY x COLLATE "C"' >"$bad"
if [ "$(check "$bad" | wc -l)" -eq 2 ]; then passed=$((passed + 1)); else
    echo "shared literals: the self-test was not flagged twice"; failed=$((failed + 1)); fi
version=$(sed -nE "s/^default_version *= *'([^']+)'.*/\1/p" pg_lease.control)
out=$(check src/common/*.sql src/leases/*.sql src/bindings/*.sql sql/pg_lease--*--"$version".sql)
if [ -z "$out" ]; then passed=$((passed + 1)); else echo "$out"; failed=$((failed + 1)); fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
