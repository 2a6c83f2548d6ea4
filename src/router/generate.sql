-- src/router/generate.sql: writes pg_lease_router--<version>.sql from the
-- catalog of a database where pg_lease is installed (src/router/generate.sh
-- runs it; test/router/router_test.sh checks that the committed script is
-- exactly what it writes, so the router cannot drift from pg_lease).
--
-- Every function of pg_lease in schema lease gets a router function with
-- the same name, argument names, types, defaults and result, routed by the
-- first rule that applies (docs/scale-out.md, "Routing"):
--   stream        arguments start (app_name, stream_name): the stream's partition
--   all           grant_app, revoke_app, prune_events,
--                 retry_failed_compensations, list_tenant_limits and the
--                 monitoring_* functions: every partition; a scalar result is combined
--                 (bool_or, sum) by a SQL wrapper, rows are the union of
--                 each partition's (one monitoring_fleet row per partition)
--   import        import_kcl_ex, import_kcl_ex_rows: by hand,
--                 src/router/<name>.sql (the rows split by stream);
--                 import_kcl_dynamodb imports one stream's leases, so the
--                 stream rule sends it whole to that stream's partition
--   app           first argument app_name: the app's partition
--   user          first argument user_id: the tenant's partition
--   conversation  first argument a conversation id: the partition that made it
-- Trigger functions are not routed: they serve pg_lease's own tables, which
-- a router has not; nor are the steps of a stream move (move_stream_*),
-- which src/router/placement.sql calls on named partitions.  A function no rule covers makes the generator fail
-- (NO ROUTING RULE).
-- Every view of pg_lease in schema lease becomes a view over all partitions.
\set ON_ERROR_STOP 1
\pset format unaligned
\pset tuples_only on
\pset footer off

WITH fn AS (
    SELECT p.oid, p.proname, p.proretset,
           pg_catalog.pg_get_function_arguments(p.oid) AS args,
           pg_catalog.pg_get_function_result(p.oid) AS result,
           pg_catalog.format_type(p.prorettype, NULL) AS rettype,
           -- input arguments only, in order: names and types
           ARRAY(SELECT a.n FROM ROWS FROM (pg_catalog.unnest(p.proargnames), pg_catalog.unnest(p.proargmodes)) WITH ORDINALITY AS a(n, m, i)
                  WHERE a.m IS NULL OR a.m IN ('i', 'b') ORDER BY a.i) AS innames,
           ARRAY(SELECT t::pg_catalog.regtype::text FROM pg_catalog.unnest(p.proargtypes) AS t) AS intypes
      FROM pg_catalog.pg_proc AS p
      JOIN pg_catalog.pg_depend AS d
        ON d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND d.objid = p.oid AND d.deptype = 'e'
      JOIN pg_catalog.pg_extension AS e
        ON d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass AND d.refobjid = e.oid
     WHERE e.extname = 'pg_lease' AND p.pronamespace = 'lease'::pg_catalog.regnamespace
       AND p.prorettype OPERATOR(pg_catalog.<>) 'pg_catalog.trigger'::pg_catalog.regtype
       -- called by pg_lease's own statements on a partition, about that
       -- partition's sessions; no client calls it
       AND p.proname OPERATOR(pg_catalog.<>) 'liveness_cutoff'
       -- the steps of a stream move: the router's move_stream calls each
       -- on a named partition (src/router/placement.sql)
       AND p.proname NOT LIKE 'move\_stream\_%'
), ruled AS (
    SELECT fn.*,
           CASE
               WHEN proname IN ('grant_app', 'revoke_app', 'prune_events', 'retry_failed_compensations',
                               'list_tenant_limits')
                    OR proname LIKE 'monitoring\_%' THEN 'all'
               WHEN proname IN ('import_kcl_ex', 'import_kcl_ex_rows') THEN 'import'
               WHEN innames[1:2] = ARRAY['app_name', 'stream_name'] THEN 'stream'
               WHEN innames[1] = 'app_name' THEN 'app'
               WHEN innames[1] = 'user_id' THEN 'user'
               WHEN innames[1] LIKE '%conversation_id' AND intypes[1] = 'bigint' THEN 'conversation'
           END AS rule,
           -- the arguments as passed on: reg* types travel as text (their
           -- OIDs differ between servers) and are cast back remotely
           (SELECT pg_catalog.string_agg(CASE WHEN t LIKE 'reg%' THEN pg_catalog.quote_ident(n) || '::pg_catalog.' || t
                                              ELSE pg_catalog.quote_ident(n) END, ', ' ORDER BY i)
              FROM ROWS FROM (pg_catalog.unnest(innames), pg_catalog.unnest(intypes)) WITH ORDINALITY AS a(n, t, i)) AS remote_args,
           (SELECT pg_catalog.string_agg(pg_catalog.quote_ident(n) || ' ' || CASE WHEN t LIKE 'reg%' THEN 'text' ELSE t END, ', ' ORDER BY i)
              FROM ROWS FROM (pg_catalog.unnest(innames), pg_catalog.unnest(intypes)) WITH ORDINALITY AS a(n, t, i)) AS internal_args,
           (SELECT pg_catalog.string_agg('$' || i || CASE WHEN t LIKE 'reg%' THEN '::text' ELSE '' END, ', ' ORDER BY i)
              FROM ROWS FROM (pg_catalog.unnest(innames), pg_catalog.unnest(intypes)) WITH ORDINALITY AS a(n, t, i)) AS wrapper_args
      FROM fn
), defs AS (
    SELECT proname, args, 1 AS part,
           CASE rule
               WHEN 'stream' THEN pg_catalog.format(E'CREATE FUNCTION lease.%I(%s)\nRETURNS %s\nLANGUAGE plproxy AS $$\n    CLUSTER ''pg_lease'';\n    RUN ON lease_router.stream_partition(app_name, stream_name);\n$$;',
                                                    proname, args, result)
               WHEN 'app' THEN pg_catalog.format(E'CREATE FUNCTION lease.%I(%s)\nRETURNS %s\nLANGUAGE plproxy AS $$\n    CLUSTER ''pg_lease'';\n    RUN ON lease_router.app_partition(app_name);\n$$;',
                                                 proname, args, result)
               WHEN 'user' THEN pg_catalog.format(E'CREATE FUNCTION lease.%I(%s)\nRETURNS %s\nLANGUAGE plproxy AS $$\n    CLUSTER ''pg_lease'';\n    RUN ON lease_router.user_partition(user_id);\n$$;',
                                                  proname, args, result)
               WHEN 'conversation' THEN pg_catalog.format(E'CREATE FUNCTION lease.%I(%s)\nRETURNS %s\nLANGUAGE plproxy AS $$\n    CLUSTER ''pg_lease'';\n    RUN ON lease_router.conversation_partition(%I);\n$$;',
                                                          proname, args, result, innames[1])
               WHEN 'all' THEN
                   CASE WHEN proretset THEN
                       pg_catalog.format(E'CREATE FUNCTION lease.%I(%s)\nRETURNS %s\nLANGUAGE plproxy AS $$\n    CLUSTER ''pg_lease'';\n    RUN ON ALL;\n$$;',
                                         proname, args, result)
                   ELSE
                       pg_catalog.format(E'CREATE FUNCTION lease_router.%I(%s)\nRETURNS SETOF %s\nLANGUAGE plproxy AS $$\n    CLUSTER ''pg_lease'';\n    RUN ON ALL;\n    SELECT lease.%I(%s);\n$$;\n\n'
                                         || E'CREATE FUNCTION lease.%I(%s)\nRETURNS %s\nLANGUAGE sql VOLATILE AS $$\n    SELECT %s FROM lease_router.%I(%s) AS r\n$$;',
                                         proname || '_on_all', internal_args, rettype, proname, remote_args,
                                         proname, args, result,
                                         CASE rettype WHEN 'boolean' THEN 'pg_catalog.bool_or(r)'
                                                      ELSE 'CAST(pg_catalog.sum(r) AS ' || rettype || ')' END,
                                         proname || '_on_all', wrapper_args)
                   END
               WHEN 'import' THEN '\ir ' || proname || '.sql'
               ELSE pg_catalog.format('NO ROUTING RULE for lease.%I(%s)', proname, args)
           END AS def
      FROM ruled
    UNION ALL
    SELECT c.relname, '', 2,
           pg_catalog.format(E'CREATE FUNCTION lease_router.%I()\nRETURNS TABLE (%s)\nLANGUAGE plproxy AS $$\n    CLUSTER ''pg_lease'';\n    RUN ON ALL;\n    SELECT %s FROM lease.%I AS v;\n$$;\n\n'
                             || E'CREATE VIEW lease.%I AS SELECT * FROM lease_router.%I();',
                             c.relname || '_on_all',
                             (SELECT pg_catalog.string_agg(pg_catalog.quote_ident(a.attname) || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum)
                                FROM pg_catalog.pg_attribute AS a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped),
                             (SELECT pg_catalog.string_agg('v.' || pg_catalog.quote_ident(a.attname), ', ' ORDER BY a.attnum)
                                FROM pg_catalog.pg_attribute AS a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped),
                             c.relname, c.relname, c.relname || '_on_all')
      FROM pg_catalog.pg_class AS c
      JOIN pg_catalog.pg_depend AS d
        ON d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass AND d.objid = c.oid AND d.deptype = 'e'
      JOIN pg_catalog.pg_extension AS e
        ON d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass AND d.refobjid = e.oid
     WHERE e.extname = 'pg_lease' AND c.relnamespace = 'lease'::pg_catalog.regnamespace AND c.relkind = 'v'
)
SELECT pg_catalog.string_agg(def, E'\n\n' ORDER BY part, proname COLLATE "C", args COLLATE "C") FROM defs;
