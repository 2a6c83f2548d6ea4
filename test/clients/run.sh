#!/usr/bin/env bash
# The clients suite (make test, PG_LEASE_SUITES=clients): the Python, Node,
# Java, Go and Elixir clients against the running throwaway cluster (PGHOST, PGPORT from
# test/lib/cluster.sh).  Prints TAP ("ok N - ...", "not ok N - ..."); exits
# non-zero on any failure.
#
#   1. the docs show the tested code: each "write a worker" page's code block
#      is byte-for-byte the example worker the fleet runs;
#   2. every client's retry table names the SQLSTATEs of docs/client-rules.md,
#      and the same pattern for PL/Proxy's connection-loss XX000;
#      the Java client's JUnit 5 tests (one TAP line each) against the server;
#   3. the channel-rotation helper of each client: a started replacement
#      stays, a replacement that fails to start is restored;
#   The Java client's JUnit 5 tests and the Go client's go test count one
#   TAP line per test.
#   4. the Go client, built offline from Debian's packages (GOPATH mode, no
#      module proxy): go vet, and its go test against this cluster, one TAP
#      line per test (the rules cases, the local deadline, fenced checkpoints,
#      handoff, shard end, rotation, sync_shards);
#   5. the fleet: Python, Node, Java, Go and Elixir workers on one stream at the
#      same time, one of each killed (SIGKILL) mid-run, one of each joining
#      later, then a checker over what the workers recorded
#      (test/clients/check.py).
#   6. transactional mode;
#   7. the clients installed from their packages, failing loudly on bad
#      credentials, and creating a stream's leases from a shard-list callback
#      (test/clients/packages.sh);
#   8. the fast-failover mode of the Python and Node workers
#      (test/clients/fast_failover.sh).
#   The Elixir client's ExUnit tests (clients/elixir/test: the kcl_ex AppState
#   adapter, rotate_channel, the worker's loud failure) count one TAP line
#   per test.  Its driver (erlang-p1-pgsql) speaks TCP only: it reaches the
#   cluster's Unix socket through test/clients/tcp_relay.py on 127.0.0.1.
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

# 2. One table of retry rules, followed by every client.
rules_codes() {   # the SQLSTATEs a file names, sorted, one a line
    grep -oE '\b(40001|40L01|40P01|55P03|55000|57014|53300|57P0[1-3]|25006|XX000|28P01|28000|3D000)\b' "$1" | sort -u
}
plproxy_pattern() {   # the regular expression a file gives for PL/Proxy's connection-loss XX000
    grep -oE '\^PL/Proxy function [^`"]*' "$1" | unescape_java "$1"
}
unescape_java() {   # a Java string literal's \\ is one backslash of the pattern
    case $1 in *.java) sed 's/\\\\/\\/g' ;; *) cat ;; esac
}
RULES_FILES="clients/python/pg_lease/rules.py clients/node/rules.js clients/go/pglease/rules.go clients/elixir/lib/pg_lease/rules.ex clients/java/src/main/java/org/pglease/Rules.java"
same=0
for f in $RULES_FILES; do
    diff <(rules_codes docs/client-rules.md) <(rules_codes "$f") >/dev/null || { echo "# $f names other SQLSTATEs"; same=1; }
done
ok $same "docs/client-rules.md, rules.py, rules.js, Rules.java, rules.go and rules.ex name the same SQLSTATEs"
pattern=$(plproxy_pattern docs/client-rules.md)
same=0
[ "$(wc -l <<<"$pattern")" -eq 1 ] && [ -n "$pattern" ] || same=1
for f in $RULES_FILES; do [ "$(plproxy_pattern "$f")" = "$pattern" ] || same=1; done
ok $same "docs/client-rules.md, rules.py, rules.js, Rules.java, rules.go and rules.ex recognise PL/Proxy's lost connection by one pattern"
not_held_pattern() {   # the regular expression a file gives for hold_lease's "not held"
    grep -oE '\(\^\|REMOTE ERROR: \)lease [^`"]*' "$1"
}
pattern=$(not_held_pattern docs/client-rules.md)
same=0
[ "$(wc -l <<<"$pattern")" -eq 1 ] && [ -n "$pattern" ] || same=1
for f in $RULES_FILES; do [ "$(not_held_pattern "$f")" = "$pattern" ] || same=1; done
ok $same "docs/client-rules.md, rules.py, rules.js, Rules.java, rules.go and rules.ex recognise hold_lease's not-held 55000 by one pattern"
refused_pattern() {   # the regular expression a file gives for a refused connection without a SQLSTATE
    grep -oE "\(password authentication failed[^\`']*" "$1" | unescape_java "$1"
}
pattern=$(refused_pattern docs/client-rules.md)
same=0
[ "$(wc -l <<<"$pattern")" -eq 1 ] && [ -n "$pattern" ] || same=1
for f in $RULES_FILES; do [ "$(refused_pattern "$f")" = "$pattern" ] || same=1; done
ok $same "docs/client-rules.md, rules.py, rules.js, Rules.java, rules.go and rules.ex recognise a refused connection without a SQLSTATE by one pattern"
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
for (const c of bad) console.log(`# rules.js: ${JSON.stringify(c)}`);
process.exit(bad.length || cases.length < 20 ? 1 : 0);'
ok $? "rules.js classifies every SQLSTATE of the table as the page says"
$NODE -e '
const rules = require("./clients/node/rules.js");
const epipe = Object.assign(new Error("write EPIPE"), { code: "EPIPE", errno: -32, syscall: "write" });
const server = Object.assign(new Error("could not serialize access"), { code: "40001", severity: "ERROR" });
process.exit(rules.sqlstate(epipe) === undefined && rules.classify(rules.sqlstate(epipe), epipe.message) === "ambiguous" &&
             rules.sqlstate(server) === "40001" ? 0 : 1);'
ok $? "rules.js takes a socket error (EPIPE: code, errno, syscall) for a lost connection, not for a SQLSTATE"
# Elixir 1.14 ships no JSON reader: the cases reach it as lines of
# code, kind and base64 message ("-" for null)
$PY -c '
import base64, json
for code, message, kind in json.load(open("test/clients/rules_cases.json")):
    print(code or "-", kind, "-" if message is None else base64.b64encode(message.encode()).decode())' |
    elixir -r clients/elixir/lib/pg_lease/rules.ex -e '
cases = for line <- IO.stream(:stdio, :line), do: String.split(String.trim(line), " ")
bad = for [code, kind, message] = c <- cases,
          PgLease.Rules.classify(if(code == "-", do: nil, else: code),
                                 if(message == "-", do: nil, else: Base.decode64!(message))) != String.to_atom(kind), do: c
for c <- bad, do: IO.puts("# rules.ex: #{inspect(c)}")
System.halt(if bad == [] and length(cases) >= 20, do: 0, else: 1)'
ok $? "rules.ex classifies every SQLSTATE of the table as the page says"

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
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'clients_kcl') THEN
        CREATE ROLE clients_kcl LOGIN;
    END IF;
END \$\$;
GRANT USAGE ON SCHEMA lease TO clients_worker, clients_app, clients_kcl;
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

# The Elixir client: compiled with Debian's elixir (no warnings), reached over
# 127.0.0.1 through the relay (killed with every other job by the trap).
$PY test/clients/tcp_relay.py "$PGHOST/.s.PGSQL.$PGPORT" >"$OUT/relay.port" &
relay=$!
for _ in $(seq 1 50); do [ -s "$OUT/relay.port" ] && break; sleep 0.1; done
EX_PORT=$(cat "$OUT/relay.port")
EX_EBIN=$OUT/mix/build/lib/pg_lease/ebin
EX_DSN="postgresql://clients_worker@127.0.0.1:$EX_PORT/$DB"
(cd clients/elixir && MIX_HOME="$OUT/mix/home" HEX_HOME="$OUT/mix/hex" HEX_OFFLINE=1 MIX_BUILD_PATH="$OUT/mix/build" \
    mix compile --warnings-as-errors) >"$OUT/mix.log" 2>&1
ok $? "the Elixir client builds offline with Debian's elixir (mix, no dependencies), without warnings" ||
    sed 's/^/#   /' "$OUT/mix.log"
(cd clients/elixir && PG_LEASE_EX_PORT=$EX_PORT PG_LEASE_EX_DB=$DB PG_LEASE_EX_TAP=$OUT/exunit.tap \
    elixir -pa "$EX_EBIN" test/app_state_test.exs >"$OUT/exunit.log" 2>&1)
status=$?
while read -r verdict rest; do
    [ "$verdict" = ok ] && ok 0 "ExUnit $rest" || { ok 1 "ExUnit ${rest#ok }"; }
done <"$OUT/exunit.tap"
grep -E '^[0-9]+ tests?, [0-9]+ failures?' "$OUT/exunit.log" | sed 's/^/# ExUnit: /'
[ "$status" -eq 0 ] && [ "$(grep -c "^ok " "$OUT/exunit.tap")" -ge 12 ]
ok $? "the Elixir client's ExUnit run passed, every test reported" || sed 's/^/#   /' "$OUT/exunit.log" | tail -60

# Loud failure: the example worker, from the jar, with a role that does not
# exist exits non-zero after the rules' retries and logs why (in the
# background, while the JUnit tests run).
$JAVA -cp "$JAVA_CP" ExampleWorker "$(url no_such_role)" clients orders java-bad "$OUT" "$LEASE_SECONDS" \
    >"$OUT/java-bad.log" 2>&1 &
java_bad=$!
t_java=$SECONDS
# The Java client's JUnit 5 tests (clients/java/src/test), run offline by
# Debian's console launcher against this database, concurrently (each test
# its own streams): every case of rules_cases.json, the local deadline, a
# refused checkpoint -> leaseLost, a handoff -> shutdownRequested, shard end
# -> shardEnded, the stop, bad credentials, sync_shards, the channel-rotation
# helper (as the Python and Node ones above).  One TAP line per test, from
# the XML report.
$JAVA -Dpglease.dsn="$WORKER_DSN" -Dpglease.app="$APP_DSN" -Dpglease.admin="$ADMIN_DSN" \
    -Dpglease.rules=test/clients/rules_cases.json \
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

# 5. The fleet.
fleet_leases_sql | "$PSQL" -X -q -v ON_ERROR_STOP=1 -d $DB >/dev/null

echo "# fleet: py-1 py-2 node-1 node-2 java-1 java-2 go-1 go-2 ex-1 start; py-1 killed at 5 s, node-1, java-1 and ex-1 at 7 s, go-1 at 8 s;" \
    "py-3, node-3, java-3, go-3 and ex-2 join at 10 s; stop once fair, from ${SETTLE_AT} s"
t0=$SECONDS
for w in java-1 java-2 py-1 py-2 node-1 node-2 go-1 go-2 ex-1; do start_worker $w; done     # the JVMs first: the slowest to start
sleep 5
kill -KILL "${PIDS[py-1]}"; wait "${PIDS[py-1]}" 2>/dev/null
echo "# $((SECONDS - t0)) s: py-1 killed"
sleep 2
# a JVM is the slowest to start (seconds on a busy machine): java-1 is killed
# once it has processed something, at most 5 s later
for _ in $(seq 1 20); do [ -s "$OUT/java-1.records" ] && break; sleep 0.25; done
kill -KILL "${PIDS[node-1]}" "${PIDS[java-1]}" "${PIDS[ex-1]}"; wait "${PIDS[node-1]}" "${PIDS[java-1]}" "${PIDS[ex-1]}" 2>/dev/null
echo "# $((SECONDS - t0)) s: node-1, java-1 and ex-1 killed"
sleep 1
kill -KILL "${PIDS[go-1]}"; wait "${PIDS[go-1]}" 2>/dev/null
echo "# $((SECONDS - t0)) s: go-1 killed"
sleep 2
start_worker py-3
start_worker node-3
start_worker java-3
start_worker go-3
start_worker ex-2
echo "# $((SECONDS - t0)) s: py-3, node-3, java-3, go-3 and ex-2 joined"
LIVE="ex-2 go-2 go-3 java-2 java-3 node-2 node-3 py-2 py-3"
sleep $((SETTLE_AT - 10))
# fair shares at the end: wait up to 8 s for the fleet to settle
settle_and_stop 16 -d "$DB"
[ "$stopped" -eq 9 ]
ok $? "the nine live workers stopped gracefully on SIGTERM"
$PY test/clients/check.py "$OUT" "$ADMIN_DSN" --killed py-1,node-1,java-1,go-1,ex-1 --joined py-3,node-3,java-3,go-3,ex-2
ok $? "fleet invariants (test/clients/check.py over the workers' journals and record logs)"

# The checker can fail: the same history with a record processed again by a
# live worker, a refused checkpoint, and two owners of one shard at once.
mkdir "$OUT/tampered" && cp "$OUT"/*.journal "$OUT"/*.records "$OUT/fairness" "$OUT/tampered/" &&
    $PY test/clients/tamper.py "$OUT/tampered"
verdict=$($PY test/clients/check.py "$OUT/tampered" "$ADMIN_DSN" --killed py-1,node-1,java-1,go-1,ex-1 --joined py-3,node-3,java-3,go-3,ex-2 2>&1)
status=$?
[ "$status" -eq 1 ] && grep -q 'FAIL nothing processed twice' <<<"$verdict" &&
    grep -q 'FAIL no checkpoint refused' <<<"$verdict" && grep -q 'FAIL no two owners at once' <<<"$verdict"
ok $? "the checker rejects a repeat by a live worker, a refused checkpoint, two owners at once"

# 6. Transactional mode (docs/exactly-once.md): Python and Node workers write
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

# 7. Installed from the packages; loud failures; shard discovery.
# shellcheck source=test/clients/packages.sh
. test/clients/packages.sh

# 8. Fast failover (docs/client-rules.md, rule 6).
# shellcheck source=test/clients/fast_failover.sh
. test/clients/fast_failover.sh

kill "$relay" 2>/dev/null; wait "$relay" 2>/dev/null
echo "1..$n"
[ "$fails" -eq 0 ]
