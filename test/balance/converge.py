#!/usr/bin/python3
"""Convergence driver for weighted balancing, run against the real
extension: every round is lease.take_leases, every check reads the tables.

  converge.py --dsn DSN [--shards 64] [--zipf 1.1] [--steady 50] [--seed 22]

A stream of SHARDS leases whose weights (set with lease.set_weight) follow a
Zipf law of exponent ZIPF, in an order shuffled by SEED so that weight and
shard id are unrelated.  Workers run in steps: in one step every live worker
calls take_leases once (one round each, max_steal 1, in name order), then
every worker renews with renew_leases and hands over at once every lease it
was asked for (release_lease, the graceful handoff a client makes).  w1
declares capacity 2, the others 1.  Three phases:

  1. start: w1..w7 start on the stream, nothing held;
  2. join:  w8 joins;
  3. churn: w4 stops and w9 starts; w9 makes its first round, then w4's
            leases expire (they are made to, as if its lease duration had
            passed).

Each phase runs until a step changes nothing (no take, no request, no
transfer), at most 40 steps, and is checked:

  * converged: max(load / target) over the workers is at most 1.15, or at
    most what the indivisible shards allow.  target is the stream's load
    times the worker's share of the capacity.  The bound is computed as
    balancing.c pins workers: while the heaviest unplaced shard weighs
    more than a fair share of the largest free worker (the load left over
    the capacity left), it sits alone there, and that worker's load over
    target is a floor no placement can beat.  The bound is printed.
  * minimal (phases 2 and 3): the ownership changes of the phase are at most
    1.5 x the minimum the change needs.  The minimum is a lower bound:
    every lease of a departed worker has to move; a worker that ends below
    (1 - tolerance) x target must receive at least the fewest leases whose
    weights cover the gap, heaviest first; a worker above (1 + tolerance)
    x target must shed at least the fewest leases, heaviest first, covering
    its excess; the minimum is the larger of the two sums (departed leases
    count on both sides).  Both are computed from the state at the
    change, with the targets of the workers after it.
  * agreement: before every round, lease.plan_rebalance(app, stream,
    worker) is asked what the worker's round would do; the round must take
    exactly the free leases the plan gives the worker and request exactly
    the plan's leading moves to it (up to max_steal).
  * bookkeeping: after every step, lease.worker_holdings (leases, load,
    weighed) equals a recount (test/lib/taker_state_check.sql).

Then STEADY more steps must move nothing at all.  Phase 1 starts from an
empty fleet, so its moves are reported but not judged: workers know of each
other only by the leases they hold, so the first worker takes everything.

Prints TAP ("ok N - ..." / "not ok N - ..."); exit status 1 when a check
failed.
"""
import argparse
import random
import sys
import time

import psycopg2

APP, STREAM = 'conv', 's'
TOL = 0.1            # the default tolerance (LEASE_DEFAULT_BALANCE_TOLERANCE)
MAX_STEPS = 40

results = []


def check(ok, what):
    results.append(ok)
    print('%s %d - %s' % ('ok' if ok else 'not ok', len(results), what), flush=True)
    return ok


def q(cur, sql, args=()):
    cur.execute(sql, args)
    return cur.fetchall() if cur.description else []


class Fleet:
    def __init__(self, conn, weights, check_sql):
        self.conn = conn
        self.cur = conn.cursor()
        self.weights = weights
        self.check_sql = check_sql
        self.live = {}          # worker -> capacity
        self.disagreements = 0
        self.mismatches = []

    def owners(self):
        # live by the lease's own expiry or its owner's heartbeat (renew_leases)
        return dict(q(self.cur, "SELECT shard_id, lease_owner FROM lease.lease_status "
                                "WHERE app_name = %s AND stream_name = %s "
                                "AND state IN ('owned', 'handoff_pending')", (APP, STREAM)))

    def events(self):
        return q(self.cur, "SELECT count(*) FILTER (WHERE event <> 'handoff_request'), "
                           "count(*) FILTER (WHERE event = 'handoff_request') "
                           "FROM lease.lease_events WHERE app_name = %s", (APP,))[0]

    def step(self):
        """One step; returns the number of ownership changes and requests."""
        before = self.events()
        for w in sorted(self.live):
            plan = q(self.cur, "SELECT shard_id, action, to_owner FROM lease.plan_rebalance(%s, %s, %s)",
                     (APP, STREAM, w))
            want_taken = sorted(s for s, a, to in plan if a == 'taken' and to == w)
            want_req = []
            for s, a, to in plan:
                if a != 'handoff_requested':
                    continue
                if to != w or len(want_req) == 1:
                    break
                want_req.append(s)
            rows = q(self.cur, "SELECT shard_id, action FROM lease.take_leases(%s, %s, %s, '1 hour', "
                               "NULL, 1, %s)", (APP, STREAM, w, self.live[w]))
            got_taken = sorted(s for s, a in rows if a == 'taken')
            got_req = sorted(s for s, a in rows if a == 'handoff_requested')
            if got_taken != want_taken or got_req != sorted(want_req):
                self.mismatches.append((w, want_taken, got_taken, want_req, got_req))
        for w in sorted(self.live):
            for shard, _, handoff_to, _ in q(self.cur, "SELECT * FROM lease.renew_leases(%s, %s, %s, '1 hour')",
                                             (APP, STREAM, w)):
                if handoff_to is not None:
                    q(self.cur, "SELECT lease.release_lease(%s, %s, %s, %s)", (APP, STREAM, shard, w))
        self.disagreements += len(q(self.cur, self.check_sql))
        after = self.events()
        return (after[0] - before[0]) + (after[1] - before[1]), after[0] - before[0]

    def loads(self):
        own = self.owners()
        load = {w: 0.0 for w in self.live}
        for s, w in own.items():
            load[w] = load.get(w, 0.0) + self.weights[s]
        return load

    def ratios(self):
        load = self.loads()
        total = sum(self.weights.values())
        cap = sum(self.live.values())
        return {w: load[w] / (total * self.live[w] / cap) for w in self.live}


def indivisible_bound(weights, capacities):
    """The floor of max(load / target) that the heaviest shards impose."""
    total = sum(weights)
    cap_total = sum(capacities)
    shards = sorted(weights, reverse=True)
    caps = sorted(capacities, reverse=True)
    left, cap_left, bound = total, cap_total, 1.0
    while shards and caps:
        fair = left / cap_left
        if shards[0] <= fair * caps[0]:
            break
        ratio = shards[0] / (total * caps[0] / cap_total)
        bound = max(bound, ratio)
        left -= shards.pop(0)
        cap_left -= caps.pop(0)
    return bound


def fewest(leases, amount):
    """The fewest of the weights given that add up to amount, heaviest first."""
    n, got = 0, 0.0
    for x in sorted(leases, reverse=True):
        if got >= amount:
            break
        got += x
        n += 1
    return n


def receive_bound(held, target, w, need, orphans, refills=True):
    """The fewest moves that bring worker w `need` more load.  A lease from
    another worker v costs one move, plus, when v falls below its band, the
    fewest moves that refill it (from any lease that would fit it): each
    donor's choice is its j heaviest leases, and the donors' choices are
    combined by a knapsack over the moves (a lower bound: refills are
    counted as if each could take any lease)."""
    band = target[w] * (1 + TOL)
    every = sorted((x for ls in held.values() for x in ls), reverse=True)
    options = [[(x, 1)] for x in orphans if x <= band]       # orphans cost one move each
    for v, ls in held.items():
        if v == w:
            continue
        mine = sorted((x for x in ls if x <= band), reverse=True)
        load = sum(ls)
        floor = target[v] * (1 - TOL)
        choice, got = [], 0.0
        for j, x in enumerate(mine, 1):
            got += x
            cost = j
            if refills and load - got < floor:
                pool = [y for y in every if y <= target[v] * (1 + TOL)]
                for y in ls:
                    if y in pool:
                        pool.remove(y)
                cost += max(1, fewest(pool, floor - (load - got)))
            choice.append((got, cost))
        if choice:
            options.append(choice)
    best = {0: 0.0}                      # moves -> most load brought
    for choice in options:
        nxt = dict(best)
        for c0, v0 in best.items():
            for got, cost in choice:
                c = c0 + cost
                if nxt.get(c, -1) < v0 + got:
                    nxt[c] = v0 + got
        best = nxt
    for c in sorted(best):
        if best[c] >= need:
            return c
    return min(best)


def minimum_moves(fleet, departed, new_caps):
    own = fleet.owners()
    total = sum(fleet.weights.values())
    cap = sum(new_caps.values())
    held = {w: [] for w in new_caps}
    orphans = []
    for s, w in own.items():
        if w in departed:
            orphans.append(fleet.weights[s])
        elif w in held:
            held[w].append(fleet.weights[s])
    target = {w: total * c / cap for w, c in new_caps.items()}
    shed = 0
    brought = 0.0                        # the most the forced moves can bring
    pool = {w: list(ls) for w, ls in held.items()}
    for w in new_caps:
        t = target[w]
        load = sum(held[w])
        if load > t * (1 + TOL):
            # a lease heavier than every other worker's band cannot go anywhere
            room = max(target[v] * (1 + TOL) for v in new_caps if v != w)
            movable = sorted((x for x in held[w] if x <= room), reverse=True)
            k = fewest(movable, min(load - t * (1 + TOL), sum(movable)))
            shed += k
            brought += sum(movable[:k])
            for x in movable[:k]:
                pool[w].remove(x)
    brought += sum(orphans)
    # a forced move may also be the one that refills a donor: then refills
    # are not counted again
    refills = brought == 0
    recv = 0
    for w in sorted(new_caps, key=lambda v: sum(held[v]) / target[v]):
        t = target[w]
        load = sum(held[w])
        if load < t * (1 - TOL):
            # the forced moves (shed leases, orphans) may fill it first
            need = t * (1 - TOL) - load
            used = min(need, brought)
            brought -= used
            if need - used > 1e-9:
                recv += receive_bound(pool, target, w, need - used, [], refills)
    forced = shed + len(orphans)
    return forced + recv, recv, shed, len(orphans)


def run_phase(fleet, name, judge_moves, minimum):
    changes = 0
    steps = 0
    t0 = time.time()
    for steps in range(1, MAX_STEPS + 1):
        moved, owned = fleet.step()
        changes += owned
        if moved == 0:
            break
    ratios = fleet.ratios()
    worst = max(ratios.values())
    bound = max(1.15, indivisible_bound(list(fleet.weights.values()), list(fleet.live.values())))
    print('# %s: %d steps, %d ownership changes, %.2f s; max load/target %.3f (w %s), '
          'allowed %.3f' % (name, steps, changes, time.time() - t0, worst,
                            max(ratios, key=ratios.get), bound), flush=True)
    print('# %s: load/target per worker: %s' % (
        name, ', '.join('%s %.3f' % (w, r) for w, r in sorted(ratios.items()))), flush=True)
    check(steps < MAX_STEPS, '%s: the fleet stops moving within %d steps (%d)' % (name, MAX_STEPS, steps))
    check(worst <= bound + 1e-9, '%s: max(load/target) %.3f <= %.3f' % (name, worst, bound))
    if judge_moves:
        m = minimum[0]
        print('# %s: minimum %d (receive %d, shed %d, departed %d); made %d' % (
            name, m, minimum[1], minimum[2], minimum[3], changes), flush=True)
        check(changes <= 1.5 * m + 1e-9, '%s: %d ownership changes <= 1.5 x minimum %d' % (name, changes, m))
    return changes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--dsn', required=True)
    ap.add_argument('--shards', type=int, default=64)
    ap.add_argument('--zipf', type=float, default=1.1)
    ap.add_argument('--steady', type=int, default=50)
    ap.add_argument('--seed', type=int, default=22)
    args = ap.parse_args()

    conn = psycopg2.connect(args.dsn)
    conn.autocommit = True
    with open('test/lib/taker_state_check.sql') as f:
        text = f.read()
    view = text[:text.rindex('SELECT disagreement')]
    cur = conn.cursor()
    cur.execute(view)
    check_sql = "SELECT * FROM taker_disagreements"

    cur.execute("DELETE FROM lease.shard_leases WHERE app_name = %s", (APP,))
    cur.execute("DELETE FROM lease.lease_events WHERE app_name = %s", (APP,))
    cur.execute("DELETE FROM lease.worker_capacities WHERE app_name = %s", (APP,))
    rng = random.Random(args.seed)
    ranks = list(range(1, args.shards + 1))
    rng.shuffle(ranks)
    weights = {}
    for i, k in enumerate(ranks):
        shard = 's%02d' % i
        weights[shard] = round(1000.0 / k ** args.zipf, 3)
        cur.execute("SELECT lease.create_lease(%s, %s, %s)", (APP, STREAM, shard))
        cur.execute("SELECT lease.set_weight(%s, %s, %s, %s)", (APP, STREAM, shard, weights[shard]))
    total = sum(weights.values())
    print('# %d shards, Zipf %.2f: heaviest %.1f%% of the load, lightest %.2f%%' % (
        args.shards, args.zipf, 100 * max(weights.values()) / total, 100 * min(weights.values()) / total))

    fleet = Fleet(conn, weights, check_sql)
    fleet.live = {'w%d' % i: (2.0 if i == 1 else 1.0) for i in range(1, 8)}
    run_phase(fleet, 'start (w1..w7, w1 capacity 2)', False, None)

    new_caps = dict(fleet.live, w8=1.0)
    minimum = minimum_moves(fleet, set(), new_caps)
    fleet.live = new_caps
    join_moves = run_phase(fleet, 'join (w8)', True, minimum)

    # w4 stops and w9 starts together; w4's leases expire a lease duration
    # later, after w9's first round (made here, before the phase's steps)
    new_caps = {w: c for w, c in fleet.live.items() if w != 'w4'}
    new_caps['w9'] = 1.0
    minimum = minimum_moves(fleet, {'w4'}, new_caps)
    first = q(cur, "SELECT count(*) FROM lease.take_leases(%s, %s, 'w9', '1 hour', NULL, 1, 1)", (APP, STREAM))
    cur.execute("UPDATE lease.shard_leases SET lease_expires_at = clock_timestamp() - interval '1 second' "
                "WHERE app_name = %s AND lease_owner = 'w4'", (APP,))
    fleet.live = new_caps
    churn_moves = run_phase(fleet, 'churn (w4 leaves, w9 joins)', True, minimum)

    moved = 0
    t0 = time.time()
    for _ in range(args.steady):
        moved += fleet.step()[0]
    print('# steady: %d steps in %.2f s' % (args.steady, time.time() - t0))
    check(moved == 0, 'steady: no take, request or transfer in %d more steps (%d)' % (args.steady, moved))
    check(not fleet.mismatches, 'plan_rebalance agreed with every round (%d disagreements)' % len(fleet.mismatches))
    for m in fleet.mismatches[:5]:
        print('#   %s: plan took %s, round took %s; plan asked %s, round asked %s' % m)
    check(fleet.disagreements == 0, 'bookkeeping equals the recount after every step (%d disagreements)'
          % fleet.disagreements)
    print('# moves: join %d, churn %d' % (join_moves, churn_moves))
    cur.execute("DELETE FROM lease.shard_leases WHERE app_name = %s", (APP,))
    cur.execute("DELETE FROM lease.worker_capacities WHERE app_name = %s", (APP,))
    print('1..%d' % len(results))
    return 0 if all(results) else 1


if __name__ == '__main__':
    sys.exit(main())
