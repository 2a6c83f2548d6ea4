CREATE FUNCTION lease.import_kcl_ex(source regclass)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'import_kcl_ex is not supported through the router yet'
        USING ERRCODE = 'feature_not_supported',
              HINT = 'Run lease.import_kcl_ex on each partition with the rows of its streams.';
END
$$;
