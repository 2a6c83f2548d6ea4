#!/usr/bin/env bash
# The router test (docs/scale-out.md): pg_lease_router over two partitions
# (two databases with pg_lease, conversation ids with stride 2) in one
# cluster.
#   1. sql/pg_lease_router--<version>.sql is exactly what src/router/generate.sh
#      writes from a fresh pg_lease's catalog, so the router cannot drift
#      from pg_lease (a new function or column fails here until
#      `make router-sql`);
#   2. the router's functions and views equal pg_lease's: name, argument
#      names, types, defaults, result; view columns and types;
#   3. errors pass through: every call in test/router/errors.sql gives the
#      same SQLSTATE, message, detail and hint through the router as
#      directly (22004, 22023, 42501 among them; test/router/expected/errors.out);
#   4. one outcome per function through the router
#      (test/router/outcomes.sql, test/router/expected/outcomes.out);
#   5. import_kcl_ex and import_kcl_dynamodb through the router put every
#      lease on the partition of its stream (and both partitions got some);
#   7. a stream moves between the partitions (test/router/moves.sql);
#   8. every interleaving of a move with calls, an undo and a sync, in a
#      model of the protocol (test/router/move_model.py), which finds its
#      seeded defects;
#   6. a router updated from every released router version
#      (pg_lease_router--0.3.0.sql, then ALTER EXTENSION pg_lease_router
#      UPDATE) equals a fresh one: the same functions with the same
#      definitions, views, extension members and privileges.
#
#   router_test.sh              runs against PGHOST/PGPORT (test/run.sh's
#                               cluster) with both extensions installed, or
#                               starts its own cluster when PGHOST is unset
#   router_test.sh --generate   (make router-sql) builds and installs, starts
#                               a throwaway cluster and rewrites the script
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
PG_BINDIR=${PG_BINDIR:-/usr/lib/postgresql/15/bin}
export PG_BINDIR
VERSION=$(sed -nE "s/^default_version *= *'([^']+)'.*/\1/p" pg_lease.control)
SCRIPT=sql/pg_lease_router--$VERSION.sql
mode=check
[ "${1:-}" = --generate ] && mode=generate

if [ "$mode" = generate ] || [ -z "${PGHOST:-}" ]; then
    bash test/lib/deps.sh build test scale || exit 1
    # shellcheck source=../lib/cluster.sh
    . test/lib/cluster.sh
    pg_lease_build_install || exit 1
    cluster_start || exit 1
fi
WORK=$(mktemp -d /tmp/pg_lease_router.XXXXXX)
trap 'rm -rf "$WORK"; [ -n "${CLUSTER_DIR:-}" ] && cluster_stop' EXIT
SRC=lease_router_src
P0=lease_router_p0
P1=lease_router_p1
RT=lease_router_r
UP=lease_router_up
WORKER=lease_router_worker
failed=0

psql_do() {
    PGOPTIONS="-c client_min_messages=warning ${PGOPTIONS:-}" \
    "$PG_BINDIR/psql" -X -q -v ON_ERROR_STOP=1 "$@"
}

# Drops what this test created in the cluster: the databases, then the role
# that owns objects in them.
drop_created() {
    for db in $SRC $P0 $P1 $RT $UP; do
        psql_do -d postgres -c "DROP DATABASE IF EXISTS $db"
    done
    psql_do -d postgres -c "DROP ROLE IF EXISTS $WORKER"
}

for db in $SRC $P0 $P1 $RT; do
    psql_do -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" || exit 1
done
psql_do -d postgres -c "DROP ROLE IF EXISTS $WORKER" -c "CREATE ROLE $WORKER LOGIN" || exit 1
for db in $SRC $P0 $P1; do
    psql_do -d $db -c "CREATE EXTENSION pg_lease" \
        -c "GRANT USAGE ON SCHEMA lease TO $WORKER" \
        -c "GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA lease TO $WORKER" || exit 1
done

# 1. The committed script is what the generator writes.
src/router/generate.sh "$VERSION" -d $SRC >"$WORK/generated.sql" || exit 1
if [ "$mode" = generate ]; then
    cp "$WORK/generated.sql" "$SCRIPT"
    echo "router: wrote $SCRIPT"
    drop_created
    exit 0
fi
if diff -u "$SCRIPT" "$WORK/generated.sql" >"$WORK/gen.diff"; then
    echo "router: $SCRIPT is what src/router/generate.sh writes from pg_lease $VERSION"
else
    echo "router: $SCRIPT differs from pg_lease's catalog (--- committed, +++ generated); run make router-sql:"
    cat "$WORK/gen.diff"
    failed=1
fi

# The router over two partitions.
psql_do -d $P0 -c "INSERT INTO lease.conversation_id_partition (id_stride, id_offset) VALUES (2, 0)" || exit 1
psql_do -d $P1 -c "INSERT INTO lease.conversation_id_partition (id_stride, id_offset) VALUES (2, 1)" || exit 1
part() { echo "host=$PGHOST port=$PGPORT dbname=$1"; }
psql_do -d $RT -c "CREATE EXTENSION pg_lease_router CASCADE" \
    -c "CREATE SERVER pg_lease FOREIGN DATA WRAPPER plproxy OPTIONS (p0 '$(part $P0)', p1 '$(part $P1)')" \
    -c "CREATE USER MAPPING FOR PUBLIC SERVER pg_lease" \
    -c "GRANT USAGE ON FOREIGN SERVER pg_lease TO $WORKER" \
    -c "GRANT USAGE ON SCHEMA lease TO $WORKER" \
    -c "GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA lease TO $WORKER" || exit 1
psql_do -d $RT -f test/router/helpers.sql || exit 1
psql_do -d $SRC -f test/router/helpers.sql || exit 1
psql_do -d $SRC -c "SELECT lease.grant_app('rt-mine', '$WORKER')" -o /dev/null || exit 1
psql_do -d $RT -c "SELECT lease.grant_app('rt-mine', '$WORKER')" -o /dev/null || exit 1

# 2. Same functions and views.
signatures() {
    psql_do -d "$1" -At <<'SQL'
SELECT s FROM (
SELECT 'function lease.' || p.proname || '(' || pg_catalog.pg_get_function_arguments(p.oid)
       || ') returns ' || pg_catalog.pg_get_function_result(p.oid)
  FROM pg_catalog.pg_proc AS p WHERE p.pronamespace = 'lease'::pg_catalog.regnamespace
   -- trigger functions belong to pg_lease's tables, which a router has not
   AND p.prorettype OPERATOR(pg_catalog.<>) 'pg_catalog.trigger'::pg_catalog.regtype
   -- nor pg_lease's internal liveness test (src/router/generate.sql)
   AND p.proname OPERATOR(pg_catalog.<>) 'liveness_cutoff'
   -- nor the steps of a stream move, which the router calls on named partitions
   AND p.proname NOT LIKE 'move\_stream\_%'
UNION ALL
SELECT 'view lease.' || c.relname || ' (' ||
       pg_catalog.string_agg(a.attname || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum) || ')'
  FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_attribute AS a ON a.attrelid = c.oid AND a.attnum > 0
 WHERE c.relnamespace = 'lease'::pg_catalog.regnamespace AND c.relkind = 'v'
 GROUP BY c.relname) AS sig(s)
ORDER BY s COLLATE "C";
SQL
}
signatures $SRC >"$WORK/pg_lease.sig"
signatures $RT >"$WORK/router.sig"
if [ -s "$WORK/pg_lease.sig" ] && diff -u "$WORK/pg_lease.sig" "$WORK/router.sig" >"$WORK/sig.diff"; then
    echo "router: the same $(grep -c '^function' "$WORK/router.sig") functions and $(grep -c '^view' "$WORK/router.sig") views as pg_lease"
else
    echo "router: signatures differ (--- pg_lease, +++ router):"
    cat "$WORK/sig.diff"
    failed=1
fi

# 3. Errors pass through.
run_errors() {
    local stmt
    grep -vE '^(--|$)' test/router/errors.sql | while IFS= read -r stmt; do
        printf '%s\n' "$stmt"
        psql_do -d "$1" -At -c "SET ROLE $WORKER" -c "SELECT router_test.try(\$q\$$stmt\$q\$)" | sed 's/^/  -> /'
    done
}
run_errors $SRC >"$WORK/direct.err"
run_errors $RT >"$WORK/router.err"
if diff -u "$WORK/direct.err" "$WORK/router.err" >"$WORK/err.diff" &&
    diff -u test/router/expected/errors.out "$WORK/router.err" >>"$WORK/err.diff"; then
    echo "router: $(grep -c -- '->' "$WORK/router.err") errors pass through unchanged ($(grep -o -- '-> [0-9A-Z]\{5\}' "$WORK/router.err" | sort -u | cut -c4- | tr '\n' ' '))"
else
    echo "router: errors differ (direct vs router, then expected vs router):"
    cat "$WORK/err.diff"
    failed=1
fi
for st in 22004 22023 42501; do
    grep -q -- "-> $st " "$WORK/router.err" || { echo "router: no $st among the errors"; failed=1; }
done

# 4. One outcome per function.
psql_do -d $RT -a -f test/router/outcomes.sql >"$WORK/outcomes.out" 2>&1
if diff -u test/router/expected/outcomes.out "$WORK/outcomes.out" >"$WORK/out.diff"; then
    echo "router: every function's outcome through the router as expected"
else
    echo "router: outcomes differ (--- expected, +++ actual):"
    cat "$WORK/out.diff"
    cp "$WORK/outcomes.out" "$ROOT/test/router/outcomes.actual" 2>/dev/null
    failed=1
fi

# 5. Each imported lease is on the partition of its stream, and only there.
misplaced=0
for k in 0 1; do
    db=$P0; [ $k = 1 ] && db=$P1
    n=$(psql_do -d $db -At -c "SELECT count(*) FILTER (WHERE (pg_catalog.hashtext(app_name || '/' || stream_name) & 1) <> $k)
                                          || ' ' || count(*)
                                 FROM lease.shard_leases WHERE app_name IN ('ro-import', 'ro-ddb')") || n="? ?"
    echo "router: partition $k holds ${n#* } imported leases, ${n% *} of another partition's streams"
    [ "${n% *}" = 0 ] && [ "${n#* }" != 0 ] || misplaced=1
done
[ "$misplaced" = 0 ] || { echo "router: imported leases are missing or on the wrong partition"; failed=1; }

# 7. Moving a stream: every step, repeats, a stale directory, an undo, a
# resumed move, bad input (test/router/moves.sql, docs/scale-out.md).
psql_do -d $RT -a -f test/router/moves.sql >"$WORK/moves.out" 2>&1
if diff -u test/router/expected/moves.out "$WORK/moves.out" >"$WORK/moves.diff"; then
    echo "router: every step of a stream move through the router as expected"
else
    echo "router: moves differ (--- expected, +++ actual):"
    cat "$WORK/moves.diff"
    cp "$WORK/moves.out" "$ROOT/test/router/moves.actual" 2>/dev/null
    failed=1
fi

# 8. Every interleaving of a move with calls through two routers, an undo
# and a sync, in a model of the protocol (test/router/move_model.py), and
# the seeded defects it must find.
if out=$(python3 test/router/move_model.py); then
    echo "router: $out"
else
    echo "$out"
    failed=1
fi
for defect in no-freeze undo-after-commit serve-arriving; do
    if python3 test/router/move_model.py --defect "$defect" >"$WORK/model.$defect"; then
        echo "router: the move model did not find the seeded defect $defect"
        failed=1
    else
        echo "router: the move model finds the seeded defect $defect: $(head -n 1 "$WORK/model.$defect" | sed 's/.*: VIOLATION/VIOLATION/')"
    fi
done

# 6. An updated router equals a fresh one.
router_catalog() {
    psql_do -d "$1" -At <<'SQL'
SELECT s FROM (
SELECT 'function ' || p.oid::pg_catalog.regprocedure::text || ' ' || pg_catalog.pg_get_functiondef(p.oid)
       || ' acl ' || COALESCE(p.proacl::text, '-')
  FROM pg_catalog.pg_proc AS p
 WHERE p.pronamespace IN ('lease'::pg_catalog.regnamespace, 'lease_router'::pg_catalog.regnamespace)
UNION ALL
SELECT 'relation ' || c.oid::pg_catalog.regclass::text || ' ' || c.relkind::text || ' '
       || COALESCE(pg_catalog.pg_get_viewdef(c.oid), '') || ' acl ' || COALESCE(c.relacl::text, '-')
  FROM pg_catalog.pg_class AS c
 WHERE c.relnamespace IN ('lease'::pg_catalog.regnamespace, 'lease_router'::pg_catalog.regnamespace)
UNION ALL
SELECT 'member ' || pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid)
  FROM pg_catalog.pg_depend AS d JOIN pg_catalog.pg_extension AS e ON d.refobjid = e.oid
 WHERE d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass AND d.deptype = 'e'
   AND e.extname = 'pg_lease_router') AS cat(s)
ORDER BY s COLLATE "C";
SQL
}
psql_do -d postgres -c "DROP DATABASE IF EXISTS $UP" -c "CREATE DATABASE $UP" || exit 1
psql_do -d $UP -c "CREATE EXTENSION pg_lease_router VERSION '0.3.0' CASCADE" \
    -c "ALTER EXTENSION pg_lease_router UPDATE" || exit 1
psql_do -d postgres -c "DROP DATABASE IF EXISTS ${UP}_fresh" -c "CREATE DATABASE ${UP}_fresh" || exit 1
psql_do -d ${UP}_fresh -c "CREATE EXTENSION pg_lease_router CASCADE" || exit 1
router_catalog ${UP}_fresh >"$WORK/router_fresh.cat"
router_catalog $UP >"$WORK/router_updated.cat"
psql_do -d postgres -c "DROP DATABASE ${UP}_fresh"
if [ -s "$WORK/router_fresh.cat" ] && diff -u "$WORK/router_fresh.cat" "$WORK/router_updated.cat" >"$WORK/up.diff"; then
    echo "router: a router updated from 0.3.0 equals a fresh $VERSION ($(grep -c '^function' "$WORK/router_fresh.cat") functions)"
else
    echo "router: a router updated from 0.3.0 differs from a fresh $VERSION (--- fresh, +++ updated):"
    cat "$WORK/up.diff"
    failed=1
fi

drop_created
[ "$failed" -eq 0 ] && echo "router: ok" || echo "router: FAILED"
exit "$failed"
