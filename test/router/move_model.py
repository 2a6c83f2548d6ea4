#!/usr/bin/env python3
"""Every interleaving of a stream move with worker calls, two routers, an
undo and a directory sync: a small exhaustive checker of the protocol of
docs/scale-out.md ("Moving a stream"), next to the router test that runs
the real steps (test/router/moves.sql) and the isolation spec of one
partition (test/specs/stream_move.spec).

The model: partitions S (the stream's home, where it starts) and T, each
with its placement record (state, generation) and the stream's data (the
ids of the writes it holds); routers R0 (which runs move_stream) and R1
(whose directory is only changed by sync_directory).  Each step is atomic,
as the placement lock makes each partition step and each call (placement
check + write) atomic on its partition:
  - move_stream on R0: freeze S, export S, import T, complete S (the commit
    point), complete T, R0's directory -> T; each step refuses a record it
    does not expect, as src/leases/placement.c does, and the move stops;
  - undo_move on R1: undo S (a moving_out S serves again), then, if T is
    arriving, undo T (its copy goes, a tombstone stays); refused after the
    commit point;
  - sync_directory on R1: its directory from the partitions' records;
  - a worker's calls, each through R0 or R1: routed by the router's
    directory (else the home S); a partition without a record or with
    `here` serves the call (the write is acknowledged), any other record
    refuses it (40L01).
Checked after every step of every interleaving: writes are acknowledged on
one partition at a time (once a write was acknowledged on one, none is
acknowledged later on the other unless it holds every acknowledged write);
and at the end: every acknowledged write is in the data of the partition
that serves the stream, and exactly one partition serves it.
Prints the number of interleavings and exits 1 with a counterexample.
  move_model.py --defect NAME   the same with a seeded defect, which it
                                must find (exit 1): no-freeze (the source
                                keeps serving while it is exported),
                                undo-after-commit (undo_move does not check
                                the commit point), serve-arriving (the
                                target serves as soon as it has the copy:
                                a router whose directory still names it
                                from an earlier move reaches it)
"""
import sys

CALLS = 3
DEFECT = sys.argv[2] if len(sys.argv) > 2 and sys.argv[1] == "--defect" else None


def initial(moved_before):
    """moved_before: the stream came to S from T by an earlier move, and
    R1's directory still says T (it was not synced since)."""
    return {
        "rec": ({"S": ("here", 1), "T": ("moved_out", 1)} if moved_before
                else {"S": None, "T": None}),   # (state, generation) or None
        "data": {"S": frozenset(), "T": frozenset()},
        "dir": {"R0": None, "R1": "T" if moved_before else None},   # partition, None: the home S
        "doc": None, "gen": None,
        "mover": 0, "mover_dead": False,        # next move step
        "undo": 0, "undo_dead": False,
        "synced": False,
        "calls": 0, "acks": (),                 # (write id, partition)
    }


def serves(st, p):
    r = st["rec"][p]
    if DEFECT == "serve-arriving" and r is not None and r[0] == "arriving":
        return True
    return r is None or r[0] == "here"


def copy(st):
    n = dict(st)
    n["rec"] = dict(st["rec"])
    n["data"] = dict(st["data"])
    n["dir"] = dict(st["dir"])
    return n


def mover_step(st):
    n = copy(st)
    k = st["mover"]
    S, T = n["rec"]["S"], n["rec"]["T"]
    ok = True
    if k == 0:      # freeze S
        if S is None or S[0] == "here":
            n["gen"] = (S[1] if S else 0) + 1
            if DEFECT != "no-freeze":
                n["rec"]["S"] = ("moving_out", n["gen"])
        elif not (S[0] == "moving_out" and S[1] == n["gen"]):
            ok = False
    elif k == 1:    # export S
        if S == ("moving_out", n["gen"]) or DEFECT == "no-freeze":
            n["doc"] = n["data"]["S"]
        else:
            ok = False
    elif k == 2:    # import T (a copy of an older generation is replaced)
        if T == ("arriving", n["gen"]):
            pass
        elif T is None or (T[1] < n["gen"] and T[0] in ("moved_out", "arriving")):
            n["data"]["T"] = n["doc"]
            n["rec"]["T"] = ("arriving", n["gen"])
        else:
            ok = False
    elif k == 3:    # complete S: the commit point
        if S == ("moving_out", n["gen"]) or (DEFECT == "no-freeze" and S in (None, ("here", n["gen"] - 1))):
            n["data"]["S"] = frozenset()
            n["rec"]["S"] = ("moved_out", n["gen"])
        elif S != ("moved_out", n["gen"]):
            ok = False
    elif k == 4:    # complete T
        if T == ("arriving", n["gen"]):
            n["rec"]["T"] = ("here", n["gen"])
        elif T != ("here", n["gen"]):
            ok = False
    elif k == 5:    # R0's directory
        n["dir"]["R0"] = "T"
    if ok:
        n["mover"] = k + 1
    else:
        n["mover_dead"] = True
    return n


def undo_step(st):
    n = copy(st)
    S, T = n["rec"]["S"], n["rec"]["T"]
    if st["undo"] == 0:     # undo S: refused unless S is moving_out
        if S is not None and (S[0] == "moving_out" or (DEFECT == "undo-after-commit" and S[0] == "moved_out")):
            n["rec"]["S"] = ("here", S[1])
            n["undo"] = 1
        else:
            n["undo_dead"] = True
    else:                   # undo T, if its copy is there
        g = n["rec"]["S"][1]
        if T == ("arriving", g):
            n["data"]["T"] = frozenset()
            n["rec"]["T"] = ("moved_out", g)
        n["undo"] = 2
    return n


def sync_step(st):
    """lease_router.sync_directory: the latest record; past its commit point
    (a moved_out record) the peer, else the partition moving out or served."""
    n = copy(st)
    recs = [(p, r) for p, r in n["rec"].items() if r is not None]
    if recs:
        g = max(r[1] for _, r in recs)
        latest = {p: r for p, r in recs if r[1] == g}
        other = {"S": "T", "T": "S"}
        moved = [p for p, r in latest.items() if r[0] == "moved_out"]
        here = [p for p, r in latest.items() if r[0] in ("here", "moving_out")]
        n["dir"]["R1"] = other[moved[0]] if moved else (here[0] if here else None)
    n["synced"] = True
    return n


def call_step(st, router):
    n = copy(st)
    p = n["dir"][router] or "S"
    wid = n["calls"]
    n["calls"] += 1
    if serves(n, p):
        n["data"][p] = n["data"][p] | {wid}
        n["acks"] = n["acks"] + ((wid, p),)
    return n


def reachable_servers(st):
    """The partitions a call can reach (the home S, or a router's directory)
    that would serve it."""
    return sorted({p for p in ["S"] + [d for d in st["dir"].values() if d] if serves(st, p)})


def check_step(st):
    if len(reachable_servers(st)) > 1:
        return "two partitions serve the stream: %s" % reachable_servers(st)
    acks = st["acks"]
    if len(acks) >= 2 and acks[-2][1] != acks[-1][1]:
        held = {w for w, _ in acks[:-1]}
        if not held <= st["data"][acks[-1][1]]:
            return "a write acknowledged on %s after others on %s, which %s lacks" % (
                acks[-1][1], acks[-2][1], acks[-1][1])
    return None


def check_end(st):
    """Every acknowledged write is held by the partition the stream lives on:
    the one serving it, or, when the move stopped half way (no undo), the one
    a resumed move or an undo makes serve it (a record other than moved_out)."""
    held = {w for w, _ in st["acks"]}
    live = [p for p in ("S", "T")
            if (st["rec"][p] is None and p == "S") or (st["rec"][p] is not None and st["rec"][p][0] != "moved_out")]
    if not any(held <= st["data"][p] for p in live):
        return "an acknowledged write is lost (%s; data %s)" % (sorted(held), st["data"])
    return None


def explore():
    count = 0
    stack = [(initial(False), ["(the stream starts at its home S)"]),
             (initial(True), ["(the stream came to S from T; R1's directory says T)"])]
    while stack:
        st, trace = stack.pop()
        moves = []
        if st["mover"] < 6 and not st["mover_dead"]:
            moves.append(("move step %d" % st["mover"], mover_step))
        if st["undo"] < 2 and not st["undo_dead"] and st["mover"] >= 1:
            moves.append(("undo step %d" % st["undo"], undo_step))
        if not st["synced"]:
            moves.append(("sync R1", sync_step))
        if st["calls"] < CALLS:
            moves.append(("call via R0", lambda s: call_step(s, "R0")))
            moves.append(("call via R1", lambda s: call_step(s, "R1")))
        if not moves:
            count += 1
            bad = check_end(st)
            if bad:
                return count, bad, trace
            continue
        for name, f in moves:
            n = f(st)
            bad = check_step(n)
            if bad:
                return count, bad, trace + [name]
            stack.append((n, trace + [name]))
    return count, None, None


if __name__ == "__main__":
    count, bad, trace = explore()
    if bad:
        print("move model%s: VIOLATION after %d interleavings: %s" % (
            " (defect %s)" % DEFECT if DEFECT else "", count, bad))
        for step in trace:
            print("  " + step)
        sys.exit(1)
    print("move model: %d interleavings of a move, an undo, a sync and %d calls through two routers, "
          "from two starting placements: no acknowledged write lost, never served by two partitions" % (count, CALLS))
