"""The worker loop: take, renew, process, fenced checkpoints, handoff.

A port of the demo client (test/demo/pg_lease_demo.c) following
docs/client-rules.md: a renewal thread on its own connection, a processing
loop on another, the local deadline, graceful handoff, and every checkpoint
fenced with the lease_epoch learned from take_leases or renew_leases.

Transactional mode (Worker(..., transactional=True), docs/exactly-once.md):
each batch is one transaction on the processing connection: the processor
writes its output through the cursor it is given, then the worker runs
hold_lease and the fenced checkpoint and commits, so output and checkpoint
commit together or not at all, and never from a worker that lost the lease.

Through the router (pg_lease_router), the batch transactions run on a
direct connection to the stream's partition: the worker asks the router
where (lease_router.stream_conninfo) and connects there with its own
credentials; after the stream moved (40L01) it asks again.

Shard discovery (Worker(..., shard_lister=f)): the worker calls f() when it
starts and every sync_every seconds, and passes the shards it returns to
lease.sync_shards, which creates the missing leases (docs/shard-leases.md,
"Who creates a stream's leases").

Logging (the "pg_lease" logger, session.py): connection and authentication
failures at ERROR, retries at WARNING, lease changes at INFO.  A refused
connection (bad credentials, no such database) stops the worker after the
rules' tries: run() raises Fatal.

Checkpoints are opaque text (a Kinesis sequence number has up to 128 bits):
the worker never parses one.  A checkpoint is a str, or a Checkpoint (a str
with a sub_sequence, KCL's ExtendedSequenceNumber, for a KPL-aggregated
record, and the pending checkpoint a previous owner prepared); a processor
may prepare its next checkpoint (KCL's prepareCheckpoint) with
RecordProcessor.prepare_checkpoint before acting on a batch.

An unexpected exception (the processor's, or an error the rules say to
raise) stops the worker as stop() does, but without waiting: the processors
are shut down (WORKER_STOPPED), the checkpoints of batches already processed
are written while their deadlines allow, and every lease held is released,
so that other workers take them at once; a lease whose release fails (the
database is unreachable) goes by its local deadline and expiry.  Then run()
raises the exception.

Fast failover (Worker(..., fast_failover=True, renew_every=1.0),
docs/client-rules.md rule 6): the worker declares renew_every, renews that
often, and processes a shard only while its last successful renewal (or
balancing round) was sent less than renew_every + margin ago; the renewer's
connection has a statement timeout and a TCP user timeout, so a hung renewal
stops processing at that deadline; a call on either connection that gets no
answer at all (a proxy that lost its server) has its connection severed, and
the worker reconnects.  Other workers may then take its leases
once its session has ended; lease.liveness_grace must be >= the margin.
"""
import json
import os
import threading
import time
import weakref

import psycopg2
import psycopg2.extensions

from . import rules
from .session import Ambiguous, Fatal, Session, Unavailable, log

SHARD_END = "SHARD_END"
LEASE_LOST = "lease lost"
HANDED_OFF = "handed off"
SHARD_ENDED = "shard ended"
WORKER_STOPPED = "worker stopped"

TAKE = ("SELECT shard_id, action, lease_epoch"
        "  FROM lease.take_leases(%s, %s, %s, %s::interval, NULL, %s, renew_every => %s::interval)")
RENEW = "SELECT shard_id, handoff_to, lease_epoch FROM lease.renew_leases(%s, %s, %s, %s::interval, %s::interval)"
HEARTBEAT = ("SELECT leases, leases_version, handoffs_pending"
             "  FROM lease.heartbeat(%s, %s, %s, %s::interval, %s::interval)")
MINE = ("SELECT shard_id, lease_epoch, checkpoint, handoff_from, checkpoint_sub_sequence, pending_checkpoint"
        "  FROM lease.my_leases(%s, %s, %s)")
CHECKPOINT = "SELECT lease.update_checkpoint(%s, %s, %s, %s, %s, %s, %s)"
PREPARE = "SELECT lease.prepare_checkpoint(%s, %s, %s, %s, %s)"
RELEASE = "SELECT lease.release_lease(%s, %s, %s, %s)"
CLOSE = "SELECT lease.close_shard(%s, %s, %s, %s)"
HOLD = "SELECT lease.hold_lease(%s, %s, %s, %s, %s)"
SYNC = "SELECT shard_id, action FROM lease.sync_shards(%s, %s, %s::text[], %s::text[])"
# transactional mode through the router: where the stream's transactions run
WHERE = "SELECT conninfo FROM lease_router.stream_conninfo(%s, %s)"
# the connection parameters of the worker's own that a partition connection keeps
CREDENTIALS = ("user", "password", "passfile", "sslcert", "sslkey", "sslpassword")


class Checkpoint(str):
    """A checkpoint: the sequence number (or sentinel) as the str itself, never parsed,
    with the sub_sequence of a KPL-aggregated record (KCL's ExtendedSequenceNumber; 0 for
    a plain record) and, given to initialize(), the pending checkpoint a previous owner
    prepared and did not complete (KCL's pendingCheckpointSequenceNumber), or None."""

    def __new__(cls, sequence, sub_sequence=0, pending=None):
        self = super().__new__(cls, sequence)
        self.sub_sequence = int(sub_sequence or 0)
        self.pending = pending
        return self

    def __repr__(self):
        return "Checkpoint(%s, %d%s)" % (str.__repr__(self), self.sub_sequence,
                                         "" if self.pending is None else ", pending=%r" % self.pending)


def _position(checkpoint):
    """(sequence, sub_sequence) of what a processor returned: a str (sub-sequence 0), a
    Checkpoint, or a (sequence, sub_sequence) pair."""
    if isinstance(checkpoint, tuple):
        sequence, sub = checkpoint
        return str(sequence), int(sub)
    return str(checkpoint), getattr(checkpoint, "sub_sequence", 0)


class RecordProcessor:
    """What the user supplies; one object serves every shard the worker holds."""

    _worker = None    # the Worker that runs this processor (a weak reference), set by the Worker

    def initialize(self, shard_id, checkpoint):
        """The worker now processes shard_id, from checkpoint (the last acknowledged one: a
        Checkpoint, with its sub_sequence and the pending checkpoint, if any)."""

    def process(self, shard_id, cursor=None):
        """Process the next batch; return its checkpoint (a str, a Checkpoint or a (sequence,
        sub_sequence) pair), None (nothing to do), or SHARD_END.
        In transactional mode cursor is the batch's transaction: write the output through it
        (the checkpoint must move forward with every batch that writes output)."""
        return None

    def shutdown(self, shard_id, reason):
        """The worker stopped processing shard_id: LEASE_LOST, HANDED_OFF, SHARD_ENDED or WORKER_STOPPED."""

    def prepare_checkpoint(self, shard_id, checkpoint):
        """Records checkpoint (its sequence number) as the shard's pending checkpoint, the
        first phase of a two-phase checkpoint (KCL's prepareCheckpoint), before the batch
        acts on the world; the checkpoint the batch returns completes it.  Called from
        process(); True when recorded, False when the shard is no longer this worker's."""
        worker = self._worker() if self._worker is not None else None
        if worker is None:
            raise RuntimeError("prepare_checkpoint: this processor is not run by a Worker")
        return worker._prepare(shard_id, checkpoint)


class _Lease:
    """What the worker knows of one lease it holds."""

    def __init__(self, epoch, sent, learned):
        self.epoch = epoch        # the fencing token
        self.sent = sent          # when the last acknowledged take/renewal was sent (monotonic)
        self.learned = learned    # when this epoch became known here (monotonic)
        self.handoff_to = None
        self.lost = False


class _Journal:
    """Appends what the server acknowledged, one JSON line per event (O_APPEND: survives a
    SIGKILL).  Off unless a test turns it on (pg_lease._testing.journal): the clients
    suite's checker reads it."""

    def __init__(self, path, owner):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if path else None
        self.owner = owner

    def __call__(self, event, **fields):
        if self.fd is not None:
            fields.update(ev=event, w=self.owner, t=time.time())
            os.write(self.fd, (json.dumps(fields) + "\n").encode())


def _wall(mono):
    return time.time() - (time.monotonic() - mono)


def shard_list_arrays(shards):
    """sync_shards' shard_ids and parent_ids for a shard list: each item a shard id,
    or a (shard_id, parents) pair (parents: a list, e.g. Kinesis' ParentShardId and
    AdjacentParentShardId, None entries ignored).  parent_ids is n x k, NULL-padded."""
    ids, rows = [], []
    for item in shards:
        shard, parents = (item, ()) if isinstance(item, str) else item
        ids.append(shard)
        rows.append([p for p in (parents or ()) if p is not None])
    width = max((len(r) for r in rows), default=0)
    if width == 0:
        return ids, [None] * len(ids)
    return ids, [r + [None] * (width - len(r)) for r in rows]


class Worker:
    """Runs the loop for one owner on one stream until stop() (or SIGTERM, if the caller wires it)."""

    def __init__(self, dsn, app_name, stream_name, owner, processor,
                 lease_duration=10.0, margin=None, balance_every=None,
                 max_steal=1, transactional=False, shard_lister=None, sync_every=60.0,
                 fast_failover=False, renew_every=1.0):
        self.key = (app_name, stream_name)
        self.owner = owner
        self.processor = processor
        if isinstance(processor, RecordProcessor):
            processor._worker = weakref.ref(self)
        self.lease_duration = float(lease_duration)
        self.margin = self.lease_duration / 5 if margin is None else float(margin)
        self.max_steal = max_steal
        self.interval = "%d milliseconds" % int(self.lease_duration * 1000)
        # fast failover: renew (and balance) every renew_every; the margin is
        # what the server's lease.liveness_grace (default 1 s) must cover
        self.renew_every = float(renew_every) if fast_failover else None
        self.every = "%d milliseconds" % int(self.renew_every * 1000) if fast_failover else None
        if fast_failover and margin is None:
            self.margin = min(self.margin, self.renew_every / 2)
        self.balance_every = balance_every or (self.renew_every if fast_failover else self.lease_duration / 3)
        self._contract = True         # False (pg_lease._testing): the negative control, rule 6's deadline ignored
        self.contact_sent = None      # when the last acknowledged renewal or round was sent (monotonic)
        self._journal = _Journal(None, owner)
        self.transactional = transactional
        self.dsn = dsn
        self.tx_db = None         # transactional: the session the batch transactions run on
        self.shard_lister = shard_lister    # () -> the stream's shards, for lease.sync_shards
        self.sync_every = float(sync_every)
        self.unlisted = set()
        # fast failover: a call that hangs (a proxy that lost its server, a half-open
        # connection) has its connection severed, and the worker reconnects: on the
        # renewer after 2 x renew_every, here after a fifth of the lease duration
        self.db = Session(dsn, owner, params={"connect_timeout": max(1, int(self.lease_duration / 5))}
                          if fast_failover else None, call_timeout=self.lease_duration / 5 if fast_failover else None)
        # transactional: a renewal waits behind a batch transaction holding one of
        # its leases for at most a tenth of the lease duration (55P03: repeated)
        renew_options = []
        if transactional:
            renew_options.append("-c lock_timeout=%d" % int(self.lease_duration * 100))
        renew_params = {}
        if fast_failover:
            # a renewal that hangs (a slow server, a half-open connection) gives up
            # within renew_every; rule 6's deadline stops processing meanwhile
            renew_options.append("-c statement_timeout=%d" % int(self.renew_every * 1000))
            renew_params = {"connect_timeout": max(1, int(self.renew_every)),
                            "tcp_user_timeout": int(self.renew_every * 1000)}
        self.renew_db = Session(dsn, owner + " renewer", " ".join(renew_options) or None, renew_params,
                                call_timeout=2 * self.renew_every if fast_failover else None)
        self.held = {}            # shard_id -> _Lease, shared with the renewer
        # the last renew_leases list {shard_id: epoch} and the leases_version of the
        # heartbeat sent before it; None: list again at the next tick (rule 5)
        self.listed = None
        self.listed_version = None
        self.listed_stale_since = 0.0   # when a take last answered (monotonic)
        self.forgotten = {}       # shard_id -> when it was dropped here (monotonic)
        self.running = {}         # shard_id -> epoch its processor was started with
        self.unacked = {}         # shard_id -> a processed (sequence, sub_sequence) whose write failed
        self.committed = {}       # transactional: shard_id -> the checkpoint the next batch starts from
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.stop_asked = False
        self.error = None         # what stopped the renewer, raised by run()
        self.thread = None        # the thread running run(): the processors' thread
        self.processing = None    # the shard whose process() runs now

    def stop(self):
        """Asks the worker to stop (it finishes its batches, checkpoints and
        releases its leases).  Safe in a signal handler, and more than once: a
        second signal can arrive while the first handler is inside Event.set(),
        whose lock is not reentrant, so only the first call sets it."""
        if self.stop_asked:
            return
        self.stop_asked = True
        self.stopping.set()

    # -- the renewer ------------------------------------------------------

    def _renew_once(self):
        """One renewal tick (docs/client-rules.md rule 5): a heartbeat; while its
        leases_version is the one remembered with the last list and no handoff is
        pending, it renews every lease on that list at the epoch listed; otherwise
        renew_leases lists them again."""
        sent = time.monotonic()
        try:
            [(count, version, pending)] = self.renew_db.call(
                HEARTBEAT, self.key + (self.owner, self.interval, self.every))
        except (Unavailable, Ambiguous) as e:
            self._journal("renew_failed", error=str(e))    # not acknowledged: no deadline moves
            return
        with self.lock:
            self.contact_sent = max(self.contact_sent or sent, sent)   # it recorded the session too
            listed = self.listed
            if (listed is None or version is None or version != self.listed_version
                    or pending or count != len(listed)):
                self.listed = None    # stale until a list succeeds (a take sets it stale too)
                listed = None
            else:
                acked = self._renewed(sent, [(shard, None, epoch) for shard, epoch in listed.items()])
                # under the lock: nothing the processing loop does on this answer precedes its entry
                self._journal("renewed", sent=_wall(sent), leases=acked, via="heartbeat")
                return
        self._list(version)

    def _list(self, version):
        """renew_leases: the truth about what the worker holds (rule 5), remembered
        with the leases_version of the heartbeat sent before it."""
        sent = time.monotonic()
        try:
            rows = self.renew_db.call(RENEW, self.key + (self.owner, self.interval, self.every))
        except (Unavailable, Ambiguous) as e:
            self._journal("renew_failed", error=str(e))
            return
        with self.lock:
            self.contact_sent = max(self.contact_sent or sent, sent)
            acked = self._renewed(sent, rows)
            if self.listed_stale_since < sent:     # no take answered since this list was sent
                self.listed = {shard: epoch for shard, _, epoch in rows}
                self.listed_version = version
            # under the lock: nothing the processing loop does on this answer precedes its entry
            self._journal("renewed", sent=_wall(sent), leases=acked, via="list")

    def _renewed(self, sent, rows):
        """Applies an acknowledged renewal sent at sent that renewed rows
        (shard, handoff_to, epoch): the worker holds those and no others
        (but for what it learned since).  Under self.lock; returns {shard: epoch}."""
        acked = {}
        seen = set()
        for shard, handoff_to, epoch in rows:
            seen.add(shard)
            lease = self.held.get(shard)
            if self.forgotten.get(shard, -1) > sent or (lease and lease.learned > sent):
                continue      # this answer predates what we know now
            if lease is None or lease.epoch != epoch:
                lease = self.held[shard] = _Lease(epoch, sent, time.monotonic())
            lease.sent = sent
            lease.handoff_to = handoff_to
            acked[shard] = epoch
        for shard, lease in self.held.items():
            if shard not in seen and lease.learned < sent:
                lease.lost = True
        return acked

    def _renewer(self):
        while not self.stopping.wait(self.renew_every or self.lease_duration / 3):
            try:
                self._renew_once()
            except Exception as e:    # an error the rules say to raise: stop the worker with it
                log.error("%s: renewals stopped, stopping the worker: %r", self.owner, e)
                self._journal("renewer_failed", error=repr(e))
                self.error = e
                self.stopping.set()

    # -- the processing loop ----------------------------------------------

    def _balance(self):
        sent = time.monotonic()
        try:
            rows = self.db.call(TAKE, self.key + (self.owner, self.interval, self.max_steal, self.every))
        except (Unavailable, Ambiguous) as e:
            self._journal("take_failed", error=str(e))
            return
        learned = time.monotonic()
        with self.lock:
            self.contact_sent = max(self.contact_sent or sent, sent)   # the round recorded the session too
            for shard, action, epoch in rows:
                if action == "taken":
                    # the renewer lists again before it trusts a heartbeat (rule 5)
                    self.listed = None
                    self.listed_stale_since = learned
                    self.held[shard] = _Lease(epoch, sent, learned)
                    self._journal("taken", shard=shard, epoch=epoch, sent=_wall(sent))
                    log.info("%s: took %s (epoch %s)", self.owner, shard, epoch)

    def _sync(self):
        """Shard discovery: the lister's shards to lease.sync_shards."""
        try:
            ids, parents = shard_list_arrays(self.shard_lister())
        except Exception as e:        # the user's lister: log it, try again next time
            log.error("%s: the shard lister failed: %r", self.owner, e)
            return
        try:
            rows = self.db.call(SYNC, self.key + (ids, parents))
        except (Unavailable, Ambiguous) as e:
            self._journal("sync_failed", error=str(e))
            return
        created = sorted(s for s, action in rows if action == "created")
        unlisted = {s for s, action in rows if action == "unlisted"}
        for shard in created:
            log.info("%s: created the lease of %s (shard discovery)", self.owner, shard)
        for shard in sorted(unlisted - self.unlisted):
            log.info("%s: %s is no longer listed (its lease is not ended: a worker ends it at "
                     "its end)", self.owner, shard)
        self.unlisted = unlisted
        self._journal("synced", created=created, unlisted=sorted(unlisted))

    def _drop(self, shard, reason, why, keep_lease=False):
        """Shuts the shard's processor down; forgets the lease unless keep_lease."""
        if shard in self.running:
            del self.running[shard]
            self.processor.shutdown(shard, reason)
        self.unacked.pop(shard, None)
        if not keep_lease:
            with self.lock:
                self.held.pop(shard, None)
                self.forgotten[shard] = time.monotonic()
        self._journal("shutdown", shard=shard, reason=reason, why=why)
        log.info("%s: stopped processing %s: %s (%s)", self.owner, shard, reason, why)

    def _start(self, shard, epoch):
        """Starts the processor from the checkpoint; False when my_leases disagrees."""
        for row_shard, row_epoch, checkpoint, handoff_from, sub, pending in \
                self.db.call(MINE, self.key + (self.owner,)):
            if row_shard == shard and handoff_from is None and row_epoch == epoch:
                if checkpoint == SHARD_END:
                    return False
                self.processor.initialize(shard, Checkpoint(checkpoint, sub, pending))
                self.committed[shard] = checkpoint
                self.running[shard] = epoch
                self._journal("initialized", shard=shard, epoch=epoch, checkpoint=checkpoint, sub=sub,
                              pending=pending)
                return True
        return False

    def _work(self, shard, lease):
        """One step for one shard: (True when a batch was processed, a (shard, lease,
        (sequence, sub_sequence), deadline) checkpoint to write, or None)."""
        key = self.key + (shard, self.owner)
        if shard in self.running and self.running[shard] != lease.epoch:
            # it changed hands meanwhile (e.g. expired and taken again): restart from the checkpoint
            self._drop(shard, LEASE_LOST, "epoch changed", keep_lease=True)
            return False, None
        if lease.lost:
            self._drop(shard, LEASE_LOST, "not renewed")
            return False, None
        deadline = self._deadline(lease)
        if time.monotonic() >= deadline:
            self._drop(shard, LEASE_LOST, "local deadline")
            return False, None
        if shard not in self.running and not self._start(shard, lease.epoch):
            self._drop(shard, LEASE_LOST, "not in my_leases")
            return False, None
        if lease.handoff_to is not None:
            # hand it over once every processed batch is checkpointed
            if shard in self.unacked and not self._checkpoint(shard, lease, self.unacked[shard], deadline):
                return False, None
            self._journal("released", shard=shard, ok=self.db.one(RELEASE, key), to=lease.handoff_to)
            self._drop(shard, HANDED_OFF, "handoff to " + lease.handoff_to)
            return False, None
        if self._stale(lease):
            # the deadline passed since the check above (a pause, a slow my_leases): no batch starts
            self._drop(shard, LEASE_LOST, "local deadline")
            return False, None
        if self.transactional:
            return self._transaction(shard, lease), None
        self.processing = shard
        try:
            checkpoint = self.processor.process(shard)
        finally:
            self.processing = None
        if checkpoint is None:
            return False, None
        if checkpoint == SHARD_END:
            closed = self.db.one(CLOSE, key)
            self._journal("closed", shard=shard, ok=closed)
            self._drop(shard, SHARD_ENDED if closed else LEASE_LOST, "closed")
            return True, None
        return True, (shard, lease, _position(checkpoint), deadline)

    def _deadline(self, lease):
        """The local deadline (rule 3); in fast-failover mode also rule 6's: the
        last acknowledged renewal or round was sent less than renew_every + margin ago."""
        return self._limits(lease)[1]

    def _stale(self, lease):
        """True when the lease may no longer be processed: its deadline passed, or the last
        renewal said it is not held."""
        lost, deadline = self._limits(lease)
        return lost or time.monotonic() >= deadline

    def _limits(self, lease):
        """(lost, deadline) of the lease, read together under the lock the renewer writes them in."""
        with self.lock:
            deadline = lease.sent + self.lease_duration - self.margin
            if self.renew_every is not None and self._contract:
                contact = self.contact_sent if self.contact_sent is not None else lease.sent
                deadline = min(deadline, contact + self.renew_every + self.margin)
            return lease.lost, deadline

    def _checkpoints(self, done):
        """Writes the checkpoints of a tick's batches (the _work results), each fenced;
        one call each for now (lease.update_checkpoints will take them together)."""
        for shard, lease, position, deadline in done:
            self._checkpoint(shard, lease, position, deadline)

    def _checkpoint(self, shard, lease, position, deadline):
        """Writes a fenced checkpoint, a (sequence, sub_sequence), repeating no later than the
        local deadline; True when acknowledged.  None is sent past the deadline (a pause since
        the batch began): the batch stays unacknowledged, and the next step drops the shard
        unless a fresh renewal says it is still held."""
        sequence, sub = position
        if self._stale(lease):
            self.unacked[shard] = position
            self._journal("checkpoint_skipped", shard=shard, epoch=lease.epoch, checkpoint=sequence, sub=sub)
            return False
        sent = time.monotonic()
        try:
            ok = self.db.one(CHECKPOINT, self.key + (shard, self.owner, sequence, sub, lease.epoch), until=deadline)
        except (Unavailable, Ambiguous) as e:
            # it may have committed, but it is not acknowledged: the next one covers it
            self.unacked[shard] = position
            self._journal("checkpoint_failed", shard=shard, epoch=lease.epoch, checkpoint=sequence, sub=sub,
                          error=str(e), sent=_wall(sent))
            return False
        self.unacked.pop(shard, None)
        self._journal("checkpoint", shard=shard, epoch=lease.epoch, checkpoint=sequence, sub=sub, ok=ok,
                      sent=_wall(sent))
        if not ok:
            self._drop(shard, LEASE_LOST, "checkpoint refused")
        return ok

    def _prepare(self, shard, checkpoint):
        """RecordProcessor.prepare_checkpoint: lease.prepare_checkpoint of the sequence number,
        sent only while the shard's deadline allows (in transactional mode, inside the batch's
        transaction)."""
        if threading.current_thread() is not self.thread or self.processing != shard:
            raise RuntimeError("prepare_checkpoint(%r): only inside process() of that shard" % shard)
        sequence, _ = _position(checkpoint)
        lease = self.held.get(shard)
        if lease is None or self._stale(lease):
            self._journal("prepare_skipped", shard=shard, pending=sequence)
            return False
        db = self._tx_session() if self.transactional else self.db     # in the batch's transaction
        ok = db.one(PREPARE, self.key + (shard, self.owner, sequence), until=self._deadline(lease))
        self._journal("prepared", shard=shard, epoch=lease.epoch, pending=sequence, ok=ok)
        return ok

    def _tx_session(self):
        """The session the batch transactions run on: through a router, a direct connection
        to the stream's partition (lease_router.stream_conninfo, with the worker's own
        credentials); on a single server, the processing connection."""
        if self.tx_db is None:
            try:
                where = self.db.call(WHERE, self.key)
            except psycopg2.Error as e:
                if e.pgcode not in ("3F000", "42883"):    # not a router: no lease_router schema
                    raise
                self.tx_db = self.db
            else:
                mine = psycopg2.extensions.parse_dsn(self.dsn)
                dsn = psycopg2.extensions.make_dsn(where[0][0], **{k: v for k, v in mine.items()
                                                                   if k in CREDENTIALS})
                self.tx_db = Session(dsn, self.owner + " transactions")
                log.info("%s: transactions of %s/%s run on %s", self.owner, self.key[0], self.key[1],
                         where[0][0])
        return self.tx_db

    def _transaction(self, shard, lease):
        """One batch as one transaction: output, hold_lease, fenced checkpoint (or close), commit.
        True when a batch committed."""
        key = self.key + (shard, self.owner)
        tx = self._tx_session()
        try:
            conn = tx.connect()
        except psycopg2.OperationalError as e:
            raise Unavailable(str(e).strip()) from e
        tried = None
        committing = False
        try:
            with conn.cursor() as cur:
                cur.execute("BEGIN")
                self.processing = shard
                try:
                    tried = self.processor.process(shard, cur)
                finally:
                    self.processing = None
                if tried is None:
                    cur.execute("ROLLBACK")
                    return False
                sequence, sub = (SHARD_END, 0) if tried == SHARD_END else _position(tried)
                cur.execute(HOLD, key + (lease.epoch,))
                held_at = cur.fetchone()[0]
                if held_at != self.committed.get(shard):
                    # a commit acknowledged to us is not there (lost in a crash with
                    # synchronous_commit off, or a failover): go on from the server's
                    cur.execute("ROLLBACK")
                    self._journal("tx_diverged", shard=shard, epoch=lease.epoch, expected=self.committed.get(shard),
                                  checkpoint=held_at)
                    self.processor.initialize(shard, Checkpoint(held_at))
                    self.committed[shard] = held_at
                    return False
                cur.execute(CLOSE if tried == SHARD_END else CHECKPOINT,
                            key if tried == SHARD_END else key + (sequence, sub, lease.epoch))
                if not cur.fetchone()[0]:
                    cur.execute("ROLLBACK")
                    self._journal("checkpoint", shard=shard, epoch=lease.epoch, checkpoint=sequence, sub=sub, ok=False)
                    self._drop(shard, LEASE_LOST, "checkpoint refused")
                    return False
                committing = True
                tx.notices.clear()
                cur.execute("COMMIT")
                warning = tx.notices.ambiguous()
                if warning is not None:
                    raise Ambiguous(warning)    # committed here, perhaps only here
        except Exception as e:
            code = getattr(e, "pgcode", None)
            kind = rules.classify(code, getattr(getattr(e, "diag", None), "message_primary", None)) \
                if isinstance(e, psycopg2.Error) else ("ambiguous" if isinstance(e, Ambiguous) else "raise")
            if conn.closed:
                kind = "ambiguous"
            elif not isinstance(e, Ambiguous):
                try:
                    with conn.cursor() as cur:
                        cur.execute("ROLLBACK")    # autocommit: psycopg2 does not know of the BEGIN
                except psycopg2.Error:
                    tx.close()
            if code == "40L01" and tx is not self.db:
                tx.close()
                self.tx_db = None         # the stream moved: ask the router again
            if kind == "drop":
                self._journal("checkpoint", shard=shard, epoch=lease.epoch, checkpoint=tried, ok=False,
                              error=str(e).strip().split("\n")[0])
                self._drop(shard, LEASE_LOST, "not held")
                return False
            if kind == "raise":
                raise
            tx.close()
            self._journal("tx_failed", shard=shard, epoch=lease.epoch, checkpoint=sequence if committing else tried,
                          unknown=committing and kind == "ambiguous", error=str(e).strip().split("\n")[0])
            self._resolve(shard, lease, sequence if committing else None)
            return False
        self.committed[shard] = sequence
        self._journal("checkpoint", shard=shard, epoch=lease.epoch, checkpoint=sequence, sub=sub, ok=True, tx=True)
        if tried == SHARD_END:
            self._drop(shard, SHARD_ENDED, "closed")
        return True

    def _resolve(self, shard, lease, tried):
        """After a batch transaction failed: restart the processor from the checkpoint my_leases
        holds (tried: the checkpoint of a COMMIT whose outcome is unknown; equal means it committed)."""
        try:
            rows = self.db.call(MINE, self.key + (self.owner,))
        except (Unavailable, Ambiguous):
            self._drop(shard, LEASE_LOST, "unresolved", keep_lease=True)   # _start reads it again
            raise
        for row_shard, row_epoch, checkpoint, handoff_from, sub, pending in rows:
            if row_shard == shard and row_epoch == lease.epoch:
                self._journal("tx_resolved", shard=shard, epoch=lease.epoch, checkpoint=checkpoint,
                              committed=tried is not None and checkpoint == tried)
                if checkpoint == SHARD_END:
                    self._drop(shard, SHARD_ENDED, "closed")
                else:
                    self.processor.initialize(shard, Checkpoint(checkpoint, sub, pending))
                    self.committed[shard] = checkpoint
                return
        self._drop(shard, LEASE_LOST, "not in my_leases")

    def run(self):
        """Runs until stop(); then shuts every processor down and releases every lease.
        On an unexpected exception (the processor's, or an error the rules say to raise:
        a privilege, a bug) it does the same at once, then raises it; so it does when
        the renewer stopped with one.  A refused connection (Fatal) releases nothing:
        the leases go by their local deadlines."""
        self.thread = threading.current_thread()
        self._journal("started", lease_duration=self.lease_duration, margin=self.margin)
        renewer = threading.Thread(target=self._renewer, daemon=True)
        renewer.start()
        try:
            self._loop()
        except Exception as e:
            # a refused connection (Fatal), or an error the rules say to raise, or the processor's
            log.error("%s: stopping the worker: %r", self.owner, e)
            self._journal("worker_failed", error=repr(e))
            self.stopping.set()
            self._stop(renewer, release=not isinstance(e, Fatal))
            raise
        self._stop(renewer)
        if self.error is not None:
            raise self.error

    def _loop(self):
        next_balance = 0.0
        next_sync = 0.0
        while not self.stopping.is_set():
            if self.shard_lister is not None and time.monotonic() >= next_sync:
                self._sync()
                next_sync = time.monotonic() + self.sync_every
            if time.monotonic() >= next_balance:
                self._balance()
                next_balance = time.monotonic() + self.balance_every
            with self.lock:
                held = list(self.held.items())
            busy = False
            done = []             # this tick's checkpoints, written together
            for shard, lease in held:
                if self.stopping.is_set():
                    break
                try:
                    processed, checkpoint = self._work(shard, lease)
                except (Unavailable, Ambiguous) as e:
                    self._journal("call_failed", shard=shard, error=str(e))
                    continue
                busy = busy or processed
                if checkpoint is not None:
                    done.append(checkpoint)
            try:
                self._checkpoints(done)
            except (Unavailable, Ambiguous) as e:
                self._journal("call_failed", error=str(e))
            if not busy:
                time.sleep(0.02)

    def _stop(self, renewer, release=True):
        """After stop() (or an unexpected exception): shut every processor down and release
        every lease (unless not release: the database refused the connection)."""
        renewer.join()
        with self.lock:
            held = sorted(self.held)
        self._journal("stopping", held=held)
        for shard in held:
            lease = self.held.get(shard)
            deadline = self._deadline(lease) if lease else 0
            try:
                if release and shard in self.unacked and shard in self.running and time.monotonic() < deadline:
                    self._checkpoint(shard, lease, self.unacked[shard], deadline)   # before the release
                if shard in self.running:
                    del self.running[shard]
                    self.processor.shutdown(shard, WORKER_STOPPED)
                if release:
                    self._journal("released", shard=shard, ok=self.db.one(RELEASE, self.key + (shard, self.owner)))
                    log.info("%s: released %s", self.owner, shard)
            except Exception as e:    # stopping anyway: this lease goes by its deadline and expiry
                self._journal("call_failed", shard=shard, error=repr(e))
                log.warning("%s: could not release %s (it expires by itself): %r", self.owner, shard, e)
        self.db.close()
        self.renew_db.close()
        if self.tx_db is not None and self.tx_db is not self.db:
            self.tx_db.close()
