-- lease.start_conversation and lease.find_channel_conversation: every
-- outcome, the quotas, the scope rules, bad input.  Tenants here are 'st-*'.

-- a bound conversation: a pending sandbox and a pending conversation
SELECT outcome, conversation_id IS NOT NULL AS has_id, detail
  FROM lease.start_conversation('st-u1', 'agent', NULL, NULL, 'general');
SELECT lease.find_channel_conversation('st-u1', 'agent', NULL, NULL, 'general') AS bound \gset
SELECT c.user_id, c.agent_id, c.vault_id, c.environment_id, c.channel_id, c.status,
       c.rotated_from, s.user_id AS sandbox_user, s.status AS sandbox_status
  FROM lease.conversations c JOIN lease.sandboxes s ON s.id = c.sandbox_id
 WHERE c.id = :bound;

-- the same channel in the same scope: already_bound, that conversation, nothing created
SELECT lease_test.digest() AS before \gset
SELECT outcome, conversation_id = :bound AS same_conversation, detail
  FROM lease.start_conversation('st-u1', 'agent', NULL, NULL, 'general');
SELECT lease_test.digest() = :'before' AS nothing_written;

-- the scope is (user, agent, vault, environment): any difference is another
-- scope, and NULL vault/environment is a value of its own, not "any"
SELECT outcome FROM lease.start_conversation('st-u1', 'agent', 'vault-1', NULL, 'general');
SELECT outcome FROM lease.start_conversation('st-u1', 'agent', NULL, 'prod', 'general');
SELECT outcome FROM lease.start_conversation('st-u1', 'agent', 'vault-1', 'prod', 'general');
SELECT outcome FROM lease.start_conversation('st-u1', 'other-agent', NULL, NULL, 'general');
SELECT outcome FROM lease.start_conversation('st-u2', 'agent', NULL, NULL, 'general');
SELECT outcome FROM lease.start_conversation('st-u1', 'agent', 'vault-1', 'prod', 'general');
SELECT count(DISTINCT x) AS distinct_bindings, count(*) FILTER (WHERE x IS NULL) AS unbound
  FROM (VALUES (lease.find_channel_conversation('st-u1', 'agent', NULL, NULL, 'general')),
               (lease.find_channel_conversation('st-u1', 'agent', 'vault-1', NULL, 'general')),
               (lease.find_channel_conversation('st-u1', 'agent', NULL, 'prod', 'general')),
               (lease.find_channel_conversation('st-u1', 'agent', 'vault-1', 'prod', 'general')),
               (lease.find_channel_conversation('st-u1', 'other-agent', NULL, NULL, 'general')),
               (lease.find_channel_conversation('st-u2', 'agent', NULL, NULL, 'general'))) v(x);
SELECT lease.find_channel_conversation('st-u1', 'agent', NULL, NULL, 'general') = :bound AS exact_scope;
-- nothing bound: NULL (another channel, another vault, another tenant)
SELECT lease.find_channel_conversation('st-u1', 'agent', NULL, NULL, 'random') IS NULL AS unknown_channel,
       lease.find_channel_conversation('st-u1', 'agent', 'vault-2', NULL, 'general') IS NULL AS unknown_vault,
       lease.find_channel_conversation('st-nobody', 'agent', NULL, NULL, 'general') IS NULL AS unknown_user;

-- NULL channel: an unbound conversation; any number of them
SELECT outcome, conversation_id IS NOT NULL AS has_id
  FROM lease.start_conversation('st-u1', 'agent', NULL, NULL, NULL);
SELECT outcome FROM lease.start_conversation('st-u1', 'agent', NULL, NULL, NULL);
SELECT count(*) AS unbound FROM lease.conversations WHERE user_id = 'st-u1' AND channel_id IS NULL;

-- the table itself refuses a second binding in a scope, even with NULLs
SELECT lease_test.try($$INSERT INTO lease.conversations (user_id, agent_id, channel_id)
                        VALUES ('st-u1', 'agent', 'general')$$);
-- ... and a binding on a conversation that is not live
SELECT lease_test.try($$INSERT INTO lease.conversations (user_id, agent_id, channel_id, status)
                        VALUES ('st-u1', 'agent', 'ghost', 'terminated')$$);

-- quotas: a tenant's limit (tenant_limits, else lease.default_sandbox_limit)
-- counts its active sandboxes: pending, starting, ready
SELECT count(*) AS st_u1_active FROM lease.sandboxes
 WHERE user_id = 'st-u1' AND status IN ('pending', 'starting', 'ready');
SET lease.default_sandbox_limit = 7;
SELECT lease_test.digest() AS before \gset
SELECT outcome, conversation_id, detail FROM lease.start_conversation('st-u1', 'agent', NULL, NULL, 'full');
SELECT lease_test.digest() = :'before' AS nothing_written;
-- starting and ready sandboxes count too
UPDATE lease.sandboxes SET status = 'ready' WHERE id = (SELECT sandbox_id FROM lease.conversations WHERE id = :bound);
SELECT outcome FROM lease.start_conversation('st-u1', 'agent', NULL, NULL, 'full');
-- suspended (and ended) sandboxes do not
UPDATE lease.sandboxes SET status = 'suspended'
 WHERE id = (SELECT sandbox_id FROM lease.conversations WHERE user_id = 'st-u1' AND vault_id = 'vault-1' AND environment_id IS NULL);
SELECT outcome FROM lease.start_conversation('st-u1', 'agent', NULL, NULL, 'full');
SELECT outcome, detail FROM lease.start_conversation('st-u1', 'agent', NULL, NULL, 'fuller');
SELECT lease.end_conversation(lease.find_channel_conversation('st-u1', 'agent', NULL, NULL, 'full')) AS ended;
SELECT outcome FROM lease.start_conversation('st-u1', 'agent', NULL, NULL, 'fuller');
-- a tenant_limits row overrides the default, both ways
INSERT INTO lease.tenant_limits VALUES ('st-u1', 9);
SELECT outcome FROM lease.start_conversation('st-u1', 'agent', NULL, NULL, 'fullest');
SELECT outcome FROM lease.start_conversation('st-u1', 'agent', NULL, NULL, 'more');
SELECT outcome, detail FROM lease.start_conversation('st-u1', 'agent', NULL, NULL, 'most');
INSERT INTO lease.tenant_limits VALUES ('st-u3', 0);
SELECT outcome, detail FROM lease.start_conversation('st-u3', 'agent', NULL, NULL, 'general');
-- other tenants are not affected by st-u1's limit
SELECT outcome FROM lease.start_conversation('st-u2', 'agent', NULL, NULL, 'second');
RESET lease.default_sandbox_limit;

-- the fleet capacity counts active sandboxes of every tenant
SELECT count(*) AS fleet_active FROM lease.sandboxes WHERE status IN ('pending', 'starting', 'ready') \gset
SET lease.fleet_capacity = :fleet_active;
SELECT lease_test.digest() AS before \gset
SELECT outcome, conversation_id,
       detail LIKE format('fleet capacity of %s active sandboxes reached; %%', :fleet_active) AS fleet_detail
  FROM lease.start_conversation('st-u4', 'agent', NULL, NULL, 'general');
SELECT lease_test.digest() = :'before' AS nothing_written;
-- already_bound is decided before the quotas: no admission is needed
SELECT outcome FROM lease.start_conversation('st-u1', 'agent', NULL, NULL, 'general');
SET lease.fleet_capacity = 0;
SELECT outcome, detail FROM lease.start_conversation('st-u4', 'agent', NULL, NULL, NULL);
RESET lease.fleet_capacity;
SELECT outcome FROM lease.start_conversation('st-u4', 'agent', NULL, NULL, 'general');

-- bad input: errors, and nothing written
SELECT lease_test.digest() AS before \gset
SELECT lease_test.try($$SELECT * FROM lease.start_conversation(NULL, 'agent', NULL, NULL, 'c')$$);
SELECT lease_test.try($$SELECT * FROM lease.start_conversation('st-u9', NULL, NULL, NULL, 'c')$$);
SELECT lease_test.try($$SELECT * FROM lease.start_conversation('', 'agent', NULL, NULL, 'c')$$);
SELECT lease_test.try($$SELECT * FROM lease.start_conversation('st-u9', ' ', NULL, NULL, 'c')$$);
SELECT lease_test.try($$SELECT * FROM lease.start_conversation('st-u9', 'agent', '', NULL, 'c')$$);
SELECT lease_test.try($$SELECT * FROM lease.start_conversation('st-u9', 'agent', NULL, repeat('e', 257), 'c')$$);
SELECT lease_test.try($$SELECT * FROM lease.start_conversation('st-u9', 'agent', NULL, NULL, '')$$);
SELECT lease_test.try($$SELECT * FROM lease.start_conversation(repeat('u', 257), 'agent', NULL, NULL, 'c')$$);
SELECT lease_test.try($$SELECT lease.find_channel_conversation(NULL, 'agent', NULL, NULL, 'c')$$);
SELECT lease_test.try($$SELECT lease.find_channel_conversation('st-u9', NULL, NULL, NULL, 'c')$$);
SELECT lease_test.try($$SELECT lease.find_channel_conversation('st-u9', 'agent', NULL, NULL, NULL)$$);
SELECT lease_test.try($$SELECT lease.find_channel_conversation('st-u9', 'agent', '', NULL, 'c')$$);
SELECT lease_test.try($$SELECT lease.find_channel_conversation('st-u9', 'agent', NULL, NULL, repeat('c', 257))$$);
SELECT lease_test.digest() = :'before' AS nothing_written;
-- the longest identifiers fit
SELECT outcome FROM lease.start_conversation(repeat('u', 256), repeat('a', 256), repeat('v', 256),
                                             repeat('e', 256), repeat('c', 256));
