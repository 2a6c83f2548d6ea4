-- lease.hold_lease: the fenced-transaction contract (docs/exactly-once.md).
-- Returns the checkpoint when the owner holds the lease at the epoch it
-- gives; raises 55000 otherwise, so a transaction that calls it cannot
-- commit a stale owner's output.  The locking is in the isolation specs
-- (hold_lease_*.spec).
CREATE TABLE lease_test.hold_out (shard_id text, record int);
SELECT lease.create_lease('hold', 's', 'a', '{}', '10');
SELECT lease.take_lease('hold', 's', 'a', 'w1');
SELECT lease_epoch FROM lease.shard_leases WHERE app_name = 'hold';

-- the owner at its epoch: the checkpoint comes back; nothing is written
SELECT lease_test.digest() AS before \gset
SELECT lease.hold_lease('hold', 's', 'a', 'w1', 1);
SELECT lease_test.digest() = :'before' AS nothing_written;

-- the contract: output, hold, checkpoint, commit
BEGIN;
INSERT INTO lease_test.hold_out VALUES ('a', 11), ('a', 12);
SELECT lease.hold_lease('hold', 's', 'a', 'w1', 1);
SELECT lease.update_checkpoint('hold', 's', 'a', 'w1', '12', 0, 1);
COMMIT;
SELECT * FROM lease_test.hold_out ORDER BY record;
SELECT checkpoint FROM lease.shard_leases WHERE app_name = 'hold';

-- renewals do not change the epoch; an expired lease nobody took is still held
SELECT lease.renew_lease('hold', 's', 'a', 'w1', 1);
SELECT lease_test.expire('hold', 's', 'a');
SELECT lease.hold_lease('hold', 's', 'a', 'w1', 1);

-- not the owner, or a stale epoch: 55000, with what the lease is now
\set VERBOSITY default
SELECT lease.hold_lease('hold', 's', 'a', 'w2', 1);
SELECT lease.hold_lease('hold', 's', 'a', 'w1', 2);
\set VERBOSITY terse

-- another worker takes the expired lease: the old owner's transaction
-- raises at hold_lease, and its output (written first, no IF in sight)
-- never commits, even though the client sends COMMIT
SELECT lease.take_lease('hold', 's', 'a', 'w2');
BEGIN;
INSERT INTO lease_test.hold_out VALUES ('a', 13);
SELECT lease.hold_lease('hold', 's', 'a', 'w1', 1);
COMMIT;
SELECT * FROM lease_test.hold_out ORDER BY record;
-- the new owner, at the epoch take_lease gave it
SELECT lease.hold_lease('hold', 's', 'a', 'w2', 2);

-- an owner that took the lease again (after losing it) has a new epoch:
-- the old one is refused even though the owner's name matches
SELECT lease.release_lease('hold', 's', 'a', 'w2');
\set VERBOSITY default
SELECT lease.hold_lease('hold', 's', 'a', 'w2', 2);
SELECT lease.take_lease('hold', 's', 'a', 'w2');
SELECT lease.hold_lease('hold', 's', 'a', 'w2', 2);
SELECT lease.hold_lease('hold', 's', 'a', 'w2', 4);
-- no such lease
SELECT lease.hold_lease('hold', 's', 'nosuch', 'w2', 4);
-- a closed shard is held by nobody
SELECT lease.close_shard('hold', 's', 'a', 'w2');
SELECT lease.hold_lease('hold', 's', 'a', 'w2', 4);
\set VERBOSITY terse

-- under a savepoint, the error ends only the subtransaction
BEGIN;
SAVEPOINT s;
SELECT lease.hold_lease('hold', 's', 'a', 'w2', 4);
ROLLBACK TO SAVEPOINT s;
SELECT count(*) AS still_in_transaction FROM lease_test.hold_out;
COMMIT;

-- bad input: checked before anything runs, nothing written
SELECT lease_test.digest() AS before \gset
SELECT lease_test.try($$SELECT lease.hold_lease('hold', 's', 'a', NULL, 1)$$);
SELECT lease_test.try($$SELECT lease.hold_lease('hold', 's', 'a', 'w2', NULL)$$);
SELECT lease_test.try($$SELECT lease.hold_lease('hold', 's', 'a', 'w2', -1)$$);
SELECT lease_test.try($$SELECT lease.hold_lease('hold', ' ', 'a', 'w2', 1)$$);
SELECT lease_test.try($$SELECT lease.hold_lease(NULL, 's', 'a', 'w2', 1)$$);
SELECT lease_test.digest() = :'before' AS nothing_written;

DROP TABLE lease_test.hold_out;
DELETE FROM lease.shard_leases WHERE app_name = 'hold';
