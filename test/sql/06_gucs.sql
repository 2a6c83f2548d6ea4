-- lease.default_lease_duration: a millisecond time GUC like lock_timeout.
-- A value set before the module is loaded (postgresql.conf, ALTER ROLE, or a
-- SET in a fresh session) is kept and checked when it loads.
SET lease.default_lease_duration = '25s';
LOAD 'pg_lease';
SHOW lease.default_lease_duration;
RESET lease.default_lease_duration;
SHOW lease.default_lease_duration;
SET lease.default_lease_duration = '30s';
SHOW lease.default_lease_duration;
SET lease.default_lease_duration = 1500;
SHOW lease.default_lease_duration;
BEGIN;
SET LOCAL lease.default_lease_duration = '2min';
SHOW lease.default_lease_duration;
COMMIT;
SHOW lease.default_lease_duration;
RESET lease.default_lease_duration;
SHOW lease.default_lease_duration;
SELECT lease_test.try($$SET lease.default_lease_duration = 0$$);
SELECT lease_test.try($$SET lease.default_lease_duration = '8d'$$);
SELECT lease_test.try($$SET lease.default_lease_duration = 'soon'$$);
-- the lease. prefix is reserved: a typo is an error, not a silent placeholder
SELECT lease_test.try($$SET lease.default_lease_durration = '1s'$$);
