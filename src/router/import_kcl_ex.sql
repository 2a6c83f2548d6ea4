-- import_kcl_ex through the router (by hand; src/router/generate.sql puts
-- it here).  The router reads the source with the caller's privileges,
-- checks it as pg_lease does (the same SQLSTATEs and messages), and sends
-- its rows to lease.import_kcl_ex_rows below, which splits them by stream.
CREATE FUNCTION lease.import_kcl_ex(source regclass)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    relkind "char";
    relname text;
    qualified text;
    col record;
    coltype regtype;
    app_names text[]; stream_names text[]; shard_ids text[]; checkpoints text[];
    lease_owners text[]; lease_counts bigint[]; completed boolean[];
    bad bigint;
BEGIN
    IF source IS NULL THEN
        RAISE EXCEPTION 'source must not be null' USING ERRCODE = 'null_value_not_allowed',
            HINT = 'Pass the kcl_ex shard_lease table, e.g. ''public.shard_lease''.';
    END IF;
    SELECT c.relkind, c.relname, pg_catalog.quote_ident(n.nspname) OPERATOR(pg_catalog.||) '.'
                      OPERATOR(pg_catalog.||) pg_catalog.quote_ident(c.relname)
      INTO relkind, relname, qualified
      FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
     WHERE c.oid OPERATOR(pg_catalog.=) source;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'relation with OID % does not exist', CAST(source AS oid) USING ERRCODE = 'undefined_table',
            HINT = 'Pass the kcl_ex shard_lease table by name, e.g. ''public.shard_lease''.';
    END IF;
    IF relkind NOT IN ('r', 'p', 'v', 'm', 'f') THEN
        RAISE EXCEPTION '"%" is not a table, view or foreign table', relname
            USING ERRCODE = 'wrong_object_type', HINT = 'Pass the kcl_ex shard_lease table, or a view over it.';
    END IF;
    FOR col IN SELECT * FROM (VALUES
            ('shard_id', ARRAY['text', 'character varying'], 'text or varchar'),
            ('app_name', ARRAY['text', 'character varying'], 'text or varchar'),
            ('stream_name', ARRAY['text', 'character varying'], 'text or varchar'),
            ('checkpoint', ARRAY['text', 'character varying'], 'text or varchar'),
            ('lease_owner', ARRAY['text', 'character varying'], 'text or varchar'),
            ('lease_count', ARRAY['integer', 'bigint', 'smallint'], 'smallint, integer or bigint'),
            ('completed', ARRAY['boolean'], 'boolean')) AS k(name, types, expected) LOOP
        SELECT a.atttypid INTO coltype FROM pg_catalog.pg_attribute AS a
         WHERE a.attrelid OPERATOR(pg_catalog.=) source AND a.attname OPERATOR(pg_catalog.=) col.name
           AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'column "%" of relation % does not exist', col.name, qualified
                USING ERRCODE = 'undefined_column',
                DETAIL = 'A kcl_ex shard_lease table has the columns shard_id, app_name, stream_name, checkpoint, lease_owner, lease_count and completed.',
                HINT = 'Import from a view that supplies the missing columns.';
        END IF;
        IF NOT CAST(coltype AS text) OPERATOR(pg_catalog.=) ANY (col.types) THEN
            RAISE EXCEPTION 'column "%" of relation % has type %', col.name, qualified, pg_catalog.format_type(coltype, NULL)
                USING ERRCODE = 'invalid_parameter_value', DETAIL = pg_catalog.format('import_kcl_ex expects %s.', col.expected),
                HINT = 'Import from a view that casts the column.';
        END IF;
        IF NOT pg_catalog.has_column_privilege(source, col.name, 'SELECT') THEN
            RAISE EXCEPTION 'permission denied for table %', relname
                USING ERRCODE = 'insufficient_privilege',
                DETAIL = pg_catalog.format('import_kcl_ex reads %s with the caller''s privileges.', qualified),
                HINT = pg_catalog.format('Grant the importing role SELECT on %s, or import as a role that may read it.', qualified);
        END IF;
    END LOOP;
    -- the relation reaches the SQL text only as its quoted, qualified name
    EXECUTE pg_catalog.format(
        'SELECT pg_catalog.array_agg(CAST(s.app_name AS pg_catalog.text)), pg_catalog.array_agg(CAST(s.stream_name AS pg_catalog.text)),'
        '       pg_catalog.array_agg(CAST(s.shard_id AS pg_catalog.text)), pg_catalog.array_agg(CAST(s.checkpoint AS pg_catalog.text)),'
        '       pg_catalog.array_agg(CAST(s.lease_owner AS pg_catalog.text)), pg_catalog.array_agg(CAST(s.lease_count AS pg_catalog.int8)),'
        '       pg_catalog.array_agg(s.completed) FROM %s AS s', qualified)
        INTO app_names, stream_names, shard_ids, checkpoints, lease_owners, lease_counts, completed;
    IF app_names IS NULL THEN
        RETURN 0;
    END IF;
    bad := lease_router.kcl_bad_rows(app_names, stream_names, shard_ids, checkpoints, lease_owners, lease_counts);
    IF bad OPERATOR(pg_catalog.>) 0 THEN
        RAISE EXCEPTION '% rows of % cannot be imported', bad, qualified USING ERRCODE = 'invalid_parameter_value',
            DETAIL = 'Every row needs a non-blank shard_id, app_name and stream_name of at most 256 bytes, a lease_owner of at most 256 bytes, a checkpoint of at most 1024 bytes and a non-negative lease_count.',
            HINT = 'Nothing was imported: fix those rows, or import from a view that leaves them out, and run it again.';
    END IF;
    RETURN lease.import_kcl_ex_rows(app_names, stream_names, shard_ids, checkpoints, lease_owners, lease_counts, completed);
END
$$;
