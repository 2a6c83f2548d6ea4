-- src/common/schema.sql: the schema
-- One part of pg_lease--<version>.sql (Makefile, SQL_PARTS); each change here
-- needs its twin in the upgrade script pg_lease--<previous>--<version>.sql.

-- The schema `lease` is created by CREATE EXTENSION (pg_lease.control names
-- it), or used as it is when it exists already.  A role that could plant
-- objects in it before the install (its owner, or any role with CREATE on
-- it) could make the script's DDL bind to them, and its owner can drop or
-- replace the extension's objects later: so the install goes ahead only
-- into a schema owned by the installing role or by a superuser, that no
-- other role may create objects in, and that is empty (docs/security.md,
-- "Installing into a schema you own").  The upgrade script checks the same
-- ownership, and that every function and operator in it is the
-- extension's.  Everything here is schema-qualified: nothing else is
-- trusted yet.
DO $guard$
DECLARE
    schema_owner name;
    owner_is_superuser boolean;
    creators text;
    planted text;
BEGIN
    SELECT r.rolname, r.rolsuper INTO schema_owner, owner_is_superuser
      FROM pg_catalog.pg_namespace AS n
      JOIN pg_catalog.pg_roles AS r ON r.oid OPERATOR(pg_catalog.=) n.nspowner
     WHERE n.nspname OPERATOR(pg_catalog.=) 'lease';
    IF NOT (owner_is_superuser OR schema_owner OPERATOR(pg_catalog.=) CURRENT_USER) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'insufficient_privilege',
            MESSAGE = pg_catalog.format('schema "lease" is owned by role "%s", which is neither a superuser nor the installing role', schema_owner),
            DETAIL = 'The owner of a schema can create, replace and drop objects in it, so it could take over the extension and the roles that use it.',
            HINT = 'Inspect what the schema contains, then drop it, or make a superuser its owner (ALTER SCHEMA lease OWNER TO a superuser), and install again.';
    END IF;
    SELECT pg_catalog.string_agg(COALESCE(pg_catalog.quote_ident(g.rolname), 'PUBLIC'), ', ')
      INTO creators
      FROM pg_catalog.pg_namespace AS n,
           LATERAL pg_catalog.aclexplode(n.nspacl) AS a
      LEFT JOIN pg_catalog.pg_roles AS g ON g.oid OPERATOR(pg_catalog.=) a.grantee
     WHERE n.nspname OPERATOR(pg_catalog.=) 'lease'
       AND a.privilege_type OPERATOR(pg_catalog.=) 'CREATE'
       AND a.grantee OPERATOR(pg_catalog.<>) n.nspowner
       AND NOT COALESCE(g.rolsuper, false);
    IF creators IS NOT NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'insufficient_privilege',
            MESSAGE = 'roles other than the owner of schema "lease" may create objects in it',
            DETAIL = pg_catalog.format('CREATE on schema "lease" is granted to: %s.', creators),
            HINT = 'Inspect what the schema contains, then drop it, or REVOKE CREATE ON SCHEMA lease from those roles, and install again.';
    END IF;
    SELECT pg_catalog.string_agg(o.what, ', ' ORDER BY o.what) INTO planted
      FROM (SELECT pg_catalog.concat_ws(' ', i.type, i.identity) AS what
              FROM (SELECT CAST('pg_catalog.pg_class' AS pg_catalog.regclass) AS classid, c.oid AS objid
                      FROM pg_catalog.pg_class AS c, pg_catalog.pg_namespace AS n
                     WHERE n.oid OPERATOR(pg_catalog.=) c.relnamespace
                       AND n.nspname OPERATOR(pg_catalog.=) 'lease'
                    UNION ALL
                    SELECT CAST('pg_catalog.pg_proc' AS pg_catalog.regclass), p.oid
                      FROM pg_catalog.pg_proc AS p, pg_catalog.pg_namespace AS n
                     WHERE n.oid OPERATOR(pg_catalog.=) p.pronamespace
                       AND n.nspname OPERATOR(pg_catalog.=) 'lease'
                    UNION ALL
                    SELECT CAST('pg_catalog.pg_type' AS pg_catalog.regclass), t.oid
                      FROM pg_catalog.pg_type AS t, pg_catalog.pg_namespace AS n
                     WHERE n.oid OPERATOR(pg_catalog.=) t.typnamespace
                       AND n.nspname OPERATOR(pg_catalog.=) 'lease'
                    UNION ALL
                    SELECT CAST('pg_catalog.pg_operator' AS pg_catalog.regclass), p.oid
                      FROM pg_catalog.pg_operator AS p, pg_catalog.pg_namespace AS n
                     WHERE n.oid OPERATOR(pg_catalog.=) p.oprnamespace
                       AND n.nspname OPERATOR(pg_catalog.=) 'lease'
                    UNION ALL
                    SELECT CAST('pg_catalog.pg_collation' AS pg_catalog.regclass), c.oid
                      FROM pg_catalog.pg_collation AS c, pg_catalog.pg_namespace AS n
                     WHERE n.oid OPERATOR(pg_catalog.=) c.collnamespace
                       AND n.nspname OPERATOR(pg_catalog.=) 'lease'
                    UNION ALL
                    SELECT CAST('pg_catalog.pg_conversion' AS pg_catalog.regclass), c.oid
                      FROM pg_catalog.pg_conversion AS c, pg_catalog.pg_namespace AS n
                     WHERE n.oid OPERATOR(pg_catalog.=) c.connamespace
                       AND n.nspname OPERATOR(pg_catalog.=) 'lease'
                    UNION ALL
                    SELECT CAST('pg_catalog.pg_opfamily' AS pg_catalog.regclass), f.oid
                      FROM pg_catalog.pg_opfamily AS f, pg_catalog.pg_namespace AS n
                     WHERE n.oid OPERATOR(pg_catalog.=) f.opfnamespace
                       AND n.nspname OPERATOR(pg_catalog.=) 'lease'
                    UNION ALL
                    SELECT CAST('pg_catalog.pg_opclass' AS pg_catalog.regclass), c.oid
                      FROM pg_catalog.pg_opclass AS c, pg_catalog.pg_namespace AS n
                     WHERE n.oid OPERATOR(pg_catalog.=) c.opcnamespace
                       AND n.nspname OPERATOR(pg_catalog.=) 'lease'
                    UNION ALL
                    SELECT CAST('pg_catalog.pg_ts_config' AS pg_catalog.regclass), c.oid
                      FROM pg_catalog.pg_ts_config AS c, pg_catalog.pg_namespace AS n
                     WHERE n.oid OPERATOR(pg_catalog.=) c.cfgnamespace
                       AND n.nspname OPERATOR(pg_catalog.=) 'lease'
                    UNION ALL
                    SELECT CAST('pg_catalog.pg_ts_dict' AS pg_catalog.regclass), d.oid
                      FROM pg_catalog.pg_ts_dict AS d, pg_catalog.pg_namespace AS n
                     WHERE n.oid OPERATOR(pg_catalog.=) d.dictnamespace
                       AND n.nspname OPERATOR(pg_catalog.=) 'lease'
                    UNION ALL
                    SELECT CAST('pg_catalog.pg_statistic_ext' AS pg_catalog.regclass), s.oid
                      FROM pg_catalog.pg_statistic_ext AS s, pg_catalog.pg_namespace AS n
                     WHERE n.oid OPERATOR(pg_catalog.=) s.stxnamespace
                       AND n.nspname OPERATOR(pg_catalog.=) 'lease') AS o,
                   LATERAL pg_catalog.pg_identify_object(o.classid, o.objid, 0) AS i) AS o;
    IF planted IS NOT NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'insufficient_privilege',
            MESSAGE = 'schema "lease" is not empty',
            DETAIL = pg_catalog.format('pg_lease installs only into an empty schema "lease"; it contains: %s.', planted),
            HINT = 'Inspect those objects and who created them, then drop them (or the schema), and install again.';
    END IF;
END
$guard$;

REVOKE ALL ON SCHEMA lease FROM PUBLIC;
