-- test/router/router_test.sh: a helper in the router's and in a pg_lease
-- database.  Runs a statement; returns 'ok' or its SQLSTATE, message,
-- detail and hint, with what PL/Proxy adds removed (the "lease.f(n): [p0]
-- REMOTE ERROR: " before the message, "Remote detail: " / "Remote hint: ").
CREATE SCHEMA router_test;
GRANT USAGE ON SCHEMA router_test TO PUBLIC;
CREATE FUNCTION router_test.try(stmt text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    st text; msg text; det text; hnt text;
BEGIN
    EXECUTE stmt;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT,
                            det = PG_EXCEPTION_DETAIL, hnt = PG_EXCEPTION_HINT;
    RETURN concat_ws(' | ', st,
                     regexp_replace(msg, '^[a-z_.]+\(\d+\): \[[^]]*\] REMOTE ERROR: ', ''),
                     'detail: ' || NULLIF(regexp_replace(det, '^Remote detail: ', ''), ''),
                     'hint: ' || NULLIF(regexp_replace(hnt, '^Remote hint: ', ''), ''));
END $$;
