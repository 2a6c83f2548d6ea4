"""The search of the interleaving explorer (test/explorer/explore.py, which
holds the protocols and the command line; test/explorer/README.md,
"Extending it", says how to add a letter, a step or an invariant).

A client's program is a word over its alphabet: calls of the protocol, and
the three letters of a transaction that spans calls:
  [  BEGIN: the client's next calls run in one transaction, which stays
     open while the other clients act;
  ]  COMMIT;   ~  ROLLBACK.
A call outside a transaction runs in a transaction of its own, as a call in
autocommit does.  A protocol may also have steps of the world, played by no
client (the clock of the leases), and letters that open a transaction
themselves (a plan with "opens").

A call whose statement would wait for a lock is seen waiting: each
statement is sent asynchronously and, while no answer has come, the server
is asked for the backends blocking it (pg_blocking_pids) and the row it
waits for (pg_locks).  It is recorded as "A waits for B", the protocol's
wait invariants are checked, and the schedule goes on with the other
clients: the waiting client makes no move until the transaction it waits
for ends (a commit or rollback releases it; the step that ended it shows
what it then answered).  A letter whose wait the protocol bounds
(Protocol.bound_ms) is waited for instead, and must answer within its
bound.  A cycle of waits among the clients is the violation `deadlock`.

The search is breadth first over nodes.  A node is quiescent when no call
waits and no open transaction has run a statement: then it is the database
state (every row and sequence of the protocol's tables, restored exactly)
plus what each client knows and which client has begun a transaction, and
two quiescent nodes with the same key are the same node (as before
transactions existed).  A node whose open transactions ran statements
cannot be restored from rows (uncommitted rows and locks live in sessions):
it is its last quiescent ancestor plus the steps taken since, and reaching
it restores that ancestor and replays those steps for real (commits
commit), each step checked to answer what it answered the first time; it is
the same node as another with the same committed state, the same view and
letters of each open transaction and the same knowledge (Engine.open_key).  Moves from the node the
database is at are undone where they can be: a call in its own transaction
is rolled back after its state is read (nothing is deferred to commit, so
what it did is what a commit keeps), a call inside an open transaction runs
in a savepoint rolled back afterwards, a commit or rollback no call waits
for only reads what it would make, and the world's steps run in a
transaction of the control connection, rolled back.  A commit or rollback
that releases a waiting call, and an error that ends a transaction some
call waits for, run for real, and the node is restored before its next move.
"""

import select
import sys
import time
from collections import deque

import psycopg2
import psycopg2.extensions as ext

BEGIN, COMMIT, ROLLBACK = "[", "]", "~"
TXN_LETTERS = BEGIN + COMMIT + ROLLBACK
SLACK_MS = 2000     # how much later than its bound a bounded wait may answer (a loaded machine)
WAIT_POLL_S = 0.01  # how long an answer may take before the explorer asks whether it waits


class Violation(Exception):
    """One invariant broken, with a sentence saying how."""

    def __init__(self, invariant, message):
        super().__init__(message)
        self.invariant = invariant
        self.message = message


FOUND = []     # the violations of the step being checked


def check(cond, invariant, message):
    """Records a Violation unless cond holds (every broken invariant of a
    step is recorded, not only the first)."""
    if not cond:
        FOUND.append(Violation(invariant, message))


class Q:
    """One statement a letter sends (yield Q(...) in Protocol.perform): SQL
    with %s parameters; `allowed`, the SQLSTATEs the letter expects, which
    come back as ("error", sqlstate)."""
    __slots__ = ("sql", "params", "allowed")

    def __init__(self, sql, params=(), allowed=()):
        self.sql, self.params, self.allowed = sql, params, allowed


class NeedReal(Exception):
    """A move that cannot be undone after all (an error ended a transaction
    some call waits for): it is run again for real."""


class Conn:
    """One client's connection, asynchronous: a statement is sent, then its
    answer waited for with a timeout, so a statement waiting for a lock can
    be seen doing so."""

    def __init__(self, dsn, options):
        self.conn = psycopg2.connect(dsn, options=options, async_=1)
        self.wait(None)
        self.cur = self.conn.cursor()
        self.pid = self.query("SELECT pg_backend_pid()")[0][0]

    def send(self, sql, params=()):
        self.cur.execute(sql, params)

    def wait(self, timeout):
        """True once the answer is in (raising the statement's error), False
        if `timeout` seconds passed first (None: no limit)."""
        while True:
            state = self.conn.poll()
            if state == ext.POLL_OK:
                return True
            if state == ext.POLL_READ:
                if not select.select([self.conn], [], [], timeout)[0]:
                    return False
            elif state == ext.POLL_WRITE:
                select.select([], [self.conn], [])

    def rows(self):
        return self.cur.fetchall() if self.cur.description else []

    def query(self, sql, params=()):
        self.send(sql, params)
        self.wait(None)
        return self.rows()

    def cancel(self):
        """Cancels the statement in progress and waits until it has ended."""
        self.conn.cancel()
        try:
            self.wait(None)
        except psycopg2.Error:
            pass


class Db:
    """One asynchronous connection per client, and a control connection
    (session_replication_role = replica) that restores states, runs the
    world's steps and watches the waits."""

    def __init__(self, dsn, clients, options):
        self.clients = [Conn(dsn, options) for _ in range(clients)]
        self.ctl = psycopg2.connect(dsn, options=options)
        self.ctl.autocommit = True
        self.ctl_rows("SET session_replication_role = replica")
        self.pids = {c.pid: i for i, c in enumerate(self.clients)}
        # a deadlock among the clients is found by the explorer, not by the
        # server's detector after 1 s (a superuser setting: kept when refused)
        for c in self.clients:
            try:
                c.query("SET deadlock_timeout = '60s'")
            except psycopg2.Error:
                pass

    def everywhere(self, sql):
        for c in self.clients:
            c.query(sql)
        self.ctl_rows(sql)

    def ctl_rows(self, sql, params=()):
        cur = self.ctl.cursor()
        cur.execute(sql, params)
        return cur.fetchall() if cur.description else []

    BLOCKED_SQL = (
        "SELECT pg_catalog.pg_blocking_pids(%(pid)s),"
        "       (SELECT ARRAY[l.relation::regclass::text, l.page::text, l.tuple::text]"
        "          FROM pg_catalog.pg_locks AS l WHERE l.pid = %(pid)s AND l.locktype = 'tuple' LIMIT 1),"
        "       (SELECT pg_catalog.string_agg(DISTINCT l.locktype, '/') FROM pg_catalog.pg_locks AS l"
        "         WHERE l.pid = %(pid)s AND NOT l.granted)")

    def blocked(self, i, row_keys):
        """Whom client i's statement waits for (client indices; -1: a
        session that is no client; () when it does not wait) and for what:
        `table key` of the row (its tuple lock, the key column from
        row_keys), else the kind of lock; one look at pg_locks."""
        pids, tup, kinds = self.ctl_rows(self.BLOCKED_SQL, {"pid": self.clients[i].pid})[0]
        blockers = tuple(sorted(set(self.pids.get(p, -1) for p in pids)))
        if not blockers:
            return blockers, None
        if tup is not None:
            rel, page, offset = tup
            col = row_keys.get(rel)
            if col is not None:
                # rel and col come from pg_locks and the protocol's own table, not from a value
                key = self.ctl_rows("SELECT " + col + "::text FROM " + rel + " WHERE ctid = %s::tid",
                                    ("(%s,%s)" % (page, offset),))
                if key:
                    return blockers, "%s %s" % (rel, key[0][0])
            return blockers, "%s (%s,%s)" % (rel, page, offset)
        return blockers, "a %s lock" % kinds if kinds else "a lock"

    def blockers(self, i):
        return self.blocked(i, {})[0]


class State:
    """What a node is besides the database: each client's knowledge
    (locals; the last entry is the world's), the facts shared by all
    (glob), the calls left, whether each client's transaction is open and
    what it sees (txn_view, read after its last statement, when the
    committed state was txn_base), which client waits (the label of its
    letter), and the committed state (view, and the snapshot to restore when
    quiescent)."""
    __slots__ = ("locals", "glob", "left", "txn", "txn_view", "txn_base", "txn_steps", "flight", "view",
                 "snapshot")

    def copy(self):
        s = State()
        s.locals = [dict(l) for l in self.locals]
        s.glob = dict(self.glob)
        s.left = list(self.left)
        s.txn = list(self.txn)
        s.txn_view = list(self.txn_view)
        s.txn_base = list(self.txn_base)
        s.txn_steps = list(self.txn_steps)
        s.flight = list(self.flight)
        s.view, s.snapshot = self.view, self.snapshot
        return s

    def quiescent(self):
        """No call waits and no open transaction has run a statement: the
        state is its rows (a transaction begun and empty changes nothing in
        the database, only what its client's next calls run in)."""
        return not any(self.flight) and not any(t and steps for t, steps in zip(self.txn, self.txn_steps))


class Node:
    __slots__ = ("state", "key", "base", "steps", "parent", "step", "depth")

    def __init__(self, state, key, base, steps, parent, step, depth):
        self.state, self.key, self.steps = state, key, steps
        self.base = base if base is not None else self
        self.parent, self.step, self.depth = parent, step, depth


class Flight:
    """A letter being performed: its generator and what it was sent with."""
    __slots__ = ("gen", "actor", "letter", "plan", "me", "in_txn", "label", "sim", "q",
                 "rows", "error", "aborted", "blockers", "resumed")


class Wait:
    """A call seen waiting: who waits (waiter, its letter and label), for
    whom (blockers: client indices), for what (lock), and for how long
    (ms, once a bounded wait answered)."""
    __slots__ = ("waiter", "letter", "label", "plan", "blockers", "lock", "ms", "blocker_steps")

    def __init__(self, waiter, letter, label, plan, blockers, lock, blocker_steps):
        self.waiter, self.letter, self.label, self.plan = waiter, letter, label, plan
        self.blockers, self.lock, self.blocker_steps = blockers, lock, blocker_steps
        self.ms = None


class Move:
    __slots__ = ("label", "told", "undo")

    def __init__(self, label, told, undo=None):
        self.label, self.told, self.undo = label, told, undo


def path_of(node):
    steps = []
    while node is not None and node.step is not None:
        steps.append(node.step)
        node = node.parent
    return list(reversed(steps))


class Engine:
    """Breadth-first search of every interleaving of every program (see the
    module's docstring); run() returns (stats, violations by invariant,
    waits)."""

    def __init__(self, proto, progress=False):
        self.proto, self.db, self.n = proto, proto.db, proto.nclients
        self.progress = progress
        self.current = None     # the node the database is at, or None
        self.started = [False] * self.n     # BEGIN sent on the client's connection
        self.flights = [None] * self.n      # the client's letter waiting for a lock
        self.lines = []         # what a step showed besides its answer
        self.expanding = None   # the node whose move is being made
        self.replaying = False
        self.waits = {}         # a distinct wait -> [count, path, wait]
        self.calls = self.states = self.replays = self.replayed = 0

    # -- the search --------------------------------------------------------

    def run(self):
        proto = self.proto
        t0 = time.monotonic()
        proto.reset()
        st = State()
        st.snapshot, st.view = proto.read_ctl()
        st.locals, st.glob, st.left = proto.initial_locals(), proto.initial_glob(), list(proto.initial_left())
        st.txn, st.txn_view, st.txn_steps = [False] * self.n, [None] * self.n, [()] * self.n
        st.txn_base = [None] * self.n
        st.flight = [None] * self.n
        root = Node(st, ("Q", tuple(st.txn)) + proto.key(st.view, st.locals, st.glob), None, (), None, None, 0)
        self.current = root
        self.seqs = proto.sequences_of(st.snapshot)
        seen = {}
        queue = deque([root])
        violations = {}
        nviolations = 0
        last_progress = t0
        while queue:
            if self.progress and time.monotonic() - last_progress >= 30:
                last_progress = time.monotonic()
                print("  %s: %.0f s, depth %d, %d states, %d calls, %d queued, %d replays"
                      % (proto.name, last_progress - t0, queue[0].depth, self.states, self.calls,
                         len(queue), self.replays), file=sys.stderr, flush=True)
            node = queue.popleft()
            known = seen.setdefault(node.key, [])
            left = tuple(node.state.left)
            if any(all(a >= b for a, b in zip(k, left)) for k in known):
                continue
            known[:] = [k for k in known if not all(a <= b for a, b in zip(k, left))]
            known.append(left)
            self.states += 1
            deferred = []
            for actor, letter in proto.moves(node.state):
                child = self.expand(node, actor, letter, sim=True)
                if child is NeedReal:
                    deferred.append((actor, letter))
                elif child is not None:
                    nviolations += self.take(child, queue, violations)
            for actor, letter in deferred:
                nviolations += self.take(self.expand(node, actor, letter, sim=False), queue, violations)
        stats = {"states": self.states, "calls": self.calls, "seconds": time.monotonic() - t0,
                 "violating_calls": nviolations, "replays": self.replays, "replayed": self.replayed}
        return stats, violations, self.waits

    @staticmethod
    def take(result, queue, violations):
        """Queues a child, or records the violations of a step; 1 when it broke one."""
        if result is None:
            return 0
        child, found = result
        if not found:
            queue.append(child)
            return 0
        for v in found:
            if v.invariant not in violations:
                violations[v.invariant] = (path_of(child.parent) + [child.step], v.message)
        return 1

    def expand(self, node, actor, letter, sim):
        """One move from node: (child, violations), None when there is
        nothing to do, NeedReal when it must run for real."""
        self.goto(node)
        self.expanding = node
        ctx = node.state.copy()
        del FOUND[:]
        self.lines = []
        self.read_seen, self.sent = None, False
        try:
            mv = self.move(ctx, actor, letter, sim)
        except NeedReal:
            self.proto.rewind(self.seqs, None)
            return NeedReal
        if mv is None:
            return None
        self.calls += 1
        if mv.undo is not None:
            mv.undo()
            self.current = node
        if mv.undo is not None and self.sent:
            # a sequence's nextval is not rolled back: set back to the node's
            self.proto.rewind(self.seqs, self.read_seen)
        ctx.left[actor] -= 1
        found = list(FOUND)
        step = (actor, letter, mv.label, mv.told, tuple(self.lines))
        if ctx.quiescent():
            child = Node(ctx, ("Q", tuple(ctx.txn)) + self.proto.key(ctx.view, ctx.locals, ctx.glob), None, (),
                         node, step, node.depth + 1)
        else:
            steps = node.steps + ((actor, letter, mv.told),)
            child = Node(ctx, self.open_key(ctx, node, steps), node.base, steps, node, step, node.depth + 1)
        if mv.undo is None:
            self.current = child
        return child, found

    def open_key(self, ctx, node, steps):
        """The key of a node with open transactions.  With no call waiting:
        what is committed, what each open transaction sees (its own rows
        over what was committed when it last ran), its letters and their
        answers (in what its client knows), and what everyone knows; two
        such nodes have the same rows,
        the same uncommitted rows in the same sessions and the same locks
        (a transaction locks what it writes, and what its letters say it
        holds, hold_lease), so the same futures.  A call waiting is a
        statement in flight, with its snapshot: then the node is its
        quiescent ancestor and the steps since."""
        if any(ctx.flight):
            return ("T", node.base.key, steps)
        proto = self.proto
        txns = tuple((ctx.txn_steps[i], proto.key(ctx.txn_view[i], ctx.locals, ctx.glob)) if ctx.txn[i] else None
                     for i in range(self.n))
        return ("S", proto.key(ctx.view, ctx.locals, ctx.glob), txns)

    def goto(self, node):
        """Puts the database (and the sessions) into node's state."""
        cur = self.current
        if cur is node:
            return
        st = node.state
        if st.quiescent() and cur is not None and cur.state.quiescent() and cur.state.snapshot == st.snapshot \
                and not any(self.started):
            self.current = node
            return
        self.reset_clients()
        self.proto.restore(node.base.state.snapshot)
        self.seqs = self.proto.sequences_of(node.base.state.snapshot)
        if node.base is not node:
            self.replays += 1
            ctx = node.base.state.copy()
            self.replaying = self.proto.replaying = True
            try:
                for actor, letter, told in node.steps:
                    self.lines = []
                    mv = self.move(ctx, actor, letter, sim=False)
                    self.replayed += 1
                    if mv is None or mv.told != told:
                        raise RuntimeError("explore: replaying %s %s answered %s, not %s as the first time,"
                                           " after %s" % (self.proto.who(actor), letter, mv and mv.told, told,
                                                          "; ".join("%s %s -> %s" % (self.proto.who(a), l, t)
                                                                    for a, l, t in node.steps)))
            finally:
                self.replaying = self.proto.replaying = False
            del FOUND[:]
            self.seqs = self.proto.current_sequences()
        self.current = node

    def reset_clients(self):
        """Every client idle: waiting statements cancelled, transactions rolled back."""
        for i, c in enumerate(self.db.clients):
            if self.flights[i] is not None:
                c.cancel()
                self.flights[i] = None
                self.started[i] = True
            if self.started[i]:
                c.query("ROLLBACK")
                self.started[i] = False

    # -- one move ----------------------------------------------------------

    def move(self, ctx, actor, letter, sim):
        """Performs one move on ctx (the node's state, copied): a Move, or
        None when there is nothing to do.  sim: undo it afterwards."""
        proto = self.proto
        if actor == self.n:
            told, undo = proto.world(ctx, letter, sim) or (None, None)
            if told is None:
                return None
            return Move(proto.world_label(letter), told, undo)
        if letter == BEGIN:
            # a transaction no call of the client's program can run in is none
            if ctx.txn[actor] or ctx.left[actor] < 2:
                return None
            self.open_txn(ctx, actor)
            return Move("%s BEGIN" % proto.who(actor), "open", (lambda: None) if sim else None)
        if letter in (COMMIT, ROLLBACK):
            # ending a transaction in which nothing ran is ending none
            if not ctx.txn[actor] or not ctx.txn_steps[actor]:
                return None
            return self.end_txn(ctx, actor, letter == COMMIT, sim and not any(self.flights))
        plan = proto.plan(actor, letter, ctx.locals, ctx.glob, ctx.txn[actor])
        if plan is None:
            return None
        if plan.get("opens"):
            if ctx.txn[actor]:
                return None
            self.open_txn(ctx, actor)
        fl = Flight()
        fl.actor, fl.letter, fl.plan, fl.sim = actor, letter, plan, sim
        fl.in_txn = ctx.txn[actor]
        fl.label = plan.get("label", letter)
        fl.me = dict(ctx.locals[actor])
        fl.aborted = fl.resumed = False
        fl.blockers = ()
        fl.gen = proto.perform(actor, letter, plan, fl.me, fl.in_txn)
        if fl.in_txn:
            ctx.txn_steps[actor] = ctx.txn_steps[actor] + (letter,)
        c = self.db.clients[actor]
        if not fl.in_txn:
            prefix = "BEGIN; "
            self.started[actor] = True
        else:
            prefix = "" if self.started[actor] else "BEGIN; "
            self.started[actor] = True
            if sim:
                prefix += "SAVEPOINT explore_step; "
        told = self.drive(ctx, fl, None, prefix)
        if told is None:
            told = "waits"
        if not sim:
            return Move(fl.label, told)

        def undo():
            blocked = self.flights[actor] is not None
            if blocked:
                c.cancel()
                self.flights[actor] = None
            if not fl.in_txn or plan.get("opens"):
                # the node had no transaction open on this connection
                if self.started[actor]:
                    c.query("ROLLBACK")
                    self.started[actor] = False
            elif blocked or not fl.aborted:
                c.query("ROLLBACK TO SAVEPOINT explore_step; RELEASE SAVEPOINT explore_step")
        return Move(fl.label, told, undo)

    def open_txn(self, ctx, actor):
        ctx.txn[actor] = True
        ctx.txn_view[actor] = ctx.txn_base[actor] = ctx.view
        ctx.txn_steps[actor] = ()
        self.proto.on_begin(ctx, actor)

    def end_txn(self, ctx, actor, commit, sim):
        """COMMIT or ROLLBACK of client actor's transaction.  sim: no call
        waits, so nothing is released: the commit's state is read in the
        transaction (what it would make committed) and nothing is sent."""
        proto, c = self.proto, self.db.clients[actor]
        label = "%s %s" % (proto.who(actor), "COMMIT" if commit else "ROLLBACK")
        before = ctx.view
        if sim:
            if commit:
                snap, view = proto.read(c) if self.started[actor] else (ctx.snapshot, ctx.view)
                proto.on_commit(ctx, actor, before)
                proto.check_committed(ctx, before, view, actor)
                ctx.view, ctx.snapshot = view, snap
            else:
                proto.on_rollback(ctx, actor)
            ctx.txn[actor], ctx.txn_view[actor], ctx.txn_base[actor], ctx.txn_steps[actor] = False, None, None, ()
            return Move(label, "committed" if commit else "rolled back", lambda: None)
        if self.started[actor]:
            c.query("COMMIT" if commit else "ROLLBACK")
            self.started[actor] = False
        ctx.txn[actor], ctx.txn_view[actor], ctx.txn_base[actor], ctx.txn_steps[actor] = False, None, None, ()
        if commit:
            proto.on_commit(ctx, actor, before)
        else:
            proto.on_rollback(ctx, actor)
        if not self.replaying:
            snap, view = proto.read_ctl()
            if commit:
                proto.check_committed(ctx, before, view, actor)
            ctx.view, ctx.snapshot = view, snap
        self.settle(ctx)
        return Move(label, "committed" if commit else "rolled back")

    # -- a letter's statements ----------------------------------------------

    def drive(self, ctx, fl, value, prefix=""):
        """Runs fl's generator on from `value` (the answer to its last
        statement): its answer (told) once it returns, or None when a
        statement waits (fl is then the client's flight)."""
        c = self.db.clients[fl.actor]
        while True:
            try:
                q = fl.gen.send(value)
            except StopIteration as e:
                return self.finish(ctx, fl, e.value)
            fl.q = q
            self.sent = True
            c.send(prefix + q.sql, q.params)
            prefix = ""
            if not self.await_answer(ctx, fl):
                self.flights[fl.actor] = fl
                ctx.flight[fl.actor] = fl.label
                return None
            value = self.answer(ctx, fl)

    def answer(self, ctx, fl):
        """The answer to fl's statement as the letter sees it: rows, or
        ("error", sqlstate) for an error it allows (which ends the
        transaction it ran in)."""
        if fl.error is None:
            return fl.rows
        e, c = fl.error, self.db.clients[fl.actor]
        if e.pgcode not in fl.q.allowed:
            raise e
        if not fl.in_txn:
            c.query("ROLLBACK; BEGIN")      # the letter's own transaction begins again
        elif fl.sim:
            c.query("ROLLBACK TO SAVEPOINT explore_step; RELEASE SAVEPOINT explore_step")
            fl.aborted = True
            if any(self.flights):
                raise NeedReal()
        else:
            c.query("ROLLBACK")
            self.started[fl.actor] = False
            fl.aborted = True
        return ("error", e.pgcode)

    def await_answer(self, ctx, fl):
        """Waits for the answer to fl's statement (True; fl.rows or fl.error
        set), or finds it waiting for a lock (False, the wait recorded).  A
        letter with a bounded wait is waited for, up to its bound."""
        c = self.db.clients[fl.actor]
        contended = any(self.started[i] or self.flights[i] is not None
                        for i in range(self.n) if i != fl.actor)
        t0 = time.monotonic()
        wait = None
        bound = self.proto.bound_ms(fl.letter)
        # a bounded wait is looked at several times within its bound, so it is seen
        poll = WAIT_POLL_S if bound is None else min(WAIT_POLL_S, bound / 4000.0)
        while True:
            try:
                if c.wait(None if not contended else poll):
                    fl.rows, fl.error = c.rows(), None
                    break
            except psycopg2.Error as e:
                fl.rows, fl.error = None, e
                break
            blockers, lock = self.db.blocked(fl.actor, self.proto.ROW_KEYS)
            if not blockers or blockers == (-1,):
                # running, or held up for a moment by a session that is no
                # client (autovacuum, another database's work): not a wait
                # of the protocol
                continue
            if wait is None:
                wait = self.seen_waiting(ctx, fl, blockers, lock)
                if bound is None:
                    return False
            if (time.monotonic() - t0) * 1000 > bound + SLACK_MS:
                FOUND.append(Violation("bounded-wait", "%s waited for %s for more than %d ms (its bound) + %d ms"
                                       % (fl.label, self.who_all(wait.blockers), bound, SLACK_MS)))
                c.cancel()
                fl.rows, fl.error = [], None
                return True
        if wait is not None:
            wait.ms = (time.monotonic() - t0) * 1000
            self.lines.append("%s answered after %.0f ms (bound %d ms)" % (self.proto.who(fl.actor), wait.ms, bound))
            check(wait.ms <= bound + SLACK_MS, "bounded-wait",
                  "%s waited %.0f ms for %s, its bound is %d ms" % (fl.label, wait.ms, self.who_all(wait.blockers),
                                                                      bound))
        return True

    def who_all(self, clients):
        return ", ".join(self.proto.who(i) if i >= 0 else "a session that is no client" for i in clients)

    def seen_waiting(self, ctx, fl, blockers, lock):
        """Records that fl's statement waits for `blockers` (on `lock`),
        checks the wait invariants and looks for a cycle of waits."""
        proto = self.proto
        fl.blockers = blockers
        w = Wait(fl.actor, fl.letter, fl.label, fl.plan, blockers, lock,
                 tuple(ctx.txn_steps[b] if b >= 0 and ctx.txn[b] else
                       (self.flights[b].letter,) if b >= 0 and self.flights[b] is not None else ()
                       for b in blockers))
        self.lines.append("%s waits for %s (%s)" % (proto.who(fl.actor), self.who_all(blockers), w.lock))
        if not self.replaying:
            key = (proto.who(fl.actor), fl.letter, w.lock.split(" ")[0],
                   tuple(sorted(set(l for steps in w.blocker_steps for l in steps))))
            entry = self.waits.setdefault(key, [0, None, w, []])
            entry[0] += 1
            entry[3].append(w)
            if entry[1] is None:
                entry[1] = (self.expanding, fl.label)
        proto.check_wait(ctx, w)
        graph = {i: (self.flights[i].blockers if self.flights[i] is not None else ()) for i in range(self.n)}
        graph[fl.actor] = blockers
        reached, todo = set(), list(blockers)
        while todo:
            i = todo.pop()
            if i == fl.actor:
                FOUND.append(Violation("deadlock", "%s waits for %s, which waits (through each other) for %s"
                                       % (proto.who(fl.actor), self.who_all(blockers), proto.who(fl.actor))))
                break
            if i >= 0 and i not in reached:
                reached.add(i)
                todo.extend(graph.get(i, ()))
        return w

    def finish(self, ctx, fl, out):
        """A letter has answered: what it learned, its effects (now, or at
        its transaction's commit), its checks, and the end of its own
        transaction."""
        proto, actor, c = self.proto, fl.actor, self.db.clients[fl.actor]
        told, effects = out
        if fl.resumed:
            self.lines.append("%s %s -> %s" % (proto.who(actor), fl.label, told))
        if fl.aborted:
            # the error ended the transaction: what it taught stays, nothing else
            ctx.txn[actor], ctx.txn_view[actor], ctx.txn_base[actor], ctx.txn_steps[actor] = False, None, None, ()
            proto.on_rollback(ctx, actor)
            proto.learn(ctx, actor, fl.me)
            proto.check_call(ctx, fl, told, ctx.view, ctx.view, committed=False)
            if not fl.sim:
                self.settle(ctx)
        elif self.replaying:
            # replaying a node already checked: what it did, not what it saw
            proto.learn(ctx, actor, fl.me)
            if not fl.in_txn:
                c.query("COMMIT")
                self.started[actor] = False
        elif not fl.in_txn:
            snap, after = proto.read(c)
            self.read_seen = snap
            proto.learn(ctx, actor, fl.me)
            proto.apply_effects(ctx, actor, effects)
            proto.check_call(ctx, fl, told, ctx.view, after, committed=True)
            ctx.view, ctx.snapshot = after, snap
            c.query("ROLLBACK" if fl.sim else "COMMIT")
            self.started[actor] = False
        else:
            self.read_seen, after = proto.read(c)
            proto.learn(ctx, actor, fl.me)
            proto.defer_effects(ctx, actor, effects)
            before = proto.txn_before(ctx.txn_view[actor], ctx.txn_base[actor], ctx.view)
            proto.check_call(ctx, fl, told, before, after, committed=False)
            ctx.txn_view[actor], ctx.txn_base[actor] = after, ctx.view
        return told

    def settle(self, ctx):
        """After a transaction ended for real: every letter that waited
        answers, or waits again, until none is running."""
        while True:
            progressed = False
            for i in range(self.n):
                fl = self.flights[i]
                if fl is None:
                    continue
                c = self.db.clients[i]
                try:
                    ready = c.wait(0)
                    fl.rows, fl.error = (c.rows(), None) if ready else (None, None)
                except psycopg2.Error as e:
                    ready, fl.rows, fl.error = True, None, e
                if not ready:
                    continue
                self.flights[i] = None
                ctx.flight[i] = None
                fl.resumed = True
                self.drive(ctx, fl, self.answer(ctx, fl))
                progressed = True
            if progressed:
                continue
            running = [i for i in range(self.n)
                       if self.flights[i] is not None and self.db.blockers(i) in ((), (-1,))]
            if not running:
                return
            time.sleep(0.001)
