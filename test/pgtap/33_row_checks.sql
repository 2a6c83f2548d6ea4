-- pgTAP: no write can store a row the lease and binding functions cannot go
-- on with: non-finite times (monitoring and renewals
-- compute with them) and counters at the end of their range (every take
-- increments them) are refused with 23514, whether an operator INSERTs them
-- or import_kcl_ex brings them in; import refuses the whole source cleanly.
BEGIN;
SELECT plan(25);

-- An operator as docs/security.md's recipe makes one: INSERT on the table,
-- granted the app.
CREATE ROLE rc_operator;
GRANT USAGE ON SCHEMA lease TO rc_operator;
GRANT INSERT, SELECT ON lease.shard_leases TO rc_operator;
GRANT EXECUTE ON FUNCTION lease.has_app_access(text) TO rc_operator;
SELECT lease.grant_app('rc', 'rc_operator');

CREATE FUNCTION pg_temp.lease_insert(cols text, vals text) RETURNS text
LANGUAGE sql AS $$
    SELECT pg_catalog.format('INSERT INTO lease.shard_leases (app_name, stream_name, shard_id, %s) VALUES (''rc'', ''s'', ''k'', %s)', cols, vals)
$$;

SET LOCAL ROLE rc_operator;
SELECT throws_ok(pg_temp.lease_insert('lease_owner, lease_expires_at', '''w'', ''-infinity'''),
                 '23514', NULL, 'an operator cannot store lease_expires_at -infinity');
SELECT throws_ok(pg_temp.lease_insert('lease_owner, lease_expires_at', '''w'', ''infinity'''),
                 '23514', NULL, 'nor lease_expires_at infinity');
SELECT throws_ok(pg_temp.lease_insert('lease_count', '9223372036854775807'),
                 '23514', NULL, 'nor lease_count 9223372036854775807');
SELECT throws_ok(pg_temp.lease_insert('lease_count', '4611686018427387904'),
                 '23514', NULL, 'nor lease_count 2^62');
SELECT throws_ok(pg_temp.lease_insert('lease_epoch', '9223372036854775807'),
                 '23514', NULL, 'nor lease_epoch 9223372036854775807');
SELECT throws_ok(pg_temp.lease_insert('owner_switches_since_checkpoint', '9223372036854775807'),
                 '23514', NULL, 'nor owner_switches_since_checkpoint 9223372036854775807');
SELECT throws_ok(pg_temp.lease_insert('handoff_to, handoff_requested_at, handoff_deadline, handoff_lease_duration',
                                      '''w2'', pg_catalog.now(), ''infinity'', ''10s'''),
                 '23514', NULL, 'nor handoff_deadline infinity');
SELECT throws_ok(pg_temp.lease_insert('handoff_to, handoff_requested_at, handoff_deadline, handoff_lease_duration',
                                      '''w2'', ''-infinity'', pg_catalog.now(), ''10s'''),
                 '23514', NULL, 'nor handoff_requested_at -infinity');
SELECT throws_ok(pg_temp.lease_insert('checkpointed_at', '''-infinity'''),
                 '23514', NULL, 'nor checkpointed_at -infinity');
SELECT throws_ok(pg_temp.lease_insert('created_at, updated_at', '''infinity'', ''infinity'''),
                 '23514', NULL, 'nor created_at and updated_at infinity');
SELECT lives_ok(pg_temp.lease_insert('lease_count', '4611686018427387902'),
                'a lease_count just below 2^62 is accepted');
RESET ROLE;
SELECT is(lease.take_lease('rc', 's', 'k', 'w2'), 4611686018427387903::bigint,
          'and the lease can be taken');
SELECT is((SELECT count(*)::int FROM lease.shard_leases WHERE app_name = 'rc'), 1,
          'only the acceptable row was stored');

-- The binding tables.
SELECT throws_ok($$INSERT INTO lease.sandboxes (user_id, created_at) VALUES ('u', 'infinity')$$,
                 '23514', NULL, 'a sandbox cannot be created at infinity');
SELECT throws_ok($$INSERT INTO lease.conversations (user_id, agent_id, updated_at) VALUES ('u', 'a', '-infinity')$$,
                 '23514', NULL, 'a conversation cannot be updated at -infinity');
SELECT throws_ok($$INSERT INTO lease.compensation_failures
                       (previous_conversation_id, failed_conversation_id, reason, sqlstate, occurred_at)
                   VALUES (1, 2, 'r', '55P03', '-infinity')$$,
                 '23514', NULL, 'a compensation failure cannot have occurred at -infinity');
SELECT throws_ok($$INSERT INTO lease.compensation_failures
                       (previous_conversation_id, failed_conversation_id, reason, sqlstate, attempts)
                   VALUES (1, 2, 'r', '55P03', 2147483647)$$,
                 '23514', NULL, 'nor have been attempted 2147483647 times');

-- import_kcl_ex: a lease_count at the end of the range is refused before
-- anything is written (22023), and a count that fits is imported.
CREATE TEMP TABLE rc_kcl (shard_id text, app_name text, stream_name text, checkpoint text,
                          lease_owner text, lease_count bigint, completed boolean);
INSERT INTO rc_kcl VALUES ('k1', 'rc-import', 's', 'LATEST', 'w', 1, false),
                          ('k2', 'rc-import', 's', 'LATEST', 'w', 9223372036854775807, false);
SELECT throws_ok($$SELECT lease.import_kcl_ex('pg_temp.rc_kcl')$$, '22023', NULL,
                 'import_kcl_ex refuses a lease_count of 9223372036854775807');
UPDATE rc_kcl SET lease_count = 4611686018427387904 WHERE shard_id = 'k2';
SELECT throws_ok($$SELECT lease.import_kcl_ex('pg_temp.rc_kcl')$$, '22023', NULL,
                 'and one of 2^62');
SELECT is((SELECT count(*)::int FROM lease.shard_leases WHERE app_name = 'rc-import'), 0,
          'nothing was imported');
SELECT throws_ok($$SELECT lease.import_kcl_ex_rows(ARRAY['rc-import'], ARRAY['s'], ARRAY['k3'],
                                                  ARRAY['LATEST'], ARRAY['w'],
                                                  ARRAY[9223372036854775807], ARRAY[false])$$,
                 '22023', NULL, 'import_kcl_ex_rows refuses it too');
-- 2^62 - 1 fits the table but leaves no take after it (the next needs
-- 2^62): the imports keep 2^61 in hand
UPDATE rc_kcl SET lease_count = 4611686018427387903 WHERE shard_id = 'k2';
SELECT throws_ok($$SELECT lease.import_kcl_ex('pg_temp.rc_kcl')$$, '22023', NULL,
                 'and one of 2^62 - 1, after which no take could follow');
UPDATE rc_kcl SET lease_count = 2305843009213693951 WHERE shard_id = 'k2';
SELECT is(lease.import_kcl_ex('pg_temp.rc_kcl'), 2::bigint, 'a lease_count below 2^61 is imported');
SELECT is((SELECT max(lease_count) FROM lease.shard_leases WHERE app_name = 'rc-import'),
          2305843009213693951::bigint, 'as it was');
SELECT ok(lease.take_lease('rc-import', 's', 'k2', 'w2') IS NOT NULL, 'and a take can follow');

SELECT * FROM finish();
ROLLBACK;
