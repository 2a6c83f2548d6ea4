# shellcheck shell=bash
# The fleet harness shared by test/clients/run.sh (one server),
# test/clients/router.sh (through the router during a failover) and
# test/clients/pgbouncer.sh (through PgBouncer): the worker role's functions
# and the fleet's leases, starting an example worker, the SQL that judges
# fair shares, and stopping the fleet once they are fair.  Uses PY, NODE,
# JAVA and JAVA_CP (the Java worker's command and classpath, run.sh only),
# GO_WORKER (the Go example worker's binary, built once by the sourcing
# script, for go-* workers; GO_TEST_WORKER, test/clients/go_worker's, for
# the fast-failover ones), WORKER_DSN, OUT, LEASE_SECONDS, PSQL, LIVE and
# t0 of the sourcing script, and for Elixir workers EX_EBIN (the compiled
# client) and EX_DSN (a TCP URL); FLEET_STREAM, when set, names the stream
# that fair_sql judges (default orders).  The fast-failover workers
# (ff_start, ff_recovery) use FF_DSN, FF_OUT, FF_LEASE, FF_RENEW and
# FF_STREAM (default orders).  The Python, Node and Elixir example workers
# know nothing of journals: they run under test/clients/journaled.{py,js,exs},
# which journals every worker they start (the clients' private test hooks).
declare -A PIDS
# The worker recipe's functions (docs/security.md), for GRANT EXECUTE ON
# FUNCTION ... TO the worker role.
FLEET_WORKER_FUNCTIONS="lease.update_checkpoint(text, text, text, text, text, bigint, bigint, bigint),
    lease.update_checkpoints(text, text, text, text[], text[], bigint[], bigint[], bigint[]),
    lease.prepare_checkpoint(text, text, text, text, text),
    lease.release_lease(text, text, text, text),
    lease.close_shard(text, text, text, text),
    lease.take_leases(text, text, text, interval, integer, integer, double precision, interval),
    lease.renew_leases(text, text, text, interval, interval),
    lease.heartbeat(text, text, text, interval, interval),
    lease.my_leases(text, text, text)"
# The fleet's 17 leases (app clients, stream orders), as SQL.
fleet_leases_sql() {
    cat <<'SQL'
SELECT lease.create_lease('clients', 'orders', pg_catalog.format('s%s', pg_catalog.lpad(i::text, 2, '0')))
  FROM pg_catalog.generate_series(1, 13) AS i;
SELECT lease.create_lease('clients', 'orders', 'p-end40');                     -- ends after 40 records
SELECT lease.create_lease('clients', 'orders', 'q-end60');                     -- ends after 60
SELECT lease.create_lease('clients', 'orders', 'c1', '{p-end40}');             -- split child of p
SELECT lease.create_lease('clients', 'orders', 'c2', '{p-end40}');
SQL
}
start_worker() {   # name [stream]
    local stream=${2:-orders}
    case $1 in
        py-*) $PY test/clients/journaled.py "$OUT" clients/python/example_worker.py "$WORKER_DSN" clients "$stream" \
                  "$1" "$OUT" "$LEASE_SECONDS" 2>"$OUT/$1.stderr" & ;;
        node-*) $NODE test/clients/journaled.js "$OUT" clients/node/example_worker.js "$WORKER_DSN" clients "$stream" \
                  "$1" "$OUT" "$LEASE_SECONDS" 2>"$OUT/$1.stderr" & ;;
        ex-*) PG_LEASE_JOURNAL_DIR=$OUT elixir --erl "-logger level ${EX_LOG_LEVEL:-warning}" -pa "$EX_EBIN" \
                  -r test/clients/journaled.exs clients/elixir/example_worker.exs \
                  "$EX_DSN" clients "$stream" "$1" "$OUT" "$LEASE_SECONDS" >"$OUT/$1.stderr" 2>&1 & ;;
        go-*) PG_LEASE_LOG_LEVEL=${GO_LOG_LEVEL:-warn} "$GO_WORKER" "$WORKER_DSN" clients "$stream" "$1" "$OUT" "$LEASE_SECONDS" \
                  2>"$OUT/$1.stderr" & ;;
        # the library from its jar; it logs lease changes at INFO, the fleet shows only warnings
        java-*) $JAVA -Djava.util.logging.config.file=test/clients/java-logging.properties -cp "$JAVA_CP" \
                  ExampleWorker "$WORKER_DSN" clients "$stream" "$1" "$OUT" "$LEASE_SECONDS" 2>"$OUT/$1.stderr" & ;;
    esac
    PIDS[$1]=$!
}
# ff_start name [nocontract [dsn]]: a fast-failover worker (ff_worker.py /
# ff_worker.js / ff_worker.exs / the Java SuiteWorker / go_worker ff, 10 s leases, renew_every) on $FF_DSN, or on
# dsn (a relay; an Elixir worker needs one: a TCP URL).
ff_start() {
    case $1 in
        py-*) $PY test/clients/ff_worker.py "${3:-$FF_DSN}" clients "${FF_STREAM:-orders}" "$1" "$FF_OUT" $FF_LEASE \
                  $FF_RENEW ${2:-} 2>"$FF_OUT/$1.stderr" & ;;
        node-*) $NODE test/clients/ff_worker.js "${3:-$FF_DSN}" clients "${FF_STREAM:-orders}" "$1" "$FF_OUT" $FF_LEASE \
                  $FF_RENEW 2>"$FF_OUT/$1.stderr" & ;;
        # java-*: the suite's Java worker (clients/java/src/test, SuiteWorker), from the test classes
        java-*) $JAVA -Djava.util.logging.config.file=test/clients/java-logging.properties -cp "$JAVA_TEST_CP" \
                  org.pglease.SuiteWorker ff "${3:-$FF_DSN}" clients "${FF_STREAM:-orders}" "$1" "$FF_OUT" $FF_LEASE \
                  $FF_RENEW ${2:-} 2>"$FF_OUT/$1.stderr" & ;;
        ex-*) PG_LEASE_JOURNAL_DIR=$FF_OUT PG_LEASE_IGNORE_RULE_6=$([ "${2:-}" = nocontract ] && echo 1 || echo 0) \
                  elixir --erl "-logger level warning" -pa "$EX_EBIN" -r test/clients/journaled.exs \
                  test/clients/ff_worker.exs "$3" clients "${FF_STREAM:-orders}" "$1" "$FF_OUT" $FF_LEASE $FF_RENEW \
                  >"$FF_OUT/$1.stderr" 2>&1 & ;;
        go-*) PG_LEASE_LOG_LEVEL=warn PG_LEASE_IGNORE_RULE_6=$([ "${2:-}" = nocontract ] && echo 1 || echo 0) \
                  "$GO_TEST_WORKER" ff "${3:-$FF_DSN}" clients "${FF_STREAM:-orders}" "$1" "$FF_OUT" $FF_LEASE $FF_RENEW \
                  2>"$FF_OUT/$1.stderr" & ;;
    esac
    PIDS[$1]=$!
}
# How long after the SIGKILL of fast-failover worker $1 (at $2, seconds since
# the epoch) each shard it held had a new acknowledged checkpoint by another
# worker, from the journals in $FF_OUT: "N shards: median M s, max X s", or
# how many of them were checkpointed again.
ff_recovery() {   # worker kill-time
    $PY - "$FF_OUT" "$1" "$2" <<'PYEOF'
import glob, json, statistics, sys
out, victim, kill = sys.argv[1], sys.argv[2], float(sys.argv[3])
events = [json.loads(l) for p in glob.glob(out + "/*.journal") for l in open(p) if l.endswith("\n")]
held = [e for e in events if e["w"] == victim and e["ev"] == "renewed" and e["t"] < kill]
shards = set(held[-1]["leases"]) if held else set()
gaps = []
for s in shards:
    after = [e["t"] for e in events if e["w"] != victim and e["ev"] == "checkpoint" and e.get("ok")
             and e["shard"] == s and e["t"] > kill]
    if after:
        gaps.append(min(after) - kill)
if gaps and len(gaps) == len(shards):
    print("%d shards: median %.2f s, max %.2f s" % (len(gaps), statistics.median(gaps), max(gaps)))
else:
    print("%d of %d shards checkpointed again" % (len(gaps), len(shards)))
PYEOF
}
# The live leases per owner, and whether every live worker holds a fair share
# (floor or ceil of the takeable leases over the live workers) with no
# takeable lease unheld.
fair_sql() {
    cat <<SQL
WITH t AS (SELECT l.shard_id, l.lease_owner,
                  -- live: by its own expiry or its owner's heartbeat (renew_leases)
                  GREATEST(l.lease_expires_at,
                           (SELECT w.renewed_until FROM lease.stream_workers w
                             WHERE w.app_name = l.app_name AND w.stream_name = l.stream_name
                               AND w.worker = l.lease_owner)) > clock_timestamp() AS live
             FROM lease.shard_leases l
            WHERE l.app_name = 'clients' AND l.stream_name = '${FLEET_STREAM:-orders}' AND l.checkpoint <> 'SHARD_END'
              AND NOT EXISTS (SELECT 1 FROM lease.shard_leases p
                               WHERE p.app_name = l.app_name AND p.stream_name = l.stream_name
                                 AND p.shard_id = ANY (l.parent_shard_ids) AND p.checkpoint <> 'SHARD_END')),
     w AS (SELECT unnest(string_to_array('$1', ' ')) AS owner),
     c AS (SELECT w.owner, count(t.shard_id) FILTER (WHERE t.live) AS n FROM w LEFT JOIN t ON t.lease_owner = w.owner GROUP BY w.owner),
     f AS (SELECT count(*) AS takeable, count(*) FILTER (WHERE NOT live OR lease_owner IS NULL) AS unheld FROM t)
SELECT (SELECT string_agg(owner || '=' || n, ' ' ORDER BY owner) FROM c)
       || ' takeable=' || f.takeable || ' unheld=' || f.unheld
       || CASE WHEN f.unheld = 0 AND (SELECT bool_and(n BETWEEN f.takeable / (SELECT count(*) FROM w)
                                                        AND (f.takeable + (SELECT count(*) FROM w) - 1) / (SELECT count(*) FROM w))
                                      FROM c)
               THEN ' fair' ELSE ' unfair' END
  FROM f
SQL
}


# Waits up to $1 half-seconds for fair shares among $LIVE (psql connection
# arguments follow), records the last snapshot in $OUT/fairness, stops the
# live workers with SIGTERM and prints their stderr.  Sets $stopped to how
# many of them exited 0.
settle_and_stop() {   # tries psql-connection-args...
    local tries=$1 snapshot= w f
    shift
    for _ in $(seq 1 "$tries"); do
        snapshot=$("$PSQL" -X -qAt "$@" -c "$(fair_sql "$LIVE")")
        case $snapshot in *' fair') break ;; esac
        sleep 0.5
    done
    echo "# $((SECONDS - t0)) s: live leases: $snapshot"
    echo "$snapshot" >"$OUT/fairness"
    for w in $LIVE; do kill -TERM "${PIDS[$w]}"; done
    stopped=0
    for w in $LIVE; do wait "${PIDS[$w]}" && stopped=$((stopped + 1)); done
    for f in "$OUT"/*.stderr; do
        [ -s "$f" ] && { echo "# $(basename "$f"):"; sed 's/^/#   /' "$f" | head -20; }
    done
}
