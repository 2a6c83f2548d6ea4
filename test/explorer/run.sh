#!/usr/bin/env bash
# The exhaustive interleaving explorer (test/explorer/explore.py; what it
# explores, the alphabets and the invariants are in its header and in
# test/explorer/README.md).
#
#   test/explorer/run.sh          suite `explore` of make test: against the
#       running test cluster (PGHOST, PGPORT, PG_BINDIR set by test/run.sh)
#   test/explorer/run.sh --long   make explore: dependencies, build, install,
#       its own throwaway cluster (test/lib/cluster.sh), the long sizes
#
# Nineteen checks, one count each, closing with "N passed, N failed":
#   1. bindings against the extension: 0 violations;
#   2. leases against the extension: 0 violations;
#   2b. leases balanced by load (--weights: weighted shards, w1 of
#      capacity 2): 0 violations;
#   3. bindings against the 0.3.0 restore (explore_mutant, mutants.sql): at
#      least one violation of restorable-unbound, with its counterexample;
#   4. leases against update_checkpoint without its owner guard: at least
#      one violation of checkpoint-owner, with its counterexample;
#   5. bindings against admit_turn as released up to 0.3.0 (a first turn
#      that ends nothing): at least one violation of lifecycle;
#   6. leases in the fast-failover mode (--fast-failover: sessions end, the
#      clock moves, leases are taken as session_ended): no violation;
#   7. leases renewed by lease.heartbeat with the remembered list
#      (--heartbeat, letter B), and 7b. the same in the fast-failover mode:
#      no violation;
#   8. leases renewed by heartbeat against a lease that leaves its holder
#      without moving the holder's leases_version (mutants.sql,
#      explore_mutant.keep_version): at least one violation of
#      heartbeat-list, with its counterexample;
#   9. leases checkpointed in batches (update_checkpoints, letter W) among
#      takes, expiry takeovers, closes and renewals: no violation;
#  10. leases against update_checkpoints without its guards (mutants.sql):
#      at least one violation of batch-judged, with its counterexample;
#  11. leases with transactions that span calls (engine.py; --seed: w1
#      holds p, w2 holds s): 3 workers x 3 steps + the clock, w1 releasing
#      inside a transaction ([R), w2 asking for p and renewing by heartbeat
#      (HB), w3 taking inside a transaction ([K): no violation, every wait
#      printed (the open transfer, the takeovers of expired leases);
#  11b. a worker's own calls against other workers' open transactions:
#      w1 renews (N, P), checkpoints (C) and reads (M) while w2 takes (
#      [K) and w3 asks for handoffs ([H) inside transactions: no violation;
#  11c. the transactional batch (E: BEGIN, output, hold_lease; C; ]) against
#      take_lease and take_leases in transactions: no violation;
#  11d. bindings with transactions (a tenant's start_conversation or turn
#      left open, [ST]) against rotations, admissions and turns, the bounds
#      at 20 ms: no violation, every wait answered within its bound;
#  12. leases against the heartbeat of 0.4.0, which locked the row the
#      ownership changes write (explore_mutant.heartbeat): own-call-waits;
#  13. leases against a renewal that locks the lease rows it renews
#      (explore_mutant.renew_leases): own-call-waits;
#  14. leases against a takeover that ignores hold_lease (a hold without
#      its row lock, explore_mutant.hold_lease): hold-respected;
#  15. leases with the server's restart (the world's step S, a new server
#      incarnation) among the workers' calls and the clock: 2 workers x 3
#      steps, per-worker alphabets (--roles), and 2 x 3 of take_lease in
#      transactions ([K]) against rounds and take_lease: no violation of
#      restart-grace (no lease held at the restart passes to another worker
#      within one lease duration but by its holder's own call);
#      --long: 2 x 3 with heartbeats and transactions (TNR[]B TKHB);
#  16. the same restart with lease.restart_grace off: restart-grace.
# Sizes (clients x steps per client; the alphabets are in explore.py's
# header): make test 2 x 3 bindings, every letter for both clients; 3 x 3
# leases + 1 clock step, per-worker alphabets (--roles), and 3 x 2 of them
# with --weights; the heartbeat runs 2 x 3 over alphabets without the
# checkpoint letters (a heartbeat decides on who holds what, not on
# checkpoints): TNRXB TNKHB, and TNRBD TKHBD in the fast-failover mode
# (--long: 2 x 4); the batch runs 3 x 3 + 1 clock step over TNW TKCW TXW
# on 2 shards (--long: 3 shards); the transaction runs as above (--long:
# 3 x 3 with larger alphabets).  --long: 3 x 4
# bindings (--roles); 3 x 3 leases + 1 clock step, every letter for every
# worker, and 3 x 3 with --weights (--roles).  Each run prints its counts,
# the waits it saw and its time.
set -uo pipefail
cd "$(dirname "$0")/../.."

LONG=0
case "${1:-}" in
    --long) LONG=1 ;;
    "") ;;
    *) echo "usage: $0 [--long]" >&2; exit 2 ;;
esac

PY=/usr/bin/python3          # Debian's python3-psycopg2 is for Debian's python3
DB=pg_lease_explore
EXPLORE=test/explorer/explore.py
# shellcheck source=../lib/cluster.sh
. test/lib/cluster.sh

bash test/lib/deps.sh explore || { echo "0 passed, 1 failed"; exit 1; }
if [ "$LONG" -eq 1 ]; then
    bash test/lib/deps.sh || exit 1
    pg_lease_build_install || exit 1
    cluster_start || exit 1
    echo "pg_lease explore: throwaway cluster on socket $PGHOST port $PGPORT"
    BINDINGS=(--clients 3 --calls 4 --roles --progress)
    LEASES=(--clients 3 --calls 3 --shards 2 --advances 1 --progress)
    WEIGHTED=(--clients 3 --calls 3 --roles --shards 2 --advances 1 --weights --progress)
    HEARTBEAT=(--clients 2 --calls 4 --shards 2 --advances 1 --progress)
    TXN=(--alphabets "[R,[HB,[K" --clients 3 --calls 3 --progress)
    OWN=(--alphabets "NPCM,[K,[H" --clients 3 --calls 3 --progress)
    BATCH=(--alphabets "EC]~,[]KT" --clients 2 --calls 4 --progress)
    BTXN=(--alphabets "[ST]~,RSTE" --clients 2 --calls 4 --progress)
    CKPTS=(--clients 3 --calls 3 --shards 3 --advances 1 --progress)
    RESTART=(--heartbeat --alphabets "TNR[],TKH" --clients 2 --calls 3 --shards 2 --advances 1 --restarts 1 --progress)
else
    BINDINGS=(--clients 2 --calls 3)
    LEASES=(--clients 3 --calls 3 --roles --shards 2 --advances 1)
    WEIGHTED=(--clients 3 --calls 2 --roles --shards 2 --advances 1 --weights)
    HEARTBEAT=(--clients 2 --calls 3 --shards 2 --advances 1)
    TXN=(--alphabets "[R,HB,[K" --clients 3 --calls 3)
    OWN=(--alphabets "NPCM,[K,[H" --clients 3 --calls 2)
    BATCH=(--alphabets "EC],[KT" --clients 2 --calls 3)
    BTXN=(--alphabets "[ST],RST" --clients 2 --calls 3)
    CKPTS=(--clients 3 --calls 3 --shards 2 --advances 1)
    RESTART=(--alphabets "K[],TK" --clients 2 --calls 3 --shards 2 --advances 1 --restarts 1)
fi
SEEDED=(--seed --shards 3 --advances 1)
BOUNDS=(--setting lease.rotation_lock_timeout=20 --setting lease.admission_lock_timeout=20)

"$PG_BINDIR/psql" -X -q -d postgres -c "SET client_min_messages = warning" \
    -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB" &&
    "$PG_BINDIR/psql" -X -q -d "$DB" -v ON_ERROR_STOP=1 -c "CREATE EXTENSION pg_lease" \
        -f test/explorer/mutants.sql || { echo "0 passed, 1 failed"; exit 1; }

passed=0
failed=0
log=$(mktemp /tmp/pg_lease_explore.XXXXXX)
# (--long: and stop our own cluster; make test's is not ours to stop)
trap 'rm -f "$log"; [ "$LONG" -eq 0 ] || cluster_stop' EXIT

# One explorer run; $1 = what is expected: "clean" (exit 0, no violation)
# or the name of an invariant the run must find broken (exit 1, that
# invariant's counterexample printed).
run() {
    local expect=$1 status
    shift
    "$PY" "$EXPLORE" --dsn "dbname=$DB" "$@" 2>&1 | tee "$log"
    status=${PIPESTATUS[0]}
    if [ "$expect" = clean ] && [ "$status" -eq 0 ]; then
        passed=$((passed + 1))
        echo "ok: explore $* found no violation"
    elif [ "$expect" != clean ] && [ "$status" -eq 1 ] &&
        grep -q "VIOLATION $expect, shortest counterexample" "$log"; then
        passed=$((passed + 1))
        echo "ok: explore $* found the seeded defect ($expect)"
    else
        failed=$((failed + 1))
        echo "FAILED: explore $* (exit $status; expected: $expect)"
    fi
}

run clean --protocol bindings "${BINDINGS[@]}"
run clean --protocol leases "${LEASES[@]}"
run clean --protocol leases "${WEIGHTED[@]}"
# the fast-failover mode: sessions end (D), the clock moves
run clean --protocol leases --fast-failover --roles --clients 2 --calls 3 --shards 2 --advances 1
# renewing by lease.heartbeat (B), in both modes
run clean --protocol leases --heartbeat --alphabets TNRX,TNKH "${HEARTBEAT[@]}"
run clean --protocol leases --heartbeat --fast-failover --alphabets TNR,TKH "${HEARTBEAT[@]}"
# batched checkpoints (W) among takes (T, K), renewals (N), closes (X) and
# single fenced checkpoints (C)
run clean --protocol leases --alphabets TNW,TKCW,TXW "${CKPTS[@]}"
# The seeded defects, at the smallest sizes that reach them (the
# counterexamples are 4 calls long).
run restorable-unbound --protocol bindings --clients 2 --calls 2 \
    --restore-function explore_mutant.restore_rotated_channel
run checkpoint-owner --protocol leases --clients 2 --calls 2 --advances 1 \
    --checkpoint-function explore_mutant.update_checkpoint
# a batch that writes a shard taken over by expiry: take, the clock, the
# takeover, the batch (4 steps)
run batch-judged --protocol leases --alphabets TW --clients 2 --calls 2 --advances 1 \
    --batch-function explore_mutant.update_checkpoints
# a replacement's first turn that ends nothing: 2 calls long
run lifecycle --protocol bindings --clients 1 --calls 2 \
    --turn-function explore_mutant.admit_turn
# a takeover that leaves the loser's leases_version: 5 steps long
# (take, heartbeat and list, the clock, the takeover, a heartbeat)
run heartbeat-list --protocol leases --heartbeat --alphabets T --clients 2 --calls 3 --advances 1 \
    --setting explore_mutant.keep_version=on
# Transactions that span calls, and waits (engine.py)
run clean --protocol leases "${SEEDED[@]}" "${TXN[@]}"
run clean --protocol leases "${SEEDED[@]}" "${OWN[@]}"
run clean --protocol leases "${SEEDED[@]}" "${BATCH[@]}"
run clean --protocol bindings "${BOUNDS[@]}" "${BTXN[@]}"
# Their seeded defects, at the smallest sizes that reach them: w2 asks for
# p, w1 hands it over in a transaction it leaves open, w2's heartbeat waits
# (4 steps); w2 asks for p in a transaction it leaves open, w1's renewal
# waits (3 steps); the clock, w1 holds p, w2 takes it (4 steps)
run own-call-waits --protocol leases --seed --shards 3 --advances 0 --alphabets "[R,HB" --clients 2 --calls 2 \
    --heartbeat-function explore_mutant.heartbeat
run own-call-waits --protocol leases --seed --shards 3 --advances 0 --alphabets "N,[H" --clients 2 --calls 2 \
    --renew-function explore_mutant.renew_leases
run hold-respected --protocol leases --seed --shards 3 --advances 1 --alphabets "[L,K" --clients 2 --calls 2 \
    --hold-function explore_mutant.hold_lease
# The server's restart (15, 16): the clock, w1 holds p, the restart, w2
# takes it (4 steps) once the grace is off
run clean --protocol leases --roles --clients 2 --calls 3 --shards 2 --advances 1 --restarts 1
run clean --protocol leases "${RESTART[@]}"
# heartbeats (B) the restart loses (a heartbeat-only transaction does not
# wait for the WAL flush): the grace still keeps every lease for its holder
run clean --protocol leases --heartbeat --alphabets "TB,TK" --clients 2 --calls 3 --shards 2 --advances 1 --restarts 1
run restart-grace --protocol leases --alphabets TN,TK --clients 2 --calls 2 --shards 2 --advances 1 --restarts 1 \
    --setting lease.restart_grace=off

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
