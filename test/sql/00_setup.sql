-- Helpers shared by the pg_regress suite (all files run in one database).
CREATE SCHEMA lease_test;
-- the roles of 14_binding_gucs, 23_events_status, 24_import_kcl_ex and 40_bad_input call lease_test.try() too
GRANT USAGE ON SCHEMA lease_test TO PUBLIC;

-- Runs a statement and returns its SQLSTATE and message, or 'ok'.
CREATE FUNCTION lease_test.try(stmt text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE stmt;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

-- A digest of every row of every table in schema lease: equal digests
-- before and after a call prove the call wrote nothing.
CREATE FUNCTION lease_test.digest() RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    t record;
    d text;
    acc text := '';
BEGIN
    FOR t IN SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = 'lease' AND c.relkind = 'r' ORDER BY 1
    LOOP
        EXECUTE format('SELECT md5(coalesce(string_agg(x::text, %L ORDER BY x::text), %L)) FROM lease.%I x',
                       '|', '', t.relname) INTO d;
        acc := acc || t.relname || '=' || d || ';';
    END LOOP;
    RETURN md5(acc);
END $$;

-- Moves a lease's expiry into the past, as if its owner had stopped renewing:
-- its own expiry, and its owner's heartbeat (renew_leases renews every lease
-- of a worker with one heartbeat, so the owner's other leases lose it too:
-- those it took after its last renew_leases keep their own expiry).
CREATE FUNCTION lease_test.expire(app text, stream text, shard text) RETURNS void
LANGUAGE sql AS $$
    UPDATE lease.stream_workers AS w
       SET renewed_until = LEAST(w.renewed_until, clock_timestamp() - interval '1 second')
      FROM lease.shard_leases AS l
     WHERE l.app_name = app AND l.stream_name = stream AND l.shard_id = shard
       AND w.app_name = app AND w.stream_name = stream AND w.worker = l.lease_owner;
    UPDATE lease.shard_leases SET lease_expires_at = clock_timestamp() - interval '1 second'
     WHERE app_name = app AND stream_name = stream AND shard_id = shard AND lease_owner IS NOT NULL
$$;

SELECT lease_test.try('SELECT 1'), lease_test.try('SELECT 1/0');
