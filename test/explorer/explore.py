#!/usr/bin/python3
"""Exhaustive interleaving explorer for pg_lease's two protocols, run against
the real extension (no model of it): every call below is the extension's own
function, on a real server, and every state checked is read back from its
tables.

  explore.py --dsn DSN --protocol bindings|leases [--clients N] [--calls K]
             [--roles] [--shards 2|3] [--advances N] [--restarts N] [--weights] [--progress]
             [--restore-function F] [--retry-function F] [--checkpoint-function F]
             [--turn-function F] [--heartbeat-function F] [--renew-function F]
             [--hold-function F] [--batch-function F] [--fast-failover] [--heartbeat] [--seed]
             [--alphabets A1,A2,...] [--setting NAME=VALUE]

It deletes and re-creates the protocol's rows: give it a database of its own
(test/explorer/run.sh makes one; make test and make explore run it).

Exit status: 0 when no invariant broke, 1 when at least one did (each is
printed as its shortest counterexample), 2 on an unexpected error.

WHAT IS EXPLORED
  N clients (workers), each running a program of at most K steps, each on
  its own connection.  Programs are not listed one by one: a client's next
  step may be ANY letter of its alphabet (the protocol's whole alphabet, or
  with --roles one per client, see Bindings.ROLES and Leases.ROLES, or
  --alphabets), so the search covers every program of length <= K over the
  alphabet for every client, combined with every interleaving of the steps.
  A call outside a transaction is its own transaction (autocommit), so the
  states it can see are exactly the states between steps.  Three letters
  make transactions that span calls (engine.py): `[` BEGIN, `]` COMMIT and
  `~` ROLLBACK; between them a client's calls run in one transaction that
  stays open while the others act, as a transactional worker, an ORM or a
  paused psql session would leave it; a program may end with it still open.
  A call that would wait for a lock is seen waiting (pg_blocking_pids, and
  the row from pg_locks), recorded as "A waits for B", checked against the
  wait invariants, and the others go on while it waits; it answers when the
  transaction it waits for ends.  "interleavings" in the report counts the
  pairs (program tuple, interleaving): for N clients with K steps each over
  alphabets of A1..AN letters, multinomial(N*K; K, ..., K) * A1^K * ... *
  AN^K (times the clock's steps placed among them, for leases), a step that
  has nothing to do counting as one; "waits" counts the calls seen waiting
  and the distinct waits are listed, each with the shortest schedule that
  reaches it.

  How the search restores states, replays open transactions and undoes
  moves is in engine.py's docstring.  Clients with the same alphabet,
  knowledge, calls left and transaction state are interchangeable: only the
  first of them moves (bindings; lease workers' names are in the state).
  Breadth first means the first violation of an invariant found is one with
  the fewest steps: that is the counterexample printed, for each invariant.
  A state that broke an invariant is not explored further.

  Every letter is a generator (perform): it yields each statement (engine.Q)
  and returns what it was told with its effects (tells, acknowledgements);
  what the client learns is its knowledge (Protocol.KNOWLEDGE), kept through
  a commit and put back by a rollback; the effects count at the commit (at
  once outside a transaction).  Invariants are checked after every call
  (check_call), after every change of the committed state (check_committed:
  an autocommit call, a commit, the world's step) and at every wait
  (check_wait; the engine itself checks `deadlock` and `bounded-wait`).

INVARIANTS OF THE TRANSACTIONS (both protocols)
  deadlock          no cycle of waits among the clients' calls
  bounded-wait      a letter whose wait the protocol bounds (bindings:
                    rotate_channel R and F by lease.rotation_lock_timeout +
                    lease.admission_lock_timeout, start_conversation S and
                    admit_turn T by lease.admission_lock_timeout) answers
                    within its bound (+ 2 s for a loaded machine); the time
                    each waited is printed

BINDINGS (one tenant 'u', agent 'a', channel 'ch', no vault/environment;
  lease.tenant_limits gives the tenant a limit of 3 active sandboxes: the
  smallest that lets two rotations stand side by side, as the restore
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
       first turn of a replacement ends what it replaced: the lifecycle
       below; --turn-function names the function)
    C  confirm_rotation of the client's own last rotation (its worker
       started without a turn; nothing if it rotated none)
    Q  retry_failed_compensations() (--retry-function names the function)
    S  start_conversation on the channel (already_bound, started or refused;
       the client then has seen the conversation returned)
    [ ] ~  a transaction (above): with --setting lease.rotation_lock_timeout
       and lease.admission_lock_timeout short, a rotation or an admission
       that meets another client's open transaction answers busy (55P03, or
       rotate_channel's `busy`) within its bound
  Invariants, after every call and every commit (state, and what the
  clients were told):
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
  Inside a transaction a call's answers are checked against what the
  transaction sees; the state invariants are checked on what is committed.

LEASES (app 'explore', stream 'st': shard 'p', shard 'c' a child of 'p',
  with --shards 3 a third shard 's'; workers w1..wN; every take and renewal
  for '1 day', lease.handoff_timeout 12 h, so no lease expires and no handoff
  deadline passes while the explorer runs).  Time is an actor of its own:
  the clock's step `A` (advance) moves every lease's expiry, handoff request
  and deadline 3 days into the past by UPDATE, and lowers
  lease.worker_holdings.expires_min by the same 3 days (its lower bound must
  stay a lower bound: docs/taker-internals.md) and the heartbeats of
  lease.stream_workers, with no trigger firing, as time passing fires none
  (lease.shard_leases_expiry_lowered would move the holders'
  leases_version); the clock has --advances steps (default 1) to
  interleave anywhere, and moves only while no open transaction holds one
  of those rows (time cannot move a row a transaction has changed and not
  committed): a lease held or changed in an open transaction expires by a
  clock step taken before it (the step also moves the server incarnation's
  first_seen back, so a restart grace is over after it).  With --restarts N
  the world has a second step, S: the server restarts, while no
  transaction is open (a restart would end them), as a new server
  incarnation first seen now and following the old one (its row of
  lease.server_incarnations, which takes judge the grace by), that lost
  every heartbeat (a heartbeat-only transaction does not wait for the WAL
  flush: lease.stream_workers' records move 3 days back); the world's
  steps share one budget, --advances + --restarts.  --seed starts from w1 holding p and w2 holding
  s (--shards 3), each having taken it, sent a heartbeat and listed its
  leases, so three steps reach further.  A worker's alphabet:
    T  take_leases(w, '1 day')            (learns the epochs of what it took)
    N  renew_leases(w, '1 day')           (learns what it holds, with epochs;
                                           --renew-function names it)
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
    P  renew_lease of the first shard it believes it holds, with the
       lease_count the table has (a worker that kept it)
    M  my_leases (read only)
    L  hold_lease of the first shard it believes it holds with a known
       epoch, inside a transaction only (--hold-function names it); an
       answer 55000 ends the transaction (the worker rolls back and drops
       the shard, docs/client-rules.md)
    E  the transactional batch begins (docs/exactly-once.md): BEGIN, the
       batch's output row (a temporary table of the session), hold_lease as
       L; the batch goes on with C (its fenced checkpoint) and ] (commit)
    [ ] ~  a transaction (above)
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
       again, as a reconnect would); outside a transaction only
  so that leases are taken before their expiry ('session_ended') in some
  interleavings; the invariants below are the same.
  With --heartbeat (docs/shard-leases.md, lease.heartbeat) every worker's
  alphabet gains
    B  lease.heartbeat(w, '1 day') (--heartbeat-function names it), the
       worker keeping a list: its last renew_leases list (plus what its own
       takes and releases changed), remembered with the leases_version of
       the last heartbeat before that list.  Same version and no handoff
       pending: every lease on the list is renewed, at the epoch listed
       (told, as N tells).  Otherwise it lists again at once (renew_leases
       in the same transaction), and that list, with this heartbeat's
       version, is its list.  N on its own also makes the list, with the
       version of the worker's last heartbeat.
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
  checkpoints "<worker>.<n>", n counting its own writes.  What a worker is
  told inside a transaction counts from its commit.
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
    renewal-honoured  a lease a worker was told it holds since the clock's
                      last step (taken, listed, renewed by its heartbeat or
                      renew_lease; committed) is never taken from it by
                      another worker before the clock moves again: a renewal
                      that raced a takeover never both stands and loses
                      (none of the alphabet's letters steals a live lease or
                      claims one past a handoff deadline, which would)
    restart-grace     a lease a worker held when the server restarted (the
                      world's step S, --restarts: a new server incarnation,
                      docs/worker-guide.md "After a restart") never passes to
                      another worker but by its holder's own call (a release,
                      a handoff) before the clock moves again (3 days, more
                      than the 1-day lease): the holder has one lease
                      duration in the new incarnation to renew
    hold-respected    while a worker's transaction holds a lease
                      (hold_lease or E answered), no other worker's call
                      changes that lease's owner or epoch, in what it sees or
                      what is committed: a takeover waits for the holder's
                      transaction to end (take_lease) or passes the lease by
                      (take_leases, SKIP LOCKED)
    batch-fenced      a batch (E ... ]) commits only while its worker holds
                      the lease at the epoch its hold_lease checked
    own-call-waits    a worker's own heartbeat B, renew_leases N,
                      renew_lease P, update_checkpoint C and U,
                      update_checkpoints W and my_leases M
                      never wait for another worker's transaction, but for
                      these exceptions (docs/shard-leases.md, "What a
                      worker's call can wait for"): B and N may wait on the
                      worker's own lease.stream_workers row while another
                      worker's transaction takes one of its leases by expiry,
                      and only when the worker's last committed renewal is
                      older than the clock's last step (its leases had
                      expired); P, C, U and W may wait on the row of a lease
                      they act on while another transaction has written or
                      locked that very lease (its takeover or a handoff
                      request of it); with --weights, C (a measured
                      checkpoint) may wait on its worker's
                      lease.worker_holdings row while another transaction
                      moves one of the worker's leases
"""

import argparse
import math
import os
import sys

import psycopg2
import psycopg2.errors

from engine import COMMIT, TXN_LETTERS, FOUND, Db, Engine, Q, Violation, check, path_of

HERE = os.path.dirname(os.path.abspath(__file__))
LIVE = ("pending", "running", "idle")


def interleavings(calls, alphabets, extra=0):
    """(program tuple, interleaving) pairs: the interleavings of len(alphabets)
    programs of `calls` steps and `extra` clock steps, times the programs
    (|alphabet|^calls for each client)."""
    n = len(alphabets) * calls + extra
    m = math.factorial(n) // (math.factorial(calls) ** len(alphabets) * math.factorial(extra))
    for alphabet in alphabets:
        m *= len(alphabet) ** calls
    return m


class Protocol:
    """What both protocols share, and what the engine asks of a protocol.

    To add a letter: a branch in plan() (None when it has nothing to do;
    "opens": True for a letter that begins a transaction itself) and in
    perform(), a generator that yields engine.Q statements and returns
    (told, effects); what it learns goes into `me` (only the KNOWLEDGE keys
    are kept), and effects are applied by apply_effects (at once, or at the
    commit inside a transaction).  To add a step of the world (the clock,
    a server restart): a letter in WORLD, world() performing it (sim: undo
    it afterwards, and return the undo; a step that cannot be undone
    returns None as its undo whatever sim says, and the engine restores the
    node before its next move) and world_label().  To add an invariant:
    check() in check_call, check_committed or check_wait."""

    SNAPSHOT_SQL = VIEW_SQL = None
    NSNAP = 0              # the number of columns of SNAPSHOT_SQL
    KNOWLEDGE = ()         # a client's locals that its own calls change
    ROW_KEYS = {}          # table -> the key column that names a row a call waits for
    WORLD = ""             # the letters of the world's steps
    replaying = False      # set by the engine while it replays steps already checked

    def prepare(self):
        self.db.everywhere("PREPARE explore_state AS SELECT * FROM (" + self.SNAPSHOT_SQL + ") AS s, ("
                           + self.VIEW_SQL + ") AS v")

    def split(self, row):
        snap = tuple(row[:self.NSNAP])
        return snap, self.view(row[self.NSNAP:], snap)

    def read(self, conn):
        """The state as client connection `conn` sees it: (snapshot, view)."""
        return self.split(conn.query("EXECUTE explore_state")[0])

    def read_ctl(self):
        """The committed state."""
        return self.split(self.db.ctl_rows("EXECUTE explore_state")[0])

    def who(self, actor):
        return "client %d" % (actor + 1)

    def world_label(self, letter):
        return letter

    def moves(self, st):
        for i in range(self.nclients):
            if st.left[i] > 0 and st.flight[i] is None:
                for letter in self.alphabets[i]:
                    yield i, letter
        if self.WORLD and st.left[self.nclients] > 0:
            for letter in self.WORLD:
                yield self.nclients, letter

    def world(self, ctx, letter, sim):
        return None

    def bound_ms(self, letter):
        return None

    # the sequences of a snapshot (None: the protocol has none)
    def sequences_of(self, snapshot):
        return None

    def current_sequences(self):
        return None

    def rewind(self, seqs, seen):
        """Sequences back to `seqs` (a rolled-back nextval stays); `seen`: a
        snapshot read after the move, or None."""

    # what a client knows, across its transactions
    def on_begin(self, ctx, actor):
        me = ctx.locals[actor]
        me["saved"] = tuple((k, me[k]) for k in self.KNOWLEDGE)
        me["pending"] = ()

    def on_commit(self, ctx, actor, before):
        me = ctx.locals[actor]
        effects = me["pending"]
        me["saved"], me["pending"] = None, ()
        self.apply_effects(ctx, actor, effects)

    def on_rollback(self, ctx, actor):
        me = ctx.locals[actor]
        if me.get("saved") is not None:
            me.update(dict(me["saved"]))
        me["saved"], me["pending"] = None, ()

    def learn(self, ctx, actor, me):
        ctx.locals[actor].update((k, me[k]) for k in self.KNOWLEDGE)

    def defer_effects(self, ctx, actor, effects):
        ctx.locals[actor]["pending"] = ctx.locals[actor]["pending"] + tuple(effects)

    def apply_effects(self, ctx, actor, effects):
        pass

    def check_call(self, ctx, fl, told, before, after, committed):
        pass

    def txn_before(self, txn_view, txn_base, latest):
        """The state a call inside a transaction starts from (the `before`
        of its check_call): what the transaction saw after its last
        statement (txn_view, when the committed state was txn_base), with
        what others committed since (latest).  By default txn_view; a
        protocol whose checks judge a call by the rows it found overlays."""
        return txn_view

    def check_committed(self, ctx, before, after, actor):
        pass

    def check_wait(self, ctx, wait):
        pass

    @staticmethod
    def txn_letters(alphabets):
        return any(c in a for a in alphabets for c in TXN_LETTERS)


# ---------------------------------------------------------------------------
# Channel bindings
# ---------------------------------------------------------------------------

SCOPE = ("u", "a", None, None, "ch")


class Bindings(Protocol):
    name = "bindings"
    letters = "RFXETCQS"
    limit = 3
    KNOWLEDGE = ("seen", "rot")
    ROW_KEYS = {"lease.conversations": "id", "lease.sandboxes": "id", "lease.admission_gate": "only_row",
                "lease.turns": "id", "lease.compensation_failures": "id"}
    NSNAP = 5

    # --roles: every client rotates and restores its rotation; client 1
    # rotates from what it saw, ends conversations and confirms its
    # rotation, client 2 rotates from a lookup and admits turns (its worker
    # starts), client 3 rotates from a lookup and retries the queued
    # compensations.
    ROLES = ("RXEC", "FXT", "FXQ")

    def __init__(self, db, clients, calls, restore_function, retry_function, roles=False,
                 turn_function="lease.admit_turn", alphabets=None):
        self.db, self.nclients, self.ncalls = db, clients, calls
        self.restore_function = restore_function
        self.retry_function = retry_function
        self.turn_function = turn_function
        self.alphabets = [self.ROLES[i % len(self.ROLES)] if roles else self.letters for i in range(clients)]
        if alphabets:
            self.alphabets = [alphabets[i % len(alphabets)] for i in range(clients)]
        # the bounds in force in the explorer's sessions (--setting), as the module reads them
        db.ctl_rows("SELECT lease.find_channel_conversation('u', 'a', NULL, NULL, 'ch')")
        bounds = dict(db.ctl_rows("SELECT name, setting::int FROM pg_catalog.pg_settings"
                                  " WHERE name IN ('lease.rotation_lock_timeout', 'lease.admission_lock_timeout')"))
        self.rotation_ms = bounds.get("lease.rotation_lock_timeout", 250)
        self.admission_ms = bounds.get("lease.admission_lock_timeout", 1000)
        self.prepare()

    def bound_ms(self, letter):
        if letter in "RF":
            return self.rotation_ms + self.admission_ms
        if letter in "ST":
            return self.admission_ms
        return None

    def reset(self):
        self.db.ctl_rows(
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

    def view(self, row, snapshot):
        """What the invariants and the key read (timestamps left out: no
        function's decision depends on them, and the queue's order by
        occurred_at is its order by id, calls being sequential)."""
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

    def sequences_of(self, snapshot):
        return tuple(snapshot[4])

    def current_sequences(self):
        return self.sequences_of(self.read_ctl()[0])

    def rewind(self, seqs, seen):
        """Sequences back to the node's values (a rolled-back nextval stays)."""
        if seen is not None and tuple(seen[4]) == seqs:
            return
        self.db.ctl_rows(
            "SELECT setval(s.seq, split_part(v, '/', 1)::bigint, split_part(v, '/', 2)::boolean)"
            "  FROM unnest(ARRAY['lease.sandboxes_id_seq', 'lease.conversations_id_seq',"
            "                    'lease.turns_id_seq', 'lease.compensation_failures_id_seq']::regclass[],"
            "              %s::text[]) AS s(seq, v)", (list(seqs),))

    def restore(self, snapshot):
        self.db.ctl_rows(
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
        self.rewind(self.sequences_of(snapshot), None)

    def initial_locals(self):
        return [{"seen": 1, "rot": None, "saved": None, "pending": ()} for _ in range(self.nclients)]

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

    def moves(self, st):
        # Client symmetry: clients with the same knowledge, calls left and
        # transaction are interchangeable; only the first of each such group
        # moves.
        done = set()
        for i in range(self.nclients):
            if st.left[i] == 0 or st.flight[i] is not None:
                continue
            sig = (self.alphabets[i], tuple(sorted(st.locals[i].items(), key=str)), st.left[i],
                   st.txn[i], st.txn_steps[i])
            if sig in done:
                continue
            done.add(sig)
            for letter in self.alphabets[i]:
                yield i, letter

    def plan(self, actor, letter, locals_, glob, in_txn):
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

    BUSY = ("55P03",)   # a bounded wait that ran out (admission is busy, conversation N is busy)

    def perform(self, actor, letter, plan, me, in_txn):
        effects = []
        if letter in "RF":
            src = plan.get("from")
            if plan.get("find"):
                r = yield Q("SELECT lease.find_channel_conversation(%s, %s, %s, %s, %s)", SCOPE)
                src = r[0][0]
                plan["from"] = src
                if src is None:
                    plan["label"] = "F find_channel_conversation -> NULL (nothing to rotate)"
                    return "unbound", effects
                me["seen"] = src
                plan["label"] = "F find_channel_conversation -> %d, rotate_channel(from %d)" % (src, src)
            r = yield Q("SELECT outcome, conversation_id FROM lease.rotate_channel(%s, %s, %s, %s, %s, %s)",
                        SCOPE + (src,), allowed=self.BUSY)
            if isinstance(r, tuple):
                return "error %s" % r[1], effects
            outcome, new = r[0]
            if outcome == "rotated":
                me["seen"], me["rot"] = new, (src, new)
                return "rotated %d" % new, effects
            return outcome, effects
        if letter == "X":
            p, f = plan["pair"]
            r = yield Q("SELECT " + self.restore_function + "(%s, %s)", (p, f))
            effects.append(("pair", (p, f), r[0][0]))
            return r[0][0], effects
        if letter == "E":
            r = yield Q("SELECT lease.end_conversation(%s)", (plan["conv"],))
            return str(r[0][0]).lower(), effects
        if letter == "T":
            r = yield Q("SELECT " + self.turn_function + "(%s)", (plan["conv"],),
                        allowed=("55000", "22023") + self.BUSY)
            return ("error %s" % r[1]) if isinstance(r, tuple) else "admitted", effects
        if letter == "C":
            r = yield Q("SELECT lease.confirm_rotation(%s, %s)", plan["pair"])
            return r[0][0], effects
        if letter == "Q":
            r = yield Q("SELECT previous_conversation_id, failed_conversation_id, outcome"
                        "  FROM " + self.retry_function + "()")
            for p, f, outcome in r:
                effects.append(("pair", (p, f), outcome))
            plan["retried"] = [outcome for _, _, outcome in r]
            return ", ".join("(%d, %d) %s" % row for row in r) or "nothing queued", effects
        if letter == "S":
            r = yield Q("SELECT outcome, conversation_id FROM lease.start_conversation(%s, %s, %s, %s, %s)",
                        SCOPE, allowed=self.BUSY)
            if isinstance(r, tuple):
                return "error %s" % r[1], effects
            outcome, cid = r[0]
            if cid is not None:
                me["seen"] = cid
                return "%s %d" % (outcome, cid), effects
            return outcome, effects
        raise ValueError(letter)

    def apply_effects(self, ctx, actor, effects):
        for _kind, pair, outcome in effects:
            self.told_pair(ctx.glob, pair, outcome)

    @staticmethod
    def told_pair(glob, pair, outcome):
        failed = set(glob["told_failed"])
        if outcome == "failed":
            failed.add(pair)
        elif outcome in ("restored", "superseded"):
            failed.discard(pair)
        glob["told_failed"] = frozenset(failed)

    def check_call(self, ctx, fl, told, before, after, committed):
        if committed:
            self.check(before, after, fl.actor, fl.letter, fl.plan, told, ctx.locals, ctx.glob)
        else:
            # what the transaction sees; the holder is tracked on committed states
            glob = dict(ctx.glob)
            for _kind, pair, outcome in ctx.locals[fl.actor]["pending"]:
                self.told_pair(glob, pair, outcome)
            self.check(before, after, fl.actor, fl.letter, fl.plan, told, ctx.locals, glob)

    def check_committed(self, ctx, before, after, actor):
        self.check(before, after, actor, COMMIT, {}, "committed", ctx.locals, ctx.glob)

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
OWN_CALLS = "BNPCUWM"   # the calls own-call-waits is about


class Leases(Protocol):
    name = "leases"
    letters = "TNKCURXHW"
    KNOWLEDGE = ("held", "writes", "hb", "lv", "hold", "batch")
    ROW_KEYS = {"lease.shard_leases": "shard_id", "lease.stream_workers": "worker",
                "lease.worker_holdings": "worker", "lease.stream_takeable": "stream_name"}
    WORLD = "A"
    NSNAP = 6

    # --roles: every worker calls T N C U R; besides, w1 closes shards (X),
    # w2 takes single leases (K), w3 requests handoffs (H).  The batch (W)
    # has runs of its own (test/explorer/run.sh, --alphabets).
    ROLES = ("TNCURX", "TNCURK", "TNCURH")

    # --weights: the operator's weights of the shards, and each worker's
    # capacity (w1 declares 2), so that take_leases balances by load
    WEIGHTS = {"p": 4, "c": 1, "s": 2}

    def __init__(self, db, clients, calls, shards, advances, checkpoint_function, roles=False,
                 weights=False, fast_failover=False, heartbeat=False, alphabets=None, seed=False,
                 heartbeat_function="lease.heartbeat", renew_function="lease.renew_leases",
                 hold_function="lease.hold_lease", batch_function="lease.update_checkpoints", restarts=0):
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
        self.transactions = self.txn_letters(self.alphabets) or any("E" in a for a in self.alphabets)
        self.shards = ["p", "c", "s"][:shards]
        self.advances = advances
        # --restarts: the world's step S, a server restart (a new server
        # incarnation), besides the clock's A; the world's steps share one
        # budget, advances + restarts
        self.restarts = restarts
        if restarts:
            self.WORLD = "AS"
        self.checkpoint_function = checkpoint_function
        self.heartbeat_function = heartbeat_function
        self.renew_function = renew_function
        self.hold_function = hold_function
        self.seed = seed
        self.seeded = {}
        self.batch_function = batch_function
        self.workers = ["w%d" % (i + 1) for i in range(clients)]
        with open(os.path.join(HERE, "..", "lib", "taker_state_check.sql")) as f:
            sql = f.read()
        db.everywhere(sql[:sql.rindex("SELECT disagreement")])
        for c in db.clients:
            c.query("CREATE TEMPORARY TABLE explore_output (worker text, shard_id text, lease_epoch bigint)")
        self.prepare()

    def who(self, actor):
        return self.workers[actor] if actor < self.nclients else "clock"

    def world_label(self, letter):
        if letter == "S":
            return "S the server restarts (a new incarnation)"
        return "A advance the clock 3 days"

    def reset(self):
        self.db.ctl_rows("SET session_replication_role = origin;"
                         "DELETE FROM lease.shard_leases WHERE app_name = %s;"
                         "DELETE FROM lease.stream_workers WHERE app_name = %s;"
                         "DELETE FROM lease.worker_holdings WHERE app_name = %s;"
                         "DELETE FROM lease.stream_takeable WHERE app_name = %s;"
                         "DELETE FROM lease.lineage_changes WHERE app_name = %s",
                         (APP, APP, APP, APP, APP))
        self.db.ctl_rows("DELETE FROM lease.worker_capacities WHERE app_name = %s", (APP,))
        # the server incarnation, recorded afresh (a heartbeat of a worker
        # with no leases writes nothing else): the first one, no grace
        self.db.ctl_rows("DELETE FROM lease.server_incarnations;"
                         "SELECT count(*) FROM lease.heartbeat(%s, %s, 'w0', %s)", (APP, STREAM, DAY))
        for s in self.shards:
            self.db.ctl_rows("SELECT lease.create_lease(%s, %s, %s, %s)", (APP, STREAM, s, ["p"] if s == "c" else []))
            if self.weights:
                self.db.ctl_rows("SELECT lease.set_weight(%s, %s, %s, %s)", (APP, STREAM, s, self.WEIGHTS[s]))
        if self.weights:
            # the capacities are declared once, as every round would
            self.db.ctl_rows("INSERT INTO lease.worker_capacities VALUES (%s, %s, 'w1', 2)", (APP, STREAM))
        if self.seed:
            # w1 holds p, w2 holds s: each took it, sent a heartbeat, listed its leases
            for actor, shard in ((0, "p"), (1, "s")):
                w = self.workers[actor]
                self.db.ctl_rows("SELECT lease.take_lease(%s, %s, %s, %s, NULL, %s)", (APP, STREAM, shard, w, DAY))
                version = self.db.ctl_rows("SELECT leases_version FROM lease.heartbeat(%s, %s, %s, %s)",
                                           (APP, STREAM, w, DAY))[0][0]
                listed = self.db.ctl_rows("SELECT shard_id, lease_epoch FROM lease.renew_leases(%s, %s, %s, %s)",
                                          (APP, STREAM, w, DAY))
                self.seeded[actor] = (tuple(sorted(listed)), version)
        self.db.ctl_rows("SET session_replication_role = replica")

    SNAPSHOT_SQL = (
            "SELECT (SELECT coalesce(array_agg(t::text ORDER BY t.shard_id), '{}') FROM lease.shard_leases AS t"
            "         WHERE t.app_name = 'explore'),"
            "       (SELECT coalesce(array_agg(t::text ORDER BY t.worker), '{}') FROM lease.stream_workers AS t"
            "         WHERE t.app_name = 'explore'),"
            "       (SELECT coalesce(array_agg(t::text ORDER BY t.worker), '{}') FROM lease.worker_holdings AS t"
            "         WHERE t.app_name = 'explore'),"
            "       (SELECT coalesce(array_agg(t::text), '{}') FROM lease.stream_takeable AS t"
            "         WHERE t.app_name = 'explore'),"
            "       (SELECT coalesce(array_agg(t::text), '{}') FROM lease.lineage_changes AS t"
            "         WHERE t.app_name = 'explore'),"
            "       (SELECT coalesce(array_agg(t::text), '{}') FROM lease.server_incarnations AS t)")

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
            "                          FROM lease.shard_leases AS x WHERE x.app_name = 'explore') AS y) AS l) AS shards,"
            "       (SELECT coalesce(array_agg(ARRAY[w.worker, w.leases::text,"
            "                floor(extract(epoch FROM w.expires_min - clock_timestamp()) / 21600)::text,"
            "                CASE WHEN b.renew_every IS NOT NULL THEN concat_ws('/', b.renew_every,"
            "                     floor(extract(epoch FROM b.renewed_at - clock_timestamp()) / 21600),"
            "                     b.session_pid = 0) END,"
            "                (SELECT count(*) FROM lease.shard_leases AS l WHERE l.app_name = 'explore'"
            "                   AND l.lease_expires_at < w.expires_min)::text] ORDER BY w.worker), '{}')"
            "          FROM lease.worker_holdings AS w LEFT JOIN lease.stream_workers AS b"
            "            ON b.app_name = w.app_name AND b.stream_name = w.stream_name AND b.worker = w.worker"
            "         WHERE w.app_name = 'explore') AS workers,"
            "       (SELECT coalesce(array_agg(t.takeable::text), '{}') FROM lease.stream_takeable AS t"
            "         WHERE t.app_name = 'explore') AS takeable,"
            "       (SELECT count(*) FROM lease.lineage_changes AS g WHERE g.app_name = 'explore') AS changes,"
            "       (SELECT coalesce(array_agg(disagreement ORDER BY 1), '{}') FROM taker_disagreements) AS recount,"
            "       (SELECT coalesce(array_agg(ARRAY[w.worker, w.version::text]), '{}')"
            "          FROM lease.worker_holdings AS w WHERE w.app_name = 'explore') AS versions,"
            "       (SELECT concat_ws('/', floor(extract(epoch FROM i.first_seen - clock_timestamp()) / 21600),"
            "                         i.follows IS NOT NULL)"
            "          FROM lease.server_incarnations AS i ORDER BY i.first_seen DESC LIMIT 1) AS incarnation")

    def view(self, row, snapshot):
        """What the invariants and the key read: timestamps as 6-hour buckets
        relative to now plus the order of the expiries (what the functions
        compare them with: now, a duration, each other), and the taker check."""
        shards = {}
        for r in row[0]:
            shards[r[0]] = {"owner": r[1], "checkpoint": r[3], "epoch": int(r[5]), "row": tuple(r)}
        return {"shards": shards, "workers": tuple(tuple(w) for w in row[1]),
                "takeable": tuple(row[2]), "lineage_changes": row[3], "disagreements": list(row[4]),
                "versions": {w: int(v) for w, v in row[5]}, "incarnation": row[6]}

    def restore(self, snapshot):
        self.db.ctl_rows(
            "DELETE FROM lease.shard_leases WHERE app_name = %(a)s;"
            "DELETE FROM lease.stream_workers WHERE app_name = %(a)s;"
            "DELETE FROM lease.worker_holdings WHERE app_name = %(a)s;"
            "DELETE FROM lease.stream_takeable WHERE app_name = %(a)s;"
            "DELETE FROM lease.lineage_changes WHERE app_name = %(a)s;"
            "DELETE FROM lease.server_incarnations;"
            "INSERT INTO lease.server_incarnations SELECT (r::lease.server_incarnations).* FROM unnest(%(i)s::text[]) AS r;"
            "INSERT INTO lease.shard_leases SELECT (r::lease.shard_leases).* FROM unnest(%(l)s::text[]) AS r;"
            "INSERT INTO lease.stream_workers SELECT (r::lease.stream_workers).* FROM unnest(%(w)s::text[]) AS r;"
            "INSERT INTO lease.worker_holdings SELECT (r::lease.worker_holdings).* FROM unnest(%(h)s::text[]) AS r;"
            "INSERT INTO lease.stream_takeable SELECT (r::lease.stream_takeable).* FROM unnest(%(t)s::text[]) AS r;"
            "INSERT INTO lease.lineage_changes SELECT (r::lease.lineage_changes).* FROM unnest(%(g)s::text[]) AS r",
            {"a": APP, "l": list(snapshot[0]), "w": list(snapshot[1]), "h": list(snapshot[2]),
             "t": list(snapshot[3]), "g": list(snapshot[4]), "i": list(snapshot[5])})

    def initial_locals(self):
        # held: shard -> epoch known (None: held, epoch not told); writes: n;
        # hb: the leases_version of its last heartbeat, lv: the one its list
        # was made under (NOBEAT before any heartbeat: it never matches);
        # hold, batch: (shard, epoch) its open transaction holds / its batch;
        # fresh: the shards it was told it holds since the clock's last
        # step, committed; beat: its last committed renewal is since then;
        # session: the session its row records is alive (--fast-failover:
        # D ends it, a take or renewal given renew_every records it again)
        locals_ = []
        for i in range(self.nclients):
            me = {"held": (), "writes": 0, "hb": NOBEAT, "lv": NOBEAT, "hold": None, "batch": None,
                  "fresh": (), "beat": False, "session": True, "saved": None, "pending": ()}
            if i in self.seeded:
                listed, version = self.seeded[i]
                me.update(held=listed, hb=version, lv=version, fresh=tuple(s for s, _ in listed), beat=True)
            locals_.append(me)
        # the world: the clock's advances, the restarts, and the grace: the
        # (shard, owner) pairs of the last restart until the clock moves
        locals_.append({"advances": 0, "restarts": 0, "grace": ()})
        return locals_

    def initial_glob(self):
        # acked: shard -> last acknowledged checkpoint; max_told: shard ->
        # (epoch, worker), the highest epoch told and to whom
        mx = {}
        for i, (listed, _version) in self.seeded.items():
            for shard, epoch in listed:
                mx[shard] = (epoch, self.workers[i])
        return {"acked": frozenset(), "max_told": frozenset(mx.items())}

    def initial_left(self):
        return tuple([self.ncalls] * self.nclients + [self.advances + self.restarts])

    def key(self, view, locals_, glob):
        """Left out, as no call of the alphabet decides on them: lease_count
        (no call passes a count), owner_switches_since_checkpoint, the
        sub-sequence and pending checkpoint (always 0 and NULL here), and the
        checkpoint's value: only whether it is the acknowledged one matters,
        values being unique per write (so the writes counter is left out
        too).  What a worker was told since the clock moved (fresh, beat)
        only counts with transactions, where a renewal can race a takeover."""
        acked = dict(glob["acked"])
        rows = []
        for shard, v in sorted(view["shards"].items()):
            r = v["row"]
            cp = r[3] if r[3] in ("TRIM_HORIZON", "SHARD_END") else (
                "acked" if acked.get(shard) == r[3] else "other")
            rows.append((r[0], r[1], cp, r[5], r[6], r[7]) + r[10:])
        skip = ("writes",) if self.transactions else ("writes", "fresh", "beat", "session")
        return (tuple(rows), view["workers"], view["takeable"], view["lineage_changes"], view["incarnation"],
                tuple(tuple(sorted((k, self.version_key(view, i, k, v)) for k, v in l.items() if k not in skip))
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

    @staticmethod
    def held(me):
        return dict(me["held"])

    def plan(self, actor, letter, locals_, glob, in_txn):
        me = locals_[actor]
        w = self.workers[actor]
        held = self.held(me)
        mine = [s for s in self.shards if s in held]
        others = [s for s in self.shards if s not in held]
        fenced = [x for x in mine if held[x] is not None]
        if letter == "T":
            return {"label": "%s take_leases" % w}
        if letter == "N":
            return {"label": "%s renew_leases" % w}
        if letter == "B":
            return {"label": "%s heartbeat" % w}
        if letter == "M":
            return {"label": "%s my_leases" % w}
        if letter == "D":
            return None if in_txn else {"label": "%s its session ends" % w}
        if letter == "K":
            if not others:
                return None
            return {"shard": others[0], "label": "%s take_lease(%s)" % (w, others[0])}
        if letter == "H":
            if not others:
                return None
            return {"shard": others[0], "label": "%s request_handoff(%s, to %s)" % (w, others[0], w)}
        if letter in "LE":
            if not fenced or me["hold"] is not None or (letter == "L") != in_txn:
                return None
            s = fenced[0]
            if letter == "L":
                return {"shard": s, "epoch": held[s],
                        "label": "%s %s(%s, epoch %d)" % (w, self.hold_function, s, held[s])}
            return {"shard": s, "epoch": held[s], "opens": True,
                    "label": "%s batch: BEGIN, output, %s(%s, epoch %d)" % (w, self.hold_function, s, held[s])}
        if not mine:
            return None
        s = mine[0]
        if letter == "C":
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
        if letter == "P":
            return {"shard": s, "label": "%s renew_lease(%s)" % (w, s)}
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

    def world(self, ctx, letter, sim):
        if letter == "S":
            return self.restart(ctx, sim)
        return self.advance(ctx, sim)

    def restart(self, ctx, sim):
        """S: the server restarts, with no transaction open (a restart ends
        every session; the explorer's clients then reconnect, and what they
        were told stands): the server incarnation is new, first seen now and
        following the old one.  The incarnation's row is what the functions
        judge the grace by (a take reads it each time), so the step writes
        it on the control connection, as the new incarnation's first call
        would.  The leases held at that moment are the grace's: until the
        clock moves (3 days, more than the 1-day leases), none of them may
        pass to another worker but by its holder's own call."""
        world = ctx.locals[self.nclients]
        if world["restarts"] >= self.restarts or any(ctx.txn) or any(ctx.flight):
            return None
        # A transaction that only sent a heartbeat commits without waiting
        # for the WAL flush, so the restart may lose the heartbeats: the
        # worst case, every one (each worker's record goes back past its
        # leases), while what the workers were told stands.
        self.db.ctl_rows(
            "BEGIN;"
            "UPDATE lease.server_incarnations SET first_seen = clock_timestamp(),"
            "       follows = incarnation || ' (before the restart)'"
            " WHERE first_seen = (SELECT max(first_seen) FROM lease.server_incarnations);"
            "UPDATE lease.stream_workers SET renewed_until = renewed_until - interval '3 days',"
            "       renewed_at = renewed_at - interval '3 days'"
            " WHERE app_name = %(a)s", {"a": APP})
        world["restarts"] += 1
        world["grace"] = tuple(sorted((s, v["owner"]) for s, v in ctx.view["shards"].items()
                                      if v["owner"] is not None))
        return self.world_done(ctx, sim, "restarted")

    def world_done(self, ctx, sim, told):
        """The end of a world's step begun on the control connection."""
        if not self.replaying:
            snap, view = self.read_ctl()
            self.check_state(ctx, ctx.view, view, self.nclients)
            ctx.view, ctx.snapshot = view, snap
        if sim:
            return told, lambda: self.db.ctl_rows("ROLLBACK")
        self.db.ctl_rows("COMMIT")
        return told, None

    def advance(self, ctx, sim):
        """A: the clock moves 3 days, on the control connection
        (session_replication_role = replica: no trigger fires, as time
        passing fires none), unless an open transaction holds one of the
        rows it moves."""
        try:
            self.db.ctl_rows(
                "BEGIN;"
                "SELECT 1 FROM lease.shard_leases WHERE app_name = %(a)s FOR NO KEY UPDATE NOWAIT;"
                "SELECT 1 FROM lease.worker_holdings WHERE app_name = %(a)s FOR NO KEY UPDATE NOWAIT;"
                "SELECT 1 FROM lease.stream_workers WHERE app_name = %(a)s FOR NO KEY UPDATE NOWAIT", {"a": APP})
        except psycopg2.errors.LockNotAvailable:
            self.db.ctl_rows("ROLLBACK")
            return None
        self.db.ctl_rows(
            "UPDATE lease.shard_leases SET lease_expires_at = lease_expires_at - interval '3 days',"
            "       handoff_requested_at = handoff_requested_at - interval '3 days',"
            "       handoff_deadline = handoff_deadline - interval '3 days'"
            " WHERE app_name = %(a)s;"
            "UPDATE lease.worker_holdings SET expires_min = expires_min - interval '3 days'"
            " WHERE app_name = %(a)s;"
            "UPDATE lease.stream_workers SET renewed_until = renewed_until - interval '3 days',"
            "       renewed_at = renewed_at - interval '3 days'"
            " WHERE app_name = %(a)s;"
            "UPDATE lease.server_incarnations SET first_seen = first_seen - interval '3 days'", {"a": APP})
        ctx.locals[self.nclients]["advances"] += 1
        ctx.locals[self.nclients]["grace"] = ()
        for me in ctx.locals[:self.nclients]:
            me["fresh"], me["beat"] = (), False
        return self.world_done(ctx, sim, "advanced")

    RENEW_SQL = "SELECT shard_id, lease_epoch, handoff_to FROM lease.renew_leases(%s, %s, %s, %s, %s)"

    def perform(self, actor, letter, plan, me, in_txn):
        w = self.workers[actor]
        held = self.held(me)
        eff = []
        if letter == "B":
            return (yield from self.heartbeat(actor, plan, me))
        if letter in "TN":
            if letter == "T":
                # capacity 1 (the default) unless --weights: balancing by load
                r = yield Q("SELECT shard_id, lease_epoch, action"
                            " FROM lease.take_leases(%s, %s, %s, %s, capacity => %s, renew_every => %s)",
                            (APP, STREAM, w, DAY, self.capacities[actor] if self.weights else 1.0, self.every))
            else:
                r = yield Q("SELECT shard_id, lease_epoch, 'renewed' FROM " + self.renew_function
                            + "(%s, %s, %s, %s, %s)", (APP, STREAM, w, DAY, self.every))
            if letter == "N":
                held = {}
                me["lv"] = me["hb"]     # the list, under its last heartbeat's version
            for shard, epoch, action in r:
                if action in ("taken", "renewed"):
                    held[shard] = epoch
                    eff.append(("tell", shard, epoch))
            if letter == "N":
                eff += [("held", tuple(sorted(held))), ("beat",)]
            if self.every:
                eff.append(("session", True))
            me["held"] = tuple(sorted(held.items()))
            return ", ".join("%s %s@%d" % (a, s, e) for s, e, a in r) or "nothing", eff
        if letter == "D":
            yield Q("UPDATE lease.stream_workers SET session_pid = 0"
                    " WHERE app_name = %(a)s AND worker = %(w)s", {"a": APP, "w": w})
            return "ended", [("session", False)]
        if letter == "K":
            r = yield Q("SELECT lease.take_lease(%s, %s, %s, %s, NULL, %s)", (APP, STREAM, plan["shard"], w, DAY))
            if r[0][0] is None:
                return "not taken", eff
            held[plan["shard"]] = None
            me["held"] = tuple(sorted(held.items()))
            plan["taken"] = True
            return "taken (count %d)" % r[0][0], eff
        if letter in "CU":
            if letter == "C" and self.weights:
                # reports work too: the measured rate (the weights win)
                r = yield Q("SELECT lease.update_checkpoint(%s, %s, %s, %s, %s, 0, %s, 10)",
                            (APP, STREAM, plan["shard"], w, plan["value"], plan["epoch"]))
            elif letter == "C":
                r = yield Q("SELECT lease.update_checkpoint(%s, %s, %s, %s, %s, 0, %s)",
                            (APP, STREAM, plan["shard"], w, plan["value"], plan["epoch"]))
            else:
                r = yield Q("SELECT " + self.checkpoint_function + "(%s, %s, %s, %s, %s, 0)",
                            (APP, STREAM, plan["shard"], w, plan["value"]))
            me["writes"] += 1
            ok = bool(r[0][0])
            plan["acked"] = ok
            if ok:
                eff.append(("ack", plan["shard"], plan["value"]))
            return "true" if ok else "false", eff
        if letter == "W":
            r = yield Q("SELECT shard_id, ok, reason FROM " + self.batch_function + "(%s, %s, %s,"
                        " %s::text[], %s::text[], %s::bigint[], %s::bigint[])",
                        (APP, STREAM, w, [x for x, _ in plan["batch"]], [plan["value"]] * len(plan["batch"]),
                         [0] * len(plan["batch"]), [e for _, e in plan["batch"]]))
            me["writes"] += 1
            plan["results"] = [tuple(row) for row in r]
            eff += [("ack", shard, plan["value"]) for shard, ok, _ in r if ok]
            return ", ".join("%s %s" % (shard, "true" if ok else "false (%s)" % reason)
                             for shard, ok, reason in r) or "nothing", eff
        if letter in "RX":
            fn = "release_lease" if letter == "R" else "close_shard"
            r = yield Q("SELECT lease." + fn + "(%s, %s, %s, %s)", (APP, STREAM, plan["shard"], w))
            held.pop(plan["shard"], None)
            me["held"] = tuple(sorted(held.items()))
            eff.append(("drop", plan["shard"]))
            if r[0][0] and letter == "X":
                eff.append(("ack", plan["shard"], "SHARD_END"))
            return "true" if r[0][0] else "false", eff
        if letter == "H":
            r = yield Q("SELECT lease.request_handoff(%s, %s, %s, %s)", (APP, STREAM, plan["shard"], w))
            return "true" if r[0][0] else "false", eff
        if letter == "P":
            r = yield Q("SELECT lease.renew_lease(%s, %s, %s, %s,"
                        " (SELECT l.lease_count FROM lease.shard_leases AS l WHERE l.app_name = %s"
                        "     AND l.stream_name = %s AND l.shard_id = %s), %s)",
                        (APP, STREAM, plan["shard"], w, APP, STREAM, plan["shard"], DAY))
            if r[0][0] is None:
                return "not renewed", eff
            eff.append(("renewed", plan["shard"]))
            return "renewed (count %d)" % r[0][0], eff
        if letter == "M":
            r = yield Q("SELECT shard_id, lease_epoch FROM lease.my_leases(%s, %s, %s) ORDER BY 1", (APP, STREAM, w))
            return ", ".join("%s@%d" % row for row in r) or "nothing", eff
        if letter in "LE":
            if letter == "E":
                yield Q("INSERT INTO explore_output VALUES (%s, %s, %s)", (w, plan["shard"], plan["epoch"]))
            r = yield Q("SELECT " + self.hold_function + "(%s, %s, %s, %s, %s)",
                        (APP, STREAM, plan["shard"], w, plan["epoch"]), allowed=("55000",))
            if isinstance(r, tuple):
                # not held at that epoch: the transaction is rolled back, the shard dropped
                held.pop(plan["shard"], None)
                me["held"] = tuple(sorted(held.items()))
                return "error %s (rolled back)" % r[1], eff
            me["hold"] = (plan["shard"], plan["epoch"])
            if letter == "E":
                me["batch"] = me["hold"]
            return "held (checkpoint %s)" % r[0][0], eff
        raise ValueError(letter)

    def heartbeat(self, actor, plan, me):
        """B: the worker's renewal by heartbeat (docs/shard-leases.md,
        lease.heartbeat).  The same leases_version as its list's and no
        handoff pending: every lease on its list is renewed at the epoch
        listed (what renew_leases would answer then is read too, in a
        savepoint rolled back, for heartbeat-list).  Otherwise it lists again
        at once, in the same transaction: renew_leases, which becomes its
        list, under the heartbeat's version."""
        w = self.workers[actor]
        r = yield Q("SELECT leases, leases_version, handoffs_pending FROM " + self.heartbeat_function
                    + "(%s, %s, %s, %s, %s)", (APP, STREAM, w, DAY, self.every))
        count, version, pending = r[0]
        me["hb"] = version
        said = "leases %d, version %s, %d handoff%s pending" % (
            count, version, pending, "" if pending == 1 else "s")
        if version == me["lv"] and pending == 0:
            held = self.held(me)
            eff = [("tell", s, e) for s, e in sorted(held.items()) if e is not None]
            eff += [("held", tuple(sorted(held))), ("beat",)] + ([("session", True)] if self.every else [])
            rows = yield Q("SAVEPOINT explore_oracle; " + self.RENEW_SQL, (APP, STREAM, w, DAY, self.every))
            yield Q("ROLLBACK TO SAVEPOINT explore_oracle")
            plan["standing"] = (count, rows)
            return "%s: the list stands, renewed %s" % (
                said, ", ".join("%s@%s" % (s, "?" if e is None else e) for s, e in sorted(held.items()))
                or "nothing"), eff
        r = yield Q(self.RENEW_SQL.replace("lease.renew_leases", self.renew_function),
                    (APP, STREAM, w, DAY, self.every))
        was, me["lv"] = me["lv"], version
        me["held"] = tuple(sorted((shard, epoch) for shard, epoch, _ in r))
        eff = [("tell", shard, epoch) for shard, epoch, _ in r]
        eff += [("held", tuple(sorted(shard for shard, _, _ in r))), ("beat",)]
        if self.every:
            eff.append(("session", True))
        return "%s (list's %s): renew_leases -> %s" % (
            said, was,
            ", ".join("renewed %s@%d" % (shard, epoch) for shard, epoch, _ in r) or "nothing"), eff

    def apply_effects(self, ctx, actor, effects):
        w, me = self.workers[actor], ctx.locals[actor]
        fresh = set(me["fresh"])
        for e in effects:
            if e[0] == "tell":
                self.tell(ctx.glob, w, e[1], e[2])
                fresh.add(e[1])
            elif e[0] == "renewed":
                fresh.add(e[1])
            elif e[0] == "held":
                fresh = set(e[1])
            elif e[0] == "drop":
                fresh.discard(e[1])
            elif e[0] == "beat":
                me["beat"] = True
            elif e[0] == "session":
                me["session"] = e[1]
            elif e[0] == "ack":
                acked = dict(ctx.glob["acked"])
                acked[e[1]] = e[2]
                ctx.glob["acked"] = frozenset(acked.items())
        me["fresh"] = tuple(sorted(fresh))

    def on_commit(self, ctx, actor, before):
        me, w = ctx.locals[actor], self.workers[actor]
        if me["batch"] is not None:
            s, e = me["batch"]
            b = before["shards"][s]
            check(b["owner"] == w and b["epoch"] == e, "batch-fenced",
                  "%s's batch on %s (held at epoch %d) commits while %s holds it at epoch %d"
                  % (w, s, e, b["owner"], b["epoch"]))
        me["hold"] = me["batch"] = None
        super().on_commit(ctx, actor, before)

    def holds(self, ctx, but):
        """(worker, shard, epoch) of every open transaction's hold, but client `but`'s."""
        for i in range(self.nclients):
            me = ctx.locals[i]
            if i != but and ctx.txn[i] and me["hold"] is not None:
                yield self.workers[i], me["hold"][0], me["hold"][1]

    def check_holds(self, ctx, view, actor, what):
        for w, s, e in self.holds(ctx, actor):
            a = view["shards"][s]
            check(a["owner"] == w and a["epoch"] == e, "hold-respected",
                  "%s's transaction holds %s at epoch %d, and %s shows it held by %s at epoch %d"
                  % (w, s, e, what, a["owner"], a["epoch"]))

    def txn_before(self, txn_view, txn_base, latest):
        """A shard the transaction has written (it differs from what was
        committed then) is as the transaction left it: its row lock kept
        everyone else off it.  Any other shard is as last committed (read
        committed: the call's statement sees other commits)."""
        if txn_base is latest:
            return txn_view
        shards = {s: (txn_view["shards"][s] if txn_view["shards"][s] != txn_base["shards"][s] else row)
                  for s, row in latest["shards"].items()}
        return dict(latest, shards=shards)

    def check_call(self, ctx, fl, told, before, after, committed):
        actor, letter, plan = fl.actor, fl.letter, fl.plan
        w = self.workers[actor]
        if plan.get("standing"):
            count, rows = plan["standing"]
            truth = {shard: epoch for shard, epoch, _ in rows}
            listed = self.held(fl.me)
            handoffs = [shard for shard, _, to in rows if to is not None]
            check(set(listed) == set(truth) and not handoffs and count == len(truth)
                  and all(e is None or truth[s] == e for s, e in listed.items()), "heartbeat-list",
                  "%s's heartbeat left its list standing (%s), but renew_leases answers %s (heartbeat: %d leases)"
                  % (w, ", ".join("%s@%s" % (s, e) for s, e in sorted(listed.items())) or "nothing",
                     ", ".join("%s@%d%s" % (s, e, " handoff to %s" % to if to else "") for s, e, to in rows)
                     or "nothing", count))
        if plan.get("taken"):
            s = after["shards"][plan["shard"]]
            effects = [("tell", plan["shard"], s["epoch"])]
            if committed:
                self.apply_effects(ctx, actor, effects)
            else:
                self.defer_effects(ctx, actor, effects)
            if plan["shard"] == "c":
                check(before["shards"]["p"]["checkpoint"] == "SHARD_END", "lineage",
                      "take_lease(c) by %s succeeded while its parent p is at %s"
                      % (w, before["shards"]["p"]["checkpoint"]))
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
        self.check_holds(ctx, after, actor, "what %s sees" % plan.get("label", letter))
        if committed:
            self.check_state(ctx, before, after, actor)
        else:
            self.check_rows(before, after)

    def check_committed(self, ctx, before, after, actor):
        self.check_state(ctx, before, after, actor)

    def check_rows(self, before, after):
        for shard, a in after["shards"].items():
            b = before["shards"][shard]
            check(a["epoch"] >= b["epoch"], "epoch-increases",
                  "%s: lease_epoch went from %d to %d" % (shard, b["epoch"], a["epoch"]))
            if a["owner"] != b["owner"]:
                check(a["epoch"] > b["epoch"], "epoch-increases",
                      "%s: owner %s -> %s with lease_epoch %d -> %d"
                      % (shard, b["owner"], a["owner"], b["epoch"], a["epoch"]))
        if "c" in after["shards"] and after["shards"]["c"]["owner"] is not None:
            check(after["shards"]["p"]["checkpoint"] == "SHARD_END", "lineage",
                  "c is owned by %s while its parent p is at %s"
                  % (after["shards"]["c"]["owner"], after["shards"]["p"]["checkpoint"]))
        check(not after["disagreements"], "taker-recount",
              "the taker's bookkeeping disagrees with a recount: %s" % "; ".join(after["disagreements"]))

    def check_state(self, ctx, before, after, actor):
        """A change of the committed state, made by client `actor` (or the clock)."""
        glob = ctx.glob
        self.check_rows(before, after)
        for shard, a in after["shards"].items():
            b = before["shards"][shard]
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
            if b["owner"] is not None and a["owner"] != b["owner"] and b["owner"] in self.workers:
                loser = self.workers.index(b["owner"])
                # (a holder whose recorded session ended loses its leases early, by design)
                check(loser == actor or shard not in ctx.locals[loser]["fresh"]
                      or not ctx.locals[loser]["session"], "renewal-honoured",
                      "%s was told it holds %s since the clock last moved, and %s took it"
                      % (b["owner"], shard, self.who(actor)))
                check(loser == actor or a["owner"] is None
                      or (shard, b["owner"]) not in ctx.locals[self.nclients]["grace"], "restart-grace",
                      "%s held %s when the server restarted, and %s took it within one lease duration"
                      % (b["owner"], shard, self.who(actor)))
        self.check_holds(ctx, after, actor, "the committed state")

    def check_wait(self, ctx, wait):
        waiter = wait.waiter
        if wait.letter not in OWN_CALLS or all(b == waiter for b in wait.blockers):
            return
        w = self.workers[waiter]
        rel, _, key = wait.lock.partition(" ")
        if wait.letter in "BN" and rel == "lease.stream_workers" and key == w \
                and not ctx.locals[waiter]["beat"]:
            return      # a takeover of its own expired lease
        if wait.letter in "PCUW" and rel == "lease.shard_leases" \
                and key in ([x for x, _ in wait.plan["batch"]] if wait.letter == "W" else [wait.plan.get("shard")]):
            return      # the row of a lease it acts on, written or locked by another transaction
        if wait.letter == "C" and self.weights and rel == "lease.worker_holdings" and key == w:
            return      # a measured checkpoint keeps its worker's load exact (--weights)
        FOUND.append(Violation("own-call-waits", "%s waits for %s's transaction (%s)"
                               % (wait.label, ", ".join(self.who(b) for b in wait.blockers if b != waiter),
                                  wait.lock)))


# ---------------------------------------------------------------------------

def report(proto, stats, violations, waits, clients, calls, extra):
    n = interleavings(calls, proto.alphabets, extra)
    clock = " + %d clock step%s" % (extra, "s" if extra != 1 else "") if extra else ""
    if len(set(proto.alphabets)) == 1:
        programs = "every program over the alphabet %s" % proto.alphabets[0]
    else:
        programs = "every program over the alphabets %s" % " ".join(proto.alphabets)
    broken = " (%d invariant%s broken)" % (len(violations), "s" if len(violations) > 1 else "") if violations else ""
    nwaits = sum(e[0] for e in waits.values())
    print("%s: %d interleavings of %d clients x %d calls%s (%s), %d violations%s, %d waits (%d distinct), %.1f s"
          " (%d distinct states, %d calls, %d replays)"
          % (proto.name, n, clients, calls, clock, programs, stats["violating_calls"], broken,
             nwaits, len(waits), stats["seconds"], stats["states"], stats["calls"], stats["replays"]))
    for key in sorted(waits, key=lambda k: (k[0], k[1], k[2], k[3])):
        count, (node, label), w, seen = waits[key]
        who = proto.who(w.waiter)
        blockers = ", ".join("%s (its transaction: %s)" % (proto.who(b), " ".join(steps) if steps else "?")
                             for b, steps in zip(w.blockers, w.blocker_steps))
        timed = [x.ms for x in seen if x.ms is not None]
        waited = ("; it answered after %.0f to %.0f ms (bound %d ms)"
                  % (min(timed), max(timed), proto.bound_ms(w.letter)) if timed else "")
        print("  wait: %s waits for %s on %s; %d time%s%s; first after:"
              % (label if label.startswith(who) else "%s %s" % (who, label), blockers, w.lock, count,
                 "s" if count != 1 else "", waited))
        for actor, _letter, slabel, told, _lines in path_of(node):
            print("      %-9s %s -> %s" % (proto.who(actor), slabel, told))
    for invariant in sorted(violations, key=lambda k: len(violations[k][0])):
        path, message = violations[invariant]
        print("  VIOLATION %s, shortest counterexample (%d calls):" % (invariant, len(path)))
        for actor, _letter, label, told, lines in path:
            who = proto.who(actor)
            print("    %-9s %s -> %s" % (who, label, told))
            for line in lines:
                print("              (%s)" % line)
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
    ap.add_argument("--restarts", type=int, default=0)
    ap.add_argument("--restore-function", default="lease.restore_rotated_channel")
    ap.add_argument("--retry-function", default="lease.retry_failed_compensations",
                    help="bindings: the function Q calls (a mutant restore's own retry)")
    ap.add_argument("--checkpoint-function", default="lease.update_checkpoint")
    ap.add_argument("--batch-function", default="lease.update_checkpoints",
                    help="leases: the function W calls (a mutant batch without its guards)")
    ap.add_argument("--turn-function", default="lease.admit_turn",
                    help="bindings: the function T calls (a mutant turn that ends nothing)")
    ap.add_argument("--heartbeat-function", default="lease.heartbeat",
                    help="leases: the function B calls (a seeded defect)")
    ap.add_argument("--renew-function", default="lease.renew_leases",
                    help="leases: the function N calls, and B when it lists (a seeded defect)")
    ap.add_argument("--hold-function", default="lease.hold_lease",
                    help="leases: the function L and E call (a seeded defect)")
    ap.add_argument("--progress", action="store_true", help="a line on stderr every 30 s")
    ap.add_argument("--weights", action="store_true",
                    help="leases: the shards weigh 4, 1, 2 and w1 has capacity 2 (balancing by load)")
    ap.add_argument("--roles", action="store_true",
                    help="per-client alphabets (Bindings.ROLES, Leases.ROLES) instead of every letter for every client")
    ap.add_argument("--fast-failover", action="store_true",
                    help="leases: T, N and B declare renew_every, and every worker may end its session (D)")
    ap.add_argument("--heartbeat", action="store_true",
                    help="leases: every worker may renew by lease.heartbeat with its remembered list (B)")
    ap.add_argument("--seed", action="store_true",
                    help="leases (--shards 3): w1 starts holding p and w2 holding s, heartbeat and list made")
    ap.add_argument("--alphabets", type=lambda v: v.split(","),
                    help="the clients' alphabets, comma-separated (instead of --roles or every letter)")
    ap.add_argument("--setting", action="append", default=[],
                    help="NAME=VALUE, a setting of the explorer's sessions (a seeded defect's switch)")
    args = ap.parse_args()
    options = ("-c lease.handoff_timeout=43200000 -c lease.default_lease_duration=86400000"
               " -c lease.record_events=off -c client_min_messages=error")
    options += "".join(" -c " + setting for setting in args.setting)
    if args.seed and (args.protocol != "leases" or args.shards != 3 or args.clients < 2):
        ap.error("--seed needs --protocol leases --shards 3 and at least 2 clients")
    db = Db(args.dsn, args.clients, options)
    extra = 0
    if args.protocol == "bindings":
        proto = Bindings(db, args.clients, args.calls, args.restore_function, args.retry_function, args.roles,
                         args.turn_function, args.alphabets)
    else:
        proto = Leases(db, args.clients, args.calls, args.shards, args.advances, args.checkpoint_function,
                       args.roles, args.weights, args.fast_failover, args.heartbeat, args.alphabets, args.seed,
                       args.heartbeat_function, args.renew_function, args.hold_function, args.batch_function,
                       restarts=args.restarts)
        extra = args.advances + args.restarts
    stats, violations, waits = Engine(proto, args.progress).run()
    report(proto, stats, violations, waits, args.clients, args.calls, extra)
    return 1 if violations else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except psycopg2.Error as e:
        print("explore: unexpected error %s: %s" % (e.pgcode, e))
        sys.exit(2)
