# shellcheck shell=bash
# The fleet harness shared by test/clients/run.sh (one server) and
# test/clients/router.sh (through the router during a failover): starting
# an example worker, the SQL that judges fair shares, and stopping the
# fleet once they are fair.  Uses PY, NODE,
# WORKER_DSN, OUT, LEASE_SECONDS, PSQL, LIVE and t0 of the sourcing script.
declare -A PIDS
start_worker() {   # name
    case $1 in
        py-*) (cd clients/python && exec $PY example_worker.py "$WORKER_DSN" clients orders "$1" "$OUT" "$LEASE_SECONDS") \
                  2>"$OUT/$1.stderr" & ;;
        node-*) $NODE clients/node/example_worker.js "$WORKER_DSN" clients orders "$1" "$OUT" "$LEASE_SECONDS" \
                  2>"$OUT/$1.stderr" & ;;
    esac
    PIDS[$1]=$!
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
            WHERE l.app_name = 'clients' AND l.stream_name = 'orders' AND l.checkpoint <> 'SHARD_END'
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
