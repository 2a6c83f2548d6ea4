-- recipe: docs/security.md
-- the group roles, cluster-wide: created only where missing
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['lease_worker', 'lease_app', 'lease_operator'] LOOP
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = r) THEN
            EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', r);
        END IF;
    END LOOP;
END
$$;

GRANT USAGE ON SCHEMA lease TO lease_worker;
GRANT EXECUTE ON FUNCTION
    lease.create_lease(text, text, text, text[], text),
    lease.sync_shards(text, text, text[], text[]),
    lease.take_lease(text, text, text, text, bigint, interval, interval),
    lease.renew_lease(text, text, text, text, bigint, interval),
    lease.update_checkpoint(text, text, text, text, text, bigint),
    lease.update_checkpoint(text, text, text, text, text, bigint, bigint, bigint),
    lease.update_checkpoints(text, text, text, text[], text[], bigint[], bigint[], bigint[]),
    lease.prepare_checkpoint(text, text, text, text, text),
    lease.release_lease(text, text, text, text),
    lease.close_shard(text, text, text, text),
    lease.take_leases(text, text, text, interval, integer, integer, double precision, interval),
    lease.renew_leases(text, text, text, interval, interval),
    lease.heartbeat(text, text, text, interval, interval),
    lease.my_leases(text, text, text),
    lease.hold_lease(text, text, text, text, bigint)
    TO lease_worker;

GRANT USAGE ON SCHEMA lease TO lease_app;
GRANT EXECUTE ON FUNCTION
    lease.start_conversation(text, text, text, text, text),
    lease.find_channel_conversation(text, text, text, text, text),
    lease.rotate_channel(text, text, text, text, text, bigint),
    lease.restore_rotated_channel(bigint, bigint),
    lease.confirm_rotation(bigint, bigint),
    lease.admit_turn(bigint),
    lease.end_conversation(bigint),
    lease.list_conversations(text, text, text, text),
    lease.set_sandbox_status(bigint, text),
    lease.set_conversation_status(bigint, text)
    TO lease_app;

GRANT USAGE ON SCHEMA lease TO lease_operator;
GRANT EXECUTE ON FUNCTION
    lease.request_handoff(text, text, text, text),
    lease.cleanup_ended(text, text),
    lease.delete_lease(text, text, text),
    lease.import_kcl_ex(regclass),
    lease.import_kcl_ex_rows(text[], text[], text[], text[], text[], bigint[], boolean[]),
    lease.import_kcl_dynamodb(text, text, text),
    lease.grant_app(text, regrole),
    lease.revoke_app(text, regrole),
    lease.has_app_access(text),
    lease.set_weight(text, text, text, double precision),
    lease.set_balance_tolerance(text, text, double precision),
    lease.plan_rebalance(text, text, text)
    TO lease_operator;
GRANT SELECT ON lease.lease_status, lease.worker_loads, lease.lease_events,
    lease.app_grants TO lease_operator;
-- the imports run as the caller: they insert the leases themselves (INSERT ...
-- ON CONFLICT, which also needs SELECT); row-level security shows and admits
-- the rows of the operator's own apps only
GRANT SELECT, INSERT ON lease.shard_leases TO lease_operator;
-- end of recipe
