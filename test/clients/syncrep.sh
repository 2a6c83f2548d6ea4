# shellcheck shell=bash
# Sourced by test/clients/run.sh (suite clients): a call, or the COMMIT of a
# transaction, that comes back with PostgreSQL's WARNING that the wait for
# synchronous replication was cancelled is ambiguous to the Python, Node and
# Elixir clients, not success (docs/client-rules.md).  The cluster is made to
# wait for a standby that is not there (synchronous_standby_names), only in
# sessions that ask for it (synchronous_commit on; the throwaway cluster runs
# with it off, and the database lets lease functions commit with local
# flushes, lease.min_synchronous_commit = local, so that the workers'
# renewals and takes do not wait too), and test/clients/syncrep_cancel.py cancels each backend that
# waits (pg_cancel_backend), as a failover manager does when it gives up on
# its standby:
#   1. each client's session: a checkpoint sent as not safe to repeat raises
#      the client's Ambiguous, and one safe to repeat is tried the rules'
#      5 times and then reported unavailable; either way it was written
#      (committed locally), which is why it is not success;
#   2. each client's transactional worker, every batch committing with
#      synchronous_commit on: each cancelled COMMIT is an unknown outcome,
#      resolved from my_leases (it committed), and every record is in the
#      output exactly once.
# Uses PY, NODE, PSQL, OUT, EX_EBIN, EX_PORT, ok and url() of run.sh.
SR_DB=pg_lease_syncrep
SR_OUT=$OUT/syncrep && mkdir -p "$SR_OUT"
"$PSQL" -X -q -v ON_ERROR_STOP=1 -d postgres <<SQL >/dev/null
DROP DATABASE IF EXISTS $SR_DB;
CREATE DATABASE $SR_DB;
\c $SR_DB
SET client_min_messages = warning;
CREATE EXTENSION pg_lease;
LOAD 'pg_lease';
ALTER DATABASE $SR_DB SET lease.min_synchronous_commit = 'local';
GRANT USAGE ON SCHEMA lease TO clients_worker;
GRANT EXECUTE ON FUNCTION $FLEET_WORKER_FUNCTIONS TO clients_worker;
GRANT EXECUTE ON FUNCTION lease.hold_lease(text, text, text, text, bigint) TO clients_worker;
SELECT lease.grant_app('clients', 'clients_worker');
CREATE TABLE public.tx_out (shard_id text, seq int, worker text);
GRANT INSERT ON public.tx_out TO clients_worker;
SELECT lease.create_lease('clients', 'sr-' || c, 's1') FROM unnest(ARRAY['py', 'node', 'ex']) AS c;
SELECT lease.take_lease('clients', 'sr-' || c, 's1', 'sr-' || c) FROM unnest(ARRAY['py', 'node', 'ex']) AS c;
SELECT lease.create_lease('clients', 'sr-tx', 't' || i) FROM generate_series(1, 3) AS i;
ALTER SYSTEM SET synchronous_standby_names = 'pg_lease_absent_standby';
SELECT pg_reload_conf();
SQL
ok $? "sync-rep: a database whose synchronous commits wait for a standby that is not there"
sr_wdsn=$(url clients_worker); sr_wdsn=${sr_wdsn/\/$DB?//$SR_DB?}
sr_adsn=$(url postgres); sr_adsn=${sr_adsn/\/$DB?//$SR_DB?}
$PY test/clients/syncrep_cancel.py "$sr_adsn" "$SR_OUT/cancelled" &
sr_cancel=$!
sleep 0.5

# 1. Each client's session: the same fenced checkpoint, not safe to repeat,
# then safe to repeat; prints "ambiguous" / "unavailable" per the client's
# own exceptions, and the server's checkpoint after each.
$PY - "$sr_wdsn" <<'EOF' >"$SR_OUT/py" 2>&1
import sys
sys.path.insert(0, "clients/python")
from pg_lease import Ambiguous, Session, Unavailable
s = Session(sys.argv[1], "sr-py", options="-c synchronous_commit=on")
epoch = Session(sys.argv[1], "sr-py-read").one("SELECT lease_epoch FROM lease.my_leases('clients', 'sr-py', 'sr-py')")
ck = "SELECT lease.update_checkpoint('clients', 'sr-py', 's1', 'sr-py', %s, 0, %s)"
read = Session(sys.argv[1], "sr-py-read")
for seq, safe in (("49590338271490256608559692538361571095921575989136588898", False), ("49590338271490256608559692538361571095921575989136588899", True)):
    try:
        s.one(ck, (seq, epoch), repeat_safe=safe)
        print("success")
    except Ambiguous:
        print("ambiguous")
    except Unavailable as e:
        print("unavailable" if "WARNING canceling wait for synchronous replication" in str(e) else "unavailable: %s" % e)
    print(read.one("SELECT checkpoint FROM lease.my_leases('clients', 'sr-py', 'sr-py')"))
EOF
$NODE - "$sr_wdsn" <<'EOF' >"$SR_OUT/node" 2>&1
const { Session, Ambiguous, Unavailable, consoleLogger } = require('./clients/node/pg_lease');
(async () => {
  const log = consoleLogger('error');
  const s = new Session(process.argv[2], 'sr-node', '-c synchronous_commit=on', log);
  const read = new Session(process.argv[2], 'sr-node-read', null, log);
  const epoch = await read.one("SELECT lease_epoch FROM lease.my_leases('clients', 'sr-node', 'sr-node')");
  const ck = "SELECT lease.update_checkpoint('clients', 'sr-node', 's1', 'sr-node', $1, 0, $2::bigint)";
  for (const [seq, safe] of [['49590338271490256608559692538361571095921575989136588898', false],
                             ['49590338271490256608559692538361571095921575989136588899', true]]) {
    try {
      await s.one(ck, [seq, epoch], safe);
      console.log('success');
    } catch (e) {
      if (e instanceof Ambiguous) console.log('ambiguous');
      else if (e instanceof Unavailable && e.message.includes('WARNING canceling wait for synchronous replication')) console.log('unavailable');
      else console.log(`unavailable: ${e.message}`);
    }
    console.log(await read.one("SELECT checkpoint FROM lease.my_leases('clients', 'sr-node', 'sr-node')"));
  }
  s.close(); read.close();
})();
EOF
EX_SR_URL="postgresql://clients_worker@127.0.0.1:$EX_PORT/$SR_DB"
elixir -pa "$EX_EBIN" -e '
alias PgLease.Session
connect = PgLease.Pgsql.connector(hd(System.argv()))
s = connect.("sr-ex", settings: [synchronous_commit: "on"])
read = connect.("sr-ex-read", [])
epoch = Session.one(read, "SELECT lease_epoch::text FROM lease.my_leases($1, $2, $3)", ["clients", "sr-ex", "sr-ex"])
ck = "SELECT lease.update_checkpoint($1, $2, $3, $4, $5, 0, $6::bigint)::text"
for {seq, safe} <- [{"49590338271490256608559692538361571095921575989136588898", false},
                    {"49590338271490256608559692538361571095921575989136588899", true}] do
  try do
    Session.one(s, ck, ["clients", "sr-ex", "s1", "sr-ex", seq, epoch], repeat_safe: safe)
    IO.puts("success")
  rescue
    Session.Ambiguous -> IO.puts("ambiguous")
    e in Session.Unavailable -> IO.puts("unavailable" <> if(e.message =~ ~r/WARNING canceling wait for synchronous replication|a notice came/, do: "", else: ": " <> e.message))
  end
  # p1_pgsql raises on the WARNING before the backend has finished its
  # commit, so the read may come first: it looks again for up to a second
  IO.puts(Enum.reduce_while(1..20, nil, fn _, _ ->
    v = Session.one(read, "SELECT checkpoint FROM lease.my_leases($1, $2, $3)", ["clients", "sr-ex", "sr-ex"])
    if v == seq, do: {:halt, v}, else: (Process.sleep(50); {:cont, v})
  end))
end' "$EX_SR_URL" >"$SR_OUT/ex" 2>&1
for c in py node ex; do
    printf '%s\n' ambiguous 49590338271490256608559692538361571095921575989136588898 \
        unavailable 49590338271490256608559692538361571095921575989136588899 |
        diff - <(grep -E '^(success|ambiguous|unavailable.*|[0-9]+)$' "$SR_OUT/$c") >/dev/null
    ok_show $? "sync-rep ($c): a checkpoint whose commit's sync-rep wait was cancelled is ambiguous (not safe to repeat) or, repeated, unavailable after the rules' tries; written locally each time" \
        "$SR_OUT/$c"
done

# 2. Each client's transactional worker, its batches committing synchronously.
declare -A SRP
for w in py-sr node-sr ex-sr; do
    case $w in
        py-*) TX_WORKER_SYNCHRONOUS=1 $PY test/clients/tx_worker.py "$sr_wdsn" clients sr-tx "$w" "$SR_OUT" 3 2>"$SR_OUT/$w.stderr" & ;;
        node-*) TX_WORKER_SYNCHRONOUS=1 $NODE test/clients/tx_worker.js "$sr_wdsn" clients sr-tx "$w" "$SR_OUT" 3 2>"$SR_OUT/$w.stderr" & ;;
        ex-*) TX_WORKER_SYNCHRONOUS=1 PG_LEASE_JOURNAL_DIR=$SR_OUT elixir --erl "-logger level warning" -pa "$EX_EBIN" \
                  -r test/clients/journaled.exs test/clients/tx_worker.exs "$EX_SR_URL" clients sr-tx "$w" 3 >"$SR_OUT/$w.stderr" 2>&1 & ;;
    esac
    SRP[$w]=$!
done
sleep 8
for w in py-sr node-sr ex-sr; do kill -TERM "${SRP[$w]}"; done
sr_stopped=0
for w in py-sr node-sr ex-sr; do wait "${SRP[$w]}" && sr_stopped=$((sr_stopped + 1)); done
kill "$sr_cancel"; wait "$sr_cancel" 2>/dev/null
"$PSQL" -X -q -d $SR_DB -c "ALTER SYSTEM RESET synchronous_standby_names" -c "SELECT pg_reload_conf()" >/dev/null
$PY - "$SR_OUT" "$sr_adsn" <<'EOF'
import collections, glob, json, os, sys
import psycopg2
out, dsn = sys.argv[1:3]
cur = psycopg2.connect(dsn).cursor()
cur.execute("SELECT shard_id, checkpoint::int FROM lease.shard_leases WHERE stream_name = 'sr-tx' AND checkpoint <> 'TRIM_HORIZON'")
ckpt = dict(cur.fetchall())
cur.execute("SELECT shard_id, seq, count(*) FROM public.tx_out GROUP BY 1, 2")
rows = {(s, q): n for s, q, n in cur.fetchall()}
exact = all(rows.get((s, q)) == 1 for s, c in ckpt.items() for q in range(1, c + 1)) and \
    not [k for k in rows if k[1] > ckpt.get(k[0], 0)] and all(n == 1 for n in rows.values())
bad = []
for w in ("py-sr", "node-sr", "ex-sr"):
    j = [json.loads(l) for l in open(os.path.join(out, w + ".journal")) if l.endswith("\n")]
    unknown = [e for e in j if e["ev"] == "tx_failed" and e.get("unknown")]
    resolved = [e for e in j if e["ev"] == "tx_resolved" and e.get("committed")]
    acked = [e for e in j if e["ev"] == "checkpoint" and e.get("ok") and e.get("tx")]
    print("# sync-rep: %s: %d COMMITs cancelled in their sync-rep wait (unknown outcome), %d of them resolved as"
          " committed from my_leases, %d acknowledged" % (w, len(unknown), len(resolved), len(acked)))
    if not unknown or not resolved or acked:
        bad.append(w)
print("# sync-rep: cancelled waits: %s; output exactly once up to each checkpoint: %s (%s)"
      % (open(os.path.join(out, "cancelled")).read().strip(), exact, ckpt))
sys.exit(1 if bad or not exact or not ckpt else 0)
EOF
ok $? "sync-rep: a batch's COMMIT whose sync-rep wait was cancelled is an unknown outcome to the Python, Node and Elixir workers (none counted acknowledged), resolved from my_leases; the output exactly once"
[ "$sr_stopped" -eq 3 ]
ok $? "sync-rep: the three transactional workers stopped gracefully on SIGTERM"
