-- The channel-binding GUCs: defaults, units, ranges, who may set them.
LOAD 'pg_lease';
SHOW lease.default_sandbox_limit;
SHOW lease.fleet_capacity;
SHOW lease.fleet_lock_namespace;
SHOW lease.sandbox_lock_namespace;
SHOW lease.rotation_lock_timeout;

-- rotation_lock_timeout is a millisecond time GUC like lock_timeout
SET lease.rotation_lock_timeout = '2s';
SHOW lease.rotation_lock_timeout;
SET lease.rotation_lock_timeout = 75;
SHOW lease.rotation_lock_timeout;
BEGIN;
SET LOCAL lease.rotation_lock_timeout = '1min';
SHOW lease.rotation_lock_timeout;
COMMIT;
SHOW lease.rotation_lock_timeout;
RESET lease.rotation_lock_timeout;
-- the wait is always bounded: 0 (lock_timeout's "no limit") is rejected
SELECT lease_test.try($$SET lease.rotation_lock_timeout = 0$$);
SELECT lease_test.try($$SET lease.rotation_lock_timeout = 'soon'$$);
SELECT lease_test.try($$SET lease.fleet_capacity = -1$$);
SELECT lease_test.try($$SET lease.default_sandbox_limit = -1$$);
SELECT lease_test.try($$SET lease.fleet_lock_namespace = 4294967296$$);

-- admission serializes on the admission gate and takes no advisory lock
-- (lease.fleet_lock_namespace has no effect since 0.5.0)
BEGIN;
SELECT outcome FROM lease.start_conversation('gu-u1', 'agent', NULL, NULL, NULL);
SELECT count(*) AS advisory_locks FROM pg_locks
 WHERE locktype = 'advisory' AND pid = pg_backend_pid();
ROLLBACK;

-- admission_lock_timeout is a millisecond time GUC too, always bounded
SHOW lease.admission_lock_timeout;
SET lease.admission_lock_timeout = '2s';
SHOW lease.admission_lock_timeout;
RESET lease.admission_lock_timeout;
SELECT lease_test.try($$SET lease.admission_lock_timeout = 0$$);
-- it bounds only admission's locking read: lock_timeout is the caller's after it
SET lock_timeout = '3s';
BEGIN;
SELECT outcome FROM lease.start_conversation('gu-u1', 'agent', NULL, NULL, NULL);
SHOW lock_timeout;
SELECT lease.admit_turn(conversation_id) > 0 AS turn
  FROM lease.start_conversation('gu-u1', 'agent', NULL, NULL, NULL);
SHOW lock_timeout;
ROLLBACK;
RESET lock_timeout;

-- quotas and lock namespaces are superuser settings: a role that may call
-- the functions cannot raise its own quota or leave the fleet lock's key
-- space; it may choose its own rotation patience
CREATE ROLE lease_gucs_user;
SET ROLE lease_gucs_user;
SELECT lease_test.try($$SET lease.fleet_capacity = 100000$$);
SELECT lease_test.try($$SET lease.default_sandbox_limit = 100000$$);
SELECT lease_test.try($$SET lease.fleet_lock_namespace = 1$$);
SELECT lease_test.try($$SET lease.sandbox_lock_namespace = 1$$);
SELECT lease_test.try($$SET lease.rotation_lock_timeout = '1s'$$);
SELECT lease_test.try($$SET lease.admission_lock_timeout = '1s'$$);
RESET ROLE;
DROP ROLE lease_gucs_user;
