#!/usr/bin/env bash
# The settings test (docs/worker-guide.md, "Loading the module and setting
# lease.* settings"): every lease.* setting behaves as documented whether it
# is set before or after the module loads.
#   1. without preloading: a value SET before the module loads is kept and
#      checked when it loads (a bad value or a misspelt name: a WARNING, and
#      the default), after it loads a bad value or a misspelt name is an
#      error; ALTER ROLE ... SET before the load reaches the role's sessions;
#      ALTER SYSTEM needs the module loaded in the session (PostgreSQL 15);
#   2. the documented setup, session_preload_libraries = 'pg_lease': every
#      session has the settings from its start, so SET, ALTER ROLE ... SET and
#      ALTER SYSTEM SET of every lease.* setting work and are checked at once.
#
# Runs against the cluster in PGHOST/PGPORT (test/run.sh's throwaway one)
# with the module installed.  It changes the cluster's configuration with
# ALTER SYSTEM and puts it back on exit, whatever happens.  Exit status 0
# when every check held.
set -uo pipefail
PG_BINDIR=${PG_BINDIR:-/usr/lib/postgresql/15/bin}
ROLE=lease_settings_test
failed=0
checks=0

# Every lease.* setting, a valid value other than its default, and how SHOW
# prints that value.
SETTINGS=(
    "lease.default_lease_duration|'20s'|20s"
    "lease.default_sandbox_limit|21|21"
    "lease.fleet_capacity|1001|1001"
    "lease.fleet_lock_namespace|5315|5315"
    "lease.sandbox_lock_namespace|5316|5316"
    "lease.rotation_lock_timeout|'500ms'|500ms"
    "lease.admission_lock_timeout|'1500ms'|1500ms"
    "lease.handoff_timeout|'31s'|31s"
    "lease.liveness_grace|'1500ms'|1500ms"
    "lease.move_lock_timeout|'2500ms'|2500ms"
    "lease.record_events|off|off"
    "lease.restart_grace|off|off"
    "lease.flush_heartbeats|on|on"
    "lease.min_synchronous_commit|local|local"
    "lease.expected_sync_standbys|1|1"
    "lease.notify_channel|'lease_settings_x'|lease_settings_x"
    "lease.notify_queue_limit|0.25|0.25"
)

# psql as the superuser (or PGUSER=... given), output unaligned, messages on
# stdout too so that WARNINGs can be checked.
q() {
    "$PG_BINDIR/psql" -X -q -At -d postgres "$@" 2>&1
}

# Asserts that $2 (actual) contains $3 (expected substring).
expect() {
    checks=$((checks + 1))
    if [[ "$2" == *"$3"* ]]; then
        echo "settings: ok   $1"
    else
        echo "settings: FAIL $1: expected to find [$3] in:"
        printf '%s\n' "$2" | sed 's/^/    /'
        failed=1
    fi
}

# Asserts that $2 does not contain $3.
expect_not() {
    checks=$((checks + 1))
    if [[ "$2" != *"$3"* ]]; then
        echo "settings: ok   $1"
    else
        echo "settings: FAIL $1: did not expect [$3] in:"
        printf '%s\n' "$2" | sed 's/^/    /'
        failed=1
    fi
}

# Puts the cluster back: no preload, no lease.* in postgresql.auto.conf, no
# test role.  ALTER SYSTEM RESET of a lease.* setting needs the module
# loaded in the session, hence the LOAD.
restore() {
    local entry
    {
        echo "LOAD 'pg_lease';"
        for entry in "${SETTINGS[@]}"; do
            echo "ALTER SYSTEM RESET ${entry%%|*};"
        done
        echo "ALTER SYSTEM RESET session_preload_libraries;"
        echo "SELECT pg_reload_conf();"
        echo "DROP ROLE IF EXISTS $ROLE;"
    } | q >/dev/null
}
trap restore EXIT

# Waits until new sessions see session_preload_libraries = $1.
await_preload() {
    local i
    for i in $(seq 1 50); do
        [ "$(q -c "SHOW session_preload_libraries")" = "$1" ] && return 0
        sleep 0.1
    done
    echo "settings: FAIL new sessions never saw session_preload_libraries = '$1'"
    failed=1
}

restore
q -c "CREATE ROLE $ROLE LOGIN" >/dev/null

# 1. Without preloading ------------------------------------------------------
await_preload ""

out=$(q -c "SHOW lease.handoff_timeout")
expect "before any load, a lease.* setting does not exist" "$out" 'unrecognized configuration parameter "lease.handoff_timeout"'

out=$(q -c "SET lease.handoff_timeout = '5s'" -c "LOAD 'pg_lease'" -c "SHOW lease.handoff_timeout")
expect "set before the load: kept when the module loads" "$out" "5s"

out=$(q -c "SET lease.handoff_timeout = '-1'" -c "LOAD 'pg_lease'" -c "SHOW lease.handoff_timeout")
expect "set before the load, out of range: a WARNING when it loads" "$out" 'WARNING:  -1 ms is outside the valid range for parameter "lease.handoff_timeout"'
expect "set before the load, out of range: the default" "$out" "30s"

out=$(q -c "SET lease.nosuch = 1" -c "LOAD 'pg_lease'" -c "SHOW lease.nosuch")
expect "misspelt before the load: a WARNING when it loads" "$out" 'WARNING:  invalid configuration parameter name "lease.nosuch", removing it'
expect "misspelt before the load: removed" "$out" 'unrecognized configuration parameter "lease.nosuch"'

out=$(q -c "LOAD 'pg_lease'" -c "SET lease.nosuch = 1")
expect "misspelt after the load: an error" "$out" 'ERROR:  invalid configuration parameter name "lease.nosuch"'
out=$(q -c "LOAD 'pg_lease'" -c "SET lease.handoff_timeout = '-1'")
expect "out of range after the load: an error" "$out" 'ERROR:  -1 ms is outside the valid range for parameter "lease.handoff_timeout"'

# ALTER ROLE ... SET before anything loaded the module: stored unchecked,
# applied to the role's sessions; checked by the first lease call (or LOAD)
out=$(q -c "ALTER ROLE $ROLE SET lease.handoff_timeout = '7s'")
expect_not "ALTER ROLE SET before the load is accepted" "$out" "ERROR"
out=$(PGUSER=$ROLE q -c "LOAD 'pg_lease'" -c "SHOW lease.handoff_timeout")
expect "ALTER ROLE SET before the load reaches the role's sessions" "$out" "7s"
q -c "ALTER ROLE $ROLE RESET ALL" >/dev/null

# ALTER SYSTEM: PostgreSQL 15 refuses a setting no loaded module defines
out=$(q -c "ALTER SYSTEM SET lease.fleet_capacity = 1001")
expect "ALTER SYSTEM SET before the load: refused by PostgreSQL 15" "$out" 'unrecognized configuration parameter "lease.fleet_capacity"'
out=$(q -c "LOAD 'pg_lease'" -c "ALTER SYSTEM SET lease.fleet_capacity = 1001" -c "ALTER SYSTEM RESET lease.fleet_capacity")
expect_not "ALTER SYSTEM SET after LOAD 'pg_lease' works" "$out" "ERROR"

# 2. The documented setup: session_preload_libraries = 'pg_lease' -------------
q -c "ALTER SYSTEM SET session_preload_libraries = 'pg_lease'" -c "SELECT pg_reload_conf()" >/dev/null
await_preload "pg_lease"

out=$(q -c "SELECT string_agg(name, ' ' ORDER BY name) FROM pg_settings WHERE name LIKE 'lease.%'")
listed=$(for entry in "${SETTINGS[@]}"; do echo "${entry%%|*}"; done | sort | tr '\n' ' ')
expect "preloaded: every lease.* setting exists from the session's start, and this test covers each" "$out " "$listed"

out=$(q -c "SET lease.nosuch = 1")
expect "preloaded: a misspelt SET is an error at once" "$out" 'ERROR:  invalid configuration parameter name "lease.nosuch"'
out=$(q -c "SET lease.default_lease_duration = '-1'")
expect "preloaded: an out-of-range SET is an error at once" "$out" 'ERROR:  -1 ms is outside the valid range for parameter "lease.default_lease_duration"'
out=$(q -c "ALTER ROLE $ROLE SET lease.nosuch = 1")
expect "preloaded: a misspelt ALTER ROLE SET is an error" "$out" 'ERROR:  invalid configuration parameter name "lease.nosuch"'
out=$(q -c "ALTER SYSTEM SET lease.handoff_timeout = '-1'")
expect "preloaded: an out-of-range ALTER SYSTEM SET is an error" "$out" 'ERROR:  -1 ms is outside the valid range for parameter "lease.handoff_timeout"'

for entry in "${SETTINGS[@]}"; do
    IFS='|' read -r name value shown <<<"$entry"
    out=$(q -c "ALTER SYSTEM SET $name = $value" -c "SELECT pg_reload_conf()")
    expect_not "preloaded: ALTER SYSTEM SET $name" "$out" "ERROR"
    out=""
    for _ in $(seq 1 50); do
        out=$(q -c "SHOW $name")
        [ "$out" = "$shown" ] && break
        sleep 0.1
    done
    expect "preloaded: ALTER SYSTEM SET $name takes effect in new sessions" "$out" "$shown"
    out=$(q -c "ALTER SYSTEM RESET $name" -c "SELECT pg_reload_conf()" -c "ALTER ROLE $ROLE SET $name = $value")
    expect_not "preloaded: ALTER ROLE SET $name" "$out" "ERROR"
    out=$(PGUSER=$ROLE q -c "SHOW $name")
    expect "preloaded: ALTER ROLE SET $name takes effect in the role's sessions" "$out" "$shown"
    q -c "ALTER ROLE $ROLE RESET $name" >/dev/null
done

restore
trap - EXIT
await_preload ""
echo "settings: $checks checks"
exit "$failed"
