#!/usr/bin/env bash
# The planted-object test (docs/security.md, "Installing into a schema you
# own"): a role that may create objects in the database, mallory, plants
# trojans before pg_lease is installed or updated.  A trojan logs every call
# into public.trojan_log and, when a superuser runs it, makes mallory a
# superuser.  Each scenario has a fresh database owned by mallory:
#   1. mallory creates schema lease and plants lease.num_nulls with the
#      signature the shard_leases CHECK uses: CREATE EXTENSION is refused;
#   2. a superuser's schema lease in which mallory may create, or could
#      before, with a planted function: refused (CREATE granted, not empty);
#   3. trojans in public (num_nulls, now, clock_timestamp, an = operator on
#      text, tables named like the extension's): the install succeeds and a
#      worker's take, renew, checkpoint and handoff calls never run them;
#   4. every release installed into mallory's planted schema (its frozen
#      script does bind to the trojan: why the update must refuse it):
#      ALTER EXTENSION pg_lease UPDATE is refused (a release from 0.4.0 on
#      refuses the install itself, as scenarios 1 and 2); with trojans in public
#      only, every release updates and the calls never run them.
# After each: mallory is no superuser and the trojan log is empty.
#
# Runs against the cluster in PGHOST/PGPORT as its superuser (test/run.sh's
# throwaway one) with the scripts installed.  TAP lines, then
# "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/../.."
PG_BINDIR=${PG_BINDIR:-/usr/lib/postgresql/15/bin}
# shellcheck source=../lib/tap.sh
. test/lib/tap.sh
DB=pg_lease_planted
VERSION=$(sed -nE "s/^default_version *= *'([^']+)'.*/\1/p" pg_lease.control)
# shellcheck source=../lib/release.sh
. test/lib/release.sh
RELEASES=$(pg_lease_releases)

# psql in $DB (or -d given first) as the superuser, quiet, stopping at the
# first error.
sql() {
    PGOPTIONS="-c client_min_messages=warning" \
        "$PG_BINDIR/psql" -X -q -At -v ON_ERROR_STOP=1 -v VERBOSITY=verbose -d "$DB" "$@"
}

# The trojan body: log the call, and take over when a superuser runs it.
TROJAN_BODY="BEGIN
    INSERT INTO public.trojan_log VALUES (TG_NAME_OR, current_user);
    IF pg_catalog.current_setting('is_superuser') = 'on' THEN
        EXECUTE 'ALTER ROLE mallory SUPERUSER';
    END IF;
    RETURN RESULT;
END"
# $1 = the function's name in the log, $2 = what it returns.
trojan() {
    local body=${TROJAN_BODY//TG_NAME_OR/\'$1\'}
    echo "${body//RESULT/$2}"
}

# A fresh database owned by mallory, with mallory's log table.
fresh_db() {
    sql -d postgres -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB OWNER mallory" &&
        sql -U mallory -c "CREATE TABLE public.trojan_log (what text, who text);
                           GRANT INSERT, SELECT ON public.trojan_log TO PUBLIC;"
}

# mallory plants lease.num_nulls in schema lease (which must exist and be
# open to it).
plant_lease_schema() {
    sql -U mallory -c "CREATE FUNCTION lease.num_nulls(text, timestamptz, timestamptz, interval)
                       RETURNS integer LANGUAGE plpgsql AS \$t\$ $(trojan lease.num_nulls 0) \$t\$;"
}

# mallory plants trojans in public.
plant_public() {
    sql -U mallory <<SQL
CREATE FUNCTION public.num_nulls(text, timestamptz, timestamptz, interval)
RETURNS integer LANGUAGE plpgsql AS \$t\$ $(trojan public.num_nulls 0) \$t\$;
CREATE FUNCTION public.now() RETURNS timestamptz LANGUAGE plpgsql
AS \$t\$ $(trojan public.now "'2000-01-01'") \$t\$;
CREATE FUNCTION public.clock_timestamp() RETURNS timestamptz LANGUAGE plpgsql
AS \$t\$ $(trojan public.clock_timestamp "'2000-01-01'") \$t\$;
CREATE FUNCTION public.isfinite(timestamptz) RETURNS boolean LANGUAGE plpgsql
AS \$t\$ $(trojan public.isfinite true) \$t\$;
CREATE FUNCTION public.trojan_texteq(text, text) RETURNS boolean LANGUAGE plpgsql
AS \$t\$ $(trojan 'public.=' "\$1 OPERATOR(pg_catalog.=) \$2") \$t\$;
CREATE OPERATOR public.= (LEFTARG = text, RIGHTARG = text, FUNCTION = public.trojan_texteq);
CREATE TABLE public.shard_leases (LIKE public.trojan_log);
CREATE TABLE public.app_grants (LIKE public.trojan_log);
GRANT ALL ON public.shard_leases, public.app_grants TO PUBLIC;
SQL
}

# Nobody gained anything and no trojan ran ($1: the scenario).
assert_clean() {
    local super log
    super=$(sql -c "SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = 'mallory'")
    ok "$([ "$super" = f ] && echo 0 || echo 1)" "$1: mallory is not a superuser (rolsuper=$super)"
    log=$(sql -c "SELECT pg_catalog.string_agg(what || ' as ' || who, ', ') FROM public.trojan_log")
    ok "$([ -z "$log" ] && echo 0 || echo 1)" "$1: no trojan ran${log:+ (ran: $log)}"
    sql -c "ALTER ROLE mallory NOSUPERUSER" >/dev/null
}

# Runs $2 (SQL) as the superuser and expects an error with SQLSTATE 42501
# whose message contains $3 ($1: the scenario).
expect_refused() {
    local out
    out=$(sql -c "$2" 2>&1)
    if grep -q "ERROR:  42501: .*$3" <<<"$out"; then
        ok 0 "$1: refused ($(oneline "$(grep -A1 'ERROR:' <<<"$out")"))"
    else
            ok 1 "$1: not refused with 42501 \"$3\": $(oneline "$out")"
    fi
}

# A worker's calls through the whole lease protocol, then the monitoring
# functions; the worker's search_path puts public first.
worker_calls() {
    sql <<'SQL' >/dev/null 2>"$WORK/calls.err"
DO $r$ BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'planted_worker') THEN
        CREATE ROLE planted_worker LOGIN;
    END IF;
END $r$;
GRANT USAGE ON SCHEMA lease TO planted_worker;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA lease TO planted_worker;
SELECT lease.grant_app('app1', 'planted_worker');
SQL
    sql -U planted_worker <<'SQL' >/dev/null 2>>"$WORK/calls.err"
SET search_path = public, pg_catalog, lease;
SELECT lease.create_lease('app1', 's1', 'shard-1');
SELECT lease.create_lease('app1', 's1', 'shard-2');
SELECT lease.take_lease('app1', 's1', 'shard-1', 'w1');
SELECT lease.renew_lease('app1', 's1', 'shard-1', 'w1',
                         (SELECT m.lease_count FROM lease.my_leases('app1', 's1', 'w1') AS m
                           WHERE m.shard_id OPERATOR(pg_catalog.=) 'shard-1'));
SELECT lease.update_checkpoint('app1', 's1', 'shard-1', 'w1', 'cp-1');
SELECT * FROM lease.take_leases('app1', 's1', 'w2');
SELECT lease.request_handoff('app1', 's1', 'shard-1', 'w2');
SELECT * FROM lease.renew_leases('app1', 's1', 'w1');
SELECT lease.release_lease('app1', 's1', 'shard-1', 'w1');
SELECT * FROM lease.take_leases('app1', 's1', 'w2');
SELECT * FROM lease.start_conversation('u1', 'a1', NULL, NULL, 'ch1');
SQL
    local rc=$?
    sql <<'SQL' >/dev/null 2>>"$WORK/calls.err"
SET search_path = public, pg_catalog, lease;
SELECT * FROM lease.lease_status;
SELECT * FROM lease.monitoring_streams();
SELECT * FROM lease.monitoring_leases();
SELECT pg_catalog.count(*) FROM lease.shard_leases WHERE lease_owner OPERATOR(pg_catalog.=) 'w2';
SQL
    [ $rc -eq 0 ] && [ $? -eq 0 ]
}

WORK=$(mktemp -d /tmp/pg_lease_planted.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

sql -d postgres <<'SQL' || exit 1
DO $r$ BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'mallory') THEN
        CREATE ROLE mallory LOGIN;
    END IF;
END $r$;
SQL

# 1. mallory's own schema lease with a planted num_nulls.
fresh_db && sql -U mallory -c "CREATE SCHEMA lease" && plant_lease_schema || exit 1
expect_refused "1 mallory's schema" "CREATE EXTENSION pg_lease" 'schema "lease" is owned by role "mallory"'
assert_clean "1 mallory's schema"

# 2. A superuser's schema lease that mallory may create in, then one that
# mallory may no longer create in but planted in before.
fresh_db && sql -c "CREATE SCHEMA lease; GRANT CREATE, USAGE ON SCHEMA lease TO mallory" &&
    plant_lease_schema || exit 1
expect_refused "2 CREATE granted" "CREATE EXTENSION pg_lease" 'roles other than the owner of schema "lease" may create objects in it'
sql -c "REVOKE CREATE ON SCHEMA lease FROM mallory" || exit 1
expect_refused "2 not empty" "CREATE EXTENSION pg_lease" 'schema "lease" is not empty'
out=$(sql -c "CREATE EXTENSION pg_lease" 2>&1)
ok "$(grep -q 'function lease\.num_nulls(pg_catalog\.text,timestamp with time zone,timestamp with time zone,interval)' <<<"$out"; echo $?)" \
    "2 not empty: the detail names the planted function"
assert_clean "2 superuser's schema"

# 3. Trojans in public; a fresh install and a worker's calls.
fresh_db && plant_public || exit 1
sql -c "CREATE EXTENSION pg_lease" 2>"$WORK/err"
ok $? "3 public trojans: CREATE EXTENSION pg_lease succeeds $(oneline "$(cat "$WORK/err")")"
worker_calls
ok $? "3 public trojans: the worker's calls succeed $(oneline "$(cat "$WORK/calls.err")")"
assert_clean "3 public trojans"

# 4. Every release: into mallory's planted schema, then updated (refused);
# with trojans in public only, updated and called.
for from in $RELEASES; do
    fresh_db && sql -U mallory -c "CREATE SCHEMA lease" && plant_lease_schema || exit 1
    # From 0.4.0 on a release's own install script carries the guard: it is
    # refused as the current install is (scenarios 1 and 2).
    if [ "$(printf '%s\n' 0.4.0 "$from" | sort -V | head -n 1)" = 0.4.0 ]; then
        expect_refused "4 $from in mallory's schema" "CREATE EXTENSION pg_lease VERSION '$from'" 'schema "lease" is owned by role "mallory"'
        assert_clean "4 $from in mallory's schema"
        sql -c "ALTER SCHEMA lease OWNER TO CURRENT_USER" || exit 1
        expect_refused "4 $from with a planted function" "CREATE EXTENSION pg_lease VERSION '$from'" 'not part of pg_lease'
        assert_clean "4 $from with a planted function"
    else
        sql -c "CREATE EXTENSION pg_lease VERSION '$from'" 2>"$WORK/err"
        ok $? "4 $from in mallory's schema: the release installs (its script is frozen) $(oneline "$(cat "$WORK/err")")"
        def=$(sql -c "SELECT pg_catalog.pg_get_constraintdef(oid) FROM pg_catalog.pg_constraint
                       WHERE conname = 'shard_leases_handoff_check'")
        if [ -n "$def" ]; then
            ok "$(grep -q 'lease\.num_nulls' <<<"$def"; echo $?)" \
                "4 $from in mallory's schema: the frozen script bound its CHECK to the trojan ($def)"
        fi
        expect_refused "4 $from in mallory's schema" "ALTER EXTENSION pg_lease UPDATE" 'schema "lease" is owned by role "mallory"'
        got=$(sql -c "SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'pg_lease'")
        ok "$([ "$got" = "$from" ] && echo 0 || echo 1)" "4 $from in mallory's schema: still at $from (at $got)"
        assert_clean "4 $from in mallory's schema"

        # A superuser took the schema over, but mallory's function is still there.
        sql -c "ALTER SCHEMA lease OWNER TO CURRENT_USER" || exit 1
        expect_refused "4 $from with a planted function" "ALTER EXTENSION pg_lease UPDATE" 'not part of pg_lease'
        assert_clean "4 $from with a planted function"
    fi

    fresh_db && plant_public || exit 1
    sql -c "CREATE EXTENSION pg_lease VERSION '$from'" -c "ALTER EXTENSION pg_lease UPDATE" 2>"$WORK/err"
    ok $? "4 $from with public trojans: installs and updates $(oneline "$(cat "$WORK/err")")"
    got=$(sql -c "SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'pg_lease'")
    ok "$([ "$got" = "$VERSION" ] && echo 0 || echo 1)" "4 $from with public trojans: at $VERSION (at $got)"
    worker_calls
    ok $? "4 $from with public trojans: the worker's calls succeed $(oneline "$(cat "$WORK/calls.err")")"
    assert_clean "4 $from with public trojans"
done

sql -d postgres -c "DROP DATABASE IF EXISTS $DB" -c "DROP ROLE IF EXISTS planted_worker" >/dev/null
echo "1..$n"
echo "$((n - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
