# shellcheck shell=bash
# Sourced by test/clients/run.sh (suite clients): the clients as a newcomer
# installs them, and what they say when something is wrong.
#   1. the Python package installs offline into a venv
#      (pip install --no-build-isolation --no-index, clients/python/pyproject.toml)
#      and the Node tarball of `npm pack` into an empty project (npm install
#      --offline: node-postgres is bundled in it);
#   2. bad credentials: the example worker of each, run from the installed
#      package (Elixir's from its build, over TCP through the relay; Java's
#      from the jar, every log record at every level; Go's), exits 1
#      after the rules' tries, with the cause in its log, and the password
#      appears nowhere in what it wrote; the Elixir client passes SCRAM over
#      TCP with the right password (p1_pgsql with the stringprep application);
#   3. shard discovery: a Python and a Node worker with a shard-list
#      callback create a new stream's leases, then a merge's child with
#      both parents, each lease exactly once.
# Uses PY, NODE, JAVA, JAVA_CP, GO_WORKER, PSQL, DB, OUT and url() of run.sh; sets PKG_PY (the venv's
# python) and PKG_NODE_PATH (the installed node_modules) for what follows;
# uses EX_EBIN and EX_PORT of test/clients/elixir.sh.
PKG=$OUT/packages
mkdir -p "$PKG/bin" "$PKG/nodeapp"

# 1. Install.  Copies, so the checkout is never written to (setuptools
# writes build/ and *.egg-info next to pyproject.toml).
cp -r clients/python "$PKG/pysrc" && rm -rf "$PKG/pysrc/build" "$PKG/pysrc"/*.egg-info
$PY -m venv --system-site-packages "$PKG/venv" &&
    "$PKG/venv/bin/pip" install -q --no-build-isolation --no-index "$PKG/pysrc" >"$PKG/pip.log" 2>&1 &&
    (cd "$PKG" && "$PKG/venv/bin/python" -c 'import pg_lease, sys; sys.exit(0 if "/venv/" in pg_lease.__file__ else 1)')
ok $? "the Python client installs offline into a venv from clients/python (pyproject.toml)" ||
    sed 's/^/#   /' "$PKG/pip.log" | tail -20
PKG_PY=$PKG/venv/bin/python
cp clients/python/example_worker.py "$PKG/bin/"      # the example alone: pg_lease comes from the venv
(cd clients/node && npm pack --pack-destination "$PKG" --loglevel=error >/dev/null) &&
    echo '{"name": "pg-lease-newcomer", "version": "1.0.0", "private": true}' >"$PKG/nodeapp/package.json" &&
    (cd "$PKG/nodeapp" && npm install --offline --no-audit --no-fund --loglevel=error "$PKG"/pg-lease-client-*.tgz >/dev/null) &&
    [ -f "$PKG/nodeapp/node_modules/pg-lease-client/node_modules/pg/package.json" ]
ok $? "the Node client: npm pack's tarball installs offline into an empty project, node-postgres bundled"
PKG_NODE_PATH=$PKG/nodeapp/node_modules

# 2. Bad credentials: a role with a password, asked for one on its socket.
HBA="$PGHOST/data/pg_hba.conf"
if [ -f "$HBA" ]; then
    cp "$HBA" "$PKG/pg_hba.conf.orig"
    { echo "local all clients_pw scram-sha-256"; cat "$PKG/pg_hba.conf.orig"; } >"$HBA"
    PGOPTIONS="-c client_min_messages=warning" "$PSQL" -X -q -d $DB -c "DROP ROLE IF EXISTS clients_pw" -c "CREATE ROLE clients_pw LOGIN PASSWORD 'right'" \
        -c "SELECT pg_reload_conf()" >/dev/null
    secret=wrong-Pw-7f3q      # nothing a client writes may contain it
    bad_dsn="postgresql:///$DB?host=$PGHOST&port=$PGPORT&user=clients_pw&password=$secret"
    mkdir "$PKG/bad"
    t=$SECONDS
    timeout 60 "$PKG_PY" "$PKG/bin/example_worker.py" "$bad_dsn" clients orders py-bad "$PKG/bad" 3 2>"$PKG/bad/py.log"
    status=$?
    [ "$status" -eq 1 ] && grep -q 'ERROR pg_lease: .*refused the connection 5 times.*password authentication failed' "$PKG/bad/py.log"
    ok $? "bad credentials: the installed Python worker exits 1 after $((SECONDS - t)) s, the cause logged at ERROR (exit $status)" ||
        sed 's/^/#   /' "$PKG/bad/py.log" | tail -8
    t=$SECONDS
    timeout 60 $NODE "$PKG_NODE_PATH/pg-lease-client/example_worker.js" "$bad_dsn" clients orders node-bad "$PKG/bad" 3 \
        2>"$PKG/bad/node.log"
    status=$?
    [ "$status" -eq 1 ] && grep -q 'ERROR pg_lease: .*refused the connection 5 times.*28P01 password authentication failed' "$PKG/bad/node.log"
    ok $? "bad credentials: the installed Node worker exits 1 after $((SECONDS - t)) s, the cause logged at ERROR (exit $status)" ||
        sed 's/^/#   /' "$PKG/bad/node.log" | tail -8
    t=$SECONDS
    timeout 60 elixir -pa "$EX_EBIN" clients/elixir/example_worker.exs \
        "postgresql://clients_pw:$secret@127.0.0.1:$EX_PORT/$DB" clients orders ex-bad "$PKG/bad" 3 >"$PKG/bad/ex.log" 2>&1
    status=$?
    [ "$status" -eq 1 ] && grep -q '\[error\] pg_lease: ex-bad: stopping the worker: password authentication failed for user "clients_pw" (SQLSTATE 28P01)' "$PKG/bad/ex.log"
    ok_show $? "bad credentials: the Elixir example worker exits 1 after $((SECONDS - t)) s, the cause logged at error, no retry forever (exit $status)" \
        "$PKG/bad/ex.log" 8
    # Java: every record of its logger, FINEST included (pgjdbc's own, which logs
    # the URL it connects with), and the exception run() throws
    t=$SECONDS
    printf '%s\n' 'handlers = java.util.logging.ConsoleHandler' '.level = ALL' \
        'java.util.logging.ConsoleHandler.level = ALL' >"$PKG/bad/java-all.properties"
    timeout 60 $JAVA -Djava.util.logging.config.file="$PKG/bad/java-all.properties" -cp "$JAVA_CP" ExampleWorker \
        "$bad_dsn" clients orders java-bad "$PKG/bad" 3 >"$PKG/bad/java.log" 2>&1
    status=$?
    [ "$status" -eq 1 ] && grep -q 'SEVERE: java-bad failed: .*28P01.*password authentication failed' "$PKG/bad/java.log" &&
        grep -q 'FINE: Connecting with URL' "$PKG/bad/java.log"
    ok_show $? "bad credentials: the Java example worker exits 1 after $((SECONDS - t)) s, the cause logged at SEVERE, pgjdbc's FINE records in the log (exit $status)" \
        "$PKG/bad/java.log" 8
    t=$SECONDS
    PG_LEASE_LOG_LEVEL=debug timeout 60 "$GO_WORKER" "$bad_dsn" clients orders go-bad "$PKG/bad" 3 >"$PKG/bad/go.log" 2>&1
    status=$?
    [ "$status" -eq 1 ] && grep -q 'SQLSTATE 28P01' "$PKG/bad/go.log"
    ok_show $? "bad credentials: the Go example worker exits 1 after $((SECONDS - t)) s, the cause logged at debug level and up (exit $status)" \
        "$PKG/bad/go.log" 8
    leaked=$(grep -l -- "$secret" "$PKG/bad/py.log" "$PKG/bad/node.log" "$PKG/bad/ex.log" "$PKG/bad/java.log" "$PKG/bad/go.log" \
                 "$PKG/bad"/*.journal 2>/dev/null)
    ok $([ -z "$leaked" ] && echo 0 || echo 1) "bad credentials: the password is in no log, exception or journal of the Python, Node, Elixir, Java and Go workers${leaked:+: $leaked}"
    elixir -pa "$EX_EBIN" -e '
{:ok, conn} = PgLease.Pgsql.start_link(host: "127.0.0.1", port: String.to_integer(System.argv() |> hd()),
                                       user: "clients_pw", password: "right", database: System.argv() |> List.last())
IO.puts(PgLease.Session.one(PgLease.Pgsql.session(conn), "SELECT concat_ws($1, current_user, (SELECT count(*) FROM pg_stat_activity WHERE usename = current_user))", ["/"]))' \
        "$EX_PORT" "$DB" >"$PKG/bad/ex-scram.log" 2>&1
    grep -qx 'clients_pw/1' "$PKG/bad/ex-scram.log"
    ok_show $? "the Elixir client passes SCRAM (scram-sha-256) over TCP with the right password: p1_pgsql, the stringprep application started" \
        "$PKG/bad/ex-scram.log" 8
    cp "$PKG/pg_hba.conf.orig" "$HBA"
    "$PSQL" -X -q -d $DB -c "SELECT pg_reload_conf()" -c "DROP ROLE clients_pw" >/dev/null
else
    ok 1 "bad credentials: no pg_hba.conf under \$PGHOST/data (test/lib/cluster.sh's cluster expected)"
fi

# 3. Shard discovery from a shard-list callback, both languages at once.
"$PSQL" -X -q -v ON_ERROR_STOP=1 -d $DB \
    -c "GRANT EXECUTE ON FUNCTION lease.sync_shards(text, text, text[], text[]) TO clients_worker" >/dev/null
# Both list nothing until both have started (their journals say so), so
# their first syncs of the real list run at about the same time.
echo '[]' >"$PKG/shards.json"
wdsn=$(url clients_worker)
"$PKG_PY" test/clients/discover_worker.py "$wdsn" clients discovered py-d "$PKG/shards.json" "$PKG/py-d.journal" \
    2>"$PKG/py-d.log" &
disc_py=$!
NODE_PATH=$PKG_NODE_PATH $NODE test/clients/discover_worker.js "$wdsn" clients discovered node-d "$PKG/shards.json" \
    "$PKG/node-d.journal" 2>"$PKG/node-d.log" &
disc_node=$!
leases() {
    "$PSQL" -X -qAt -d $DB -c "SELECT string_agg(shard_id || '{' || array_to_string(parent_shard_ids, ',') || '}'
        || CASE WHEN lease_owner IS NULL THEN '' ELSE '@' || lease_owner END, ' ' ORDER BY shard_id)
        FROM lease.shard_leases WHERE app_name = 'clients' AND stream_name = 'discovered'"
}
for _ in $(seq 1 60); do
    grep -qs '"started"' "$PKG/py-d.journal" && grep -qs '"started"' "$PKG/node-d.journal" && break
    sleep 0.25
done
echo '["d-1", "d-2"]' >"$PKG/shards.json"
for _ in $(seq 1 20); do
    case $(leases) in 'd-1{}@'*' d-2{}@'*) break ;; esac
    sleep 0.5
done
first=$(leases)
# a merge of d-1 and d-2 into d-3 (the adjacent parent as Kinesis lists it)
echo '[["d-1", [null]], ["d-2", []], ["d-3", ["d-1", "d-2"]]]' >"$PKG/shards.json"
for _ in $(seq 1 20); do
    case $(leases) in *'d-3{d-1,d-2}') break ;; esac
    sleep 0.5
done
second=$(leases)
kill -TERM $disc_py $disc_node
wait $disc_py; s1=$?
wait $disc_node; s2=$?
echo "# shard discovery: leases after the first listing: $first; after the merge: $second; exits $s1 $s2"
created=$(cat "$PKG/py-d.journal" "$PKG/node-d.journal" | $PY -c '
import json, sys
created = [s for line in sys.stdin for s in json.loads(line).get("created", [])]
print(" ".join(sorted(created)))')
[[ "$first" =~ ^d-1\{\}@.*\ d-2\{\}@ ]] && [ "$second" != "${second%d-3\{d-1,d-2\}}" ] &&
    [ "$created" = "d-1 d-2 d-3" ] && [ "$s1" -eq 0 ] && [ "$s2" -eq 0 ] &&
    grep -q 'INFO pg_lease: .*created the lease of' "$PKG/py-d.log" "$PKG/node-d.log"
ok $? "shard discovery: the shard-list callbacks of a Python and a Node worker create each lease once (created: $created), lineage included, and the leases are taken" ||
    { sed 's/^/#   /' "$PKG/py-d.log" | tail -5; sed 's/^/#   /' "$PKG/node-d.log" | tail -5; }
