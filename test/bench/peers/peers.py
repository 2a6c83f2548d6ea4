#!/usr/bin/python3
"""pg_lease side by side with etcd, ZooKeeper and Redis.

    peers.py bench [--rounds N] [--seconds S] [--out DIR]     make bench, section 8
    peers.py test                                              make test, suite `peers`
    peers.py worker CONFIG_FILE                                one worker process (internal)

One worker protocol on four back ends (take a free or expired lease, renew
every lease held, checkpoint with fencing, release), all in this one Python
file so that every back end pays the same client overhead (one process per
worker, one round trip per step where the peer allows it).  Each server is
started here, on 127.0.0.1 on a free port, in a temporary directory, and
killed by its PID on every exit path; the packaged services are never used.
docs/comparison.md describes the settings, the figures and the checker.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

APP = "peers"
PY = "/usr/bin/python3"
HERE = os.path.abspath(__file__)
CLK = os.sysconf("SC_CLK_TCK")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, proc, what, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError("%s exited while starting" % what)
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("%s did not listen on %d" % (what, port))


def proc_stat(pid):
    """(ppid, utime+stime+cutime+cstime in seconds) of a process."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[1]), sum(int(x) for x in fields[11:15]) / CLK


def smaps_kib(pid, fields):
    """The sum of the given smaps_rollup fields of a process, in KiB."""
    total = 0
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                if line.split(":")[0] in fields:
                    total += int(line.split()[1])
    except OSError:
        pass
    return total


def pss_kib(pid):
    """Proportional set size: private pages plus a share of each shared one
    (for PostgreSQL, of the shared buffers the process touched)."""
    return smaps_kib(pid, ("Pss",))


def uss_kib(pid):
    """The process's own memory: the private pages (Private_Clean,
    Private_Dirty) of its mappings that are not shared ones.  A shared
    mapping's page that only this process has touched also counts as
    private in smaps: PostgreSQL's shared buffers would then show up in the
    USS of the first backend that read them, so shared mappings (VmFlags
    "sh") are left out."""
    total = own = 0
    try:
        with open("/proc/%d/smaps" % pid) as f:
            for line in f:
                field = line.split()
                if not field:
                    continue
                if field[0] in ("Private_Clean:", "Private_Dirty:"):
                    own += int(field[1])
                elif field[0] == "VmFlags:":
                    if "sh" not in field[1:]:
                        total += own
                    own = 0
    except OSError:
        pass
    return total


# -- servers -------------------------------------------------------------------
# Each: start(), kill9() (SIGKILL, or PostgreSQL's immediate stop), restart()
# on the same data, stop(), pids() (every process of the server, for CPU and
# memory), and client_config() (what a worker needs to connect).

class Server:
    name = "?"

    def __init__(self, durable, tmp, lease_s):
        self.durable, self.lease_s = durable, lease_s
        self.dir = tempfile.mkdtemp(prefix="%s." % self.name, dir=tmp)
        self.proc = None
        self.port = free_port()

    def pids(self):
        return [self.proc.pid] if self.proc and self.proc.poll() is None else []

    def kill9(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def restart(self):
        self.kill9()
        self.start()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill9()

    def cpu(self):
        total = 0.0
        for pid in self.pids():
            try:
                total += proc_stat(pid)[1]
            except OSError:
                pass
        return total

    def pss(self):
        return sum(pss_kib(p) for p in self.pids())

    def uss(self):
        return sum(uss_kib(p) for p in self.pids())

    def client_config(self):
        """What a worker connects with (a peer on loopback: its port)."""
        return {"port": self.port}

    def wait_ready(self, check):
        """Waits for the port, then for check() to succeed (etcd opens its
        port before the member is ready, Redis loads its AOF first)."""
        wait_port(self.port, self.proc, self.name)
        end = time.time() + 30
        while True:
            try:
                check()
                return
            except Exception:
                if time.time() > end:
                    raise
                time.sleep(0.2)

    def popen(self, argv):
        log = open(os.path.join(self.dir, "server.log"), "ab")
        self.proc = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                     cwd=self.dir, start_new_session=True)


class Etcd(Server):
    name = "etcd"
    settings = {True: "etcd 3.4 defaults (fsync of the WAL before every answer)",
                False: None}   # etcd 3.4 has no switch for it (--unsafe-no-fsync came in 3.5)

    def start(self):
        peer = getattr(self, "peer_port", None) or free_port()
        self.peer_port = peer
        self.popen(["etcd", "--name", "bench", "--data-dir", os.path.join(self.dir, "data"),
                    "--listen-client-urls", "http://127.0.0.1:%d" % self.port,
                    "--advertise-client-urls", "http://127.0.0.1:%d" % self.port,
                    "--listen-peer-urls", "http://127.0.0.1:%d" % peer,
                    "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % peer,
                    "--initial-cluster", "bench=http://127.0.0.1:%d" % peer,
                    "--log-level", "error"])
        import etcd3
        self.wait_ready(lambda: etcd3.client(host="127.0.0.1", port=self.port, timeout=2).status())


class ZooKeeper(Server):
    name = "zookeeper"
    settings = {True: "zoo.cfg: forceSync=yes (the default: the transaction log is fsynced before an answer), tickTime=1000",
                False: "zoo.cfg: forceSync=no, tickTime=1000"}

    def start(self):
        cfg = os.path.join(self.dir, "zoo.cfg")
        with open(cfg, "w") as f:
            f.write("tickTime=1000\ndataDir=%s\nclientPort=%d\nclientPortAddress=127.0.0.1\n"
                    "admin.enableServer=false\nmaxClientCnxns=0\nforceSync=%s\n"
                    "minSessionTimeout=2000\nmaxSessionTimeout=60000\n"
                    % (os.path.join(self.dir, "data"), self.port, "yes" if self.durable else "no"))
        self.popen(["java", "-Xmx512m", "-XX:+UseSerialGC", "-Dzookeeper.jmx.log4j.disable=true",
                    "-cp", "/usr/share/java/zookeeper.jar",
                    "org.apache.zookeeper.server.ZooKeeperServerMain", cfg])
        import logging
        from kazoo.client import KazooClient
        logging.getLogger("kazoo").setLevel(logging.CRITICAL)

        def session():
            z = KazooClient(hosts="127.0.0.1:%d" % self.port)
            z.start(timeout=5)
            z.stop()
            z.close()
        self.wait_ready(session)


class Redis(Server):
    name = "redis"
    settings = {True: "appendonly yes, appendfsync always (AOF fsynced before an answer), save ''",
                False: "appendonly yes, appendfsync no, save ''"}

    def start(self):
        self.popen(["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--dir", self.dir,
                    "--appendonly", "yes", "--appendfsync", "always" if self.durable else "no",
                    "--save", "", "--daemonize", "no", "--logfile", ""])
        import redis
        self.wait_ready(lambda: redis.Redis(host="127.0.0.1", port=self.port).ping())   # after the AOF is loaded


class Postgres(Server):
    name = "pg_lease"
    settings = {True: "fsync=on, synchronous_commit=on (the defaults: WAL flushed before the commit answers)",
                False: "fsync=off, synchronous_commit=on (WAL written to the kernel before the answer, never fsynced)"}

    def __init__(self, *a):
        super().__init__(*a)
        self.bindir = os.environ["PG_BINDIR"]
        os.chmod(self.dir, 0o755)
        self.as_owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
        self.data = os.path.join(self.dir, "data")
        subprocess.run(self.as_owner + [os.path.join(self.bindir, "initdb"), "-D", self.data, "-U", "postgres",
                                        "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"],
                       check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(self.data, "postgresql.conf"), "a") as f:
            f.write("listen_addresses = '127.0.0.1'\nport = %d\nunix_socket_directories = '%s'\n"
                    "fsync = %s\nsynchronous_commit = on\nmax_connections = 100\n"
                    % (self.port, self.dir, "on" if self.durable else "off"))

    def start(self):
        subprocess.run(self.as_owner + [os.path.join(self.bindir, "pg_ctl"), "-D", self.data, "-l",
                                        os.path.join(self.dir, "server.log"), "-w", "-t", "60", "start"],
                       check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(self.data, "postmaster.pid")) as f:
            self.pid = int(f.readline())
        if not getattr(self, "installed", False):
            import psycopg2
            c = psycopg2.connect(**self.client_config())
            c.autocommit = True
            c.cursor().execute("CREATE EXTENSION pg_lease")
            c.close()
            self.installed = True

    def pids(self):
        """The postmaster and every child (backends, walwriter, checkpointer, ...)."""
        if not os.path.exists("/proc/%d" % self.pid):
            return []
        out = [self.pid]
        for p in os.listdir("/proc"):
            if p.isdigit():
                try:
                    if proc_stat(int(p))[0] == self.pid:
                        out.append(int(p))
                except OSError:
                    pass
        return out

    def pg_ctl_stop(self, mode):
        subprocess.run(self.as_owner + [os.path.join(self.bindir, "pg_ctl"), "-D", self.data, "-m", mode,
                                        "-w", "-t", "60", "stop"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)

    def kill9(self):
        self.pg_ctl_stop("immediate")

    def stop(self):
        if os.path.exists(os.path.join(self.data, "postmaster.pid")):
            self.pg_ctl_stop("fast")

    def client_config(self):
        return {"host": "127.0.0.1", "port": self.port, "user": "postgres", "dbname": "postgres"}


SERVERS = {"pg_lease": Postgres, "etcd": Etcd, "zookeeper": ZooKeeper, "redis": Redis}


# -- clients: the one worker protocol -------------------------------------------
# take(n) -> {shard: (token, checkpoint)} of leases newly taken (free or
# expired, up to n); renew() -> set of shards still held; checkpoint(shard,
# value) -> True when written (fenced by the token of the take);
# checkpoints([(shard, value), ...]) -> {shard: written}, the same checkpoints
# in one round trip (each back end's own batching: pg_lease's
# update_checkpoints, an etcd transaction with a compare per shard, a
# ZooKeeper multi, a Redis pipeline); release(s); read(shard) -> the stored
# checkpoint (int).  A refused checkpoint or a lease missing from a renewal
# drops the shard.  reset() reconnects after an error.

class Client:
    def __init__(self, cfg, owner, lease_s, shards):
        self.cfg, self.owner, self.lease_s, self.shards = cfg, owner, lease_s, shards
        self.stream = cfg["stream"]   # shard ids start with "<stream>-" on every back end
        self.held = {}   # shard -> token
        self.connect()

    def order(self):
        """The shards, starting at a place of this worker's own: workers that
        start together do not all race for the same free leases."""
        import zlib
        k = self.cfg.get("offset", zlib.crc32(self.owner.encode())) % max(len(self.shards), 1)
        return self.shards[k:] + self.shards[:k]

    def reset(self):
        try:
            self.close()
        except Exception:
            pass
        self.connect()

    def checkpoint_each(self, batch):
        """The batch as single checkpoints, one round trip each."""
        return {s: self.checkpoint(s, v) for s, v in batch}


class PgLease(Client):
    def connect(self):
        import psycopg2
        self.conn = psycopg2.connect(connect_timeout=5, **self.cfg["server"])
        self.conn.autocommit = True
        self.cur = self.conn.cursor()
        self.interval = "%g seconds" % self.lease_s
        # the last renew_leases list {shard: epoch} and the leases_version of
        # the heartbeat sent before it (None: list at the next renewal)
        self.listed, self.version = None, None

    def close(self):
        self.conn.close()

    def setup(self):
        self.cur.execute("SELECT count(lease.create_lease(%s, %s, s, '{}', '0')) FROM unnest(%s::text[]) s",
                         (APP, self.stream, self.shards))
        self.cur.execute("VACUUM ANALYZE lease.shard_leases")

    def take(self, n):
        # max_steal 0: this protocol has no handoffs (a holder asked to hand
        # over would not, and the asker would claim the lease at the deadline)
        self.cur.execute("SELECT shard_id, lease_epoch FROM lease.take_leases(%s, %s, %s, %s::interval, %s, 0)"
                         " WHERE action = 'taken'", (APP, self.stream, self.owner, self.interval, len(self.held) + n))
        got = dict(self.cur.fetchall())
        out = {}
        if got:
            self.listed = None   # the next renewal lists again
            self.cur.execute("SELECT shard_id, checkpoint FROM lease.my_leases(%s, %s, %s)",
                             (APP, self.stream, self.owner))
            ckpt = dict(self.cur.fetchall())
            for s, tok in got.items():
                self.held[s] = tok
                out[s] = (tok, int(ckpt[s]))
        return out

    def renew(self):
        # as the Python and Node workers renew (docs/client-rules.md, rule 5):
        # a heartbeat, one row written whatever the worker holds; renew_leases
        # lists the leases only when the heartbeat's leases_version moved since
        # the last list, or a handoff is pending
        key = (APP, self.stream, self.owner, self.interval)
        self.cur.execute("SELECT leases, leases_version, handoffs_pending"
                         "  FROM lease.heartbeat(%s, %s, %s, %s::interval)", key)
        count, version, pending = self.cur.fetchone()
        if (self.listed is None or version is None or version != self.version or pending
                or count != len(self.listed)):
            self.cur.execute("SELECT shard_id, lease_epoch FROM lease.renew_leases(%s, %s, %s, %s::interval)", key)
            self.listed, self.version = dict(self.cur.fetchall()), version
        self.held = {s: t for s, t in self.held.items() if self.listed.get(s) == t}
        return set(self.held)

    def checkpoint(self, shard, value):
        self.cur.execute("SELECT lease.update_checkpoint(%s, %s, %s, %s, %s, 0, %s)",
                         (APP, self.stream, shard, self.owner, str(value), self.held[shard]))
        return self.cur.fetchone()[0]

    def checkpoints(self, batch):
        # one statement, one commit: each shard judged as the single call judges it
        self.cur.execute("SELECT shard_id, ok FROM lease.update_checkpoints(%s, %s, %s, %s::text[], %s::text[],"
                         " %s::bigint[], %s::bigint[])",
                         (APP, self.stream, self.owner, [s for s, _ in batch], [str(v) for _, v in batch],
                          [0] * len(batch), [self.held[s] for s, _ in batch]))
        return dict(self.cur.fetchall())

    def release(self, shard):
        self.cur.execute("SELECT lease.release_lease(%s, %s, %s, %s)", (APP, self.stream, shard, self.owner))
        self.held.pop(shard, None)

    def read(self, shard):
        self.cur.execute("SELECT checkpoint FROM lease.shard_leases WHERE app_name = %s AND stream_name = %s"
                         " AND shard_id = %s", (APP, self.stream, shard))
        return int(self.cur.fetchone()[0])


class PgLeaseUnguarded(PgLease):
    """The negative control: the checkpoint as a plain UPDATE with no owner or
    epoch predicate.  The checker must fail it."""

    def checkpoint(self, shard, value):
        self.cur.execute("UPDATE lease.shard_leases SET checkpoint = %s WHERE app_name = %s AND stream_name = %s"
                         " AND shard_id = %s", (str(value), APP, self.stream, shard))
        return self.cur.rowcount == 1


class EtcdClient(Client):
    """A lease per worker kept alive over one open LeaseKeepAlive stream (the
    library's refresh() opens a new stream per call, ~20x slower: the
    library's own gRPC stub is used instead); /owner/<shard> attached to the
    lease; the fencing token is its create_revision."""

    def connect(self):
        import queue
        import etcd3
        from etcd3.etcdrpc import rpc_pb2
        self.pb = rpc_pb2
        self.c = etcd3.client(host="127.0.0.1", port=self.cfg["server"]["port"], timeout=5)
        self.lease = self.c.lease(int(round(self.lease_s)))
        self.renewed = time.time()
        self.q = queue.Queue()

        def requests(q=self.q):
            while True:
                r = q.get()
                if r is None:
                    return
                yield r
        self.stream = self.c.leasestub.LeaseKeepAlive(requests(), metadata=self.c.metadata)
        self.held = {}   # a new etcd lease: nothing held under it

    def close(self):
        self.q.put(None)
        self.c.close()

    def setup(self):
        for s in self.shards:
            self.c.put("/ckpt/" + s, "0")

    def take(self, n):
        t = self.c.transactions
        out = {}
        owners = {m.key.decode()[7:] for _, m in self.c.get_prefix("/owner/%s-" % self.stream, keys_only=True)}
        for s in self.order():
            if len(out) >= n:
                break
            if s in owners or s in self.held:
                continue
            if time.time() - self.renewed > self.lease_s / 4:
                self.renew()   # a long take must not let the lease expire
            ok, resp = self.c.transaction(compare=[t.version("/owner/" + s) == 0],
                                          success=[t.put("/owner/" + s, self.owner, lease=self.lease.id),
                                                   t.get("/owner/" + s), t.get("/ckpt/" + s)], failure=[])
            if ok:
                tok = resp[1][0][1].create_revision
                self.held[s] = tok
                out[s] = (tok, int(resp[2][0][0]))
            else:   # another worker was first: look at the owners again
                owners = {m.key.decode()[7:] for _, m in self.c.get_prefix("/owner/%s-" % self.stream, keys_only=True)}
        return out

    def renew(self):
        self.renewed = time.time()
        self.q.put(self.pb.LeaseKeepAliveRequest(ID=self.lease.id))
        r = next(self.stream)
        if r.TTL <= 0:
            self.held = {}
        return set(self.held)

    def checkpoint(self, shard, value):
        t = self.c.transactions
        ok, _ = self.c.transaction(compare=[t.create("/owner/" + shard) == self.held[shard]],
                                   success=[t.put("/ckpt/" + shard, str(value))], failure=[])
        return ok

    def checkpoints(self, batch):
        # one transaction: N puts guarded by N compares.  It is all or
        # nothing, so when a compare fails the shards are written one by one
        # to find which are still held (never the case while measuring)
        t = self.c.transactions
        ok, _ = self.c.transaction(compare=[t.create("/owner/" + s) == self.held[s] for s, _ in batch],
                                   success=[t.put("/ckpt/" + s, str(v)) for s, v in batch], failure=[])
        return {s: True for s, _ in batch} if ok else self.checkpoint_each(batch)

    def release(self, shard):
        t = self.c.transactions
        self.c.transaction(compare=[t.create("/owner/" + shard) == self.held.pop(shard)],
                           success=[t.delete("/owner/" + shard)], failure=[])

    def read(self, shard):
        return int(self.c.get("/ckpt/" + shard)[0])


class ZkClient(Client):
    """An ephemeral /owner/<shard> per lease held, in a session whose timeout
    is the lease duration; /ckpt/<shard> is persistent.  Taking bumps the
    checkpoint node's version in the same multi (its new version is the
    fencing token); a checkpoint is a multi: check the owner node, setData on
    the checkpoint node at the token's version."""

    def connect(self):
        import logging
        from kazoo.client import KazooClient, KazooState
        logging.getLogger("kazoo").setLevel(logging.CRITICAL)   # its reconnect chatter on stderr
        self.z = KazooClient(hosts="127.0.0.1:%d" % self.cfg["server"]["port"], timeout=self.lease_s,
                             connection_retry={"max_tries": -1, "delay": 0.05, "max_delay": 0.5})
        self.lost = False

        def listen(state):
            if state == KazooState.LOST:
                self.lost = True
        self.z.add_listener(listen)
        self.z.start(timeout=15)
        self.held = {}

    def close(self):
        self.z.stop()
        self.z.close()

    def setup(self):
        self.z.ensure_path("/owner")
        for s in self.shards:
            self.z.create("/ckpt/" + s, b"0", makepath=True)

    def take(self, n):
        out = {}
        owners = set(self.z.get_children("/owner"))
        for s in self.order():
            if len(out) >= n:
                break
            if s in owners or s in self.held:
                continue
            data, st = self.z.get("/ckpt/" + s)
            tx = self.z.transaction()
            tx.create("/owner/" + s, self.owner.encode(), ephemeral=True)
            tx.set_data("/ckpt/" + s, data, version=st.version)
            res = tx.commit()
            if not any(isinstance(r, Exception) for r in res):   # else another worker was first
                self.held[s] = st.version + 1
                out[s] = (st.version + 1, int(data))
        return out

    def renew(self):
        # any request touches the session on the server; the session is the lease
        self.z.exists("/owner")
        if self.lost:
            self.lost = False
            self.held = {}
        return set(self.held)

    def checkpoint(self, shard, value):
        tx = self.z.transaction()
        tx.check("/owner/" + shard, 0)
        tx.set_data("/ckpt/" + shard, str(value).encode(), version=self.held[shard])
        res = tx.commit()
        if any(isinstance(r, Exception) for r in res):
            return False
        self.held[shard] += 1
        return True

    def checkpoints(self, batch):
        # one multi: per shard the owner check and the versioned setData.
        # All or nothing, as etcd's transaction: on a failure the shards are
        # written one by one (never the case while measuring)
        tx = self.z.transaction()
        for s, v in batch:
            tx.check("/owner/" + s, 0)
            tx.set_data("/ckpt/" + s, str(v).encode(), version=self.held[s])
        res = tx.commit()
        if any(isinstance(r, Exception) for r in res):
            return self.checkpoint_each(batch)
        for s, _ in batch:
            self.held[s] += 1
        return {s: True for s, _ in batch}

    def release(self, shard):
        tx = self.z.transaction()
        tx.check("/ckpt/" + shard, self.held.pop(shard))
        tx.delete("/owner/" + shard)
        tx.commit()

    def read(self, shard):
        return int(self.z.get("/ckpt/" + shard)[0])


REDIS_TAKE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {redis.call('INCR', KEYS[2]), redis.call('GET', KEYS[3])}
end
return false"""
REDIS_RENEW = """
local held = {}
for i, k in ipairs(KEYS) do
  if redis.call('GET', k) == ARGV[1] then redis.call('PEXPIRE', k, ARGV[2]); held[#held + 1] = i end
end
return held"""
REDIS_CHECKPOINT = """
if redis.call('GET', KEYS[1]) == ARGV[1] and redis.call('GET', KEYS[2]) == ARGV[2] then
  redis.call('SET', KEYS[3], ARGV[3]); return 1
end
return 0"""
REDIS_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0"""


class RedisClient(Client):
    """owner:<shard> by SET NX PX; fence:<shard> an INCR counter bumped by
    every take (the token); the checkpoint a Lua script comparing the owner
    and the counter."""

    def connect(self):
        import redis
        self.r = redis.Redis(host="127.0.0.1", port=self.cfg["server"]["port"], socket_timeout=5)
        self.take_s = self.r.register_script(REDIS_TAKE)
        self.renew_s = self.r.register_script(REDIS_RENEW)
        self.ckpt_s = self.r.register_script(REDIS_CHECKPOINT)
        self.release_s = self.r.register_script(REDIS_RELEASE)

    def close(self):
        self.r.close()

    def setup(self):
        self.r.mset({"ckpt:" + s: "0" for s in self.shards})

    def take(self, n):
        out = {}
        ms = int(self.lease_s * 1000)
        for s in self.order():
            if len(out) >= n:
                break
            if s in self.held:
                continue
            res = self.take_s(keys=["owner:" + s, "fence:" + s, "ckpt:" + s], args=[self.owner, ms])
            if res:
                self.held[s] = int(res[0])
                out[s] = (int(res[0]), int(res[1]))
        return out

    def renew(self):
        keys = sorted(self.held)
        if keys:
            idx = self.renew_s(keys=["owner:" + s for s in keys], args=[self.owner, int(self.lease_s * 1000)])
            still = {keys[i - 1] for i in idx}
            self.held = {s: t for s, t in self.held.items() if s in still}
        return set(self.held)

    def checkpoint(self, shard, value):
        return self.ckpt_s(keys=["owner:" + shard, "fence:" + shard, "ckpt:" + shard],
                           args=[self.owner, self.held[shard], value]) == 1

    def checkpoints(self, batch):
        # one pipeline (one round trip, no MULTI: each script judges its own
        # shard, as pg_lease's batch does); with appendfsync always the AOF
        # is fsynced once for the writes of one event-loop pass
        p = self.r.pipeline(transaction=False)
        for s, v in batch:
            self.ckpt_s(keys=["owner:" + s, "fence:" + s, "ckpt:" + s], args=[self.owner, self.held[s], v], client=p)
        return {s: r == 1 for (s, _), r in zip(batch, p.execute())}

    def release(self, shard):
        self.release_s(keys=["owner:" + shard], args=[self.owner])
        self.held.pop(shard, None)

    def read(self, shard):
        return int(self.r.get("ckpt:" + shard))


class RedisUnfenced(RedisClient):
    """A Redis lock without fencing (the usual pattern): the lock by SET NX PX,
    the checkpoint a plain SET by whoever believes it holds the lock."""

    def checkpoint(self, shard, value):
        return self.r.set("ckpt:" + shard, value) is True


CLIENTS = {"pg_lease": PgLease, "pg_lease-unguarded": PgLeaseUnguarded, "etcd": EtcdClient,
           "zookeeper": ZkClient, "redis": RedisClient, "redis-unfenced": RedisUnfenced}


# -- the worker process -------------------------------------------------------------

def worker(cfg):
    """Modes: 'ckpt' (take cfg.take leases, checkpoint them back to back for
    cfg.seconds from the driver's SIGUSR1), 'ckptb' (take cfg.take leases,
    checkpoint all of them in one batch, back to back; ops counts shard
    checkpoints), 'renew' (take every lease, renew back to back),
    'hold' (take, renew every lease/3, tell the driver after each renewal on
    stdout), 'take' (poll take every cfg.poll s, print each shard taken),
    'safety' (the fault run: take, renew, checkpoint; journal every answer)."""
    cls = CLIENTS[cfg["client"]]
    cl = cls(cfg, cfg["owner"], cfg["lease_s"], cfg["shards"])
    mode = cfg["mode"]
    out = sys.stdout
    if mode in ("ckpt", "ckptb", "renew"):
        got = take_all(cl, cfg["take"])
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
        print(json.dumps({"ready": True}), file=out, flush=True)
        signal.sigwait({signal.SIGUSR1})   # the driver starts every worker at once
        end = time.time() + cfg["seconds"]
        n = bad = 0
        shards = sorted(got)
        v = max(c for _, c in got.values())
        while time.time() < end:
            if mode == "ckpt":
                v += 1
                if not cl.checkpoint(shards[n % len(shards)], v):
                    bad += 1
            elif mode == "ckptb":
                v += 1
                done = cl.checkpoints([(sh, v) for sh in shards])
                bad += sum(1 for ok in done.values() if not ok)
                n += len(shards) - 1
            else:
                if len(cl.renew()) != len(shards):
                    bad += 1
            n += 1
        print(json.dumps({"ops": n, "refused": bad}), file=out, flush=True)
    elif mode == "hold":
        if cfg.get("wait"):   # connected: the driver measures, then starts the takes
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
            print("connected", file=out, flush=True)
            while signal.sigtimedwait({signal.SIGUSR1}, cfg["lease_s"] / 4) is None:
                cl.renew()   # an etcd lease or a ZooKeeper session must not expire meanwhile
        take_all(cl, cfg["take"])
        while True:
            cl.renew()
            print("renewed", file=out, flush=True)
            time.sleep(cfg["lease_s"] / 3)
    elif mode == "take":
        held = set()
        print("ready", file=out, flush=True)
        while True:
            for s in cl.take(len(cl.shards)):
                held.add(s)
                print("taken %s %.6f" % (s, time.time()), file=out, flush=True)
            cl.renew()   # keeps an etcd lease or a ZooKeeper session of its own alive
            time.sleep(cfg["poll"])
    elif mode == "safety":
        safety_worker(cl, cfg)


def take_all(cl, n):
    """Takes n leases, 20 at a time, renewing what it holds in between (a
    back end that fsyncs every take needs longer than a lease for 1,000)."""
    got = {}
    last = time.time()
    while len(got) < n:
        got.update(cl.take(min(20, n - len(got))))
        if time.time() - last > cl.lease_s / 4:
            cl.renew()
            last = time.time()
    return got


def safety_worker(cl, cfg):
    """The fault run's worker: journals (JSON lines) every acknowledged take,
    renewal and checkpoint with send and answer times.  Checks its local
    deadline before each checkpoint (as a real worker does); when the file
    cfg.pause_flag appears, it stops itself (SIGSTOP) right after that check,
    as a process paused by the OS or a GC pause would, and on SIGCONT sends
    cfg.stale_writes checkpoints with the token it had (the writes Kleppmann's
    fencing argument is about) before it looks at its lease again."""
    j = open(cfg["journal"], "a")
    d = cfg["lease_s"]

    def log(**e):
        j.write(json.dumps(e) + "\n")
        j.flush()
    log(ev="started", lease_s=d)
    values = {}        # shard -> last value written
    granted = {}       # shard -> send time of its last acknowledged take or renewal
    last_renew = 0.0
    paused = False
    end = time.time() + 600
    per = cfg["per_worker"]
    while time.time() < end and not os.path.exists(cfg["stop_flag"]):
        try:
            if cl.held and time.time() - last_renew > d / 4:
                sent = time.time()
                held = cl.renew()
                log(ev="renewed", sent=sent, ack=time.time(), shards={s: cl.held[s] for s in held})
                granted.update((s, sent) for s in held)
                last_renew = sent
            if len(cl.held) < per:
                sent = time.time()
                got = cl.take(per - len(cl.held))
                ack = time.time()
                for s, (tok, ck) in got.items():
                    log(ev="taken", shard=s, token=tok, checkpoint=ck, sent=sent, ack=ack)
                    values[s] = ck
                    granted[s] = sent
            for s in sorted(cl.held):
                if time.time() >= granted[s] + 0.75 * d:
                    continue   # the local deadline: renew before writing again
                if not paused and os.path.exists(cfg["pause_flag"]):
                    paused = True
                    log(ev="pausing", t=time.time())
                    os.kill(os.getpid(), signal.SIGSTOP)
                    log(ev="resumed", t=time.time())
                    for _ in range(cfg["stale_writes"]):
                        for s2 in sorted(cl.held):
                            write(cl, s2, values, log, stale=True)
                    break
                write(cl, s, values, log)
            time.sleep(cfg["think"])
        except Exception as e:   # the coordinator went away: reconnect, keep nothing
            log(ev="error", t=time.time(), what=repr(e)[:200])
            time.sleep(0.2)
            try:
                cl.reset()
            except Exception:
                pass
            cl.held = {}
            last_renew = 0.0
    j.close()


def write(cl, s, values, log, stale=False):
    v = values[s] + 1
    sent = time.time()
    try:
        ok = cl.checkpoint(s, v)
    except Exception as e:   # not acknowledged: ZooKeeper refuses an expired session's writes this way
        log(ev="ckpt_error", shard=s, value=v, sent=sent, what=repr(e)[:200], stale=stale)
        if stale:
            return
        raise
    log(ev="checkpoint", shard=s, value=v, token=cl.held.get(s), ok=bool(ok), sent=sent, ack=time.time(),
        stale=stale)
    if ok:
        values[s] = v
    else:
        cl.held.pop(s, None)


# -- the checker --------------------------------------------------------------------

def check(journals, final, lease_s):
    """One checker over what each back end ACKNOWLEDGED (journals: worker ->
    events; final: shard -> the checkpoint read at the end).  Returns
    (lost, two_owners, stale_accepted) as lists of examples."""
    takes, grants, acked = [], [], []
    for w, evs in journals.items():
        for e in evs:
            if e["ev"] == "taken":
                takes.append((e["ack"], e["sent"], w, e["shard"], e))
                grants.append((e["sent"], e["ack"], w, e["shard"], "take"))
            elif e["ev"] == "renewed":
                for s in e["shards"]:
                    grants.append((e["sent"], e["ack"], w, s, "renew"))
            elif e["ev"] == "checkpoint" and e["ok"]:
                acked.append((e["ack"], e["sent"], w, e["shard"], e["value"]))
    # lost: a take read a checkpoint behind one acknowledged before the take
    # was sent, or the end state is behind the last acknowledged checkpoint
    lost = []
    for tack, tsent, w, s, e in takes:
        before = max([v for a, _, _, s2, v in acked if s2 == s and a < tsent], default=0)
        if e["checkpoint"] < before:
            lost.append(("take read", w, s, e["checkpoint"], before))
    for s, v in final.items():
        last = max([(a, val) for a, _, _, s2, val in acked if s2 == s], default=(0, 0))[1]
        if v < last:
            lost.append(("end state", s, v, last))

    def last_take(w, s, before):
        return max([tsent for tack, tsent, w2, s2, _ in takes if w2 == w and s2 == s and tack < before], default=None)
    # two owners: B's take answered before a lease A was granted (sent after
    # its own take) could have expired, or A renewed a lease B had taken since
    two = []
    margin = 0.05
    for tack, tsent, b, s, _ in takes:
        for gsent, gack, a, s2, kind in grants:
            if s2 != s or a == b:
                continue
            if gack < tsent and tack < gsent + lease_s - margin:
                two.append((s, a, kind, round(gsent, 3), b, round(tack, 3)))
            elif kind == "renew" and gsent > tack:
                lt = last_take(a, s, gsent)
                if lt is not None and lt < tsent:
                    two.append((s, a, "renewed after", round(gsent, 3), b, round(tack, 3)))
    # stale: A's checkpoint acknowledged though sent after B's later take
    stale = []
    for aack, asent, a, s, v in acked:
        lt = last_take(a, s, asent)
        for tack, tsent, b, s2, _ in takes:
            if s2 == s and b != a and tack < asent and (lt is None or lt < tsent):
                stale.append((s, a, v, round(asent, 3), b, round(tack, 3)))
                break
    return lost, two, stale


# -- the driver ------------------------------------------------------------------------

class Driver:
    """Owns every process it starts (servers and workers) and ends them, by
    PID, on every exit path (atexit, SIGTERM, SIGINT)."""

    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix="pg_lease-peers.")
        os.chmod(self.tmp, 0o755)
        self.servers, self.workers = [], []
        self.bufs = {}
        self.seq = 0
        import atexit
        atexit.register(self.cleanup)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, lambda *_: sys.exit(1))

    def cleanup(self):
        for p in self.workers:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait()
        for s in self.servers:
            try:
                s.stop()
            except Exception:
                pass
            s.kill9()
        if not os.environ.get("PEERS_KEEP"):
            shutil.rmtree(self.tmp, ignore_errors=True)

    def server(self, backend, durable, lease_s=10):
        s = SERVERS[backend](durable, self.tmp, lease_s)
        self.servers.append(s)
        s.start()
        return s

    def end_server(self, s):
        s.stop()
        s.kill9()
        self.servers.remove(s)

    def stream(self, what):
        self.seq += 1
        return "%s%d" % (what, self.seq)

    def setup(self, server, client, stream, n):
        shards = ["%s-%d" % (stream, i) for i in range(n)]
        cfg = {"server": server.client_config(), "stream": stream}
        c = CLIENTS[client](cfg, "driver", 60, shards)
        c.setup()
        return c, shards

    def spawn(self, server, client, stream, shards, settings=None, **kw):
        conf = server.client_config()
        if settings:
            conf["options"] = " ".join("-c %s=%s" % kv for kv in settings.items())
        cfg = dict(kw, server=conf, client=client, stream=stream, shards=shards)
        cfg.setdefault("owner", "w%d" % len(self.workers))
        fd, path = tempfile.mkstemp(prefix="worker.", suffix=".json", dir=self.tmp)
        with os.fdopen(fd, "w") as f:   # 10,000 shard ids are too long for an argument
            json.dump(cfg, f)
        p = subprocess.Popen([PY, HERE, "worker", path], stdout=subprocess.PIPE, bufsize=0,
                             stderr=open(os.path.join(self.tmp, "workers.err"), "a"))
        self.workers.append(p)
        return p

    def reap(self, p):
        if p.poll() is None:
            p.send_signal(signal.SIGCONT)
            p.send_signal(signal.SIGKILL)
        p.wait()
        self.workers.remove(p)

    def readline(self, p, timeout):
        """One line of a worker's stdout (read unbuffered: select() on a
        buffered pipe would miss the lines already in the buffer)."""
        import select
        buf = self.bufs.setdefault(p.pid, b"")
        end = time.time() + timeout
        while b"\n" not in buf:
            left = end - time.time()
            if left <= 0 or not select.select([p.stdout], [], [], left)[0]:
                raise RuntimeError("worker %d said nothing for %g s: %s" % (p.pid, timeout, self.errors()))
            chunk = os.read(p.stdout.fileno(), 65536)
            if not chunk:
                raise RuntimeError("worker %d exited: %s" % (p.pid, self.errors()))
            buf += chunk
        line, buf = buf.split(b"\n", 1)
        self.bufs[p.pid] = buf
        return line.decode()

    def errors(self):
        try:
            with open(os.path.join(self.tmp, "workers.err")) as f:
                return f.read()[-2000:]
        except OSError:
            return ""

    # fenced checkpoints/s with n clients, each on a lease of its own
    def checkpoints(self, server, client, nclients, seconds):
        stream = self.stream("ck")
        c, shards = self.setup(server, client, stream, nclients)
        ps = [self.spawn(server, client, stream, shards, mode="ckpt", take=1, lease_s=60,
                         seconds=seconds) for _ in range(nclients)]
        return self.timed(server, ps, seconds, c)

    # shard checkpoints/s with n clients, each checkpointing the `batch`
    # leases it holds in one call
    def batched(self, server, client, nclients, batch, seconds):
        stream = self.stream("cb")
        c, shards = self.setup(server, client, stream, nclients * batch)
        ps = [self.spawn(server, client, stream, shards, mode="ckptb", take=batch, lease_s=60,
                         seconds=seconds, offset=i * batch) for i in range(nclients)]
        return self.timed(server, ps, seconds, c)

    def timed(self, server, ps, seconds, c=None):
        for p in ps:
            self.readline(p, 60)
        time.sleep(0.5)
        cpu0 = server.cpu()
        for p in ps:
            p.send_signal(signal.SIGUSR1)
        res = [json.loads(self.readline(p, seconds + 60)) for p in ps]
        cpu1 = server.cpu()
        for p in ps:
            self.reap(p)
        if c is not None:
            c.close()
        ops = sum(r["ops"] for r in res)
        return {"ops_s": ops / seconds, "cpu_us": (cpu1 - cpu0) * 1e6 / max(ops, 1),
                "refused": sum(r["refused"] for r in res)}

    # renewal rounds/s of one worker holding n leases; `settings`: the
    # worker's session settings (pg_lease's libpq options)
    def renewals(self, server, client, n, seconds, settings=None):
        stream = self.stream("rn")
        c, shards = self.setup(server, client, stream, n)
        p = self.spawn(server, client, stream, shards, mode="renew", take=n, lease_s=60, seconds=seconds,
                       settings=settings)
        return self.timed(server, [p], seconds, c)

    # seconds from the SIGKILL of a worker holding k leases (right after its
    # renewal) until another worker, polling every 0.1 s, holds them all
    def takeover(self, server, client, lease_s, k=10):
        stream = self.stream("tk")
        c, shards = self.setup(server, client, stream, k)
        c.close()
        a = self.spawn(server, client, stream, shards, mode="hold", take=k, lease_s=lease_s)
        self.readline(a, 60)
        b = self.spawn(server, client, stream, shards, mode="take", lease_s=lease_s, poll=0.1)
        self.readline(b, 60)
        self.readline(a, lease_s)
        t0 = time.time()
        a.send_signal(signal.SIGKILL)
        taken = {}
        while len(taken) < k:
            w = self.readline(b, 4 * lease_s + 10).split()
            taken[w[1]] = float(w[2])
        self.reap(a)
        self.reap(b)
        return max(taken.values()) - t0

    # the server's memory (PSS) for 10 connected workers, then its growth and
    # the server's CPU while they hold n leases in all, renewing every lease/3
    def footprint(self, server, client, n, lease_s, seconds):
        stream = self.stream("mem")
        c, shards = self.setup(server, client, stream, n)
        c.close()
        time.sleep(1)
        pss0, uss0 = server.pss(), server.uss()
        ps = [self.spawn(server, client, stream, shards, mode="hold", take=n // 10, lease_s=lease_s, wait=True,
                         offset=i * n // 10) for i in range(10)]
        for p in ps:
            self.readline(p, 60)
        time.sleep(1)
        pss1, uss1 = server.pss(), server.uss()
        for p in ps:
            p.send_signal(signal.SIGUSR1)
        for p in ps:
            self.readline(p, 600)
        time.sleep(2)
        cpu0, t0 = server.cpu(), time.time()
        time.sleep(seconds)
        cpu1, t1 = server.cpu(), time.time()
        pss2, uss2 = server.pss(), server.uss()
        for p in ps:
            self.reap(p)
        return {"conn_mib": (pss1 - pss0) / 1024.0, "pss_mib": (pss2 - pss1) / 1024.0,
                "conn_uss_mib": (uss1 - uss0) / 1024.0, "uss_mib": (uss2 - uss1) / 1024.0,
                "cpu_pct": 100 * (cpu1 - cpu0) / (t1 - t0)}

    # the fault run; returns (lost, two owners, stale accepted, acknowledged checkpoints)
    def safety(self, server, client, lease_s, restart=True, nworkers=3, nshards=6):
        stream = self.stream("sf")
        c, shards = self.setup(server, client, stream, nshards)
        c.close()
        d = os.path.join(self.tmp, stream)
        os.mkdir(d)
        flags = {k: os.path.join(d, k) for k in ("stop",) + tuple("pause%d" % i for i in range(nworkers))}
        ps = []
        for i in range(nworkers):
            ps.append(self.spawn(server, client, stream, shards, mode="safety", owner="w%d" % i, lease_s=lease_s,
                                 journal=os.path.join(d, "w%d.journal" % i), per_worker=nshards // 2,
                                 stop_flag=flags["stop"], pause_flag=flags["pause%d" % i], stale_writes=3,
                                 think=0.05))
            time.sleep(0.3)   # w0 takes half the shards, w1 the other half, w2 waits
        time.sleep(1)
        open(flags["pause0"], "w").close()
        end = time.time() + 10
        while proc_state(ps[0].pid) != "T":
            if time.time() > end:
                raise RuntimeError("worker w0 did not pause")
            time.sleep(0.02)
        time.sleep(lease_s + 1.5)   # past the lease (ZooKeeper expires sessions on 1 s ticks)
        ps[0].send_signal(signal.SIGCONT)
        time.sleep(1.5)
        if restart:
            server.kill9()
            server.start()
            time.sleep(lease_s + 1)   # leases of the workers that reconnected expire and are taken again
        time.sleep(1)
        open(flags["stop"], "w").close()
        for p in ps:
            p.wait(30)
            self.workers.remove(p)
        journals = {}
        for i in range(nworkers):
            with open(os.path.join(d, "w%d.journal" % i)) as f:
                journals["w%d" % i] = [json.loads(l) for l in f if l.endswith("\n")]
        c, _ = self.setup_reader(server, client, stream, shards)
        final = {s: c.read(s) for s in shards}
        c.close()
        lost, two, stale = check(journals, final, lease_s)
        acked = sum(1 for j in journals.values() for e in j if e["ev"] == "checkpoint" and e["ok"])
        stale_sent = sum(1 for j in journals.values() for e in j if e["ev"] in ("checkpoint", "ckpt_error")
                         and e.get("stale"))
        return {"lost": lost, "two": two, "stale": stale, "acked": acked, "stale_sent": stale_sent}

    def setup_reader(self, server, client, stream, shards):
        cfg = {"server": server.client_config(), "stream": stream}
        return CLIENTS[client](cfg, "reader", 60, shards), shards


def proc_state(pid):
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def available():
    """back end -> None, or why it cannot run here."""
    import importlib.util
    need = {"etcd": (["etcd"], "etcd3"), "zookeeper": (["java"], "kazoo"), "redis": (["redis-server"], "redis"),
            "pg_lease": ([], "psycopg2")}
    out = {}
    for b, (bins, mod) in need.items():
        why = [x for x in bins if not shutil.which(x)]
        if b == "zookeeper" and not os.path.exists("/usr/share/java/zookeeper.jar"):
            why.append("/usr/share/java/zookeeper.jar")
        if importlib.util.find_spec(mod) is None:
            why.append("python3 module " + mod)
        out[b] = ("missing " + ", ".join(why)) if why else None
    return out


PEERS = ["etcd", "zookeeper", "redis"]


def ratio(a, b):
    return "%.2f" % (a / b) if b else "n/a"


def violations(r):
    return len(r["lost"]) + len(r["two"]) + len(r["stale"])


def safety_line(r):
    return ("%d acknowledged checkpoints (%d stale writes sent): %d lost, %d two owners at once, %d stale"
            " accepted %s" % (r["acked"], r["stale_sent"], len(r["lost"]), len(r["two"]), len(r["stale"]),
                              (r["lost"] + r["two"] + r["stale"])[:2]))


def main_test():
    """make test: one round per back end; safety is pass/fail, speeds are reported."""
    drv = Driver()
    avail = available()
    passed = failed = 0

    def ok(cond, what):
        nonlocal passed, failed
        print("%s %s" % ("ok" if cond else "FAIL", what), flush=True)
        passed, failed = passed + bool(cond), failed + (not cond)
    speeds = {}
    only = os.environ.get("PEERS_ONLY", "").split()
    for b in ["pg_lease"] + PEERS:
        if only and b not in only:
            continue
        if avail[b]:
            print("# SKIP %s: %s (test/lib/deps.sh peers installs it)" % (b, avail[b]), flush=True)
            continue
        t0 = time.time()
        try:
            srv = drv.server(b, True)
            ck = drv.checkpoints(srv, b, 4, 1)
            rn = drv.renewals(srv, b, 100, 1)
            tk = drv.takeover(srv, b, 2)
            speeds[b] = (ck, rn, tk)
            ok(ck["refused"] == 0, "%s: fenced checkpoints, 4 clients: %.0f/s, server CPU %.0f µs/op, none refused"
               % (b, ck["ops_s"], ck["cpu_us"]))
            cb = drv.batched(srv, b, 2, 10, 1)
            ok(cb["refused"] == 0, "%s: batches of 10 fenced checkpoints, 2 clients: %.0f shard checkpoints/s,"
               " server CPU %.0f µs per shard checkpoint, none refused" % (b, cb["ops_s"], cb["cpu_us"]))
            print("# %s: renewals holding 100 leases %.0f/s; takeover of 10 leases at lease 2 s: %.2f s"
                  % (b, rn["ops_s"], tk), flush=True)
            r = drv.safety(srv, b, 2)
            ok(violations(r) == 0 and r["acked"] > 0 and r["stale_sent"] > 0,
               "%s: SIGSTOP past the lease, then SIGKILL + restart of the server: %s" % (b, safety_line(r)))
            control = {"pg_lease": "pg_lease-unguarded", "redis": "redis-unfenced"}.get(b)
            if control:
                r = drv.safety(srv, control, 2, restart=False)
                ok(len(r["stale"]) > 0, "%s (negative control) fails the checker: %s" % (control, safety_line(r)))
            drv.end_server(srv)
        except Exception as e:
            ok(False, "%s: %r %s" % (b, e, drv.errors()[-800:]))
        print("# %s: %.0f s" % (b, time.time() - t0), flush=True)
    if "pg_lease" in speeds:
        base = speeds["pg_lease"]
        for b in PEERS:
            if b in speeds:
                ck, rn, tk = speeds[b]
                print("# pg_lease / %s: checkpoints/s %s, server CPU per checkpoint %s, renewals/s (100) %s,"
                      " takeover time %s (one round, reported, not judged)"
                      % (b, ratio(base[0]["ops_s"], ck["ops_s"]), ratio(base[0]["cpu_us"], ck["cpu_us"]),
                         ratio(base[1]["ops_s"], rn["ops_s"]), ratio(base[2], tk)), flush=True)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


def median(xs):
    xs = sorted(xs)
    return xs[(len(xs) - 1) // 2] if xs else float("nan")


# the batch rows: BATCH_CLIENTS workers, each checkpointing all of its
# `batch` leases in one call, for each batch size
BATCHES = (1, 10, 100)
BATCH_CLIENTS = 4

LABEL = {"pg_lease": "pg_lease", "etcd": "etcd", "zookeeper": "ZooKeeper", "redis": "Redis"}


def main_bench(argv):
    """make bench, section 8: every figure a median of interleaved rounds,
    written as a Markdown section (--out) and the plot's data (--data)."""
    import argparse
    ap = argparse.ArgumentParser(prog="peers.py bench")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4)
    ap.add_argument("--lease", type=float, default=10, help="lease duration of the takeover and footprint")
    ap.add_argument("--out", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--only-renewals", action="store_true",
                    help="the durable renewal rows only (a few minutes)")
    a = ap.parse_args(argv)
    avail = available()
    missing = {b: why for b, why in avail.items() if why}
    if missing:
        raise SystemExit("peers.py: cannot run %s" % missing)
    drv = Driver()
    backends = ["pg_lease"] + PEERS
    step = lambda *x: print("bench: peers:", *x, file=sys.stderr, flush=True)
    res = {}   # (durability, metric, backend) -> [values]
    safety = {}
    foot = {}
    for durable in ((True,) if a.only_renewals else (True, False)):
        mode = "durable" if durable else "relaxed"
        bs = [b for b in backends if SERVERS[b].settings[durable]]
        srv = {b: drv.server(b, durable) for b in bs}
        for r in range(a.rounds):
            order = bs[r % len(bs):] + bs[:r % len(bs)]
            for b in order:
                step("%s round %d of %d: %s" % (mode, r + 1, a.rounds, b))
                for n in () if a.only_renewals else (4, 16):
                    x = drv.checkpoints(srv[b], b, n, a.seconds)
                    if x["refused"]:
                        raise SystemExit("peers.py: %s refused %d checkpoints of their owners" % (b, x["refused"]))
                    res.setdefault((mode, "ckpt%d" % n, b), []).append(x["ops_s"])
                    res.setdefault((mode, "ckptcpu%d" % n, b), []).append(x["cpu_us"])
                for n in () if a.only_renewals else BATCHES:
                    x = drv.batched(srv[b], b, BATCH_CLIENTS, n, a.seconds)
                    if x["refused"]:
                        raise SystemExit("peers.py: %s refused %d checkpoints of their owners" % (b, x["refused"]))
                    res.setdefault((mode, "ckptb%d" % n, b), []).append(x["ops_s"])
                    res.setdefault((mode, "ckptbcpu%d" % n, b), []).append(x["cpu_us"])
                for n in (100, 1000):
                    # pg_lease's heartbeats flushed, as the peers' renewals
                    # are; then without the flush (lease.flush_heartbeats
                    # off, the default), against the same peers' figures
                    flushed = {"lease.flush_heartbeats": "on"} if b == "pg_lease" else None
                    x = drv.renewals(srv[b], b, n, a.seconds, flushed)
                    res.setdefault((mode, "renew%d" % n, b), []).append(x["ops_s"])
                    res.setdefault((mode, "renewcpu%d" % n, b), []).append(x["cpu_us"])
                    if b == "pg_lease":
                        x = drv.renewals(srv[b], b, n, a.seconds, {"lease.flush_heartbeats": "off"})
                        res.setdefault((mode, "renewff%d" % n, b), []).append(x["ops_s"])
                        res.setdefault((mode, "renewffcpu%d" % n, b), []).append(x["cpu_us"])
        for b in PEERS:   # the flush-free rows compare with the same renewals
            for n in (100, 1000):
                for key in ("renew%d", "renewcpu%d"):
                    if (mode, key % n, b) in res:
                        res[(mode, key.replace("renew", "renewff") % n, b)] = res[(mode, key % n, b)]
        if durable and not a.only_renewals:
            for r in range(a.rounds):
                for b in bs[r % len(bs):] + bs[:r % len(bs)]:
                    step("takeover round %d of %d: %s" % (r + 1, a.rounds, b))
                    res.setdefault((mode, "takeover", b), []).append(drv.takeover(srv[b], b, a.lease))
            for b in bs:
                step("footprint: %s" % b)
                try:
                    foot[b] = drv.footprint(srv[b], b, 10000, a.lease, 10)
                except Exception as e:   # reported in the table, the other figures kept
                    step("footprint of %s failed: %s" % (b, str(e)[:2000]))
            for b in bs + ["pg_lease-unguarded", "redis-unfenced"]:
                step("safety: %s" % b)
                base = b.split("-")[0]
                try:
                    safety[b] = drv.safety(srv[base], b, 4, restart=(b == base))
                except Exception as e:
                    step("safety run of %s failed: %s" % (b, str(e)[:2000]))
                    safety[b] = None
        for b in bs:
            drv.end_server(srv[b])
    write_report(a, res, foot, safety)
    return 0


def write_report(a, res, foot, safety):
    def med(mode, metric, b):
        return median(res.get((mode, metric, b), []))
    out = []
    w = out.append
    w("Every back end runs as one local node started by the driver (`test/bench/peers/peers.py`) on 127.0.0.1 in "
      "a temporary directory, killed by its PID at the end; one Python process per worker (psycopg2, "
      "python3-etcd3, python3-kazoo, python3-redis), one round trip per step. Each figure is the median of "
      "%d rounds in which the back ends take turns, each round starting at the next one; %g s per measurement. "
      "Ratios are **pg_lease ÷ peer**: above 1 pg_lease does more per second; for CPU, memory and time, "
      "below 1 pg_lease costs less. What each step is on each peer, and when a peer is the better choice: "
      "[docs/comparison.md](docs/comparison.md)." % (a.rounds, a.seconds))
    w("")
    w("| back end | durable (the goal's comparison) | relaxed |")
    w("| --- | --- | --- |")
    for b in ["pg_lease"] + PEERS:
        st = SERVERS[b].settings
        w("| %s | %s | %s |" % (LABEL[b], st[True], st[False] or "none in etcd 3.4 (`--unsafe-no-fsync` came in 3.5): not measured"))
    rows = [("ckpt4", "fenced checkpoints/s, 4 clients", "%.0f"),
            ("ckpt16", "fenced checkpoints/s, 16 clients", "%.0f"),
            ("ckptcpu4", "server CPU per checkpoint (µs), 4 clients", "%.0f"),
            ("ckptcpu16", "server CPU per checkpoint (µs), 16 clients", "%.0f"),
            ("ckptb1", "checkpoints/s per shard, %d clients, batches of 1 shard" % BATCH_CLIENTS, "%.0f"),
            ("ckptb10", "checkpoints/s per shard, %d clients, batches of 10 shards" % BATCH_CLIENTS, "%.0f"),
            ("ckptb100", "checkpoints/s per shard, %d clients, batches of 100 shards" % BATCH_CLIENTS, "%.0f"),
            ("ckptbcpu1", "server CPU per shard checkpoint (µs), batches of 1", "%.0f"),
            ("ckptbcpu10", "server CPU per shard checkpoint (µs), batches of 10", "%.1f"),
            ("ckptbcpu100", "server CPU per shard checkpoint (µs), batches of 100", "%.1f"),
            ("renew100", "renewals/s, one worker holding 100 leases", "%.0f"),
            ("renew1000", "renewals/s, one worker holding 1,000 leases", "%.0f"),
            ("renewcpu100", "server CPU per renewal (µs), 100 leases", "%.0f"),
            ("renewcpu1000", "server CPU per renewal (µs), 1,000 leases", "%.0f"),
            ("renewff100", "renewals/s, 100 leases, pg_lease's heartbeat without a flush", "%.0f"),
            ("renewff1000", "renewals/s, 1,000 leases, pg_lease's heartbeat without a flush", "%.0f"),
            ("renewffcpu100", "server CPU per renewal (µs), 100 leases, heartbeat without a flush", "%.0f"),
            ("renewffcpu1000", "server CPU per renewal (µs), 1,000 leases, heartbeat without a flush", "%.0f"),
            ("takeover", "takeover of a SIGKILLed worker's 10 leases (s), lease %g s, polling every 0.1 s" % a.lease, "%.2f")]
    data = []
    for mode in ("durable", "relaxed"):
        w("")
        w("**%s**%s" % (mode.capitalize(), "" if mode == "durable" else " (etcd has no relaxed setting: left out)"))
        w("")
        w("| figure | pg_lease | etcd | ZooKeeper | Redis | ÷ etcd | ÷ ZooKeeper | ÷ Redis |")
        w("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for key, label, fmt in rows:
            if not res.get((mode, key, "pg_lease")):
                continue
            vals = {b: med(mode, key, b) for b in ["pg_lease"] + PEERS}
            cells = [fmt % v if (mode, key, b) in res else "–" for b, v in vals.items()]
            rat = [ratio(vals["pg_lease"], vals[b]) if (mode, key, b) in res else "–" for b in PEERS]
            w("| %s | %s | %s |" % (label, " | ".join(cells), " | ".join(rat)))
            if mode == "durable" and key in ("ckpt4", "ckpt16", "ckptb10", "ckptb100", "renewff100", "renewff1000",
                                             "ckptcpu16", "ckptbcpu100", "takeover"):
                data.append("%s %s" % (key, " ".join(r if r != "–" else "NaN" for r in rat)))
    w("")
    w("Batches (the rows \"per shard\"): %d clients, each holding `batch` leases and checkpointing all of them "
      "in one call, back to back: pg_lease's `update_checkpoints`, an etcd transaction with one compare and one "
      "put per shard, a ZooKeeper `multi` with one check and one versioned `setData` per shard, a Redis "
      "pipeline of the checkpoint script (no MULTI: each script judges its own shard). The rate counts shard "
      "checkpoints; the CPU is per shard checkpoint. Renewals: pg_lease's heartbeats flushed "
      "(`lease.flush_heartbeats = on`), as every peer's renewal is, then without the flush (the default, "
      "docs/worker-guide.md \"Heartbeats without a flush\"), each against the same peers' figures."
      % BATCH_CLIENTS)
    if foot:
        w("")
        w("**The coordinator's footprint for 10,000 leases** (durable): 10 workers connect, then take 1,000 "
          "leases each and renew them every lease/3 (%g s). Memory: the server's PSS (proportional set size, "
          "all PostgreSQL processes summed, so shared memory is counted once) and USS (unique set size: each "
          "process's private pages outside its shared mappings, so PostgreSQL's shared buffers are in none of "
          "it), first the growth from "
          "the 10 connections, then from the leases. PSS charges each backend a share of every shared buffer "
          "it touched, so its growth is mostly the table and index pages read into shared memory, not a cost "
          "per lease; what leases and connections really cost: docs/comparison.md, \"Memory\". CPU: the "
          "server's share of one core over 10 s of that steady state." % (a.lease / 3))
        w("")
        w("| figure | pg_lease | etcd | ZooKeeper | Redis | ÷ etcd | ÷ ZooKeeper | ÷ Redis |")
        w("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for key, label in (("conn_mib", "memory (MiB) of the 10 workers' connections, before any lease, PSS"),
                           ("conn_uss_mib", "the same, USS (private memory, shared mappings left out)"),
                           ("pss_mib", "memory (MiB) growth for the 10,000 leases held, PSS"),
                           ("uss_mib", "the same, USS (private memory, shared mappings left out)"),
                           ("cpu_pct", "CPU (% of a core) for 10,000 leases held")):
            w("| %s | %s | %s |" % (label, " | ".join("%.1f" % foot[b][key] if b in foot else "failed"
                                                    for b in ["pg_lease"] + PEERS),
                                    " | ".join(ratio(foot["pg_lease"][key], foot[b][key])
                                               if "pg_lease" in foot and b in foot and foot[b][key] >= 0.5
                                               else "–" for b in PEERS)))   # no ratio to ~0 or noise
    if safety:
        w("")
        w("**Safety** (durable, lease 4 s; 3 workers on 6 leases): worker w0 stops itself (SIGSTOP) right after "
          "checking its local deadline, stays stopped past its lease while another worker takes its leases, "
          "and on SIGCONT sends 3 rounds of checkpoints with the token it had; then the server is killed "
          "(`kill -9`; PostgreSQL: `pg_ctl stop -m immediate`) and restarted on its data. A single node has no "
          "leader change: not simulated. One checker (`check()` in peers.py) over what each back end "
          "acknowledged. The last two rows are the negative controls, without the server restart.")
        w("")
        w("| back end | checkpoints acknowledged | stale writes sent | acknowledged checkpoints lost | two owners at once | stale writes accepted | checker |")
        w("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
        for b, r in safety.items():
            if r is None:
                w("| %s | the run failed (see the bench's log) | | | | | |" % b)
                continue
            w("| %s | %d | %d | %d | %d | %d | %s |" % (b, r["acked"], r["stale_sent"], len(r["lost"]), len(r["two"]),
                                                   len(r["stale"]), "passes" if not violations(r) else "**fails**"))
    with open(a.out, "w") as f:
        f.write("\n".join(out) + "\n")
    with open(a.data, "w") as f:
        f.write("\n".join(data) + "\n")


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "worker":
        with open(sys.argv[2]) as f:
            worker(json.load(f))
    elif len(sys.argv) >= 2 and sys.argv[1] == "test":
        sys.exit(main_test())
    elif len(sys.argv) >= 2 and sys.argv[1] == "bench":
        sys.exit(main_bench(sys.argv[2:]))
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
