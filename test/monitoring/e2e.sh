#!/usr/bin/env bash
# End to end (docs/monitoring.md): the Prometheus PostgreSQL exporter
# (Debian prometheus-postgres-exporter) with docs/monitoring/pg_lease_queries.yaml,
# connected as a monitoring role built with the runbook's grants, scraped
# over loopback while a small fleet runs:
#   1. two workers (w1, w2) hold three leases each and renew them from
#      background loops; the scrape shows 6 owned, 2 live workers, 6 takes;
#   2. w1 dies (its renewer is killed): its leases expire and nobody takes
#      them, so the expired-not-taken gauge rises to 3 and live workers fall
#      to 1;
#   3. w2 balances (take_leases): it takes them over, the gauge falls back to
#      0 and the expiry_takeover counter moves by 3;
#   4. a release and a close move their counters; prune_events deletes
#      every event and no counter goes down.
# Every counter is compared with lease.lease_events as well.  The exporter
# listens on 127.0.0.1 only, on a random free port; the database connection is the
# Unix socket of the cluster in PGHOST/PGPORT (test/run.sh's throwaway
# one, pg_lease installed).  Every wait is bounded; the exporter and the
# renewers are killed by PID on exit.  Prints TAP; exit status 0 when every
# check passed.
set -uo pipefail
cd "$(dirname "$0")/../.."
PG_BINDIR=${PG_BINDIR:-/usr/lib/postgresql/15/bin}
EXPORTER=${PG_LEASE_EXPORTER:-/usr/bin/prometheus-postgres-exporter}
QUERIES=$(pwd)/docs/monitoring/pg_lease_queries.yaml
DB=pg_lease_metrics
MONITOR=lease_e2e_monitor        # the runbook's NOLOGIN group role
SCRAPER=lease_e2e_exporter       # the exporter's login role, a member
: "${PGHOST:?PGHOST must name the socket directory of the cluster}" "${PGPORT:?}"

WORK=$(mktemp -d /tmp/pg_lease_e2e.XXXXXX)
exporter_pid=
renewer_pids=()
# shellcheck source=test/lib/tap.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/tap.sh"

psql_do() {
    PGOPTIONS="-c client_min_messages=warning" \
    "$PG_BINDIR/psql" -X -q -v ON_ERROR_STOP=1 -U postgres "$@"
}

# Stops what this script started, by PID, and drops what it created.
cleanup() {
    local pid
    for pid in "${renewer_pids[@]}" $exporter_pid; do
        kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    done
    psql_do -d postgres -c "DROP DATABASE IF EXISTS $DB" \
        -c "DROP ROLE IF EXISTS $SCRAPER" -c "DROP ROLE IF EXISTS $MONITOR" >/dev/null 2>&1
    rm -rf "$WORK"
}
trap cleanup EXIT


# Scrapes the exporter into $WORK/scrape; false when it does not answer.
scrape() {
    curl -sf --max-time 10 "http://127.0.0.1:$port/metrics" >"$WORK/scrape.new" &&
        mv "$WORK/scrape.new" "$WORK/scrape"
}

# The value of the one sample of metric $1 whose labels include every
# label="value" pair given after it (in any order); empty when none.
metric() {
    local name=$1
    shift
    awk -v name="$name" -v want="$*" '
        BEGIN { n = split(want, pairs, " ") }
        index($0, name "{") == 1 || $1 == name {
            for (i = 1; i <= n; i++)
                if (index($1, pairs[i]) == 0)
                    next
            print $NF
            exit
        }' "$WORK/scrape"
}

# Scrapes every 0.5 s until metric $2 {labels...} equals $1, for at most
# 30 s; true when it did.
scrape_until() {
    local want=$1 i v
    shift
    for i in $(seq 1 60); do
        if scrape; then
            v=$(metric "$@")
            [ "$v" = "$want" ] && return 0
        fi
        sleep 0.5
    done
    echo "# waited 30 s for $* = $want; last value: ${v:-none}"
    return 1
}

# The ownership-change counter of kind $1 equals the events recorded plus
# those pruned (lease.lease_events + lease.lease_event_totals), and $2.
check_counter() {
    local kind=$1 want=$2 have events
    have=$(metric pg_lease_ownership_changes_total 'app_name="e2e"' 'stream_name="orders"' "event=\"$kind\"")
    events=$(psql_do -d "$DB" -At -c "SELECT (SELECT count(*) FROM lease.lease_events
                                                WHERE app_name = 'e2e' AND event = '$kind')
                                           + COALESCE((SELECT pruned FROM lease.lease_event_totals
                                                WHERE app_name = 'e2e' AND event = '$kind'), 0)")
    [ "$have" = "$want" ] && [ "$events" = "$want" ]
    ok $? "counter $kind = $want (scraped: ${have:-none}; lease_events: $events)"
}

# A renewer: renews worker $1's leases every 0.5 s for at most 90 s.
renewer() {
    local i
    for i in $(seq 1 180); do
        psql_do -d "$DB" -c "SELECT count(*) FROM lease.renew_leases('e2e', 'orders', '$1', '3 seconds')" \
            >/dev/null 2>&1
        sleep 0.5
    done
}

[ -x "$EXPORTER" ] || { echo "e2e: $EXPORTER not found (deps.sh monitoring)"; exit 1; }

# The database, the monitoring role (docs/monitoring.md, "Installing"), the stream.
psql_do -d postgres -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB" \
    -c "DROP ROLE IF EXISTS $SCRAPER" -c "DROP ROLE IF EXISTS $MONITOR" || exit 1
psql_do -d "$DB" -o /dev/null <<SQL || exit 1
CREATE EXTENSION pg_lease;
CREATE ROLE $MONITOR NOLOGIN;
GRANT USAGE ON SCHEMA lease TO $MONITOR;
GRANT EXECUTE ON FUNCTION
    lease.monitoring_leases(),
    lease.monitoring_streams(),
    lease.monitoring_workers(),
    lease.monitoring_worker_loads(),
    lease.monitoring_ownership_changes(),
    lease.monitoring_conversations(),
    lease.monitoring_sandboxes(),
    lease.monitoring_fleet(),
    lease.monitoring_compensation_failures(),
    lease.monitoring_notifications(),
    lease.monitoring_incarnations(),
    lease.monitoring_replication()
    TO $MONITOR;
CREATE ROLE $SCRAPER LOGIN IN ROLE $MONITOR;
SELECT lease.create_lease('e2e', 'orders', 'shard-' || i) FROM generate_series(0, 5) AS i;
SELECT lease.take_lease('e2e', 'orders', 'shard-' || i, 'w1', NULL, '3 seconds') FROM generate_series(0, 2) AS i;
SELECT lease.take_lease('e2e', 'orders', 'shard-' || i, 'w2', NULL, '3 seconds') FROM generate_series(3, 5) AS i;
SQL
for w in w1 w2; do
    renewer "$w" &
    renewer_pids+=($!)
done

# The exporter, on a random loopback port (tried again on another when the
# exporter cannot bind it).
export DATA_SOURCE_NAME="host=$PGHOST port=$PGPORT user=$SCRAPER dbname=$DB sslmode=disable"
for attempt in 1 2 3; do
    port=$((20000 + RANDOM % 40000))
    "$EXPORTER" --web.listen-address="127.0.0.1:$port" --extend.query-path="$QUERIES" \
        --disable-default-metrics --disable-settings-metrics \
        --no-collector.database --no-collector.bgwriter --log.level=warn \
        >"$WORK/exporter.log" 2>&1 &
    exporter_pid=$!
    for i in $(seq 1 20); do
        scrape && break
        kill -0 "$exporter_pid" 2>/dev/null || break
        sleep 0.25
    done
    [ -s "$WORK/scrape" ] && break
    kill "$exporter_pid" 2>/dev/null; wait "$exporter_pid" 2>/dev/null; exporter_pid=
done
[ -n "$exporter_pid" ]
ok $? "the exporter answers on 127.0.0.1:${port} (attempt $attempt)"
[ -n "$exporter_pid" ] || { cat "$WORK/exporter.log"; exit 1; }
echo "# exporter $("$EXPORTER" --version 2>&1 | head -1)"

# 1. two live workers
scrape_until 6 pg_lease_leases_count 'app_name="e2e"' 'stream_name="orders"' 'state="owned"'
ok $? "6 owned leases"
[ "$(metric pg_up)" = 1 ] && [ "$(metric pg_exporter_last_scrape_error)" = 0 ]
ok $? "the monitoring role ran every query without an error (pg_up 1, last_scrape_error 0)"
grep -q '^pg_exporter_user_queries_load_error{.*} 0$' "$WORK/scrape"
ok $? "the queries file loaded"
missing=
for m in pg_lease_leases_count pg_lease_stream_open_leases pg_lease_stream_live_workers \
    pg_lease_stream_fair_share_leases pg_lease_stream_handoffs_pending \
    pg_lease_stream_handoffs_past_deadline pg_lease_stream_oldest_handoff_age_seconds \
    pg_lease_stream_oldest_expired_age_seconds pg_lease_stream_oldest_checkpoint_age_seconds \
    pg_lease_stream_lease_duration_seconds pg_lease_worker_leases pg_lease_ownership_changes_total \
    pg_lease_conversations_count pg_lease_sandboxes_count pg_lease_fleet_active_sandboxes \
    pg_lease_fleet_capacity_sandboxes pg_lease_fleet_tenants_at_limit \
    pg_lease_fleet_tenants_near_limit pg_lease_compensation_failures_unresolved \
    pg_lease_compensation_failures_oldest_unresolved_age_seconds \
    pg_lease_compensation_failures_max_attempts pg_lease_notifications_skipped_total \
    pg_lease_notifications_queue_usage pg_lease_server_incarnation_seconds_since_first_seen \
    pg_lease_server_incarnation_leases_extended_total pg_lease_server_incarnation_follows \
    pg_lease_replication_sync_standbys_expected pg_lease_replication_sync_standbys_configured \
    pg_lease_replication_standbys pg_lease_replication_sync_standbys pg_lease_replication_sync_standbys_missing; do
    grep -q "^$m[{ ]" "$WORK/scrape" || missing="$missing $m"
done
[ -z "$missing" ]
ok $? "every metric of the runbook is exported${missing:+ (missing:$missing)}"
[ "$(metric pg_lease_stream_live_workers 'app_name="e2e"')" = 2 ] &&
    [ "$(metric pg_lease_worker_leases 'lease_owner="w1"')" = 3 ] &&
    [ "$(metric pg_lease_worker_leases 'lease_owner="w2"')" = 3 ] &&
    [ "$(metric pg_lease_leases_count 'app_name="e2e"' 'state="expired"')" = 0 ]
ok $? "2 live workers holding 3 leases each, none expired"
check_counter take 6
check_counter expiry_takeover 0

# 2. w1 dies
kill "${renewer_pids[0]}" && wait "${renewer_pids[0]}" 2>/dev/null
echo "# w1's renewer killed; its leases expire in 3 s"
scrape_until 3 pg_lease_leases_count 'app_name="e2e"' 'stream_name="orders"' 'state="expired"'
ok $? "the expired-not-taken gauge rises to 3"
[ "$(metric pg_lease_stream_live_workers 'app_name="e2e"')" = 1 ] &&
    [ -z "$(metric pg_lease_worker_leases 'lease_owner="w1"')" ] &&
    [ "$(metric pg_lease_worker_leases 'lease_owner="w2"')" = 3 ]
ok $? "1 live worker; w1 holds no live lease"
age=$(metric pg_lease_stream_oldest_expired_age_seconds 'app_name="e2e"')
awk -v a="$age" 'BEGIN { exit !(a > 0) }'
ok $? "the oldest expired lease's age is positive ($age s)"
check_counter expiry_takeover 0

# 3. w2 balances and takes them over
taken=$(psql_do -d "$DB" -At -c "SELECT count(*) FROM lease.take_leases('e2e', 'orders', 'w2', '3 seconds')
                                   WHERE action = 'taken'")
[ "$taken" = 3 ]
ok $? "w2's take_leases takes the 3 expired leases (took $taken)"
scrape_until 0 pg_lease_leases_count 'app_name="e2e"' 'stream_name="orders"' 'state="expired"'
ok $? "the expired-not-taken gauge falls back to 0"
[ "$(metric pg_lease_leases_count 'app_name="e2e"' 'state="owned"')" = 6 ] &&
    [ "$(metric pg_lease_worker_leases 'lease_owner="w2"')" = 6 ]
ok $? "6 owned leases again, all w2's"
check_counter expiry_takeover 3
check_counter take 6

# 4. release and close; then prune every event
psql_do -d "$DB" -c "SELECT lease.release_lease('e2e', 'orders', 'shard-0', 'w2'),
                            lease.close_shard('e2e', 'orders', 'shard-5', 'w2')" >/dev/null
scrape_until 1 pg_lease_ownership_changes_total 'app_name="e2e"' 'event="close"'
check_counter close 1
check_counter release 1
pruned=$(psql_do -d "$DB" -At -c "SELECT lease.prune_events('0')")
[ "$pruned" = 11 ]
ok $? "prune_events deletes all 11 events (deleted $pruned)"
scrape
check_counter take 6
check_counter expiry_takeover 3
check_counter release 1
check_counter close 1
[ "$(metric pg_lease_leases_count 'app_name="e2e"' 'state="ended"')" = 1 ] &&
    [ "$(metric pg_lease_leases_count 'app_name="e2e"' 'state="unowned"')" = 1 ]
ok $? "one ended and one unowned lease"

if [ "$fails" -ne 0 ]; then
    echo "# exporter log:"
    sed 's/^/# /' "$WORK/exporter.log"
fi
echo "1..$n"
[ "$fails" -eq 0 ]
