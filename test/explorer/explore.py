#!/usr/bin/python3
"""Exhaustive interleaving explorer for pg_lease's two protocols, run against
the real extension (no model of it): every call below is the extension's own
function, on a real server, and every state checked is read back from its
tables.

  explore.py --dsn DSN --protocol bindings|leases [--clients N] [--calls K]
             [--roles] [--shards 2|3] [--advances N] [--weights] [--progress]
             [--restore-function F] [--retry-function F] [--checkpoint-function F]
             [--batch-function F]
             [--turn-function F] [--fast-failover] [--heartbeat]
             [--alphabets A1,A2,...] [--setting NAME=VALUE]

It deletes and re-creates the protocol's rows: give it a database of its own
(test/explorer/run.sh makes one; make test and make explore run it).

Exit status: 0 when no invariant broke, 1 when at least one did (each is
printed as its shortest counterexample), 2 on an unexpected error.

WHAT IS EXPLORED
  N clients (workers), each running a program of at most K calls, each call
  its own transaction on that client's own connection.  Programs are not
  listed one by one: a client's next call may be ANY letter of its alphabet
  (the protocol's whole alphabet, or with --roles one per client, see
  Bindings.ROLES and Leases.ROLES), so the search covers every program of
  length <= K over the alphabet for every client, combined with every
  interleaving of whole calls (a call is atomic, so the states a call can see
  are exactly the states between calls).  "interleavings" in the report
  counts those pairs (program tuple, interleaving): for N clients with K
  calls each over alphabets of A1..AN letters, multinomial(N*K; K, ..., K) *
  A1^K * ... * AN^K (times the clock's steps placed among them, for leases).

  The search is breadth first over states: a node is (the database state, what
  each client knows, how many calls each has left), the database state being
  every row of the protocol's tables and its sequences.  The extension is
  deterministic given that state (no call here ever waits: calls never
  overlap), so two nodes with the same key have the same futures and one is
  explored once.  A node whose key was already explored with at least as many
  calls left for every client is not explored again either: a program may
  stop early, so those futures are a subset.  A call that would be no call at
  all (restore with no rotation of one's own, checkpoint of no lease held)
  is skipped for the same reason.  When a node is taken from the queue the
  database is put back into its exact state (every row, every column, the
  sequences; triggers and foreign-key checks off for that restore only, with
  session_replication_role = replica).  Then each call from it runs as
  itself, in a transaction of its own on its client's connection; the state
  it produced is read inside that transaction, which is then rolled back (and
  the sequences set back), so the next call from the node starts from the
  node's state without a restore.  Nothing here is deferred to commit, so
  what a call did is exactly what a commit would have kept.  Clients with the
  same alphabet, knowledge and calls left are interchangeable: only the first
  of them moves (bindings; lease workers' names are in the state).  Breadth
  first means the first violation of an invariant found is one with the
  fewest calls: that is the counterexample printed, for each invariant.  A
  state that broke an invariant is not explored further.

BINDINGS (one tenant 'u', agent 'a', channel 'ch', no vault/environment;
  lease.tenant_limits gives the tenant a limit of 3 active sandboxes: the
  smallest that lets two rotations stand side by side, as the issue's
  sequence needs; seeded with c1 = start_conversation on 'ch'; every client
  has seen c1).  The alphabet, per client:
    R  rotate_channel from the conversation the client last saw
    F  find_channel_conversation, then rotate_channel from what it returned
       (nothing when the channel is unbound); one transaction, as no call
       can come in between: a call in between is R from a stale id
    X  restore_rotated_channel of the client's own last rotation
       (--restore-function names the function; nothing if it rotated none)
    E  end_conversation of the conversation it last saw
    T  admit_turn on the conversation it last saw (its worker starts; the
       first turn of a replacement ends what it replaced: issue 20's
       lifecycle; --turn-function names the function)
    C  confirm_rotation of the client's own last rotation (its worker
       started without a turn; nothing if it rotated none)
    Q  retry_failed_compensations() (--retry-function names the function)
    S  start_conversation on the channel (already_bound, started or refused;
       the client then has seen the conversation returned)
  Invariants, after every call (state, and what the clients were told):
    one-holder        at most one conversation holds the channel in the scope
    holder-live       the holder is pending, running or idle
    restorable-unbound
                      the channel is never unbound while a live rotation chain
                      exists that restore could have given it back to.
                      Precisely: let H be the channel's last holder (the
                      holder in the last state where the channel was bound;
                      the explorer sees every state).  If the channel is
                      unbound, H is failed, and walking from H through
                      rotated_from, crossing only failed conversations,
                      reaches a conversation that is live and holds no
                      channel, that is a violation (restore could have bound
                      that one).  An H that was ended (terminated) unbound
                      the channel on purpose: no violation.
    unbound-by-restore
                      stronger, the fixed semantics: a channel goes from bound
                      to unbound only by ending its holder (end_conversation);
                      a restore that finds no live target leaves the channel
                      with the failed replacement
    failed-queued     a restore (or retry) that answered `failed` left the pair
                      unresolved in lease.compensation_failures, and it stays
                      there until a later answer for the pair is `restored` or
                      `superseded`; after `failed` the channel is still bound
    told-rotated      `rotated`: the new conversation holds the channel, is
                      pending, rotated_from the conversation rotated from
    told-restored     `restored`: the failed replacement is failed and unbound,
                      a live conversation of its rotated_from chain holds the
                      channel
    told-superseded   `superseded` changed no binding of the channel (a
                      restore: its own answer; a retry: when none of its
                      answers is `restored`)
    told-confirmed    `confirmed`: the replacement is running and the
                      conversation it was rotated from is not live (ended by
                      the confirmation, or failed before it); `confirmed`
                      and `already_running` changed no binding of the channel
    lifecycle         no slot held forever by a conversation that was rotated
                      away from and whose replacement runs: no running or idle
                      conversation has a live rotated_from (its start, the
                      first turn or confirm_rotation, ended it)
    quota             the tenant's active sandboxes never exceed its limit

LEASES (app 'explore', stream 'st': shard 'p', shard 'c' a child of 'p',
  with --shards 3 a third shard 's'; workers w1..wN; every take and renewal
  for '1 day', lease.handoff_timeout 12 h, so no lease expires and no handoff
  deadline passes while the explorer runs).  Time is an actor of its own:
  the clock's step `A` (advance) moves every lease's expiry, handoff request
  and deadline 3 days into the past by UPDATE, and lowers
  lease.stream_workers.expires_min by the same 3 days (its lower bound must
  stay a lower bound: docs/taker-internals.md), with no trigger firing, as
  time passing fires none (lease.shard_leases_expiry_lowered would move the
  holders' leases_version); the clock has --advances steps (default 1) to
  interleave anywhere.  A worker's alphabet:
    T  take_leases(w, '1 day')            (learns the epochs of what it took)
    N  renew_leases(w, '1 day')           (learns what it holds, with epochs)
    K  take_lease of the first shard (p, c, s) it does not believe it holds
    C  update_checkpoint fenced with the epoch it knows, on the first shard
       it believes it holds with a known epoch (nothing if none)
    W  update_checkpoints: one batch, fenced, of every shard it believes it
       holds with a known epoch, in reverse shard order (nothing if none;
       --batch-function names the function)
    U  update_checkpoint unfenced on the first shard it believes it holds
       (--checkpoint-function names the function)
    R  release_lease of the first shard it believes it holds
    X  close_shard of the first shard it believes it holds
    H  request_handoff to itself of the first shard it does not hold
  With --weights the shards weigh 4, 1 and 2 (lease.set_weight) and w1
  declares capacity 2, so T is the weighted round (balancing by load,
  docs/shard-leases.md "Balancing") and C reports work as well; the
  invariants are the same, bookkeeping included (its recount covers each
  worker's load).
  With --fast-failover (docs/worker-guide.md, "Fast failover"), T and N
  declare renew_every '1 hour' (so after the clock's step every worker has
  missed a renewal) and every worker's alphabet gains
    D  its database session ends: its lease.stream_workers row records a
       process id no backend has (its next T or N records its live session
       again, as a reconnect would)
  so that leases are taken before their expiry ('session_ended') in some
  interleavings; the invariants below are the same.
  With --heartbeat (issue 23; docs/shard-leases.md, lease.heartbeat) every
  worker's alphabet gains
    B  lease.heartbeat(w, '1 day'), the worker keeping a list: its last
       renew_leases list (plus what its own takes and releases changed),
       remembered with the leases_version of the last heartbeat before that
       list.  Same version and no handoff pending: every lease on the list
       is renewed, at the epoch listed (told, as N tells).  Otherwise it
       lists again at once (renew_leases in the same transaction), and that
       list, with this heartbeat's version, is its list.  N on its own also
       makes the list, with the version of the worker's last heartbeat.
  (and with --fast-failover B declares renew_every too).  --alphabets gives
  the workers' alphabets outright (B and D appended by the flags); the state
  key keeps a remembered version as whether it is the worker's current one
  (a version never moves back).  --setting NAME=VALUE sets a setting in the
  explorer's sessions (explore_mutant.keep_version=on switches on a seeded
  defect, mutants.sql).
  The state key leaves out what no call of the alphabet decides on
  (lease_count, as no call passes a count; owner_switches_since_checkpoint)
  and keeps timestamps as what the functions compare them with: 6-hour
  buckets relative to the clock, and the order of the expiries.
  A worker "believes it holds" a shard from what it was told: taken by
  take_lease/take_leases, listed by renew_leases (which also tells it what it
  no longer holds) or renewed by a heartbeat that left its list standing;
  released or closed by its own call.  A worker writes
  checkpoints "<worker>.<n>", n counting its own writes.
  Invariants, after every step:
    one-owner         no two workers are ever told the same (shard, epoch)
    epoch-increases   a shard's lease_epoch never decreases, and strictly
                      increases whenever its owner changes; an epoch told to a
                      worker is never below one told earlier to another
    checkpoint-kept   an acknowledged checkpoint never regresses: the stored
                      checkpoint is the last acknowledged one (SHARD_END after
                      an acknowledged close) until the next acknowledgement
    checkpoint-owner  update_checkpoint is acknowledged only to the lease's
                      owner (in the state before the call)
    stale-refused     a fenced update_checkpoint with an epoch other than the
                      current one returns false and changes nothing (each
                      shard of an update_checkpoints batch too)
    batch-judged      update_checkpoints judges every shard as the fenced
                      update_checkpoint would, from the state before the
                      call: written exactly when the worker owns it at that
                      epoch and it has not ended, else refused with the
                      reason that state gives (ended, not_owner,
                      stale_token)
    lineage           the child is never owned while its parent has not ended
    taker-recount     test/lib/taker_state_check.sql returns no row
    heartbeat-list    a heartbeat that leaves the worker's list standing
                      (same leases_version, no handoff pending): the list is
                      what renew_leases answers at that moment (read in a
                      savepoint rolled back): the same shards at the same
                      epochs, none with a handoff pending, and as many as the
                      heartbeat's `leases`
"""

import argparse
import math
import os
import sys
import time
from collections import deque

import psycopg2

HERE = os.path.dirname(os.path.abspath(__file__))
LIVE = ("pending", "running", "idle")


class Violation(Exception):
    """One invariant broken, with a sentence saying how."""

    def __init__(self, invariant, message):
        super().__init__(message)
        self.invariant = invariant
        self.message = message


FOUND = []     # the violations of the call being checked


def check(cond, invariant, message):
    """Records a Violation unless cond holds (every broken invariant of a
    call is recorded, not only the first)."""
    if not cond:
        FOUND.append(Violation(invariant, message))


class Db:
    """The explorer's connections: one per client, then one more (index
    `clients`) that resets and restores states and runs the clock."""

    def __init__(self, dsn, clients, options):
        self.dsn = dsn
        self.conns = [self.connect(options) for _ in range(clients + 1)]
        self.ctl = self.conns[-1]
        self.ctl.cursor().execute("SET session_replication_role = replica")
        self.opening = [False] * len(self.conns)

    def connect(self, options):
        conn = psycopg2.connect(self.dsn, options=options)
        conn.autocommit = True
        return conn

    def everywhere(self, sql):
        for conn in self.conns:
            conn.cursor().execute(sql)

    def begin(self, i):
        """Connection i's next statement opens a transaction (sent with it:
        one round trip fewer per call)."""
        self.opening[i] = True

    def rollback(self, i):
        if self.opening[i]:
            self.opening[i] = False
        else:
            self.conns[i].cursor().execute("ROLLBACK")

    def execute(self, i, sql, params=()):
        cur = self.conns[i].cursor()
        if self.opening[i]:
            self.opening[i] = False
            sql = "BEGIN; " + sql
        cur.execute(sql, params)
        return cur

    def call(self, i, sql, params=(), allowed=()):
        """One call in connection i's open transaction: its rows, or
        ('error', sqlstate) for an error the protocol expects (the transaction
        is then rolled back and begun again: the call changed nothing).  Any
        other error stops the explorer."""
        try:
            cur = self.execute(i, sql, params)
            return cur.fetchall() if cur.description else []
        except psycopg2.Error as e:
            if e.pgcode not in allowed:
                raise
            self.conns[i].cursor().execute("ROLLBACK; BEGIN")
            return ("error", e.pgcode)

    def rows(self, i, sql, params=()):
        return self.execute(i, sql, params).fetchall()


# ---------------------------------------------------------------------------
# The search
# ---------------------------------------------------------------------------

class Node:
    __slots__ = ("snapshot", "key", "locals", "glob", "left", "parent", "step", "depth", "view")

    def __init__(self, snapshot, key, locals_, glob, left, parent, step, depth, view):
        self.snapshot, self.key, self.locals, self.glob = snapshot, key, locals_, glob
        self.left, self.parent, self.step, self.depth, self.view = left, parent, step, depth, view


def path_of(node):
    steps = []
    while node is not None and node.step is not None:
        steps.append(node.step)
        node = node.parent
    return list(reversed(steps))


def explore(proto, progress=False):
    """Breadth-first search; returns (stats, violations by invariant)."""
    t0 = time.monotonic()
    proto.reset()
    ctl = len(proto.db.conns) - 1
    snap = proto.snapshot(ctl)
    view = proto.view(ctl, snap)
    root = Node(snap, proto.key(view, proto.initial_locals(), proto.initial_glob()),
                proto.initial_locals(), proto.initial_glob(), proto.initial_left(),
                None, None, 0, view)
    seen = {}          # key -> list of 'left' tuples explored
    queue = deque([root])
    violations = {}    # invariant -> (path, message), the first (shortest) found
    nviolations = 0
    states = calls = restores = 0
    current = snap     # the state the database is in now
    last_progress = t0
    while queue:
        if progress and time.monotonic() - last_progress >= 30:
            last_progress = time.monotonic()
            print("  %s: %.0f s, depth %d, %d states, %d calls, %d queued"
                  % (proto.name, last_progress - t0, queue[0].depth, states, calls, len(queue)),
                  file=sys.stderr, flush=True)
        node = queue.popleft()
        known = seen.setdefault(node.key, [])
        if any(all(a >= b for a, b in zip(k, node.left)) for k in known):
            continue
        known[:] = [k for k in known if not all(a <= b for a, b in zip(k, node.left))]
        known.append(node.left)
        states += 1
        for actor, letter in proto.moves(node):
            locals_ = [dict(l) for l in node.locals]
            glob = dict(node.glob)
            plan = proto.plan(actor, letter, locals_, glob)
            if plan is None:
                continue   # nothing to call: the same state with fewer calls left
            if current != node.snapshot:
                proto.restore(node.snapshot)
                current = node.snapshot
                restores += 1
            calls += 1
            # The call is its own transaction on the actor's connection; the
            # state it made is read inside that transaction, which is then
            # rolled back: the database is at the node's state again for the
            # next call from it (sequences set back by rewind()).
            proto.db.begin(actor)
            snap = None
            try:
                told = proto.perform(actor, letter, plan, locals_, glob)
                snap = proto.snapshot(actor)
                view = node.view if snap == node.snapshot else proto.view(actor, snap)
            finally:
                proto.db.rollback(actor)
                proto.rewind(node.snapshot, snap)
            step = (actor, letter, plan.get("label", letter), told)
            left = list(node.left)
            left[actor] -= 1
            del FOUND[:]
            proto.check(node.view, view, actor, letter, plan, told, locals_, glob)
            if FOUND:
                # a state that broke an invariant is not explored further
                nviolations += 1
                for v in FOUND:
                    if v.invariant not in violations:
                        violations[v.invariant] = (path_of(node) + [step], v.message)
                continue
            child = Node(snap, proto.key(view, locals_, glob), locals_, glob, tuple(left),
                         node, step, node.depth + 1, view)
            queue.append(child)
    stats = {"states": states, "calls": calls, "seconds": time.monotonic() - t0,
             "violating_calls": nviolations, "restores": restores}
    return stats, violations


def interleavings(calls, alphabets, extra=0):
    """(program tuple, interleaving) pairs: the interleavings of len(alphabets)
    programs of `calls` calls and `extra` clock steps, times the programs
    (|alphabet|^calls for each client)."""
    n = len(alphabets) * calls + extra
    m = math.factorial(n) // (math.factorial(calls) ** len(alphabets) * math.factorial(extra))
    for alphabet in alphabets:
        m *= len(alphabet) ** calls
    return m


class Protocol:
    """What both protocols share: their two reads, prepared once on every
    connection (SNAPSHOT_SQL: every row to restore, as text; VIEW_SQL: what
    the invariants and the key read)."""

    SNAPSHOT_SQL = VIEW_SQL = None

    def prepare(self):
        self.db.everywhere("PREPARE explore_snapshot AS " + self.SNAPSHOT_SQL)
        self.db.everywhere("PREPARE explore_view AS " + self.VIEW_SQL)

    def snapshot(self, conn):
        return tuple(self.db.rows(conn, "EXECUTE explore_snapshot")[0])

    def view_row(self, conn):
        return self.db.rows(conn, "EXECUTE explore_view")[0]


# ---------------------------------------------------------------------------
# Channel bindings
# ---------------------------------------------------------------------------

SCOPE = ("u", "a", None, None, "ch")


class Bindings(Protocol):
    name = "bindings"
    letters = "RFXETCQS"
    limit = 3

    # --roles: every client rotates and restores its rotation; client 1
    # rotates from what it saw, ends conversations and confirms its
    # rotation, client 2 rotates from a lookup and admits turns (its worker
    # starts), client 3 rotates from a lookup and retries the queued
    # compensations.
    ROLES = ("RXEC", "FXT", "FXQ")

    def __init__(self, db, clients, calls, restore_function, retry_function, roles=False,
                 turn_function="lease.admit_turn"):
        self.db, self.nclients, self.ncalls = db, clients, calls
        self.restore_function = restore_function
        self.retry_function = retry_function
        self.turn_function = turn_function
        self.alphabets = [self.ROLES[i % len(self.ROLES)] if roles else self.letters for i in range(clients)]
        self.prepare()

    def reset(self):
        self.db.ctl.cursor().execute(
            "SET session_replication_role = origin;"
            "DELETE FROM lease.turns; DELETE FROM lease.compensation_failures;"
            "DELETE FROM lease.conversations; DELETE FROM lease.sandboxes;"
            "DELETE FROM lease.tenant_limits WHERE user_id = 'u';"
            "INSERT INTO lease.tenant_limits (user_id, sandbox_limit) VALUES ('u', %s);"
            "SELECT setval('lease.turns_id_seq', 1, false), setval('lease.conversations_id_seq', 1, false),"
            "       setval('lease.sandboxes_id_seq', 1, false),"
            "       setval('lease.compensation_failures_id_seq', 1, false);"
            "SELECT lease.start_conversation('u', 'a', NULL, NULL, 'ch');"
            "SET session_replication_role = replica", (self.limit,))

    SNAPSHOT_SQL = (
            "SELECT (SELECT coalesce(array_agg(t::text ORDER BY t.id), '{}') FROM lease.sandboxes AS t),"
            "       (SELECT coalesce(array_agg(t::text ORDER BY t.id), '{}') FROM lease.conversations AS t),"
            "       (SELECT coalesce(array_agg(t::text ORDER BY t.id), '{}') FROM lease.turns AS t),"
            "       (SELECT coalesce(array_agg(t::text ORDER BY t.id), '{}') FROM lease.compensation_failures AS t),"
            "       (SELECT array_agg(s.last_value::text || '/' || s.is_called::text) FROM ("
            "          SELECT last_value, is_called FROM lease.sandboxes_id_seq UNION ALL"
            "          SELECT last_value, is_called FROM lease.conversations_id_seq UNION ALL"
            "          SELECT last_value, is_called FROM lease.turns_id_seq UNION ALL"
            "          SELECT last_value, is_called FROM lease.compensation_failures_id_seq) AS s)")

    def view(self, conn, snapshot):
        """What the invariants and the key read (timestamps left out: no
        function's decision depends on them, and the queue's order by
        occurred_at is its order by id, calls being sequential)."""
        row = self.view_row(conn)
        convs = {}
        for cid, status, channel, rotated_from, sandbox in row[0]:
            convs[int(cid)] = {"status": status, "channel": channel,
                               "rotated_from": int(rotated_from) if rotated_from else None,
                               "sandbox": sandbox}
        queue = [(int(p), int(f), ch, st, un == "true", int(at)) for p, f, ch, st, un, at in row[1]]
        return {"convs": convs, "queue": queue, "turns": row[2], "active": row[3], "seqs": tuple(snapshot[4])}

    VIEW_SQL = (
            "SELECT (SELECT coalesce(array_agg(ARRAY[c.id::text, c.status, c.channel_id, c.rotated_from::text,"
            "                                       s.status] ORDER BY c.id), '{}')"
            "          FROM lease.conversations AS c JOIN lease.sandboxes AS s ON s.id = c.sandbox_id),"
            "       (SELECT coalesce(array_agg(ARRAY[f.previous_conversation_id::text,"
            "                                       f.failed_conversation_id::text, f.channel_id, f.sqlstate,"
            "                                       (f.resolved_at IS NULL)::text, f.attempts::text]"
            "                                 ORDER BY f.id), '{}') FROM lease.compensation_failures AS f),"
            "       (SELECT count(*) FROM lease.turns),"
            "       (SELECT count(*) FROM lease.sandboxes WHERE user_id = 'u'"
            "           AND status IN ('pending', 'starting', 'ready'))")

    def rewind(self, snapshot, moved):
        """Sequences back to the node's values (a rolled-back nextval stays)."""
        if moved is not None and moved[4] == snapshot[4]:
            return
        self.db.ctl.cursor().execute(
            "SELECT setval(s.seq, split_part(v, '/', 1)::bigint, split_part(v, '/', 2)::boolean)"
            "  FROM unnest(ARRAY['lease.sandboxes_id_seq', 'lease.conversations_id_seq',"
            "                    'lease.turns_id_seq', 'lease.compensation_failures_id_seq']::regclass[],"
            "              %s::text[]) AS s(seq, v)", (list(snapshot[4]),))

    def restore(self, snapshot):
        self.db.ctl.cursor().execute(
            "DELETE FROM lease.turns; DELETE FROM lease.compensation_failures;"
            "DELETE FROM lease.conversations; DELETE FROM lease.sandboxes;"
            "INSERT INTO lease.sandboxes OVERRIDING SYSTEM VALUE"
            "  SELECT (r::lease.sandboxes).* FROM unnest(%s::text[]) AS r;"
            "INSERT INTO lease.conversations OVERRIDING SYSTEM VALUE"
            "  SELECT (r::lease.conversations).* FROM unnest(%s::text[]) AS r;"
            "INSERT INTO lease.turns OVERRIDING SYSTEM VALUE"
            "  SELECT (r::lease.turns).* FROM unnest(%s::text[]) AS r;"
            "INSERT INTO lease.compensation_failures OVERRIDING SYSTEM VALUE"
            "  SELECT (r::lease.compensation_failures).* FROM unnest(%s::text[]) AS r",
            (list(snapshot[0]), list(snapshot[1]), list(snapshot[2]), list(snapshot[3])))
        self.rewind(snapshot, None)

    def initial_locals(self):
        return [{"seen": 1, "rot": None} for _ in range(self.nclients)]

    def initial_glob(self):
        # holder: the channel's holder in the last state where it was bound;
        # told_failed: pairs last told `failed`
        return {"holder": 1, "told_failed": frozenset()}

    def initial_left(self):
        return tuple([self.ncalls] * self.nclients)

    def key(self, view, locals_, glob):
        convs = tuple((c, v["status"], v["channel"], v["rotated_from"], v["sandbox"])
                      for c, v in sorted(view["convs"].items()))
        return (convs, tuple(view["queue"]), view["turns"], view["seqs"],
                tuple(tuple(sorted(l.items())) for l in locals_), glob["holder"], glob["told_failed"])

    def moves(self, node):
        # Client symmetry: clients with the same knowledge and the same calls
        # left are interchangeable; only the first of each such group moves.
        done = set()
        for i in range(self.nclients):
            if node.left[i] == 0:
                continue
            sig = (self.alphabets[i], tuple(sorted(node.locals[i].items(), key=str)), node.left[i])
            if sig in done:
                continue
            done.add(sig)
            for letter in self.alphabets[i]:
                yield i, letter

    def plan(self, actor, letter, locals_, glob):
        me = locals_[actor]
        if letter == "R":
            return {"from": me["seen"], "label": "R rotate_channel(from %d)" % me["seen"]}
        if letter == "F":
            return {"find": True, "label": "F find_channel_conversation + rotate_channel"}
        if letter == "X":
            if me["rot"] is None:
                return None
            p, f = me["rot"]
            return {"pair": (p, f), "label": "X %s(%d, %d)" % (self.restore_function, p, f)}
        if letter == "E":
            return {"conv": me["seen"], "label": "E end_conversation(%d)" % me["seen"]}
        if letter == "T":
            return {"conv": me["seen"], "label": "T %s(%d)" % (self.turn_function, me["seen"])}
        if letter == "C":
            if me["rot"] is None:
                return None
            p, f = me["rot"]
            return {"pair": (p, f), "label": "C confirm_rotation(%d, %d)" % (p, f)}
        if letter == "Q":
            return {"label": "Q %s()" % self.retry_function}
        if letter == "S":
            return {"label": "S start_conversation(channel ch)"}
        raise ValueError(letter)

    def perform(self, actor, letter, plan, locals_, glob):
        db, me = self.db, locals_[actor]
        if letter in "RF":
            src = plan.get("from")
            if plan.get("find"):
                r = db.call(actor, "SELECT lease.find_channel_conversation(%s, %s, %s, %s, %s)", SCOPE)
                src = r[0][0] if isinstance(r, list) else None
                plan["from"] = src
                if src is None:
                    plan["label"] = "F find_channel_conversation -> NULL (nothing to rotate)"
                    return "unbound"
                me["seen"] = src
                plan["label"] = "F find_channel_conversation -> %d, rotate_channel(from %d)" % (src, src)
            r = db.call(actor, "SELECT outcome, conversation_id FROM lease.rotate_channel(%s, %s, %s, %s, %s, %s)",
                        SCOPE + (src,))
            if isinstance(r, tuple):
                return "error %s" % r[1]
            outcome, new = r[0]
            if outcome == "rotated":
                me["seen"], me["rot"] = new, (src, new)
                return "rotated %d" % new
            return outcome
        if letter == "X":
            p, f = plan["pair"]
            r = db.call(actor, "SELECT " + self.restore_function + "(%s, %s)", (p, f))
            if isinstance(r, tuple):
                return "error %s" % r[1]
            self.told_pair(glob, (p, f), r[0][0])
            return r[0][0]
        if letter == "E":
            r = db.call(actor, "SELECT lease.end_conversation(%s)", (plan["conv"],))
            return ("error %s" % r[1]) if isinstance(r, tuple) else str(r[0][0]).lower()
        if letter == "T":
            r = db.call(actor, "SELECT " + self.turn_function + "(%s)", (plan["conv"],),
                        allowed=("55000", "22023"))
            return ("error %s" % r[1]) if isinstance(r, tuple) else "admitted"
        if letter == "C":
            r = db.call(actor, "SELECT lease.confirm_rotation(%s, %s)", plan["pair"])
            return ("error %s" % r[1]) if isinstance(r, tuple) else r[0][0]
        if letter == "Q":
            r = db.call(actor, "SELECT previous_conversation_id, failed_conversation_id, outcome"
                               "  FROM " + self.retry_function + "()")
            if isinstance(r, tuple):
                return "error %s" % r[1]
            for p, f, outcome in r:
                self.told_pair(glob, (p, f), outcome)
            plan["retried"] = [outcome for _, _, outcome in r]
            return ", ".join("(%d, %d) %s" % row for row in r) or "nothing queued"
        if letter == "S":
            r = db.call(actor, "SELECT outcome, conversation_id FROM lease.start_conversation(%s, %s, %s, %s, %s)",
                        SCOPE)
            if isinstance(r, tuple):
                return "error %s" % r[1]
            outcome, cid = r[0]
            if cid is not None:
                me["seen"] = cid
                return "%s %d" % (outcome, cid)
            return outcome
        raise ValueError(letter)

    @staticmethod
    def told_pair(glob, pair, outcome):
        failed = set(glob["told_failed"])
        if outcome == "failed":
            failed.add(pair)
        elif outcome in ("restored", "superseded"):
            failed.discard(pair)
        glob["told_failed"] = frozenset(failed)

    @staticmethod
    def holder(view):
        holders = [c for c, v in view["convs"].items() if v["channel"] == "ch"]
        check(len(holders) <= 1, "one-holder",
              "the channel is bound to %d conversations: %s" % (len(holders), holders))
        return holders[0] if holders else None

    @staticmethod
    def restorable(view, start):
        """The live, unbound conversation reached from start through
        rotated_from across failed conversations, or None."""
        convs = view["convs"]
        c = convs[start]["rotated_from"]
        while c is not None:
            v = convs[c]
            if v["status"] in LIVE:
                return c if v["channel"] is None else None
            if v["status"] != "failed":
                return None
            c = v["rotated_from"]
        return None

    def check(self, before, after, actor, letter, plan, told, locals_, glob):
        convs = after["convs"]
        was = self.holder(before)
        now = self.holder(after)
        if now is not None:
            check(convs[now]["status"] in LIVE, "holder-live",
                  "the channel is bound to conversation %d, which is %s" % (now, convs[now]["status"]))
            glob["holder"] = now
        else:
            h = glob["holder"]
            if convs[h]["status"] == "failed":
                target = self.restorable(after, h)
                if target is not None:
                    FOUND.append(Violation("restorable-unbound",
                      "the channel is bound to nothing, its last holder %d failed, and conversation %d"
                      " (live, unbound, reached from %d through rotated_from across failed conversations)"
                      " could hold it" % (h, target, h)))
            check(convs[h]["status"] == "terminated", "unbound-by-restore",
                  "the channel is bound to nothing and its last holder %d is %s, not ended"
                  % (h, convs[h]["status"]))
        check(after["active"] <= self.limit, "quota",
              "tenant u has %d active sandboxes, its limit is %d" % (after["active"], self.limit))
        for r, v in convs.items():
            p = v["rotated_from"]
            if v["status"] in ("running", "idle") and p is not None:
                check(convs[p]["status"] not in LIVE, "lifecycle",
                      "conversation %d runs, but %d, which it was rotated from, is still %s and holds"
                      " a sandbox slot nothing can restore to" % (r, p, convs[p]["status"]))
        if letter == "C":
            p, f = plan["pair"]
            if told == "confirmed":
                check(convs[f]["status"] == "running" and convs[p]["status"] not in LIVE,
                      "told-confirmed",
                      "confirm_rotation(%d, %d) answered confirmed, but %d is %s and %d is %s"
                      % (p, f, f, convs[f]["status"], p, convs[p]["status"]))
            if told in ("confirmed", "already_running"):
                check(was == now, "told-confirmed",
                      "confirm_rotation(%d, %d) answered %s, but the channel moved from %s to %s"
                      % (p, f, told, was, now))
        unresolved = {(p, f) for p, f, _, _, un, _ in after["queue"] if un}
        for pair in glob["told_failed"]:
            check(pair in unresolved, "failed-queued",
                  "restore of (%d, %d) answered failed, and the pair is not queued unresolved"
                  " in lease.compensation_failures" % pair)
        if letter in "RF" and told.startswith("rotated"):
            new = locals_[actor]["seen"]
            c = convs.get(new)
            check(c is not None and now == new and c["status"] == "pending"
                  and c["rotated_from"] == plan["from"], "told-rotated",
                  "rotate_channel answered rotated %d, but the channel is held by %s" % (new, now))
        if letter == "X":
            p, f = plan["pair"]
            if told == "restored":
                ok = (convs[f]["status"] == "failed" and convs[f]["channel"] is None and now is not None
                      and self.on_chain(after, f, now))
                check(ok, "told-restored",
                      "restore (%d, %d) answered restored, but %d is %s and the channel is held by %s"
                      % (p, f, f, convs[f]["status"], now))
            if told == "superseded":
                check(was == now, "told-superseded",
                      "restore (%d, %d) answered superseded, but the channel moved from %s to %s"
                      % (p, f, was, now))
            if told == "failed":
                check(now is not None, "failed-queued",
                      "restore (%d, %d) answered failed and left the channel bound to nothing" % (p, f))
        if letter == "Q" and "restored" not in plan.get("retried", []):
            check(was == now, "told-superseded",
                  "retry_failed_compensations restored nothing, but the channel moved from %s to %s"
                  % (was, now))

    @staticmethod
    def on_chain(view, start, target):
        c = view["convs"][start]["rotated_from"]
        while c is not None:
            if c == target:
                return True
            c = view["convs"][c]["rotated_from"]
        return False


# ---------------------------------------------------------------------------
# Shard leases
# ---------------------------------------------------------------------------

APP, STREAM, DAY = "explore", "st", "1 day"
NOBEAT = "none"     # a worker's remembered leases_version before its first heartbeat


class Leases(Protocol):
    name = "leases"
    letters = "TNKCURXHW"

    # --roles: every worker calls T N C U R; besides, w1 closes shards (X),
    # w2 takes single leases (K), w3 requests handoffs (H).  The batch (W)
    # has runs of its own (test/explorer/run.sh, --alphabets).
    ROLES = ("TNCURX", "TNCURK", "TNCURH")

    # --weights: the operator's weights of the shards, and each worker's
    # capacity (w1 declares 2), so that take_leases balances by load
    WEIGHTS = {"p": 4, "c": 1, "s": 2}

    def __init__(self, db, clients, calls, shards, advances, checkpoint_function, roles=False,
                 weights=False, fast_failover=False, heartbeat=False, alphabets=None,
                 batch_function="lease.update_checkpoints"):
        self.db, self.nclients, self.ncalls = db, clients, calls
        self.weights = weights
        self.capacities = [2.0 if i == 0 else 1.0 for i in range(clients)]
        self.roles = roles
        self.alphabets = [self.ROLES[i % len(self.ROLES)] if roles else self.letters for i in range(clients)]
        if alphabets:
            self.alphabets = [alphabets[i % len(alphabets)] for i in range(clients)]
        if heartbeat:
            self.alphabets = [a + "B" for a in self.alphabets]
        self.every = None
        if fast_failover:
            self.every = "1 hour"
            self.alphabets = [a + "D" for a in self.alphabets]
        self.shards = ["p", "c", "s"][:shards]
        self.advances = advances
        self.checkpoint_function = checkpoint_function
        self.batch_function = batch_function
        self.workers = ["w%d" % (i + 1) for i in range(clients)]
        with open(os.path.join(HERE, "..", "lib", "taker_state_check.sql")) as f:
            sql = f.read()
        db.everywhere(sql[:sql.rindex("SELECT disagreement")])
        self.prepare()

    def rewind(self, snapshot, moved):
        """Nothing: no sequence is part of a lease's state."""

    def reset(self):
        cur = self.db.ctl.cursor()
        cur.execute("SET session_replication_role = origin;"
                    "DELETE FROM lease.shard_leases WHERE app_name = %s;"
                    "DELETE FROM lease.stream_workers WHERE app_name = %s;"
                    "DELETE FROM lease.stream_takeable WHERE app_name = %s;"
                    "DELETE FROM lease.lineage_changes WHERE app_name = %s",
                    (APP, APP, APP, APP))
        cur.execute("DELETE FROM lease.worker_capacities WHERE app_name = %s", (APP,))
        for s in self.shards:
            cur.execute("SELECT lease.create_lease(%s, %s, %s, %s)",
                        (APP, STREAM, s, ["p"] if s == "c" else []))
            if self.weights:
                cur.execute("SELECT lease.set_weight(%s, %s, %s, %s)", (APP, STREAM, s, self.WEIGHTS[s]))
        if self.weights:
            # the capacities are declared once, as every round would
            cur.execute("INSERT INTO lease.worker_capacities VALUES (%s, %s, 'w1', 2)", (APP, STREAM))
        cur.execute("SET session_replication_role = replica")

    SNAPSHOT_SQL = (
            "SELECT (SELECT coalesce(array_agg(t::text ORDER BY t.shard_id), '{}') FROM lease.shard_leases AS t"
            "         WHERE t.app_name = 'explore'),"
            "       (SELECT coalesce(array_agg(t::text ORDER BY t.worker), '{}') FROM lease.stream_workers AS t"
            "         WHERE t.app_name = 'explore'),"
            "       (SELECT coalesce(array_agg(t::text), '{}') FROM lease.stream_takeable AS t"
            "         WHERE t.app_name = 'explore'),"
            "       (SELECT coalesce(array_agg(t::text), '{}') FROM lease.lineage_changes AS t"
            "         WHERE t.app_name = 'explore')")

    VIEW_SQL = (
            "SELECT (SELECT coalesce(array_agg(ARRAY[l.shard_id, l.lease_owner, l.lease_count::text, l.checkpoint,"
            "                l.checkpoint_sub_sequence::text, l.lease_epoch::text, l.handoff_to,"
            "                l.handoff_lease_duration::text, l.pending_checkpoint,"
            "                l.owner_switches_since_checkpoint::text,"
            "                floor(extract(epoch FROM l.expires_at - clock_timestamp()) / 21600)::text,"
            "                floor(extract(epoch FROM l.handoff_deadline - clock_timestamp()) / 21600)::text,"
            "                floor(extract(epoch FROM l.handoff_requested_at - clock_timestamp()) / 21600)::text,"
            "                l.expiry_rank::text] ORDER BY l.shard_id), '{}')"
            "          FROM (SELECT y.*, dense_rank() OVER (ORDER BY y.expires_at) AS expiry_rank"
            "                  FROM (SELECT x.*, GREATEST(x.lease_expires_at, (SELECT h.renewed_until"
            "                               FROM lease.stream_workers AS h WHERE h.app_name = x.app_name"
            "                                AND h.stream_name = x.stream_name AND h.worker = x.lease_owner))"
            "                               AS expires_at"
            "                          FROM lease.shard_leases AS x WHERE x.app_name = 'explore') AS y) AS l),"
            "       (SELECT coalesce(array_agg(ARRAY[w.worker, w.leases::text,"
            "                floor(extract(epoch FROM w.expires_min - clock_timestamp()) / 21600)::text,"
            "                CASE WHEN w.renew_every IS NOT NULL THEN concat_ws('/', w.renew_every,"
            "                     floor(extract(epoch FROM w.renewed_at - clock_timestamp()) / 21600),"
            "                     w.session_pid = 0) END,"
            "                (SELECT count(*) FROM lease.shard_leases AS l WHERE l.app_name = 'explore'"
            "                   AND l.lease_expires_at < w.expires_min)::text] ORDER BY w.worker), '{}')"
            "          FROM lease.stream_workers AS w WHERE w.app_name = 'explore'),"
            "       (SELECT coalesce(array_agg(t.takeable::text), '{}') FROM lease.stream_takeable AS t"
            "         WHERE t.app_name = 'explore'),"
            "       (SELECT count(*) FROM lease.lineage_changes AS g WHERE g.app_name = 'explore'),"
            "       (SELECT coalesce(array_agg(disagreement ORDER BY 1), '{}') FROM taker_disagreements),"
            "       (SELECT coalesce(array_agg(ARRAY[w.worker, w.version::text]), '{}')"
            "          FROM lease.stream_workers AS w WHERE w.app_name = 'explore')")

    def view(self, conn, snapshot):
        """What the invariants and the key read: timestamps as 6-hour buckets
        relative to now plus the order of the expiries (what the functions
        compare them with: now, a duration, each other), and the taker check."""
        row = self.view_row(conn)
        shards = {}
        for r in row[0]:
            shards[r[0]] = {"owner": r[1], "checkpoint": r[3], "epoch": int(r[5]), "row": tuple(r)}
        return {"shards": shards, "workers": tuple(tuple(w) for w in row[1]),
                "takeable": tuple(row[2]), "lineage_changes": row[3], "disagreements": list(row[4]),
                "versions": {w: int(v) for w, v in row[5]}}

    def restore(self, snapshot):
        self.db.ctl.cursor().execute(
            "DELETE FROM lease.shard_leases WHERE app_name = %(a)s;"
            "DELETE FROM lease.stream_workers WHERE app_name = %(a)s;"
            "DELETE FROM lease.stream_takeable WHERE app_name = %(a)s;"
            "DELETE FROM lease.lineage_changes WHERE app_name = %(a)s;"
            "INSERT INTO lease.shard_leases SELECT (r::lease.shard_leases).* FROM unnest(%(l)s::text[]) AS r;"
            "INSERT INTO lease.stream_workers SELECT (r::lease.stream_workers).* FROM unnest(%(w)s::text[]) AS r;"
            "INSERT INTO lease.stream_takeable SELECT (r::lease.stream_takeable).* FROM unnest(%(t)s::text[]) AS r;"
            "INSERT INTO lease.lineage_changes SELECT (r::lease.lineage_changes).* FROM unnest(%(g)s::text[]) AS r",
            {"a": APP, "l": list(snapshot[0]), "w": list(snapshot[1]), "t": list(snapshot[2]),
             "g": list(snapshot[3])})

    def initial_locals(self):
        # held: shard -> epoch known (None: held, epoch not told); writes: n;
        # hb: the leases_version of its last heartbeat, lv: the one its list
        # was made under (NOBEAT before any heartbeat: it never matches)
        locals_ = [{"held": (), "writes": 0, "hb": NOBEAT, "lv": NOBEAT} for _ in range(self.nclients)]
        locals_.append({"advances": 0})    # the clock
        return locals_

    def initial_glob(self):
        # acked: shard -> last acknowledged checkpoint; max_told: shard ->
        # (epoch, worker), the highest epoch told and to whom
        return {"acked": frozenset(), "max_told": frozenset()}

    def initial_left(self):
        return tuple([self.ncalls] * self.nclients + [self.advances])

    def key(self, view, locals_, glob):
        """Left out, as no call of the alphabet decides on them: lease_count
        (no call passes a count), owner_switches_since_checkpoint, the
        sub-sequence and pending checkpoint (always 0 and NULL here), and the
        checkpoint's value: only whether it is the acknowledged one matters,
        values being unique per write (so the writes counter is left out
        too)."""
        acked = dict(glob["acked"])
        rows = []
        for shard, v in sorted(view["shards"].items()):
            r = v["row"]
            cp = r[3] if r[3] in ("TRIM_HORIZON", "SHARD_END") else (
                "acked" if acked.get(shard) == r[3] else "other")
            rows.append((r[0], r[1], cp, r[5], r[6], r[7]) + r[10:])
        return (tuple(rows), view["workers"], view["takeable"], view["lineage_changes"],
                tuple(tuple(sorted((k, self.version_key(view, i, k, v)) for k, v in l.items() if k != "writes"))
                      for i, l in enumerate(locals_)),
                glob["max_told"])

    def version_key(self, view, i, k, v):
        """A remembered leases_version in the key: only whether it is the
        worker's current one (a version never moves back, so one that is not
        current never will be; the numbers themselves differ between paths
        to the same state)."""
        if k not in ("hb", "lv"):
            return v
        return v == view["versions"].get(self.workers[i])

    def moves(self, node):
        for i in range(self.nclients):
            if node.left[i] > 0:
                for letter in self.alphabets[i]:
                    yield i, letter
        if node.left[self.nclients] > 0:
            yield self.nclients, "A"

    @staticmethod
    def held(me):
        return dict(me["held"])

    def plan(self, actor, letter, locals_, glob):
        if letter == "A":
            return {"label": "A advance the clock 3 days"}
        me = locals_[actor]
        w = self.workers[actor]
        held = self.held(me)
        mine = [s for s in self.shards if s in held]
        others = [s for s in self.shards if s not in held]
        if letter == "T":
            return {"label": "%s take_leases" % w}
        if letter == "N":
            return {"label": "%s renew_leases" % w}
        if letter == "B":
            return {"label": "%s heartbeat" % w}
        if letter == "D":
            return {"label": "%s its session ends" % w}
        if letter == "K":
            if not others:
                return None
            return {"shard": others[0], "label": "%s take_lease(%s)" % (w, others[0])}
        if letter == "H":
            if not others:
                return None
            return {"shard": others[0], "label": "%s request_handoff(%s, to %s)" % (w, others[0], w)}
        if not mine:
            return None
        s = mine[0]
        if letter == "C":
            fenced = [x for x in mine if held[x] is not None]
            if not fenced:
                return None
            s = fenced[0]
            value = "%s.%d" % (w, me["writes"] + 1)
            return {"shard": s, "value": value, "epoch": held[s],
                    "label": "%s update_checkpoint(%s, %s, fenced epoch %d)" % (w, s, value, held[s])}
        if letter == "U":
            value = "%s.%d" % (w, me["writes"] + 1)
            return {"shard": s, "value": value,
                    "label": "%s %s(%s, %s)" % (w, self.checkpoint_function, s, value)}
        if letter == "W":
            batch = [(x, held[x]) for x in reversed(mine) if held[x] is not None]
            if not batch:
                return None
            value = "%s.%d" % (w, me["writes"] + 1)
            return {"batch": batch, "value": value,
                    "label": "%s %s(%s, %s)" % (
                        w, self.batch_function, ", ".join("%s epoch %d" % (x, e) for x, e in batch), value)}
        if letter == "R":
            return {"shard": s, "label": "%s release_lease(%s)" % (w, s)}
        if letter == "X":
            return {"shard": s, "label": "%s close_shard(%s)" % (w, s)}
        raise ValueError(letter)

    def tell(self, glob, worker, shard, epoch):
        """A worker was told it holds shard at epoch.  Epochs told only grow,
        so the highest told per shard is all the history needed: the same
        epoch told to another worker is two owners, a lower one a regression."""
        mx = dict(glob["max_told"])
        prev = mx.get(shard)
        if prev is not None and prev[1] != worker:
            if epoch == prev[0]:
                FOUND.append(Violation("one-owner", "%s and %s were both told they hold %s at epoch %d"
                                       % (prev[1], worker, shard, epoch)))
            check(epoch > prev[0], "epoch-increases",
                  "%s was told epoch %d for %s after %s was told epoch %d"
                  % (worker, epoch, shard, prev[1], prev[0]))
        if prev is None or epoch >= prev[0]:
            mx[shard] = (epoch, worker)
        glob["max_told"] = frozenset(mx.items())

    def perform(self, actor, letter, plan, locals_, glob):
        db = self.db
        if letter == "A":
            locals_[actor]["advances"] += 1
            # on the control connection, session_replication_role = replica:
            # no trigger fires, as time passing fires none (with one, moving
            # an expiry earlier would move its holder's leases_version)
            self.db.execute(
                actor,
                "UPDATE lease.shard_leases SET lease_expires_at = lease_expires_at - interval '3 days',"
                "       handoff_requested_at = handoff_requested_at - interval '3 days',"
                "       handoff_deadline = handoff_deadline - interval '3 days'"
                " WHERE app_name = %(a)s;"
                "UPDATE lease.stream_workers SET expires_min = expires_min - interval '3 days',"
                "       renewed_until = renewed_until - interval '3 days',"
                "       renewed_at = renewed_at - interval '3 days'"
                " WHERE app_name = %(a)s", {"a": APP})
            return "advanced"
        me = locals_[actor]
        w = self.workers[actor]
        held = self.held(me)
        plan["told_checks"] = []
        if letter == "B":
            return self.heartbeat(actor, plan, me)
        if letter in "TN":
            if letter == "T":
                # capacity 1 (the default) unless --weights: balancing by load
                r = db.call(actor, "SELECT shard_id, lease_epoch, action"
                            " FROM lease.take_leases(%s, %s, %s, %s, capacity => %s, renew_every => %s)",
                            (APP, STREAM, w, DAY, self.capacities[actor] if self.weights else 1.0, self.every))
            else:
                r = db.call(actor, "SELECT shard_id, lease_epoch, 'renewed' FROM lease.renew_leases(%s, %s, %s, %s, %s)",
                            (APP, STREAM, w, DAY, self.every))
            if isinstance(r, tuple):
                return "error %s" % r[1]
            if letter == "N":
                held = {}
                me["lv"] = me["hb"]     # the list, under its last heartbeat's version
            for shard, epoch, action in r:
                if action in ("taken", "renewed"):
                    held[shard] = epoch
                    plan["told_checks"].append((shard, epoch))
            me["held"] = tuple(sorted(held.items()))
            return ", ".join("%s %s@%d" % (a, s, e) for s, e, a in r) or "nothing"
        if letter == "D":
            self.db.execute(actor, "UPDATE lease.stream_workers SET session_pid = 0"
                            " WHERE app_name = %(a)s AND worker = %(w)s", {"a": APP, "w": w})
            return "ended"
        if letter == "K":
            r = db.call(actor, "SELECT lease.take_lease(%s, %s, %s, %s, NULL, %s)",
                        (APP, STREAM, plan["shard"], w, DAY))
            if isinstance(r, tuple):
                return "error %s" % r[1]
            if r[0][0] is None:
                return "not taken"
            held[plan["shard"]] = None
            me["held"] = tuple(sorted(held.items()))
            plan["taken"] = True
            return "taken (count %d)" % r[0][0]
        if letter in "CU":
            if letter == "C" and self.weights:
                # reports work too: the measured rate (the weights win)
                r = db.call(actor, "SELECT lease.update_checkpoint(%s, %s, %s, %s, %s, 0, %s, 10)",
                            (APP, STREAM, plan["shard"], w, plan["value"], plan["epoch"]))
            elif letter == "C":
                r = db.call(actor, "SELECT lease.update_checkpoint(%s, %s, %s, %s, %s, 0, %s)",
                            (APP, STREAM, plan["shard"], w, plan["value"], plan["epoch"]))
            else:
                r = db.call(actor, "SELECT " + self.checkpoint_function + "(%s, %s, %s, %s, %s, 0)",
                            (APP, STREAM, plan["shard"], w, plan["value"]))
            if isinstance(r, tuple):
                return "error %s" % r[1]
            me["writes"] += 1
            ok = bool(r[0][0])
            plan["acked"] = ok
            if ok:
                acked = dict(glob["acked"])
                acked[plan["shard"]] = plan["value"]
                glob["acked"] = frozenset(acked.items())
            return "true" if ok else "false"
        if letter == "W":
            r = db.call(actor, "SELECT shard_id, ok, reason FROM " + self.batch_function + "(%s, %s, %s,"
                        " %s::text[], %s::text[], %s::bigint[], %s::bigint[])",
                        (APP, STREAM, w, [x for x, _ in plan["batch"]], [plan["value"]] * len(plan["batch"]),
                         [0] * len(plan["batch"]), [e for _, e in plan["batch"]]))
            if isinstance(r, tuple):
                return "error %s" % r[1]
            me["writes"] += 1
            plan["results"] = [tuple(row) for row in r]
            acked = dict(glob["acked"])
            for shard, ok, _ in r:
                if ok:
                    acked[shard] = plan["value"]
            glob["acked"] = frozenset(acked.items())
            return ", ".join("%s %s" % (shard, "true" if ok else "false (%s)" % reason)
                             for shard, ok, reason in r)
        if letter in "RX":
            fn = "release_lease" if letter == "R" else "close_shard"
            r = db.call(actor, "SELECT lease." + fn + "(%s, %s, %s, %s)", (APP, STREAM, plan["shard"], w))
            if isinstance(r, tuple):
                return "error %s" % r[1]
            held.pop(plan["shard"], None)
            me["held"] = tuple(sorted(held.items()))
            if r[0][0] and letter == "X":
                acked = dict(glob["acked"])
                acked[plan["shard"]] = "SHARD_END"
                glob["acked"] = frozenset(acked.items())
            return "true" if r[0][0] else "false"
        if letter == "H":
            r = db.call(actor, "SELECT lease.request_handoff(%s, %s, %s, %s)", (APP, STREAM, plan["shard"], w))
            if isinstance(r, tuple):
                return "error %s" % r[1]
            return "true" if r[0][0] else "false"
        raise ValueError(letter)

    RENEW_SQL = "SELECT shard_id, lease_epoch, handoff_to FROM lease.renew_leases(%s, %s, %s, %s, %s)"

    def heartbeat(self, actor, plan, me):
        """B: the worker's renewal by heartbeat (docs/shard-leases.md,
        lease.heartbeat).  The same leases_version as its list's and no
        handoff pending: every lease on its list is renewed at the epoch
        listed (what renew_leases would answer then is read too, in a
        savepoint rolled back, for heartbeat-list).  Otherwise it lists again
        at once, in the same transaction: renew_leases, which becomes its
        list, under the heartbeat's version."""
        db, w = self.db, self.workers[actor]
        r = db.call(actor, "SELECT leases, leases_version, handoffs_pending"
                    " FROM lease.heartbeat(%s, %s, %s, %s, %s)", (APP, STREAM, w, DAY, self.every))
        if isinstance(r, tuple):
            return "error %s" % r[1]
        count, version, pending = r[0]
        me["hb"] = version
        said = "leases %d, version %s, %d handoff%s pending" % (
            count, version, pending, "" if pending == 1 else "s")
        if version == me["lv"] and pending == 0:
            held = self.held(me)
            plan["told_checks"] = [(s, e) for s, e in sorted(held.items()) if e is not None]
            plan["standing"] = (count, db.rows(actor, "SAVEPOINT explore_oracle; " + self.RENEW_SQL,
                                               (APP, STREAM, w, DAY, self.every)))
            db.execute(actor, "ROLLBACK TO SAVEPOINT explore_oracle")
            return "%s: the list stands, renewed %s" % (
                said, ", ".join("%s@%s" % (s, "?" if e is None else e) for s, e in sorted(held.items()))
                or "nothing")
        r = db.call(actor, self.RENEW_SQL, (APP, STREAM, w, DAY, self.every))
        if isinstance(r, tuple):
            return "%s; renew_leases: error %s" % (said, r[1])
        was, me["lv"] = me["lv"], version
        me["held"] = tuple(sorted((shard, epoch) for shard, epoch, _ in r))
        plan["told_checks"] = [(shard, epoch) for shard, epoch, _ in r]
        return "%s (list's %s): renew_leases -> %s" % (
            said, was,
            ", ".join("renewed %s@%d" % (shard, epoch) for shard, epoch, _ in r) or "nothing")

    def check(self, before, after, actor, letter, plan, told, locals_, glob):
        w = self.workers[actor] if actor < self.nclients else None
        for shard, epoch in plan.get("told_checks", []):
            self.tell(glob, w, shard, epoch)
        if plan.get("standing"):
            count, rows = plan["standing"]
            truth = {shard: epoch for shard, epoch, _ in rows}
            listed = self.held(locals_[actor])
            handoffs = [shard for shard, _, to in rows if to is not None]
            check(set(listed) == set(truth) and not handoffs and count == len(truth)
                  and all(e is None or truth[s] == e for s, e in listed.items()), "heartbeat-list",
                  "%s's heartbeat left its list standing (%s), but renew_leases answers %s (heartbeat: %d leases)"
                  % (w, ", ".join("%s@%s" % (s, e) for s, e in sorted(listed.items())) or "nothing",
                     ", ".join("%s@%d%s" % (s, e, " handoff to %s" % to if to else "") for s, e, to in rows)
                     or "nothing", count))
        if plan.get("taken"):
            s = after["shards"][plan["shard"]]
            self.tell(glob, w, plan["shard"], s["epoch"])
            if plan["shard"] == "c":
                check(before["shards"]["p"]["checkpoint"] == "SHARD_END", "lineage",
                      "take_lease(c) by %s succeeded while its parent p is at %s"
                      % (w, before["shards"]["p"]["checkpoint"]))
        for shard, a in after["shards"].items():
            b = before["shards"][shard]
            check(a["epoch"] >= b["epoch"], "epoch-increases",
                  "%s: lease_epoch went from %d to %d" % (shard, b["epoch"], a["epoch"]))
            if a["owner"] != b["owner"]:
                check(a["epoch"] > b["epoch"], "epoch-increases",
                      "%s: owner %s -> %s with lease_epoch %d -> %d"
                      % (shard, b["owner"], a["owner"], b["epoch"], a["epoch"]))
            if a["owner"] is not None:
                # an ownership seen in the state is an epoch given to that owner
                self.tell(glob, a["owner"], shard, a["epoch"])
            acked = dict(glob["acked"]).get(shard)
            if acked is not None:
                check(a["checkpoint"] == acked, "checkpoint-kept",
                      "%s: the acknowledged checkpoint is %s, the stored one %s" % (shard, acked, a["checkpoint"]))
            else:
                check(a["checkpoint"] == "TRIM_HORIZON", "checkpoint-kept",
                      "%s: checkpoint %s was never acknowledged" % (shard, a["checkpoint"]))
        if "c" in after["shards"] and after["shards"]["c"]["owner"] is not None:
            check(after["shards"]["p"]["checkpoint"] == "SHARD_END", "lineage",
                  "c is owned by %s while its parent p is at %s"
                  % (after["shards"]["c"]["owner"], after["shards"]["p"]["checkpoint"]))
        if letter in "CU" and plan.get("acked"):
            b = before["shards"][plan["shard"]]
            check(b["owner"] == w, "checkpoint-owner",
                  "update_checkpoint(%s) by %s was acknowledged, but the owner was %s"
                  % (plan["shard"], w, b["owner"]))
        if letter == "C":
            b = before["shards"][plan["shard"]]
            if plan["epoch"] != b["epoch"]:
                a = after["shards"][plan["shard"]]
                check(not plan.get("acked") and a["row"] == b["row"], "stale-refused",
                      "update_checkpoint(%s) with stale epoch %d (current %d) answered %s"
                      % (plan["shard"], plan["epoch"], b["epoch"], told))
        if letter == "W" and "results" in plan:
            check([row[0] for row in plan["results"]] == [x for x, _ in plan["batch"]], "batch-judged",
                  "update_checkpoints by %s answered for %s, asked for %s"
                  % (w, [row[0] for row in plan["results"]], [x for x, _ in plan["batch"]]))
            for (shard, epoch), (_, ok, reason) in zip(plan["batch"], plan["results"]):
                b, a = before["shards"][shard], after["shards"][shard]
                ended = b["checkpoint"] == "SHARD_END"
                want = None if b["owner"] == w and b["epoch"] == epoch and not ended else (
                    "ended" if ended else "not_owner" if b["owner"] != w else "stale_token")
                check(ok == (want is None) and reason == want, "batch-judged",
                      "update_checkpoints(%s epoch %d) by %s answered %s (%s); before the call the owner was %s"
                      " at epoch %d, checkpoint %s" % (shard, epoch, w, ok, reason, b["owner"], b["epoch"],
                                                       b["checkpoint"]))
                if ok:
                    check(b["owner"] == w, "checkpoint-owner",
                          "update_checkpoints(%s) by %s was acknowledged, but the owner was %s"
                          % (shard, w, b["owner"]))
                if epoch != b["epoch"]:
                    check(not ok and a["row"] == b["row"], "stale-refused",
                          "update_checkpoints(%s) with stale epoch %d (current %d) answered %s"
                          % (shard, epoch, b["epoch"], ok))
        check(not after["disagreements"], "taker-recount",
              "the taker's bookkeeping disagrees with a recount: %s" % "; ".join(after["disagreements"]))


# ---------------------------------------------------------------------------

def report(proto, stats, violations, clients, calls, extra):
    n = interleavings(calls, proto.alphabets, extra)
    clock = " + %d clock step%s" % (extra, "s" if extra != 1 else "") if extra else ""
    if len(set(proto.alphabets)) == 1:
        programs = "every program over the alphabet %s" % proto.alphabets[0]
    else:
        programs = "every program over the alphabets %s" % " ".join(proto.alphabets)
    broken = " (%d invariant%s broken)" % (len(violations), "s" if len(violations) > 1 else "") if violations else ""
    print("%s: %d interleavings of %d clients x %d calls%s (%s), %d violations%s, %.1f s"
          " (%d distinct states, %d calls)"
          % (proto.name, n, clients, calls, clock, programs, stats["violating_calls"], broken,
             stats["seconds"], stats["states"], stats["calls"]))
    for invariant in sorted(violations, key=lambda k: len(violations[k][0])):
        path, message = violations[invariant]
        print("  VIOLATION %s, shortest counterexample (%d calls):" % (invariant, len(path)))
        for actor, _letter, label, told in path:
            who = "clock" if label.startswith("A ") else "client %d" % (actor + 1)
            print("    %-9s %s -> %s" % (who, label, told))
        print("    broken: %s" % message)
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dsn", default="")
    ap.add_argument("--protocol", choices=("bindings", "leases"), required=True)
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--shards", type=int, default=2, choices=(2, 3))
    ap.add_argument("--advances", type=int, default=1)
    ap.add_argument("--restore-function", default="lease.restore_rotated_channel")
    ap.add_argument("--retry-function", default="lease.retry_failed_compensations",
                    help="bindings: the function Q calls (a mutant restore's own retry)")
    ap.add_argument("--checkpoint-function", default="lease.update_checkpoint")
    ap.add_argument("--batch-function", default="lease.update_checkpoints",
                    help="leases: the function W calls (a mutant batch without its guards)")
    ap.add_argument("--turn-function", default="lease.admit_turn",
                    help="bindings: the function T calls (a mutant turn that ends nothing)")
    ap.add_argument("--progress", action="store_true", help="a line on stderr every 30 s")
    ap.add_argument("--weights", action="store_true",
                    help="leases: the shards weigh 4, 1, 2 and w1 has capacity 2 (balancing by load)")
    ap.add_argument("--roles", action="store_true",
                    help="per-client alphabets (Bindings.ROLES, Leases.ROLES) instead of every letter for every client")
    ap.add_argument("--fast-failover", action="store_true",
                    help="leases: T, N and B declare renew_every, and every worker may end its session (D)")
    ap.add_argument("--heartbeat", action="store_true",
                    help="leases: every worker may renew by lease.heartbeat with its remembered list (B)")
    ap.add_argument("--alphabets", type=lambda v: v.split(","),
                    help="leases: the workers' alphabets, comma-separated (instead of --roles or every letter)")
    ap.add_argument("--setting", action="append", default=[],
                    help="NAME=VALUE, a setting of the explorer's sessions (a seeded defect's switch)")
    args = ap.parse_args()
    options = ("-c lease.handoff_timeout=43200000 -c lease.default_lease_duration=86400000"
               " -c lease.record_events=off -c client_min_messages=error")
    options += "".join(" -c " + setting for setting in args.setting)
    db = Db(args.dsn, args.clients, options)
    extra = 0
    if args.protocol == "bindings":
        proto = Bindings(db, args.clients, args.calls, args.restore_function, args.retry_function, args.roles,
                         args.turn_function)
    else:
        proto = Leases(db, args.clients, args.calls, args.shards, args.advances, args.checkpoint_function,
                       args.roles, args.weights, args.fast_failover, args.heartbeat, args.alphabets,
                       args.batch_function)
        extra = args.advances
    stats, violations = explore(proto, args.progress)
    report(proto, stats, violations, args.clients, args.calls, extra)
    return 1 if violations else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except psycopg2.Error as e:
        print("explore: unexpected error %s: %s" % (e.pgcode, e))
        sys.exit(2)
