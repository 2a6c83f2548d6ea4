#!/usr/bin/env bash
# The dump/restore test (docs/operations.md, "Dumps"): a database using pg_lease, filled
# through the lease.* functions (test/upgrade/dump_fixture.sql), is dumped
# with pg_dump -Fc and restored with pg_restore into a new database, where
# CREATE EXTENSION comes from the dump.  Then:
#   1. every table and sequence in schema lease is marked with
#      pg_extension_config_dump (otherwise pg_dump silently drops its rows);
#   2. every row of every table, and every sequence's state, is identical
#      (the taker's bookkeeping tables, derived from the leases, are rebuilt
#      by the restore and checked against a recount instead)
#      (test/upgrade/rows.sql);
#   3. the restored database carries on: new conversations, sandboxes, turns
#      and events get ids past the restored ones, and the restored leases
#      and bindings behave as before.
#
# Two rounds: a database created at the default version, and one filled
# under the previous release and upgraded before the dump (skipped while the
# default version is the only release).
#
# Runs against the cluster in PGHOST/PGPORT (test/run.sh's throwaway one)
# with pg_lease installed.  Exit status 0 when everything held.
set -uo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=../lib/release.sh
. test/lib/release.sh
PG_BINDIR=${PG_BINDIR:-/usr/lib/postgresql/15/bin}
WORK=$(mktemp -d /tmp/pg_lease_dump.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
SRC=pg_lease_dump_src
DST=pg_lease_dump_dst
failed=0

psql_do() {
    PGOPTIONS="-c client_min_messages=warning ${PGOPTIONS:-}" \
    "$PG_BINDIR/psql" -X -q -v ON_ERROR_STOP=1 "$@"
}

# Prints "dump: $1 ok" when $2 equals $3, else the failure and $4.
check() {
    if [ "$2" = "$3" ]; then
        echo "dump: $1 ok"
    else
        echo "dump: $1 FAILED: got '$2', want '$3'${4:+ ($4)}"
        failed=1
    fi
}

# One round: a source database with pg_lease at version $2 (the default when
# empty), filled by the fixture, then upgraded to the default version when
# $2 was older; dumped, restored and checked.  Labels the output with $1.
dump_round() {
    local label=$1 from=$2
    echo "dump: round $label"
    psql_do -d postgres -c "DROP DATABASE IF EXISTS $SRC" -c "DROP DATABASE IF EXISTS $DST" \
        -c "CREATE DATABASE $SRC" -c "CREATE DATABASE $DST" || return 1
    psql_do -d "$SRC" -c "CREATE EXTENSION pg_lease${from:+ VERSION '$from'}" || return 1
    psql_do -d "$SRC" -o /dev/null -f test/upgrade/dump_fixture.sql || { echo "dump: fixture failed"; return 1; }
    if [ -n "$from" ]; then
        psql_do -d "$SRC" -c "ALTER EXTENSION pg_lease UPDATE" &&
            psql_do -d "$SRC" -o /dev/null -f test/upgrade/dump_grants.sql || return 1
    fi
    psql_do -d "$SRC" -o /dev/null -f test/upgrade/dump_id_partition.sql || return 1
    psql_do -d "$SRC" -o /dev/null -f test/upgrade/dump_balancing.sql || return 1
    psql_do -d "$SRC" -o /dev/null -f test/upgrade/dump_placement.sql || return 1

    # 1. Every table and sequence in the schema is marked for dumping, but
    #    lease.admission_gate: its one row is the install script's, and
    #    CREATE EXTENSION on restore inserts it again (step 3's new
    #    conversations need it).
    unmarked=$(psql_do -d "$SRC" -At -c "
        SELECT pg_catalog.string_agg(c.oid::regclass::text, ' ' ORDER BY c.oid::regclass::text)
          FROM pg_catalog.pg_class c
         WHERE c.relnamespace = 'lease'::regnamespace AND c.relkind IN ('r', 'p', 'S')
           AND c.oid <> 'lease.admission_gate'::regclass
           AND c.oid <> ALL ((SELECT e.extconfig FROM pg_catalog.pg_extension e
                               WHERE e.extname = 'pg_lease')::oid[])")
    check "every table and sequence marked with pg_extension_config_dump" "$unmarked" "" "not marked"

    # 2. Dump, restore, compare.
    psql_do -d "$SRC" -f test/upgrade/rows.sql >"$WORK/src.rows" || return 1
    # pg_dump warns that lease.conversations references itself (rotated_from);
    # that matters only for --data-only dumps, so it is filtered out here.
    "$PG_BINDIR/pg_dump" -Fc -d "$SRC" -f "$WORK/dump" 2>"$WORK/pg_dump.err" || {
        cat "$WORK/pg_dump.err"; return 1; }
    grep -vE 'circular foreign-key constraints|^pg_dump: (detail|hint): ' "$WORK/pg_dump.err"
    "$PG_BINDIR/pg_restore" --exit-on-error -d "$DST" "$WORK/dump" || {
        echo "dump: pg_restore failed"; return 1; }
    psql_do -d "$DST" -f test/upgrade/rows.sql >"$WORK/dst.rows" || return 1
    check "restored from a dump of $(grep -c '' "$WORK/src.rows") rows and sequences" \
        "$(diff -u "$WORK/src.rows" "$WORK/dst.rows")" ""
    check "taker bookkeeping of the source equals a recount" \
        "$(psql_do -d "$SRC" -At -f test/lib/taker_state_check.sql)" ""
    check "taker bookkeeping rebuilt by the restore equals a recount" \
        "$(psql_do -d "$DST" -At -f test/lib/taker_state_check.sql)" ""
    check "version" "$(psql_do -d "$DST" -At -c "SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'pg_lease'")" \
        "$(psql_do -d "$SRC" -At -c "SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'pg_lease'")"

    # 3. The restored database carries on where the original stopped.
    max() {
        psql_do -d "$SRC" -At -c "SELECT COALESCE(max($2), 0) FROM lease.$1"
    }
    conv_max=$(max conversations id)
    box_max=$(max sandboxes id)
    turn_max=$(max turns id)
    event_max=$(max lease_events event_id)
    mapfile -t r < <(psql_do -d "$DST" -At <<'SQL'
    SELECT conversation_id FROM lease.start_conversation('dump-u1', 'agent', NULL, NULL, 'after-restore');
    SELECT sandbox_id FROM lease.conversations
     WHERE id = lease.find_channel_conversation('dump-u1', 'agent', NULL, NULL, 'after-restore');
    SELECT lease.admit_turn(lease.find_channel_conversation('dump-u1', 'agent', 'vault', NULL, 'ch1'));
    SELECT lease.take_lease('dump', 's', 'd', 'w3');
    SELECT max(event_id) FROM lease.lease_events;
    SELECT outcome FROM lease.start_conversation('dump-u1', 'agent', 'vault', NULL, 'ch1');
    SELECT outcome || ':' || detail FROM lease.start_conversation('dump-u2', 'agent', NULL, NULL, 'again');
    SELECT lease.renew_lease('dump', 's', 'b', 'w1', 1);
    SELECT lease.update_checkpoint('dump', 's', 'b', 'w1', '4800', 0, 1);
SQL
    )
    check "new conversation id past the restored ones (max $conv_max)" "$([ "${r[0]:-0}" -gt "$conv_max" ] && echo yes)" yes "${r[0]:-}"
    check "new sandbox id past the restored ones (max $box_max)" "$([ "${r[1]:-0}" -gt "$box_max" ] && echo yes)" yes "${r[1]:-}"
    check "new turn id past the restored ones (max $turn_max)" "$([ "${r[2]:-0}" -gt "$turn_max" ] && echo yes)" yes "${r[2]:-}"
    check "take of a restored unowned lease" "${r[3]:-}" 1
    check "new event id past the restored ones (max $event_max)" "$([ "${r[4]:-0}" -gt "$event_max" ] && echo yes)" yes "${r[4]:-}"
    check "restored binding still bound" "${r[5]:-}" already_bound
    limit=${r[6]:-}
    check "restored tenant limit still applies" "${limit%% *}" 'refused:tenant'
    check "restored owner renews its lease" "${r[7]:-}" 2
    check "restored fencing token still accepted" "${r[8]:-}" t
    check "restored conversation id setting still applies (id % 2 = 1)" "$(( ${r[0]:-0} % 2 ))" 1

    check "restored tombstone still refuses the moved stream" \
        "$(psql_do -d "$DST" -At -c "SELECT lease.create_lease('dump', 'moved-away', 'm-2')" 2>&1 | grep -o 'has moved to partition 1')" \
        "has moved to partition 1"

    # 4. App grants: by role name, and none of a dropped role.
    check "the source keeps the grant of a dropped role" \
        "$(psql_do -d "$SRC" -At -c "SELECT count(*) FROM lease.app_grants WHERE app_name = 'dump-gone'")" 1
    check "a dropped role's grant is not in the dump" \
        "$("$PG_BINDIR/pg_restore" -a -t app_grants -f - "$WORK/dump" | grep -c 'dump-gone')" 0
    check "a grant whose granter was dropped is dumped with the granter's name" \
        "$("$PG_BINDIR/pg_restore" -a -t app_grants -f - "$WORK/dump" | grep 'dump-granter' | grep -c 'lease_dump_granter')" 1
    check "the restored grant keeps the dropped granter's name" \
        "$(psql_do -d "$DST" -At -c "SELECT granted_by FROM lease.app_grants WHERE app_name = 'dump-granter'")" \
        "lease_dump_granter"
    check "a restored grant names its role by name" \
        "$(psql_do -d "$DST" -At -c "SELECT grantee::text || ' ' || grantee_name FROM lease.app_grants WHERE app_name = 'dump'")" \
        "lease_dump_worker lease_dump_worker"
    check "the restored grant acts for the app" \
        "$(psql_do -d "$DST" -At -c "GRANT USAGE ON SCHEMA lease TO lease_dump_worker" \
            -c "GRANT EXECUTE ON FUNCTION lease.has_app_access(text) TO lease_dump_worker" \
            -c "SET ROLE lease_dump_worker" -c "SELECT lease.has_app_access('dump')")" t

    psql_do -d postgres -c "DROP DATABASE $SRC" -c "DROP DATABASE $DST"
}

# A database created at the default version, and one filled under the
# previous release and then upgraded (its dump must restore the same way).
# The previous release is the oldest schema the module serves
# (docs/operations.md, "Upgrades"): an older one cannot be filled through
# the lease.* functions (they raise 55000 there; the upgrade suite checks
# that, and that every older release updates).
default=$(sed -nE "s/^default_version *= *'([^']+)'.*/\1/p" pg_lease.control)
previous=$(pg_lease_releases | tail -n 1)
previous=${previous:-$default}
dump_round "fresh $default" "" || failed=1
if [ "$previous" != "$default" ]; then
    dump_round "filled at $previous, upgraded to $default" "$previous" || failed=1
fi
psql_do -d postgres -c "DROP ROLE IF EXISTS lease_dump_worker" || failed=1
[ "$failed" -eq 0 ] && echo "dump: ok" || echo "dump: FAILED"
exit "$failed"
