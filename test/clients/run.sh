#!/usr/bin/env bash
# The clients suite (make test, PG_LEASE_SUITES=clients): the Python and Node
# clients against the running throwaway cluster (PGHOST, PGPORT from
# test/lib/cluster.sh).  Prints TAP ("ok N - ...", "not ok N - ..."); exits
# non-zero on any failure.
#
#   1. the docs show the tested code: each "write a worker" page's code block
#      is byte-for-byte the example worker the fleet runs;
#   2. both clients' retry tables name the SQLSTATEs of docs/client-rules.md,
#      and the same pattern for PL/Proxy's connection-loss XX000;
#   3. the channel-rotation helper of each client: a started replacement
#      stays, a replacement that fails to start is restored;
#   4. the fleet: Python and Node workers on one stream at the same time, one
#      of each killed (SIGKILL) mid-run, one of each joining later, then a
#      checker over what the workers recorded (test/clients/check.py);
#   5. the transactional mode; 6. the fast-failover mode
#      (test/clients/fast_failover.sh).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
PY=/usr/bin/python3          # Debian's python3-psycopg2 is for Debian's python3
NODE=/usr/bin/node
PSQL="${PG_BINDIR:-/usr/lib/postgresql/15/bin}/psql"
DB=pg_lease_clients
LEASE_SECONDS=${CLIENTS_LEASE_SECONDS:-3}
# when the harness starts looking for fair shares (then up to 8 s more)
SETTLE_AT=${CLIENTS_SETTLE_AT:-18}

# shellcheck source=test/lib/tap.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/tap.sh"

bash test/lib/deps.sh clients || { ok 1 "install the clients' Debian packages"; echo "1..$n"; exit 1; }
(cd clients/node && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
ok $? "npm ci installs node-postgres from clients/node/package-lock.json" || true
[ -d clients/node/node_modules/pg ] || { echo "1..$n"; exit 1; }

# 1. The pages show exactly the code that runs.
doc_block() {   # the first fenced block of the given language in a page
    awk -v lang="$2" '$0 == "```" lang { inside = 1; next } inside && $0 == "```" { exit } inside { print }' "$1"
}
for pair in "docs/clients/python.md python clients/python/example_worker.py" \
            "docs/clients/node.md js clients/node/example_worker.js"; do
    set -- $pair
    diff <(doc_block "$1" "$2") "$3" >/dev/null
    ok $? "$1 shows $3 verbatim"
    lines=$(wc -l <"$3")
    [ "$lines" -lt 100 ]
    ok $? "$3 is a complete worker in under a hundred lines ($lines)"
done

# 2. One table of retry rules, followed by both clients.
rules_codes() {   # the SQLSTATEs a file names, sorted, one a line
    grep -oE '\b(40001|40P01|55P03|55000|57014|53300|57P0[1-3]|25006|XX000)\b' "$1" | sort -u
}
plproxy_pattern() {   # the regular expression a file gives for PL/Proxy's connection-loss XX000
    grep -oE '\^PL/Proxy function [^`"]*' "$1"
}
diff <(rules_codes docs/client-rules.md) <(rules_codes clients/python/pg_lease/rules.py) >/dev/null &&
    diff <(rules_codes docs/client-rules.md) <(rules_codes clients/node/rules.js) >/dev/null
ok $? "docs/client-rules.md, rules.py and rules.js name the same SQLSTATEs"
pattern=$(plproxy_pattern docs/client-rules.md)
[ "$(wc -l <<<"$pattern")" -eq 1 ] && [ -n "$pattern" ] &&
    [ "$(plproxy_pattern clients/python/pg_lease/rules.py)" = "$pattern" ] &&
    [ "$(plproxy_pattern clients/node/rules.js)" = "$pattern" ]
ok $? "docs/client-rules.md, rules.py and rules.js recognise PL/Proxy's lost connection by one pattern"
not_held_pattern() {   # the regular expression a file gives for hold_lease's "not held"
    grep -oE '\(\^\|REMOTE ERROR: \)lease [^`"]*' "$1"
}
pattern=$(not_held_pattern docs/client-rules.md)
[ "$(wc -l <<<"$pattern")" -eq 1 ] && [ -n "$pattern" ] &&
    [ "$(not_held_pattern clients/python/pg_lease/rules.py)" = "$pattern" ] &&
    [ "$(not_held_pattern clients/node/rules.js)" = "$pattern" ]
ok $? "docs/client-rules.md, rules.py and rules.js recognise hold_lease's not-held 55000 by one pattern"
$PY - <<'EOF'
import sys
sys.path.insert(0, "clients/python")
from pg_lease import rules
import json
cases = json.load(open("test/clients/rules_cases.json"))
bad = [c for c in cases if rules.classify(c[0], c[1]) != c[2]]
print("".join("# rules.py: %s\n" % c for c in bad), end="")
sys.exit(1 if bad or len(cases) < 20 else 0)
EOF
ok $? "rules.py classifies every SQLSTATE of the table as the page says"
$NODE -e '
const rules = require("./clients/node/rules.js");
const cases = require("./test/clients/rules_cases.json");
const bad = cases.filter(([code, message, kind]) => rules.classify(code === null ? undefined : code, message) !== kind);
for (const c of bad) console.log(`# rules.js: ${JSON.stringify(c)}`);
process.exit(bad.length || cases.length < 20 ? 1 : 0);'
ok $? "rules.js classifies every SQLSTATE of the table as the page says"

# The database: the extension, a worker role per the README recipe (it may
# call the lease functions, not read any table), an application role.
"$PSQL" -X -q -v ON_ERROR_STOP=1 -d postgres <<SQL >/dev/null
DROP DATABASE IF EXISTS $DB;
CREATE DATABASE $DB;
\c $DB
SET client_min_messages = warning;
CREATE EXTENSION pg_lease;
DO \$\$ BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'clients_worker') THEN
        CREATE ROLE clients_worker LOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'clients_app') THEN
        CREATE ROLE clients_app LOGIN;
    END IF;
END \$\$;
GRANT USAGE ON SCHEMA lease TO clients_worker, clients_app;
GRANT EXECUTE ON FUNCTION
    lease.update_checkpoint(text, text, text, text, text, bigint, bigint),
    lease.release_lease(text, text, text, text),
    lease.close_shard(text, text, text, text),
    lease.take_leases(text, text, text, interval, integer, integer, double precision, interval),
    lease.renew_leases(text, text, text, interval, interval),
    lease.my_leases(text, text, text)
    TO clients_worker;
GRANT EXECUTE ON FUNCTION
    lease.start_conversation(text, text, text, text, text),
    lease.find_channel_conversation(text, text, text, text, text),
    lease.rotate_channel(text, text, text, text, text, bigint),
    lease.restore_rotated_channel(bigint, bigint),
    lease.confirm_rotation(bigint, bigint),
    lease.admit_turn(bigint),
    lease.list_conversations(text, text, text, text)
    TO clients_app;
SELECT lease.grant_app('clients', 'clients_worker');
SQL
ok $? "a database with pg_lease, a worker role and an application role"
# URLs: libpq (psycopg2) and node-postgres both read them
url() { echo "postgresql:///$DB?host=$PGHOST&port=$PGPORT&user=$1"; }
WORKER_DSN=$(url clients_worker)
APP_DSN=$(url clients_app)
ADMIN_DSN=$(url postgres)

# 3. The channel-rotation helper, one tenant per language.
$PY test/clients/rotation_test.py "$APP_DSN" "$ADMIN_DSN"
ok $? "Python rotate_channel: started replacement kept and confirmed, failed one restored, 100 rotations at limit 2"
$NODE test/clients/rotation_test.js "$APP_DSN" "$ADMIN_DSN"
ok $? "Node rotateChannel: started replacement kept and confirmed, failed one restored, 100 rotations at limit 2"

OUT=$(mktemp -d /tmp/pg_lease_clients.XXXXXX)
trap 'for p in $(jobs -p); do kill -9 "$p" 2>/dev/null; done; rm -rf "$OUT"' EXIT

# The SQL-only worker of docs/clients/sql.md, as the page shows it: two on
# one stream, the second joining later; every record exactly once, the
# server's checkpoints are the last records processed, all released at the stop.
doc_block docs/clients/sql.md bash >"$OUT/sql_worker.sh"
"$PSQL" -X -q -v ON_ERROR_STOP=1 -d $DB \
    -c "SELECT lease.create_lease('clients', 'sql-orders', 'shard-' || i) FROM generate_series(1, 4) AS i" >/dev/null
mkdir "$OUT/sql"
PGDATABASE=$DB PGUSER=clients_worker PATH="$(dirname "$PSQL"):$PATH" bash "$OUT/sql_worker.sh" clients sql-orders sql-a "$OUT/sql" &
sql_a=$!
sleep 2
PGDATABASE=$DB PGUSER=clients_worker PATH="$(dirname "$PSQL"):$PATH" bash "$OUT/sql_worker.sh" clients sql-orders sql-b "$OUT/sql" &
sql_b=$!
sleep 6
kill -TERM $sql_a $sql_b
wait $sql_a $sql_b
$PY - "$OUT/sql" "$ADMIN_DSN" <<'EOF'
import collections, glob, sys
import psycopg2
seen = collections.defaultdict(list)
workers = collections.Counter()
for path in glob.glob(sys.argv[1] + "/*.records"):
    for line in open(path):
        shard, seq = line.split()
        seen[shard].append(int(seq))
        workers[path] += 1
cur = psycopg2.connect(sys.argv[2]).cursor()
cur.execute("SELECT shard_id, checkpoint, lease_owner FROM lease.shard_leases"
            " WHERE app_name = 'clients' AND stream_name = 'sql-orders'")
rows = cur.fetchall()
bad = [(s, c, o) for s, c, o in rows
       if o is not None or sorted(seen[s]) != list(range(1, int(c) + 1))]
print("# SQL workers: records %s, checkpoints %s" % (dict(workers), {s: c for s, c, _ in rows}))
sys.exit(1 if bad or len(rows) != 4 or len(workers) != 2 else 0)
EOF
ok $? "the SQL-only worker of docs/clients/sql.md: two on a stream, each record once, checkpoints fenced, all released"

# 4. The fleet.
"$PSQL" -X -q -v ON_ERROR_STOP=1 -d $DB <<'SQL' >/dev/null
SELECT lease.create_lease('clients', 'orders', pg_catalog.format('s%s', pg_catalog.lpad(i::text, 2, '0')))
  FROM pg_catalog.generate_series(1, 13) AS i;
SELECT lease.create_lease('clients', 'orders', 'p-end40');                     -- ends after 40 records
SELECT lease.create_lease('clients', 'orders', 'q-end60');                     -- ends after 60
SELECT lease.create_lease('clients', 'orders', 'c1', '{p-end40}');             -- split child of p
SELECT lease.create_lease('clients', 'orders', 'c2', '{p-end40}');
SQL
# shellcheck source=test/clients/fleet.sh
. test/clients/fleet.sh

echo "# fleet: py-1 py-2 node-1 node-2 start; py-1 killed at 5 s, node-1 at 7 s; py-3 and node-3 join at 10 s; stop once fair, from ${SETTLE_AT} s"
t0=$SECONDS
for w in py-1 py-2 node-1 node-2; do start_worker $w; done
sleep 5
kill -KILL "${PIDS[py-1]}"; wait "${PIDS[py-1]}" 2>/dev/null
echo "# $((SECONDS - t0)) s: py-1 killed"
sleep 2
kill -KILL "${PIDS[node-1]}"; wait "${PIDS[node-1]}" 2>/dev/null
echo "# $((SECONDS - t0)) s: node-1 killed"
sleep 3
start_worker py-3
start_worker node-3
echo "# $((SECONDS - t0)) s: py-3 and node-3 joined"
LIVE="node-2 node-3 py-2 py-3"
sleep $((SETTLE_AT - 10))
# fair shares at the end: wait up to 8 s for the fleet to settle
settle_and_stop 16 -d "$DB"
[ "$stopped" -eq 4 ]
ok $? "the four live workers stopped gracefully on SIGTERM"
$PY test/clients/check.py "$OUT" "$ADMIN_DSN" --killed py-1,node-1 --joined py-3,node-3
ok $? "fleet invariants (test/clients/check.py over the workers' journals and record logs)"

# The checker can fail: the same history with a record processed again by a
# live worker, a refused checkpoint, and two owners of one shard at once.
mkdir "$OUT/tampered" && cp "$OUT"/*.journal "$OUT"/*.records "$OUT/fairness" "$OUT/tampered/" &&
    $PY test/clients/tamper.py "$OUT/tampered"
verdict=$($PY test/clients/check.py "$OUT/tampered" "$ADMIN_DSN" --killed py-1,node-1 --joined py-3,node-3 2>&1)
status=$?
[ "$status" -eq 1 ] && grep -q 'FAIL nothing processed twice' <<<"$verdict" &&
    grep -q 'FAIL no checkpoint refused' <<<"$verdict" && grep -q 'FAIL no two owners at once' <<<"$verdict"
ok $? "the checker rejects a repeat by a live worker, a refused checkpoint, two owners at once"

# 5. Transactional mode (docs/exactly-once.md): Python and Node workers write
# one row per record into a table with no unique constraint, in the batch's
# transaction with hold_lease and the checkpoint, through a SIGKILL, a steal
# (whose thief never renews: an expiry takeover follows), backend kills of
# the processing connections mid-run, an immediate stop and restart of the
# server, and a graceful stop.  Every record up
# to each shard's checkpoint is in the table exactly once, none past it.
"$PSQL" -X -q -v ON_ERROR_STOP=1 -d $DB <<'SQL' >/dev/null
GRANT EXECUTE ON FUNCTION lease.hold_lease(text, text, text, text, bigint) TO clients_worker;
CREATE TABLE public.tx_out (shard_id text, seq int, worker text);   -- no unique constraint, on purpose
GRANT INSERT ON public.tx_out TO clients_worker;
SELECT lease.create_lease('clients', 'tx-orders', 't' || i) FROM generate_series(1, 6) AS i;
SQL
mkdir "$OUT/tx"
declare -A TXP
tx_start() {   # name
    case $1 in
        py-*) $PY test/clients/tx_worker.py "$WORKER_DSN" clients tx-orders "$1" "$OUT/tx" "$LEASE_SECONDS" 2>"$OUT/tx/$1.stderr" & ;;
        node-*) $NODE test/clients/tx_worker.js "$WORKER_DSN" clients tx-orders "$1" "$OUT/tx" "$LEASE_SECONDS" 2>"$OUT/tx/$1.stderr" & ;;
    esac
    TXP[$1]=$!
}
tx_kill_backends() {   # the processing connections (not the renewers) of the given workers
    "$PSQL" -X -qAt -d $DB -c "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
        WHERE application_name = ANY (string_to_array('$*', ' '))"
}
t0=$SECONDS
tx_start py-tx-1; tx_start node-tx-1
sleep 3
kill -KILL "${TXP[py-tx-1]}"; wait "${TXP[py-tx-1]}" 2>/dev/null
stolen=$("$PSQL" -X -qAt -d $DB -c "SELECT c.shard_id || ' ' || lease.take_lease('clients', 'tx-orders', c.shard_id, 'thief', c.lease_count)
    FROM (SELECT shard_id, lease_count FROM lease.shard_leases
           WHERE stream_name = 'tx-orders' AND lease_owner = 'node-tx-1' ORDER BY shard_id LIMIT 1) AS c")
killed=$(tx_kill_backends node-tx-1)
echo "# tx: $((SECONDS - t0)) s: py-tx-1 killed (SIGKILL), $stolen stolen from node-tx-1 by a thief that never renews, $killed backend(s) of node-tx-1 terminated"
tx_start py-tx-2; tx_start node-tx-2
sleep 3
killed=$(tx_kill_backends node-tx-1 py-tx-2 node-tx-2)
echo "# tx: $((SECONDS - t0)) s: py-tx-2 and node-tx-2 joined 3 s ago; $killed processing backend(s) terminated"
sleep 2
# an immediate stop and restart of the server (test/lib/cluster.sh's cluster:
# its data directory is under the socket directory), every connection lost
restarted=no
if [ -d "$PGHOST/data" ]; then
    as_owner=()
    [ "$(id -u)" -eq 0 ] && as_owner=(runuser -u postgres --)
    "${as_owner[@]}" "${PG_BINDIR:-/usr/lib/postgresql/15/bin}/pg_ctl" -D "$PGHOST/data" -l "$PGHOST/server.log" \
        -m immediate -w -t 60 restart >/dev/null && restarted=yes
fi
echo "# tx: $((SECONDS - t0)) s: the server stopped (immediate) and restarted: $restarted"
sleep 4
for w in node-tx-1 py-tx-2 node-tx-2; do kill -TERM "${TXP[$w]}"; done
tx_stopped=0
for w in node-tx-1 py-tx-2 node-tx-2; do wait "${TXP[$w]}" && tx_stopped=$((tx_stopped + 1)); done
for f in "$OUT"/tx/*.stderr; do [ -s "$f" ] && { echo "# $(basename "$f"):"; sed 's/^/#   /' "$f" | head -20; }; done
[ "$tx_stopped" -eq 3 ]
ok $? "transactional mode: the three live workers stopped gracefully on SIGTERM"
verdict=$("$PSQL" -X -qAt -d $DB <<'SQL'
WITH l AS (SELECT shard_id, CASE WHEN checkpoint = 'TRIM_HORIZON' THEN 0 ELSE checkpoint::int END AS ckpt
             FROM lease.shard_leases WHERE app_name = 'clients' AND stream_name = 'tx-orders'),
     o AS (SELECT shard_id, seq, count(*) AS n FROM public.tx_out GROUP BY 1, 2)
SELECT format('records written exactly once: %s of %s, %s duplicates, %s gaps, %s past a checkpoint; shards with progress %s of %s; by %s',
              (SELECT count(*) FROM o JOIN l USING (shard_id) WHERE o.n = 1 AND o.seq <= l.ckpt),
              (SELECT sum(ckpt) FROM l),
              (SELECT coalesce(sum(n - 1), 0) FROM o),
              (SELECT count(*) FROM l, generate_series(1, l.ckpt) AS s
                WHERE NOT EXISTS (SELECT FROM o WHERE o.shard_id = l.shard_id AND o.seq = s)),
              (SELECT count(*) FROM o JOIN l USING (shard_id) WHERE o.seq > l.ckpt),
              (SELECT count(*) FILTER (WHERE ckpt > 0) FROM l), (SELECT count(*) FROM l),
              (SELECT string_agg(DISTINCT worker, ',' ORDER BY worker) FROM public.tx_out))
SQL
)
echo "# tx: $verdict"
not_held=$(cat "$OUT"/tx/*.journal | grep -c '"ok": \?false' || true)
failed=$(cat "$OUT"/tx/*.journal | grep -c '"ev": \?"tx_failed"' || true)
diverged=$(cat "$OUT"/tx/*.journal | grep -c '"ev": \?"tx_diverged"' || true)
echo "# tx: $not_held batch(es) refused (not held), $failed transaction(s) failed and resolved from my_leases," \
    "$diverged found by hold_lease's checkpoint to start past the server's (commits lost in the restart)"
grep -qE '^records written exactly once: ([0-9]+) of \1, 0 duplicates, 0 gaps, 0 past a checkpoint; shards with progress 6 of 6; by .*node-.*py-' <<<"$verdict"
ok $? "transactional mode: every record up to each checkpoint written exactly once, by Python and Node workers"

# 6. Fast failover (docs/client-rules.md, rule 6).
# shellcheck source=test/clients/fast_failover.sh
. test/clients/fast_failover.sh

echo "1..$n"
[ "$fails" -eq 0 ]
