# shellcheck shell=bash
# Sourced by test/clients/run.sh (suite clients):
#   1. an unexpected exception (the processor's own) stops the Python and the
#      Node worker, which release every lease they hold at once (not left to
#      expire), having checkpointed the batches processed before it, and
#      run() raises / rejects with that exception (the Elixir worker's is an
#      ExUnit test: test/clients/elixir.sh);
#   2. INFO logging is the same set of events in every client, the Python
#      client's: the example workers of Python, Node, Elixir, Java and Go, each alone on
#      a stream of its own (a shard that ends, two that do not), log at INFO
#      only lines of the Python client's kinds (took, stopped processing,
#      released, created the lease of, is no longer listed), and the same kinds.
# Uses PY, NODE, PSQL, DB, OUT, WORKER_DSN, EX_EBIN, EX_DSN, LEASE_SECONDS, ok
# and start_worker (test/clients/fleet.sh) of run.sh.
FOUT=$OUT/failures && mkdir -p "$FOUT"
"$PSQL" -X -q -v ON_ERROR_STOP=1 -d $DB >/dev/null <<'SQL'
SELECT lease.create_lease('clients', 'boom-' || c, 's' || i) FROM unnest(ARRAY['py', 'node']) AS c, generate_series(1, 3) AS i;
SELECT lease.create_lease('clients', 'info-' || c, s)
  FROM unnest(ARRAY['py', 'node', 'ex', 'java', 'go']) AS c, unnest(ARRAY['a', 'b', 'c-end8']) AS s;
SQL

# 1. The processor raises on the batch starting at record 11 of any shard.
$PY - "$WORKER_DSN" <<'EOF' >"$FOUT/boom-py" 2>&1
import sys
sys.path.insert(0, "clients/python")
from pg_lease import RecordProcessor, Worker
class Boom(RecordProcessor):
    def __init__(self):
        self.at, self.shut = {}, []
    def initialize(self, shard, checkpoint):
        self.at[shard] = 0 if checkpoint == "TRIM_HORIZON" else int(checkpoint)
    def process(self, shard, cursor=None):
        if self.at[shard] + 1 == 11:
            raise RuntimeError("the processor failed on " + shard)
        self.at[shard] += 5
        return str(self.at[shard])
    def shutdown(self, shard, reason):
        self.shut.append(reason)
p = Boom()
w = Worker(sys.argv[1], "clients", "boom-py", "py-boom", p, lease_duration=3)
try:
    w.run()
    print("run returned")
except RuntimeError as e:
    print("raised: %s; shut down: %s" % (e, sorted(p.shut)))
EOF
$NODE - "$WORKER_DSN" <<'EOF' >"$FOUT/boom-node" 2>&1
const { RecordProcessor, Worker, consoleLogger } = require('./clients/node/pg_lease');
class Boom extends RecordProcessor {
  constructor() { super(); this.at = new Map(); this.shut = []; }
  initialize(shard, checkpoint) { this.at.set(shard, checkpoint === 'TRIM_HORIZON' ? 0 : Number(checkpoint)); }
  process(shard) {
    if (this.at.get(shard) + 1 === 11) throw new Error(`the processor failed on ${shard}`);
    this.at.set(shard, this.at.get(shard) + 5);
    return String(this.at.get(shard));
  }
  shutdown(shard, reason) { this.shut.push(reason); }
}
const p = new Boom();
new Worker(process.argv[2], 'clients', 'boom-node', 'node-boom', p, { leaseDuration: 3, logger: consoleLogger('error') }).run()
  .then(() => console.log('run returned'), (e) => console.log(`raised: ${e.message}; shut down: ${p.shut.sort()}`));
EOF
for c in py node; do
    state=$("$PSQL" -X -qAt -d $DB -c "SELECT count(*) FILTER (WHERE lease_owner IS NULL) || ' of ' || count(*) || ' released, '
                                              || string_agg(checkpoint, ',' ORDER BY shard_id)
                                         FROM lease.shard_leases WHERE stream_name = 'boom-$c'")
    grep -q '^raised: the processor failed on s[1-3]; shut down: .*worker stopped' "$FOUT/boom-$c" && [ "$state" = "3 of 3 released, 10,10,10" ]
    ok_show $? "$c: an unexpected exception of the processor stops the worker and is raised; it released every lease at once ($state; $(tail -n 1 "$FOUT/boom-$c"))" \
        "$FOUT/boom-$c"
done

# 2. INFO logging.
IOUT=$FOUT/info && mkdir -p "$IOUT"
for w in py-info node-info ex-info go-info; do
    OUT=$IOUT PG_LEASE_LOG_LEVEL=INFO EX_LOG_LEVEL=info GO_LOG_LEVEL=info start_worker "$w" "info-${w%-info}"
done
# java-*: the Java example worker, its logger org.pglease at INFO
sed 's/^org.pglease.level = .*/org.pglease.level = INFO/' test/clients/java-logging.properties >"$IOUT/java-logging.properties"
$JAVA -Djava.util.logging.config.file="$IOUT/java-logging.properties" -cp "$JAVA_CP" \
    ExampleWorker "$WORKER_DSN" clients info-java java-info "$IOUT" "$LEASE_SECONDS" 2>"$IOUT/java-info.stderr" &
PIDS[java-info]=$!
# until each has closed its ended shard (a BEAM is slow to start on a busy machine), then 2 s more
for w in py-info node-info ex-info java-info go-info; do
    for _ in $(seq 1 80); do grep -qs '"closed"' "$IOUT/$w.journal" && break; sleep 0.25; done
done
sleep 2
for w in py-info node-info ex-info java-info go-info; do kill -TERM "${PIDS[$w]}"; done
for w in py-info node-info ex-info java-info go-info; do wait "${PIDS[$w]}"; done
$PY - "$IOUT" <<'EOF'
import re, sys
# the Python client's INFO events, the reference set
KINDS = [r"took SHARD \(epoch N\)", r"stopped processing SHARD: [a-z ]+ \([^)]+\)", r"released SHARD",
         r"created the lease of SHARD \(shard discovery\)", r"transactions of \S+ run on .+",
         r"SHARD is no longer listed \(its lease is not ended: a worker ends it at its end\)"]
seen, bad = {}, []
for c in ("py", "node", "ex", "java", "go"):
    # "... INFO pg_lease: MSG", "[info] pg_lease: MSG", Java's "... INFO org.pglease: MSG"; Go's: "pglease: DATE TIME INFO MSG"
    info = re.compile(r"(?:(?: INFO |\[info\] )(?:pg_lease|org\.pglease): |^pglease: \S+ \S+ INFO )(.*)")
    lines = [l for l in open("%s/%s-info.stderr" % (sys.argv[1], c)) if info.search(l)]
    kinds = set()
    for line in lines:
        msg = info.search(line).group(1).strip()
        msg = re.sub(r"\b(a|b|c-end8)\b", "SHARD", msg.replace("%s-info: " % c, "", 1))
        msg = re.sub(r"[0-9]+", "N", msg)
        kind = next((k for k in KINDS if re.fullmatch(k, msg)), None)
        if kind is None:
            bad.append("%s: %s" % (c, line.strip()))
        kinds.add(msg)
    seen[c] = kinds
    print("# INFO %s: %d lines, %s" % (c, len(lines), sorted(kinds)))
for line in bad:
    print("# not one of the Python client's INFO events: %s" % line)
# the Java worker's lines after SIGTERM (its "released" at the stop) may be lost: java.util.logging
# closes its handlers in a shutdown hook of its own (docs/clients/java.md, "Logging and failures")
java = seen["java"] in (seen["py"], seen["py"] - {"released SHARD"})
sys.exit(0 if not bad and seen["py"] and seen["py"] == seen["node"] == seen["ex"] == seen["go"] and java else 1)
EOF
ok_show $? "INFO logging: the Python, Node, Elixir, Java and Go example workers log the same INFO events, the Python client's kinds only" \
    "$IOUT/java-info.stderr"
