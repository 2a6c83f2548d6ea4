#!/usr/bin/env bash
# The clients suite (make test, PG_LEASE_SUITES=clients): the Python, Node,
# Java, Go and Elixir clients against the running throwaway cluster (PGHOST, PGPORT from
# test/lib/cluster.sh).  Prints TAP ("ok N - ...", "not ok N - ..."); exits
# non-zero on any failure.
#
#   1. the docs show the tested code: each "write a worker" page's code block
#      is byte-for-byte the example worker the fleet runs;
#   2. one table of retry rules, clients/rules.json: each of the five
#      clients' tables and docs/client-rules.md against it
#      (test/clients/rules_table.py), and every case of rules_cases.json and
#      notice_cases.json classified by each client as the page says;
#      the Java client's JUnit 5 tests (one TAP line each) against the server;
#   3. the channel-rotation helper of each client: a started replacement
#      stays, a replacement that fails to start is restored;
#   The Java client's JUnit 5 tests and the Go client's go test count one
#   TAP line per test.
#   4. the Go client, built offline from Debian's packages (GOPATH mode, no
#      module proxy): go vet, and its go test against this cluster, one TAP
#      line per test (the rules and notice cases, a sync-rep WARNING, the local
#      deadline, fenced checkpoints, a 56-digit checkpoint, handoff, shard end,
#      rotation, sync_shards, no password written);
#   5. the fleet: Python, Node, Java, Go and Elixir workers on one stream at the
#      same time, one of each killed (SIGKILL) mid-run, one of each joining
#      later, then a checker over what the workers recorded
#      (test/clients/check.py); at the same time Python, Node and Elixir
#      workers on a second stream, kpl-orders, imported from a KCL export
#      (test/clients/kcl_export.jsonl: 56-digit checkpoints, a sub-sequence and
#      a pending checkpoint), whose even records are KPL aggregates (each
#      batch checkpointed in two phases, with sub-sequences), one killed, one
#      joining; and the checker's negative controls (test/clients/tamper.py);
#   6. transactional mode (Python, Node, Elixir and Java workers), and its negative
#      control (a tampered output table the verdict must reject);
#   7. the clients installed from their packages, failing loudly on bad
#      credentials, and creating a stream's leases from a shard-list callback
#      (test/clients/packages.sh);
#   8. the fast-failover mode of the Python, Node, Elixir and Java workers
#      (test/clients/fast_failover.sh);
#   9. a cancelled wait for synchronous replication is ambiguous to each of
#      the Python, Node and Elixir clients (test/clients/syncrep.sh);
#  10. what each of them does on an unexpected exception (releases what it
#      holds), and their INFO log events, the Python client's set
#      (test/clients/failures.sh).
#   The Elixir client (test/clients/elixir.sh): built, its ExUnit tests over
#   erlang-p1-pgsql and, from their vendored sources, over Postgrex and Ecto,
#   one TAP line per test.  Its p1_pgsql wiring speaks TCP only: it reaches
#   the cluster's Unix socket through test/clients/tcp_relay.py on 127.0.0.1.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
PY=/usr/bin/python3          # Debian's python3-psycopg2 is for Debian's python3
NODE=/usr/bin/node
GO=/usr/bin/go               # Debian's golang-go, with pgx v4 from /usr/share/gocode
JDK=/usr/lib/jvm/default-java    # Debian's default-jdk-headless, whatever java the PATH has
# C1 only and the serial collector: about a third less CPU for a short-lived JVM (the
# fleet starts three on a busy machine)
JAVA="$JDK/bin/java -XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
JDBC=/usr/share/java/postgresql.jar
JUNIT=/usr/share/java/junit-platform-console-standalone.jar
PSQL="${PG_BINDIR:-/usr/lib/postgresql/15/bin}/psql"
DB=pg_lease_clients
LEASE_SECONDS=${CLIENTS_LEASE_SECONDS:-3}
# when the harness starts looking for fair shares (then up to 8 s more)
SETTLE_AT=${CLIENTS_SETTLE_AT:-18}
# the example workers log lease changes at INFO; the harness prints their
# stderr, so only warnings and errors here
export PG_LEASE_LOG_LEVEL=${PG_LEASE_LOG_LEVEL:-WARNING}

# shellcheck source=test/lib/tap.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/tap.sh"
# shellcheck source=test/clients/fleet.sh
. test/clients/fleet.sh

bash test/lib/deps.sh clients java go elixir || { ok 1 "install the clients' Debian packages"; echo "1..$n"; exit 1; }
(cd clients/node && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
ok $? "npm ci installs node-postgres from clients/node/package-lock.json" || true
[ -d clients/node/node_modules/pg ] || { echo "1..$n"; exit 1; }
# The Java client: compiled once (library jar, example, tests), offline.
t_java=$SECONDS
java_build=$(JAVA_HOME=$JDK sh clients/java/build.sh --tests 2>&1)
ok $? "clients/java/build.sh builds $(tail -n 1 <<<"$java_build") offline from Debian's packages" ||
    sed 's/^/#   /' <<<"$java_build"
JAR=clients/java/$(tail -n 1 <<<"$java_build")
echo "# Java build: $((SECONDS - t_java)) s"
JAVA_CP=$JAR:clients/java/build/examples     # the jar's manifest adds Debian's postgresql.jar
JAVA_TEST_CP=$JAR:clients/java/build/test-classes    # the suite's Java worker (SuiteWorker: ff, tx)

# 1. The pages show exactly the code that runs.
doc_block() {   # the first fenced block of the given language in a page
    awk -v lang="$2" '$0 == "```" lang { inside = 1; next } inside && $0 == "```" { exit } inside { print }' "$1"
}
# (Go's limit is 120: its imports and error checks take the difference)
for pair in "docs/clients/python.md python clients/python/example_worker.py 100" \
            "docs/clients/node.md js clients/node/example_worker.js 100" \
            "docs/clients/java.md java clients/java/examples/ExampleWorker.java 100" \
            "docs/clients/go.md go clients/go/cmd/example_worker/main.go 120" \
            "docs/clients/elixir.md elixir clients/elixir/example_worker.exs 100"; do
    set -- $pair
    diff <(doc_block "$1" "$2") "$3" >/dev/null
    ok $? "$1 shows $3 verbatim"
    lines=$(wc -l <"$3")
    [ "$lines" -lt "$4" ]
    ok $? "$3 is a complete worker in under $4 lines ($lines)"
done

# 2. One table of retry rules, clients/rules.json, followed by every client.
while read -r verdict what; do
    case $verdict in
        "#") echo "# $what" ;;
        ok) ok 0 "$what" ;;
        *) ok 1 "${what#ok }" ;;
    esac
done < <($PY test/clients/rules_table.py)
$PY - <<'EOF'
import sys
sys.path.insert(0, "clients/python")
from pg_lease import rules
import json
cases = json.load(open("test/clients/rules_cases.json"))
bad = [c for c in cases if rules.classify(c[0], c[1]) != c[2]]
notices = json.load(open("test/clients/notice_cases.json"))
bad += [n for n in notices if rules.ambiguous_notice(n[0], n[2]) != (n[3] == "ambiguous")]
print("".join("# rules.py: %s\n" % c for c in bad), end="")
sys.exit(1 if bad or len(cases) < 20 else 0)
EOF
ok $? "rules.py classifies every SQLSTATE of the table, and every notice, as the page says"
# Worker.stop() from a signal handler, twice: the second SIGTERM's handler
# may run while the first is inside Event.set(), whose lock is not
# reentrant; simulated by taking that lock around the second call
$PY - <<'EOF'
import sys, threading
sys.path.insert(0, "clients/python")
from pg_lease import RecordProcessor, Worker
w = Worker("host=/nonexistent dbname=none connect_timeout=1", "app", "s", "w", RecordProcessor())
real_set = w.stopping.set
def set_interrupted():
    with w.stopping._cond:      # inside Event.set(): the second signal's handler runs
        w.stop()
    real_set()
w.stopping.set = set_interrupted
t = threading.Thread(target=w.stop, daemon=True)
t.start()
t.join(5)
sys.exit(0 if not t.is_alive() and w.stopping.is_set() else 1)
EOF
ok $? "Python Worker.stop() returns when a second stop (a second SIGTERM) interrupts the first inside Event.set()"
$NODE -e '
const rules = require("./clients/node/rules.js");
const cases = require("./test/clients/rules_cases.json");
const bad = cases.filter(([code, message, kind]) => rules.classify(code === null ? undefined : code, message) !== kind);
const notices = require("./test/clients/notice_cases.json");
bad.push(...notices.filter(([severity, , message, kind]) => rules.ambiguousNotice(severity, message) !== (kind === "ambiguous")));
for (const c of bad) console.log(`# rules.js: ${JSON.stringify(c)}`);
process.exit(bad.length || cases.length < 20 ? 1 : 0);'
ok $? "rules.js classifies every SQLSTATE of the table, and every notice, as the page says"
$NODE -e '
const rules = require("./clients/node/rules.js");
const epipe = Object.assign(new Error("write EPIPE"), { code: "EPIPE", errno: -32, syscall: "write" });
const server = Object.assign(new Error("could not serialize access"), { code: "40001", severity: "ERROR" });
process.exit(rules.sqlstate(epipe) === undefined && rules.classify(rules.sqlstate(epipe), epipe.message) === "ambiguous" &&
             rules.sqlstate(server) === "40001" ? 0 : 1);'
ok $? "rules.js takes a socket error (EPIPE: code, errno, syscall) for a lost connection, not for a SQLSTATE"
# Elixir 1.14 ships no JSON reader: the cases reach it as lines of
# code, kind and base64 message ("-" for null); notices as "notice",
# severity, kind and base64 message
$PY -c '
import base64, json
b64 = lambda m: "-" if m is None else base64.b64encode(m.encode()).decode()
for code, message, kind in json.load(open("test/clients/rules_cases.json")):
    print(code or "-", kind, b64(message))
for severity, _, message, kind in json.load(open("test/clients/notice_cases.json")):
    print("notice", severity, kind, b64(message))' |
    elixir -r clients/elixir/lib/pg_lease/rules.ex -e '
decode = fn "-" -> nil; m -> Base.decode64!(m) end
cases = for line <- IO.stream(:stdio, :line), do: String.split(String.trim(line), " ")
bad = for c <- cases,
          (case c do
             ["notice", severity, kind, message] -> PgLease.Rules.ambiguous_notice?(severity, decode.(message)) != (kind == "ambiguous")
             [code, kind, message] -> PgLease.Rules.classify(if(code == "-", do: nil, else: code), decode.(message)) != String.to_atom(kind)
           end), do: c
for c <- bad, do: IO.puts("# rules.ex: #{inspect(c)}")
System.halt(if bad == [] and length(cases) >= 20, do: 0, else: 1)'
ok $? "rules.ex classifies every SQLSTATE of the table, and every notice, as the page says"

# The database: the extension, a worker role per the README recipe (it may
# call the lease functions, not read any table), an application role.
"$PSQL" -X -q -v ON_ERROR_STOP=1 -d postgres <<SQL >/dev/null
DROP DATABASE IF EXISTS $DB;
-- created by docs/clients/elixir.md's role block below (it holds grants in $DB only)
DROP ROLE IF EXISTS clients_kcl;
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
GRANT EXECUTE ON FUNCTION $FLEET_WORKER_FUNCTIONS TO clients_worker;
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
-- for the Elixir worker's shard-list callback, as the worker recipe grants it
GRANT EXECUTE ON FUNCTION lease.sync_shards(text, text, text[], text[]) TO clients_worker;
-- transactional mode (the Elixir client's ExUnit tests; section 6)
GRANT EXECUTE ON FUNCTION lease.hold_lease(text, text, text, text, bigint) TO clients_worker;
SQL
ok $? "a database with pg_lease, a worker role and an application role"
# the kcl_ex adapter's role, granted exactly as docs/clients/elixir.md says
doc_block docs/clients/elixir.md sql | sed -e 's/kcl_consumer/clients_kcl/g' -e "s/'billing'/'kcl'/g" |
    "$PSQL" -X -q -v ON_ERROR_STOP=1 -d $DB >/dev/null
ok $? "the kcl_ex adapter's role, granted as docs/clients/elixir.md says"
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

# 4. The Go client, offline: GOPATH mode over Debian's /usr/share/gocode
# (module mode cannot resolve offline: Debian's pgx v4 declares module
# requirements Debian does not ship), the tree linked in at its import path,
# a build cache in the run's directory.  The example worker is built once
# here for the fleet.
GODIR=$OUT/go
mkdir -p "$GODIR/src/github.com/pg-lease" && ln -s "$ROOT" "$GODIR/src/github.com/pg-lease/pg_lease"
export GO111MODULE=off GOPATH="$GODIR:/usr/share/gocode" GOCACHE="$GODIR/cache" GOPROXY=off GOFLAGS=
GOSRC=$GODIR/src/github.com/pg-lease/pg_lease/clients/go
GO_WORKER=$GODIR/example_worker
(cd "$GOSRC" && $GO vet ./... 2>&1 | sed 's/^/# /'; exit "${PIPESTATUS[0]}") &&
    unformatted=$(cd "$GOSRC" && /usr/bin/gofmt -l .) && [ -z "$unformatted" ]
ok $? "go vet ./... and gofmt -l are clean (clients/go, offline against Debian's pgx v4)${unformatted:+: $unformatted}"
(cd "$GOSRC" && $GO build -o "$GO_WORKER" ./cmd/example_worker 2>&1 | sed 's/^/# /'; exit "${PIPESTATUS[0]}")
ok $? "go build clients/go/cmd/example_worker, offline"
# go-*: the Go fast-failover and transactional fleets' worker, vetted and built out of the tree
GO_TEST_WORKER=$GODIR/go_worker
(cd "$GOSRC/../../test/clients/go_worker" && $GO vet . && [ -z "$(/usr/bin/gofmt -l .)" ] &&
    $GO build -o "$GO_TEST_WORKER" . 2>&1 | sed 's/^/# /'; exit "${PIPESTATUS[0]}")
ok $? "go vet, gofmt and go build test/clients/go_worker, offline"
# go test -v, one TAP line per test and subtest; everything else as comments
# (its own "ok  package" line included)
while IFS= read -r line; do
    case $line in
        *"--- PASS: "*) ok 0 "go test: ${line#*--- PASS: }" ;;
        *"--- FAIL: "*) ok 1 "go test: ${line#*--- FAIL: }" ;;
        *"--- SKIP: "*) ok 1 "go test skipped: ${line#*--- SKIP: }" ;;
        "=== "*) ;;
        *) echo "# $line" ;;
    esac
done < <(cd "$GOSRC" && PGDATABASE=$DB PGLEASE_TEST_WORKER_USER=clients_worker PGLEASE_TEST_APP_USER=clients_app \
             $GO test -count=1 -v -timeout 150s ./pglease 2>&1; echo $? >"$GODIR/test.status")
[ "$(cat "$GODIR/test.status")" = 0 ]
ok $? "go test ./pglease against this cluster exits 0"
# Loud failure: a role the server refuses stops the example worker at once,
# non-zero, with the server's error logged.
mkdir "$OUT/refused"
timeout 20 "$GO_WORKER" "$(url pglease_no_such_role)" clients orders go-refused "$OUT/refused" "$LEASE_SECONDS" \
    2>"$OUT/refused/stderr"
status=$?
sed 's/^/#   /' "$OUT/refused/stderr"
[ "$status" -eq 1 ] && grep -q 'SQLSTATE 28000' "$OUT/refused/stderr"
ok $? "the Go example worker exits 1 at once, the cause logged, when the server refuses its role"

# The Elixir client: built, and its ExUnit tests over each wiring
# (test/clients/elixir.sh; the relay it starts is killed with every other job by the trap).
# shellcheck source=test/clients/elixir.sh
. test/clients/elixir.sh

# Loud failure: the example worker, from the jar, with a role that does not
# exist exits non-zero after the rules' retries and logs why (in the
# background, while the JUnit tests run).
$JAVA -cp "$JAVA_CP" ExampleWorker "$(url no_such_role)" clients orders java-bad "$OUT" "$LEASE_SECONDS" \
    >"$OUT/java-bad.log" 2>&1 &
java_bad=$!
t_java=$SECONDS
# The Java client's JUnit 5 tests (clients/java/src/test), run offline by
# Debian's console launcher against this database, concurrently (each test
# its own streams): every case of rules_cases.json and notice_cases.json, a
# sync-rep WARNING, no password written, a 56-digit checkpoint, the local deadline, a
# refused checkpoint -> leaseLost, a handoff -> shutdownRequested, shard end
# -> shardEnded, the stop, bad credentials, sync_shards, the channel-rotation
# helper (as the Python and Node ones above).  One TAP line per test, from
# the XML report.
$JAVA -Dpglease.dsn="$WORKER_DSN" -Dpglease.app="$APP_DSN" -Dpglease.admin="$ADMIN_DSN" \
    -Dpglease.rules=test/clients/rules_cases.json -Dpglease.notices=test/clients/notice_cases.json \
    -jar $JUNIT -cp "clients/java/build/test-classes:$JAR:$JDBC" --select-package org.pglease \
    --config junit.jupiter.execution.parallel.enabled=true \
    --config junit.jupiter.execution.parallel.mode.default=concurrent \
    --disable-banner --details=none --reports-dir "$OUT/junit" >"$OUT/junit.log" 2>&1
junit=$?
echo "# Java JUnit tests: $((SECONDS - t_java)) s"
grep '^SKIP (' "$OUT/junit.log"
[ "$junit" -eq 0 ] || grep -vE '^(INFO|WARNING|SEVERE|[A-Z][a-z]{2} [0-9]{2}, )' "$OUT/junit.log" | head -40 | sed 's/^/#   /'
while read -r status what; do
    ok "$status" "Java: $what"
done < <($PY test/clients/junit_tap.py "$OUT/junit")
wait $java_bad
status=$?
[ "$status" -eq 1 ] && grep -q 'SEVERE: java-bad failed: .*28000' "$OUT/java-bad.log"
ok $? "the Java example worker exits 1 on bad credentials and logs the cause (exit $status)" ||
    sed 's/^/#   /' "$OUT/java-bad.log" | head -10
rm -f "$OUT"/java-bad.*

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

# 5. The fleet, and beside it the fleet of a stream imported from a KCL
# export, kpl-orders: 56-digit checkpoints, shard 1 at sub-sequence 3 with a
# pending checkpoint, its parent ended; the even records are KPL aggregates
# of 5 user records (the example workers synthesize them so on a "kpl-" stream).
fleet_leases_sql | "$PSQL" -X -q -v ON_ERROR_STOP=1 -d $DB >/dev/null
KOUT=$OUT/kpl && mkdir "$KOUT"
"$PSQL" -X -qAt -v ON_ERROR_STOP=1 -d $DB >"$KOUT/import" <<'SQL'
\set export `cat test/clients/kcl_export.jsonl`
SELECT action || ' ' || coalesce(shard_id, '-') FROM lease.import_kcl_dynamodb('clients', 'kpl-orders', :'export');
SQL
ok $? "a KCL export imported as stream kpl-orders: $(sort "$KOUT/import" | cut -d' ' -f1 | uniq -c | xargs)"

echo "# fleet: py-1 py-2 node-1 node-2 java-1 java-2 go-1 go-2 ex-1 start; py-1 killed at 5 s, node-1, java-1 and ex-1 at 7 s, go-1 at 8 s;" \
    "py-3, node-3, java-3, go-3 and ex-2 join at 10 s; stop once fair, from ${SETTLE_AT} s"
t0=$SECONDS
for w in java-1 java-2 py-1 py-2 node-1 node-2 go-1 go-2 ex-1; do start_worker $w; done     # the JVMs first: the slowest to start
for w in py-k1 node-k1 ex-k1; do OUT=$KOUT start_worker $w kpl-orders; done
echo "# kpl fleet: py-k1 node-k1 ex-k1 start on kpl-orders; node-k1 killed at 7 s, py-k2 joins at 10 s"
sleep 5
kill -KILL "${PIDS[py-1]}"; wait "${PIDS[py-1]}" 2>/dev/null
echo "# $((SECONDS - t0)) s: py-1 killed"
sleep 2
# a JVM is the slowest to start (seconds on a busy machine): java-1 is killed
# once it has processed something, at most 5 s later
for _ in $(seq 1 20); do [ -s "$OUT/java-1.records" ] && break; sleep 0.25; done
# and the BEAM (ex-1) the next slowest
for _ in $(seq 1 20); do [ -s "$OUT/ex-1.records" ] && break; sleep 0.25; done
kill -KILL "${PIDS[node-1]}" "${PIDS[java-1]}" "${PIDS[ex-1]}" "${PIDS[node-k1]}"
wait "${PIDS[node-1]}" "${PIDS[java-1]}" "${PIDS[ex-1]}" "${PIDS[node-k1]}" 2>/dev/null
echo "# $((SECONDS - t0)) s: node-1, java-1, ex-1 and node-k1 killed"
sleep 1
kill -KILL "${PIDS[go-1]}"; wait "${PIDS[go-1]}" 2>/dev/null
echo "# $((SECONDS - t0)) s: go-1 killed"
sleep 2
start_worker py-3
start_worker node-3
start_worker java-3
start_worker go-3
start_worker ex-2
OUT=$KOUT start_worker py-k2 kpl-orders
echo "# $((SECONDS - t0)) s: py-3, node-3, java-3, go-3 and ex-2 joined; py-k2 on kpl-orders"
LIVE="ex-2 go-2 go-3 java-2 java-3 node-2 node-3 py-2 py-3"
sleep $((SETTLE_AT - 10))
# on a loaded machine a joiner may take long to start: each gets up to 10 s more to process something
for w in py-3 node-3 java-3 go-3 ex-2; do
    for _ in $(seq 1 40); do [ -s "$OUT/$w.records" ] && break; sleep 0.25; done
done
# fair shares at the end: wait up to 8 s for the fleet to settle
settle_and_stop 16 -d "$DB"
[ "$stopped" -eq 9 ]
ok $? "the nine live workers stopped gracefully on SIGTERM"
$PY test/clients/check.py "$OUT" "$ADMIN_DSN" --killed py-1,node-1,java-1,go-1,ex-1 --joined py-3,node-3,java-3,go-3,ex-2
ok $? "fleet invariants (test/clients/check.py over the workers' journals and record logs)"
LIVE="ex-k1 py-k1 py-k2"
OUT_SAVED=$OUT; OUT=$KOUT FLEET_STREAM=kpl-orders settle_and_stop 16 -d "$DB"; OUT=$OUT_SAVED
[ "$stopped" -eq 3 ]
ok $? "kpl-orders: the three live workers stopped gracefully on SIGTERM"
$PY test/clients/check.py "$KOUT" "$ADMIN_DSN" --stream kpl-orders --killed node-k1 --joined py-k2
ok $? "kpl-orders, imported from KCL: fleet invariants over 56-digit sequence numbers and KPL sub-sequences (check.py)"
# what the imported checkpoints became: the first processor of each shard
# started exactly at the export's checkpoint (sequence, sub-sequence and
# pending checkpoint), its first record the next one, and the shard was
# checkpointed past it, compared as big integers
$PY - "$KOUT" "$ADMIN_DSN" <<'EOF'
import glob, json, sys
import psycopg2
out, dsn = sys.argv[1:3]
export = {}
for line in open("test/clients/kcl_export.jsonl"):
    item = json.loads(line)["Item"]
    if "checkpoint" in item and item["checkpoint"]["S"] != "SHARD_END":
        export[item["leaseKey"]["S"]] = (item["checkpoint"]["S"], int(item.get("checkpointSubSequenceNumber", {}).get("N", 0)),
                                         item.get("pendingCheckpoint", {}).get("S"))
export["shardId-000000000002"] = ("TRIM_HORIZON", 0, None)      # a child the export only names
events = [json.loads(l) for p in glob.glob(out + "/*.journal") for l in open(p) if l.endswith("\n")]
records = [json.loads(l) for p in glob.glob(out + "/*.records") for l in open(p) if l.endswith("\n")]
cur = psycopg2.connect(dsn).cursor()
cur.execute("SELECT shard_id, checkpoint, checkpoint_sub_sequence FROM lease.shard_leases"
            " WHERE app_name = 'clients' AND stream_name = 'kpl-orders'")
server = {s: (c, sub) for s, c, sub in cur.fetchall()}
bad = []
for shard, (checkpoint, sub, pending) in sorted(export.items()):
    first = min((e for e in events if e["ev"] == "initialized" and e["shard"] == shard), key=lambda e: e["t"], default=None)
    mine = sorted(((int(r["seq"]), r["sub"]) for r in records if r["shard"] == shard))
    seq = 0 if checkpoint == "TRIM_HORIZON" else int(checkpoint)
    want = (seq, sub + 1) if seq % 2 == 0 and seq > 0 and sub + 1 < 5 else (seq + 1, 0)
    now = server[shard]
    print("# %s: imported %s/%d (pending %s), first started by %s at %s/%s (pending %s), first record %s, now %s/%d"
          % (shard, checkpoint, sub, pending, first and first["w"], first and first["checkpoint"], first and first.get("sub"),
             first and first.get("pending"), mine[:1], now[0], now[1]))
    if (first is None or (first["checkpoint"], first.get("sub"), first.get("pending")) != (checkpoint, sub, pending)
            or not mine or mine[0] != want or (int(now[0]), now[1]) <= (seq, sub)):
        bad.append(shard)
sys.exit(1 if bad else 0)
EOF
ok $? "kpl-orders: every imported shard resumed right after its KCL checkpoint (its sub-sequence, its pending checkpoint given to initialize) and moved on"

# The checker can fail: the same history with a record processed again by a
# live worker, a refused checkpoint, and two owners of one shard at once;
# and, the heartbeat path's negative control, with an Elixir worker's
# heartbeat renewals made renew_leases ones.
mkdir "$OUT/tampered" && cp "$OUT"/*.journal "$OUT"/*.records "$OUT/fairness" "$OUT/tampered/" &&
    $PY test/clients/tamper.py "$OUT/tampered"
verdict=$($PY test/clients/check.py "$OUT/tampered" "$ADMIN_DSN" --killed py-1,node-1,java-1,go-1,ex-1 --joined py-3,node-3,java-3,go-3,ex-2 2>&1)
status=$?
[ "$status" -eq 1 ] && grep -q 'FAIL nothing processed twice' <<<"$verdict" &&
    grep -q 'FAIL no checkpoint refused' <<<"$verdict" && grep -q 'FAIL no two owners at once' <<<"$verdict"
ok $? "the checker rejects a repeat by a live worker, a refused checkpoint, two owners at once"
mkdir "$KOUT/tampered" && cp "$KOUT"/*.journal "$KOUT"/*.records "$KOUT/fairness" "$KOUT/tampered/" &&
    $PY test/clients/tamper.py --heartbeat ex-k1 "$KOUT/tampered"
verdict=$($PY test/clients/check.py "$KOUT/tampered" "$ADMIN_DSN" --stream kpl-orders --killed node-k1 --joined py-k2 2>&1)
[ $? -eq 1 ] && grep -q "FAIL the workers that renew by heartbeat did: \['ex-k1'\]" <<<"$verdict"
ok $? "the checker rejects an Elixir worker that never renewed by heartbeat (the heartbeat path's negative control)" ||
    grep 'heartbeat' <<<"$verdict" | sed 's/^/#   /'
# java-*: the same negative control for a Java worker of the main fleet
mkdir "$OUT/tampered-java" && cp "$OUT"/*.journal "$OUT"/*.records "$OUT/fairness" "$OUT/tampered-java/" &&
    $PY test/clients/tamper.py --heartbeat java-2 "$OUT/tampered-java"
verdict=$($PY test/clients/check.py "$OUT/tampered-java" "$ADMIN_DSN" --killed py-1,node-1,java-1,go-1,ex-1 --joined py-3,node-3,java-3,go-3,ex-2 2>&1)
[ $? -eq 1 ] && grep -q "FAIL the workers that renew by heartbeat did: \['java-2'\]" <<<"$verdict"
ok $? "the checker rejects a Java worker that never renewed by heartbeat (the heartbeat path's negative control)" ||
    grep 'heartbeat' <<<"$verdict" | sed 's/^/#   /'
# go-*: the same negative control for a Go worker of the main fleet
mkdir "$OUT/tampered-go" && cp "$OUT"/*.journal "$OUT"/*.records "$OUT/fairness" "$OUT/tampered-go/" &&
    $PY test/clients/tamper.py --heartbeat go-2 "$OUT/tampered-go"
verdict=$($PY test/clients/check.py "$OUT/tampered-go" "$ADMIN_DSN" --killed py-1,node-1,java-1,go-1,ex-1 --joined py-3,node-3,java-3,go-3,ex-2 2>&1)
[ $? -eq 1 ] && grep -q "FAIL the workers that renew by heartbeat did: \['go-2'\]" <<<"$verdict"
ok $? "the checker rejects a Go worker that never renewed by heartbeat (the heartbeat path's negative control)" ||
    grep 'heartbeat' <<<"$verdict" | sed 's/^/#   /'

# 6. Transactional mode (docs/exactly-once.md): Python, Node and Elixir workers write
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
        java-*) $JAVA -Djava.util.logging.config.file=test/clients/java-logging.properties -cp "$JAVA_TEST_CP" \
                  org.pglease.SuiteWorker tx "$WORKER_DSN" clients tx-orders "$1" "$OUT/tx" "$LEASE_SECONDS" \
                  2>"$OUT/tx/$1.stderr" & ;;
        ex-*) PG_LEASE_JOURNAL_DIR=$OUT/tx elixir --erl "-logger level warning" -pa "$EX_EBIN" -r test/clients/journaled.exs \
                  test/clients/tx_worker.exs "$EX_DSN" clients tx-orders "$1" "$LEASE_SECONDS" >"$OUT/tx/$1.stderr" 2>&1 & ;;
        go-*) PG_LEASE_LOG_LEVEL=warn "$GO_TEST_WORKER" tx "$WORKER_DSN" clients tx-orders "$1" "$OUT/tx" "$LEASE_SECONDS" \
                  2>"$OUT/tx/$1.stderr" & ;;
    esac
    TXP[$1]=$!
}
tx_kill_backends() {   # the processing connections (not the renewers) of the given workers
    "$PSQL" -X -qAt -d $DB -c "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
        WHERE application_name = ANY (string_to_array('$*', ' '))"
}
# the Elixir worker first, until it holds a lease: it is the slowest to
# start, and five faster workers would otherwise share all six shards first
tx_start ex-tx-1
for _ in $(seq 1 120); do
    [ "$("$PSQL" -X -qAt -d $DB -c "SELECT count(*) FROM lease.shard_leases WHERE stream_name = 'tx-orders' AND lease_owner = 'ex-tx-1'")" -gt 0 ] && break
    sleep 0.25
done
t0=$SECONDS
tx_start java-tx-1; tx_start py-tx-1; tx_start node-tx-1; tx_start go-tx-1
sleep 3
kill -KILL "${TXP[py-tx-1]}"; wait "${TXP[py-tx-1]}" 2>/dev/null
stolen=$("$PSQL" -X -qAt -d $DB -c "SELECT string_agg(c.shard_id || ' ' || lease.take_lease('clients', 'tx-orders', c.shard_id, 'thief', c.lease_count), ', ')
    FROM (SELECT DISTINCT ON (lease_owner) shard_id, lease_count FROM lease.shard_leases
           WHERE stream_name = 'tx-orders' AND lease_owner IN ('node-tx-1', 'ex-tx-1', 'go-tx-1') ORDER BY lease_owner, shard_id) AS c")
killed=$(tx_kill_backends node-tx-1 ex-tx-1 java-tx-1 go-tx-1)
echo "# tx: $((SECONDS - t0)) s: py-tx-1 killed (SIGKILL), $stolen stolen from node-tx-1, ex-tx-1 and go-tx-1 by a thief that never renews, $killed backend(s) of theirs terminated"
tx_start py-tx-2; tx_start node-tx-2; tx_start ex-tx-2; tx_start go-tx-2
sleep 3
killed=$(tx_kill_backends node-tx-1 py-tx-2 node-tx-2 ex-tx-1 ex-tx-2 java-tx-1 go-tx-1 go-tx-2)
echo "# tx: $((SECONDS - t0)) s: py-tx-2, node-tx-2 and ex-tx-2 joined 3 s ago; $killed processing backend(s) terminated"
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
TX_LIVE="node-tx-1 py-tx-2 node-tx-2 ex-tx-1 ex-tx-2 java-tx-1 go-tx-1 go-tx-2"
for w in $TX_LIVE; do kill -TERM "${TXP[$w]}"; done
tx_stopped=0
for w in $TX_LIVE; do wait "${TXP[$w]}" && tx_stopped=$((tx_stopped + 1)); done
for f in "$OUT"/tx/*.stderr; do [ -s "$f" ] && { echo "# $(basename "$f"):"; grep -vE '^(Sock closed|$)' "$f" | sed 's/^/#   /' | head -20; }; done
[ "$tx_stopped" -eq 8 ]
ok $? "transactional mode: the eight live workers stopped gracefully on SIGTERM"
# the verdict over table :tbl (tx_out, or its tampered copy below)
tx_verdict() {
    "$PSQL" -X -qAt -d $DB -v tbl="$1" <<'SQL'
WITH l AS (SELECT shard_id, CASE WHEN checkpoint = 'TRIM_HORIZON' THEN 0 ELSE checkpoint::int END AS ckpt
             FROM lease.shard_leases WHERE app_name = 'clients' AND stream_name = 'tx-orders'),
     o AS (SELECT shard_id, seq, count(*) AS n FROM public.:"tbl" GROUP BY 1, 2)
SELECT format('records written exactly once: %s of %s, %s duplicates, %s gaps, %s past a checkpoint; shards with progress %s of %s; by %s',
              (SELECT count(*) FROM o JOIN l USING (shard_id) WHERE o.n = 1 AND o.seq <= l.ckpt),
              (SELECT sum(ckpt) FROM l),
              (SELECT coalesce(sum(n - 1), 0) FROM o),
              (SELECT count(*) FROM l, generate_series(1, l.ckpt) AS s
                WHERE NOT EXISTS (SELECT FROM o WHERE o.shard_id = l.shard_id AND o.seq = s)),
              (SELECT count(*) FROM o JOIN l USING (shard_id) WHERE o.seq > l.ckpt),
              (SELECT count(*) FILTER (WHERE ckpt > 0) FROM l), (SELECT count(*) FROM l),
              (SELECT string_agg(DISTINCT worker, ',' ORDER BY worker) FROM public.:"tbl"))
SQL
}
verdict=$(tx_verdict tx_out)
echo "# tx: $verdict"
not_held=$(cat "$OUT"/tx/*.journal | grep -c '"ok": \?false' || true)
failed=$(cat "$OUT"/tx/*.journal | grep -c '"ev": \?"tx_failed"' || true)
diverged=$(cat "$OUT"/tx/*.journal | grep -c '"ev": \?"tx_diverged"' || true)
echo "# tx: $not_held batch(es) refused (not held), $failed transaction(s) failed and resolved from my_leases," \
    "$diverged found by hold_lease's checkpoint to start past the server's (commits lost in the restart)"
grep -qE '^records written exactly once: ([0-9]+) of \1, 0 duplicates, 0 gaps, 0 past a checkpoint; shards with progress 6 of 6; by .*ex-.*go-.*java-.*node-.*py-' <<<"$verdict"
ok $? "transactional mode: every record up to each checkpoint written exactly once, by Python, Node, Elixir, Java and Go workers"
# The verdict can fail (transactional mode's negative control): a copy of the
# output with one of an Elixir worker's rows written twice and one row past
# its shard's checkpoint, as a careless transaction would leave them.
"$PSQL" -X -q -v ON_ERROR_STOP=1 -d $DB <<'SQL' >/dev/null
CREATE TABLE public.tx_out_tampered AS SELECT * FROM public.tx_out;
INSERT INTO public.tx_out_tampered SELECT * FROM public.tx_out WHERE worker LIKE 'ex-%' LIMIT 1;
INSERT INTO public.tx_out_tampered SELECT shard_id, checkpoint::int + 1, 'ex-careless' FROM lease.shard_leases
 WHERE stream_name = 'tx-orders' AND checkpoint <> 'TRIM_HORIZON' LIMIT 1;
SQL
tampered=$(tx_verdict tx_out_tampered)
grep -qE ', 1 duplicates, 0 gaps, 1 past a checkpoint;' <<<"$tampered"
ok $? "transactional mode: the verdict rejects a record written twice and one past its checkpoint ($tampered)"
# java-*: the same negative control with one of a Java worker's rows written twice
"$PSQL" -X -q -v ON_ERROR_STOP=1 -d $DB <<'SQL' >/dev/null
CREATE TABLE public.tx_out_tampered_java AS SELECT * FROM public.tx_out;
INSERT INTO public.tx_out_tampered_java SELECT * FROM public.tx_out WHERE worker LIKE 'java-%' LIMIT 1;
SQL
tampered=$(tx_verdict tx_out_tampered_java)
grep -qE ', 1 duplicates, 0 gaps, 0 past a checkpoint;' <<<"$tampered"
ok $? "transactional mode: the verdict rejects a Java worker's record written twice ($tampered)"

# 7. Installed from the packages; loud failures; shard discovery.
# shellcheck source=test/clients/packages.sh
. test/clients/packages.sh

# 8. Fast failover (docs/client-rules.md, rule 6).
# shellcheck source=test/clients/fast_failover.sh
. test/clients/fast_failover.sh

# 9. A cancelled wait for synchronous replication is ambiguous.
# shellcheck source=test/clients/syncrep.sh
. test/clients/syncrep.sh

# 10. Unexpected exceptions; the INFO events.
# shellcheck source=test/clients/failures.sh
. test/clients/failures.sh

kill "$relay" 2>/dev/null; wait "$relay" 2>/dev/null
echo "1..$n"
[ "$fails" -eq 0 ]
