-- lease.my_leases and the fencing token a worker holds: every way a worker
-- comes to own a lease (take, steal, expiry takeover, transfer) hands it the
-- current lease_epoch through a function of the worker recipe, and every
-- false/NULL a lease call returns can be told apart with my_leases
-- (docs/worker-guide.md).  The worker role below has exactly the worker
-- recipe (test/pgtap/30_roles.sql) and no privilege on any table or view.
CREATE ROLE lease_test_worker;
GRANT USAGE ON SCHEMA lease TO lease_test_worker;
GRANT EXECUTE ON FUNCTION
    lease.create_lease(text, text, text, text[], text),
    lease.take_lease(text, text, text, text, bigint, interval, interval),
    lease.renew_lease(text, text, text, text, bigint, interval),
    lease.update_checkpoint(text, text, text, text, text, bigint),
    lease.update_checkpoint(text, text, text, text, text, bigint, bigint, bigint),
    lease.prepare_checkpoint(text, text, text, text, text),
    lease.release_lease(text, text, text, text),
    lease.close_shard(text, text, text, text),
    lease.take_leases(text, text, text, interval, integer, integer, double precision, interval),
    lease.renew_leases(text, text, text, interval, interval),
    lease.my_leases(text, text, text)
    TO lease_test_worker;
SELECT lease.grant_app('ml', 'lease_test_worker');
SELECT lease.create_lease('ml', 's', 'm' || i) FROM generate_series(1, 4) i;
-- the database clock moves on between statements: show only its sign
CREATE FUNCTION lease_test.mine(owner text)
RETURNS TABLE(shard_id text, lease_count bigint, lease_epoch bigint, checkpoint text,
              checkpoint_sub_sequence bigint, pending_checkpoint text, live boolean,
              handoff_to text, handoff_from text, waiting_on text[])
LANGUAGE sql AS $$
SELECT shard_id, lease_count, lease_epoch, checkpoint, checkpoint_sub_sequence,
       pending_checkpoint, expires_in > interval '0', handoff_to, handoff_from, waiting_on
  FROM lease.my_leases('ml', 's', owner) $$;
GRANT EXECUTE ON FUNCTION lease_test.mine(text) TO lease_test_worker;
GRANT USAGE ON SCHEMA lease_test TO lease_test_worker;

SET ROLE lease_test_worker;
-- a worker that has nothing yet: no rows
SELECT * FROM lease_test.mine('w1');
-- take_leases: the token is in its result
SELECT shard_id, action, lease_epoch FROM lease.take_leases('ml', 's', 'w1', '1 minute');
SELECT * FROM lease_test.mine('w1');
SELECT expires_in BETWEEN interval '50 s' AND interval '60 s' AS database_clock
  FROM lease.my_leases('ml', 's', 'w1') WHERE shard_id = 'm1';
-- the second worker asks for two; each side sees the handoff from its end
SELECT shard_id, action, previous_owner, lease_epoch FROM lease.take_leases('ml', 's', 'w2', '1 minute');
SELECT * FROM lease_test.mine('w1');
SELECT * FROM lease_test.mine('w2');
-- renew_leases: the holder's epoch, and whom each lease is promised to
SELECT * FROM lease.renew_leases('ml', 's', 'w1', '1 minute');

-- transfer: the holder releases, the lease goes to the requester with a new
-- epoch.  The epoch the requester saw while it was promised is stale now:
-- its fenced checkpoint with it is refused, and the one it learns from its
-- next renew_leases is accepted.
SELECT lease.update_checkpoint('ml', 's', 'm1', 'w1', '100', 0, 1) AS holder_checkpoints;
SELECT lease.release_lease('ml', 's', 'm1', 'w1') AS handed_over;
SELECT * FROM lease.renew_leases('ml', 's', 'w2', '1 minute');
SELECT lease.update_checkpoint('ml', 's', 'm1', 'w2', '101', 0, 1) AS stale_requester_epoch;
SELECT lease.update_checkpoint('ml', 's', 'm1', 'w2', '101', 0, lease_epoch) AS renew_leases_epoch
  FROM lease.renew_leases('ml', 's', 'w2', '1 minute') WHERE shard_id = 'm1';
-- the old holder's token no longer works either, and m1 is gone from its list
SELECT lease.update_checkpoint('ml', 's', 'm1', 'w1', '102', 0, 2) AS old_holder;
SELECT * FROM lease_test.mine('w1');
SELECT * FROM lease_test.mine('w2');
RESET ROLE;

-- a due handoff claimed by take_leases: the token is in take_leases' result
SET ROLE lease_test_worker;
SELECT shard_id, action, previous_owner, lease_epoch FROM lease.take_leases('ml', 's', 'w2', '1 minute');
RESET ROLE;
UPDATE lease.shard_leases SET handoff_deadline = clock_timestamp() - interval '1 second'
 WHERE app_name = 'ml' AND shard_id = 'm2';
SET ROLE lease_test_worker;
SELECT shard_id, action, previous_owner, lease_epoch FROM lease.take_leases('ml', 's', 'w2', '1 minute');
SELECT lease.update_checkpoint('ml', 's', 'm2', 'w2', '200', 0, 2) AS claimed_epoch;
RESET ROLE;

-- expiry takeover and steal with take_lease, which returns lease_count only:
-- the token comes from my_leases (or the next renew_leases)
SELECT lease_test.expire('ml', 's', 'm3');
SET ROLE lease_test_worker;
SELECT lease.take_lease('ml', 's', 'm3', 'w2', NULL, '1 minute') AS expiry_takeover;
SELECT shard_id, lease_epoch FROM lease.my_leases('ml', 's', 'w2') WHERE shard_id = 'm3';
SELECT lease.update_checkpoint('ml', 's', 'm3', 'w2', '300', 0, lease_epoch) AS takeover_epoch
  FROM lease.my_leases('ml', 's', 'w2') WHERE shard_id = 'm3';
SELECT lease.take_lease('ml', 's', 'm4', 'w2', lease_count, '1 minute') AS stolen
  FROM lease.my_leases('ml', 's', 'w1') WHERE shard_id = 'm4';
SELECT lease.update_checkpoint('ml', 's', 'm4', 'w2', '400', 0, lease_epoch) AS steal_epoch
  FROM lease.my_leases('ml', 's', 'w2') WHERE shard_id = 'm4';
SELECT * FROM lease_test.mine('w2');

-- "my call returned false/NULL": each reason, and what my_leases shows
-- 1. lost: another worker took the lease; it is absent from my list
SELECT lease.update_checkpoint('ml', 's', 'm4', 'w1', '401') AS lost,
       lease.renew_lease('ml', 's', 'm4', 'w1', 1) AS lost_renewal,
       lease.release_lease('ml', 's', 'm4', 'w1') AS lost_release;
SELECT count(*) AS m4_in_w1_list FROM lease.my_leases('ml', 's', 'w1') WHERE shard_id = 'm4';
-- 2. stale token or stale lease_count: the lease is listed, with the
-- current epoch and count to use
SELECT lease.update_checkpoint('ml', 's', 'm4', 'w2', '402', 0, 1) AS stale_token,
       lease.renew_lease('ml', 's', 'm4', 'w2', 0) AS stale_count;
SELECT shard_id, lease_count, lease_epoch, checkpoint FROM lease.my_leases('ml', 's', 'w2') WHERE shard_id = 'm4';
-- 3. wrong arguments: owner and checkpoint swapped, app and stream
-- swapped, a shard that does not exist: false/NULL, and the real leases
-- are all listed under the right names
SELECT lease.update_checkpoint('ml', 's', 'm4', '402', 'w2') AS swapped_owner_checkpoint;
-- app and stream swapped: the worker is not granted an app called 's'
-- (42501); a role that may act for every app gets NULL
SELECT lease_test.try($$SELECT lease.renew_lease('s', 'ml', 'm4', 'w2', 3)$$) AS swapped_app_stream;
RESET ROLE;
SELECT lease.renew_lease('s', 'ml', 'm4', 'w2', 3) AS owner_swapped_app_stream;
SET ROLE lease_test_worker;
SELECT lease.update_checkpoint('ml', 's', 'no-such-shard', 'w2', '1') AS unknown_shard;
SELECT shard_id FROM lease.my_leases('ml', 's', 'w2');
-- 4. ended: close_shard ends the shard and drops the lease from the list;
-- every later call about it is false
SELECT lease.close_shard('ml', 's', 'm3', 'w2') AS closed;
SELECT lease.update_checkpoint('ml', 's', 'm3', 'w2', '301') AS after_close,
       lease.close_shard('ml', 's', 'm3', 'w2') AS closed_again;
SELECT count(*) AS m3_listed FROM lease.my_leases('ml', 's', 'w2') WHERE shard_id = 'm3';
-- 5. expired but not taken: still listed (expires_in negative) and still
-- the worker's: renewing it works
RESET ROLE;
SELECT lease_test.expire('ml', 's', 'm4');
SET ROLE lease_test_worker;
SELECT shard_id, expires_in < interval '0' AS expired FROM lease.my_leases('ml', 's', 'w2') WHERE shard_id = 'm4';
SELECT lease.renew_lease('ml', 's', 'm4', 'w2', lease_count) IS NOT NULL AS renewed
  FROM lease.my_leases('ml', 's', 'w2') WHERE shard_id = 'm4';
RESET ROLE;

-- waiting_on: a held lease whose parent appeared later and has not ended
SELECT lease.create_lease('ml', 'lin', 'child', '{parent}'),
       lease.take_lease('ml', 'lin', 'child', 'w3'),
       lease.create_lease('ml', 'lin', 'parent');
SELECT shard_id, waiting_on FROM lease.my_leases('ml', 'lin', 'w3');
SELECT lease.take_lease('ml', 'lin', 'parent', 'w4'), lease.close_shard('ml', 'lin', 'parent', 'w4');
SELECT shard_id, waiting_on FROM lease.my_leases('ml', 'lin', 'w3');
-- a lapsed handoff request is not shown
SELECT lease.create_lease('ml', 'lap', 'x'), lease.take_lease('ml', 'lap', 'x', 'w5'),
       lease.request_handoff('ml', 'lap', 'x', 'w6');
SELECT shard_id, handoff_to FROM lease.my_leases('ml', 'lap', 'w5');
SELECT shard_id, handoff_from FROM lease.my_leases('ml', 'lap', 'w6');
UPDATE lease.shard_leases SET handoff_deadline = clock_timestamp() - handoff_lease_duration - interval '1 second'
 WHERE app_name = 'ml' AND stream_name = 'lap';
SELECT shard_id, handoff_to FROM lease.my_leases('ml', 'lap', 'w5');
SELECT count(*) AS promised FROM lease.my_leases('ml', 'lap', 'w6');
-- another stream, another owner: nothing
SELECT count(*) FROM lease.my_leases('ml', 'nothing-here', 'w2');

-- access: an app the role is not granted
SET ROLE lease_test_worker;
SELECT lease_test.try($$SELECT * FROM lease.my_leases('not-mine', 's', 'w1')$$);
RESET ROLE;

-- bad input: every argument NULL, empty, blank, too long; nothing written
SELECT lease_test.digest() AS before \gset
SELECT lease_test.try(format('SELECT * FROM lease.my_leases(%s)', args)) AS outcome, args
  FROM (VALUES ($$NULL, 's', 'w'$$), ($$'ml', NULL, 'w'$$), ($$'ml', 's', NULL$$),
               ($$'', 's', 'w'$$), ($$'ml', '', 'w'$$), ($$'ml', 's', ''$$),
               ($$' ', 's', 'w'$$), ($$'ml', E'\t', 'w'$$), ($$'ml', 's', E' \n'$$),
               ($$repeat('a', 257), 's', 'w'$$), ($$'ml', repeat('s', 257), 'w'$$),
               ($$'ml', 's', repeat('w', 257)$$)) AS v(args);
SELECT lease_test.digest() = :'before' AS nothing_written;

DROP FUNCTION lease_test.mine(text);
REVOKE ALL ON SCHEMA lease_test FROM lease_test_worker;
SELECT lease.revoke_app('ml', 'lease_test_worker');
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA lease FROM lease_test_worker;
REVOKE ALL ON SCHEMA lease FROM lease_test_worker;
DROP ROLE lease_test_worker;
