-- Graceful handoff: request_handoff, release_lease transferring straight to
-- the requester, the requester taking after the deadline, nobody else
-- taking a lease with a pending handoff, and a request lapsing.
SELECT lease.create_lease('ho', 's', 'h' || i) FROM generate_series(1, 6) i;
SELECT lease.take_lease('ho', 's', 'h' || i, 'w1') FROM generate_series(1, 6) i;

-- request_handoff: true when recorded, with deadline = now + lease.handoff_timeout
SET lease.handoff_timeout = '5s';
SELECT lease.request_handoff('ho', 's', 'h1', 'w2') AS requested;
RESET lease.handoff_timeout;
SELECT handoff_to, handoff_deadline - handoff_requested_at AS timeout,
       handoff_lease_duration, lease_owner, lease_count, lease_epoch
  FROM lease.shard_leases WHERE app_name = 'ho' AND shard_id = 'h1';
-- a pending request is not replaced; nor is a lease handed to its own holder
SELECT lease.request_handoff('ho', 's', 'h1', 'w3') AS already_pending,
       lease.request_handoff('ho', 's', 'h2', 'w1') AS to_holder,
       lease.request_handoff('ho', 's', 'nope', 'w2') AS unknown;
-- unowned, expired, ended: nothing to hand over
SELECT lease.create_lease('ho', 's', 'free');
SELECT lease_test.expire('ho', 's', 'h6');
SELECT lease.request_handoff('ho', 's', 'free', 'w2') AS unowned,
       lease.request_handoff('ho', 's', 'h6', 'w2') AS expired;

-- while pending, nobody else takes the live lease: not without a count,
-- not with the right count (no abrupt steal), and not via take_leases
SELECT lease.take_lease('ho', 's', 'h1', 'w3') IS NULL AS third_not_taken,
       lease.take_lease('ho', 's', 'h1', 'w3', 1) IS NULL AS third_not_stolen;
-- the requester before the deadline: not taken without a count
SELECT lease.take_lease('ho', 's', 'h1', 'w2') IS NULL AS requester_waits;
-- the holder keeps renewing (count-guarded renew_lease still works) and
-- checkpointing, and learns of the request from renew_leases
SELECT lease.renew_lease('ho', 's', 'h1', 'w1', 1) AS renewed;
SELECT lease.update_checkpoint('ho', 's', 'h1', 'w1', '10') AS checkpointed;
SELECT * FROM lease.renew_leases('ho', 's', 'w1');

-- the holder releases: the lease goes straight to the requester
SELECT lease.release_lease('ho', 's', 'h1', 'w1') AS released;
SELECT lease_owner, lease_count, lease_epoch, owner_switches_since_checkpoint, checkpoint,
       handoff_to IS NULL AS settled,
       lease_expires_at - clock_timestamp() BETWEEN interval '9 s' AND interval '10 s' AS requester_duration
  FROM lease.shard_leases WHERE app_name = 'ho' AND shard_id = 'h1';
-- ...and the released-by-the-old-holder lease is no longer its to release
SELECT lease.release_lease('ho', 's', 'h1', 'w1') AS not_owner_any_more;

-- the holder does not release: after the deadline the requester takes it
SELECT lease.request_handoff('ho', 's', 'h2', 'w2');
SELECT lease.take_lease('ho', 's', 'h2', 'w2') IS NULL AS before_deadline;
UPDATE lease.shard_leases SET handoff_deadline = clock_timestamp() - interval '1 s'
 WHERE app_name = 'ho' AND shard_id = 'h2';
SELECT lease.take_lease('ho', 's', 'h3', 'w3') IS NULL AS third_still_not;
SELECT lease.take_lease('ho', 's', 'h2', 'w3') IS NULL AS third_not_after_deadline;
SELECT lease.take_lease('ho', 's', 'h2', 'w2') AS requester_takes;
SELECT lease_owner, lease_epoch, handoff_to FROM lease.shard_leases WHERE app_name = 'ho' AND shard_id = 'h2';
-- the old holder's renewals simply no longer include it
SELECT shard_id FROM lease.renew_leases('ho', 's', 'w1');

-- take_leases claims due handoffs the same way (action taken, previous owner)
SELECT lease.request_handoff('ho', 's', 'h3', 'w2');
UPDATE lease.shard_leases SET handoff_deadline = clock_timestamp() - interval '1 s'
 WHERE app_name = 'ho' AND shard_id = 'h3';
SELECT * FROM lease.take_leases('ho', 's', 'w2', max_leases => 1, max_steal => 0);

-- the requester may also steal with the count at any time (its own request)
SELECT lease.request_handoff('ho', 's', 'h4', 'w2');
SELECT lease.take_lease('ho', 's', 'h4', 'w2', lease_count) AS requester_steals
  FROM lease.shard_leases WHERE app_name = 'ho' AND shard_id = 'h4';

-- an expired lease with a pending handoff: its holder is gone, anyone takes it
SELECT lease.request_handoff('ho', 's', 'h5', 'w2');
SELECT lease_test.expire('ho', 's', 'h5');
SELECT lease.take_lease('ho', 's', 'h5', 'w3') AS expired_taken;
SELECT lease_owner, handoff_to FROM lease.shard_leases WHERE app_name = 'ho' AND shard_id = 'h5';

-- a request its requester did not complete within one lease duration after
-- the deadline lapses: the holder keeps the lease and releases it normally
-- (h6 is w1's again: expired but not taken, and w1 renews; one heartbeat
-- renews all of a worker's leases, so expiring h5 above expired h6 too)
SELECT shard_id FROM lease.renew_leases('ho', 's', 'w1');
SELECT lease.request_handoff('ho', 's', 'h6', 'w9');
UPDATE lease.shard_leases SET handoff_deadline = clock_timestamp() - interval '11 s'
 WHERE app_name = 'ho' AND shard_id = 'h6';
SELECT shard_id, handoff_to FROM lease.renew_leases('ho', 's', 'w1');
SELECT lease.take_lease('ho', 's', 'h6', 'w9') IS NULL AS lapsed_requester;
SELECT lease.request_handoff('ho', 's', 'h6', 'w8') AS new_request_allowed;
UPDATE lease.shard_leases SET handoff_deadline = clock_timestamp() - interval '11 s'
 WHERE app_name = 'ho' AND shard_id = 'h6';
SELECT lease.release_lease('ho', 's', 'h6', 'w1') AS released;
SELECT lease_owner, handoff_to FROM lease.shard_leases WHERE app_name = 'ho' AND shard_id = 'h6';

-- close_shard settles a pending request: the shard is over
SELECT lease.take_lease('ho', 's', 'free', 'w1');
SELECT lease.request_handoff('ho', 's', 'free', 'w2');
SELECT lease.close_shard('ho', 's', 'free', 'w1');
SELECT lease_owner, checkpoint, handoff_to FROM lease.shard_leases WHERE app_name = 'ho' AND shard_id = 'free';
SELECT lease.request_handoff('ho', 's', 'free', 'w2') AS ended;

SELECT shard_id, lease_owner, lease_count, lease_epoch FROM lease.shard_leases
 WHERE app_name = 'ho' ORDER BY shard_id;

-- bad input: errors, and nothing written
SELECT lease_test.digest() AS before \gset
SELECT lease_test.try($$SELECT lease.request_handoff(NULL, 's', 'h1', 'w2')$$);
SELECT lease_test.try($$SELECT lease.request_handoff('ho', NULL, 'h1', 'w2')$$);
SELECT lease_test.try($$SELECT lease.request_handoff('ho', 's', NULL, 'w2')$$);
SELECT lease_test.try($$SELECT lease.request_handoff('ho', 's', 'h1', NULL)$$);
SELECT lease_test.try($$SELECT lease.request_handoff('ho', 's', 'h1', '')$$);
SELECT lease_test.try($$SELECT lease.request_handoff('ho', 's', repeat('h', 257), 'w2')$$);
SELECT lease_test.digest() = :'before' AS nothing_written;
