-- Tenant quotas as functions: set_tenant_limit,
-- clear_tenant_limit, tenant_limit, list_tenant_limits.  A tenant without
-- a limit of its own gets lease.default_sandbox_limit.  Lowering a limit
-- below the tenant's current use refuses new admissions and ends nothing.

SELECT lease.set_tenant_limit('tq-1', 3);        -- NULL: it had no limit of its own
SELECT lease.set_tenant_limit('tq-1', 4);        -- 3: the limit replaced
SELECT * FROM lease.tenant_limit('tq-1');
SELECT sandbox_limit = current_setting('lease.default_sandbox_limit')::int AS is_default, own_limit,
       active_sandboxes
  FROM lease.tenant_limit('tq-none');
SELECT lease.set_tenant_limit('tq-2', 0);
SELECT * FROM lease.list_tenant_limits() WHERE user_id LIKE 'tq-%';
SELECT lease.clear_tenant_limit('tq-2');         -- 0: the limit removed
SELECT lease.clear_tenant_limit('tq-2');         -- NULL: none left
SELECT * FROM lease.list_tenant_limits() WHERE user_id LIKE 'tq-%';
-- the default is read at each call (the setting, here for this session)
SET lease.default_sandbox_limit = 7;
SELECT * FROM lease.tenant_limit('tq-none');
RESET lease.default_sandbox_limit;

-- bad input: 22004 for NULLs, 22023 for a negative limit or a blank or too
-- long user_id; each writes nothing
SELECT lease_test.digest() AS before \gset
SELECT lease_test.try($$SELECT lease.set_tenant_limit('tq-1', NULL)$$);
SELECT lease_test.try($$SELECT lease.set_tenant_limit('tq-1', -1)$$);
SELECT lease_test.try($$SELECT lease.set_tenant_limit(NULL, 1)$$);
SELECT lease_test.try($$SELECT lease.set_tenant_limit('', 1)$$);
SELECT lease_test.try($$SELECT lease.set_tenant_limit(repeat('u', 300), 1)$$);
SELECT lease_test.try($$SELECT lease.clear_tenant_limit(NULL)$$);
SELECT lease_test.try($$SELECT lease.clear_tenant_limit(' ')$$);
SELECT lease_test.try($$SELECT * FROM lease.tenant_limit(NULL)$$);
SELECT lease_test.try($$SELECT * FROM lease.tenant_limit('')$$);
SELECT lease_test.digest() = :'before' AS nothing_written;
SELECT * FROM lease.tenant_limit('tq-1');

-- Lowering a limit below current use: three live conversations at limit 4,
-- then limit 1.  New admissions are refused (start and rotate), nothing is
-- ended, turns on the existing conversations go on.
SELECT (lease.start_conversation('tq-1', 'agent', NULL, NULL, 'c' || i)).outcome FROM generate_series(1, 3) i;
SELECT lease.set_tenant_limit('tq-1', 1);
SELECT * FROM lease.tenant_limit('tq-1');
SELECT outcome, detail FROM lease.start_conversation('tq-1', 'agent', NULL, NULL, 'c4');
SELECT outcome, detail
  FROM lease.rotate_channel('tq-1', 'agent', NULL, NULL, 'c1',
                            lease.find_channel_conversation('tq-1', 'agent', NULL, NULL, 'c1'));
SELECT status, channel_id FROM lease.list_conversations('tq-1', NULL, NULL, NULL);
SELECT lease.admit_turn(lease.find_channel_conversation('tq-1', 'agent', NULL, NULL, 'c2')) IS NOT NULL AS turn;
-- ending two leaves one, still at the limit; ending the third admits again
SELECT lease.end_conversation(lease.find_channel_conversation('tq-1', 'agent', NULL, NULL, 'c' || i))
  FROM generate_series(1, 2) i;
SELECT outcome FROM lease.start_conversation('tq-1', 'agent', NULL, NULL, 'c4');
SELECT lease.end_conversation(lease.find_channel_conversation('tq-1', 'agent', NULL, NULL, 'c3'));
SELECT outcome FROM lease.start_conversation('tq-1', 'agent', NULL, NULL, 'c4');
-- clearing the limit gives the tenant the default again
SELECT lease.clear_tenant_limit('tq-1');
SELECT sandbox_limit = current_setting('lease.default_sandbox_limit')::int AS is_default, own_limit,
       active_sandboxes
  FROM lease.tenant_limit('tq-1');
