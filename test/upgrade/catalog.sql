-- Everything the catalogs say about the installed pg_lease, one line per
-- fact, in a fixed order, with no OIDs: test/upgrade/upgrade.sh diffs this
-- listing between an upgraded database and a fresh install.  Names are
-- printed schema-qualified (search_path is empty), so the output does not
-- depend on any setting of the session that runs it.
\ir listing.sql

-- The extension itself, and the tables (and sequences) whose rows pg_dump keeps.
SELECT 'extension ' || e.extname || ' version=' || e.extversion
       || ' schema=' || e.extnamespace::regnamespace
       || ' relocatable=' || e.extrelocatable
  FROM pg_catalog.pg_extension e WHERE e.extname = 'pg_lease';
SELECT 'config_dump ' || c.relid::regclass || ' condition=' || pg_catalog.quote_literal(c.cond)
  FROM pg_catalog.pg_extension e,
       LATERAL unnest(e.extconfig, e.extcondition) AS c(relid, cond)
 WHERE e.extname = 'pg_lease'
 ORDER BY 1;

-- (multi-argument unnest is FROM-clause syntax and cannot be schema-qualified)
-- Membership: every object that belongs to the extension (pg_depend 'e') ...
SELECT 'member ' || pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid)
  FROM pg_catalog.pg_depend d
  JOIN pg_catalog.pg_extension e ON d.refclassid = 'pg_catalog.pg_extension'::regclass
                                AND d.refobjid = e.oid
 WHERE e.extname = 'pg_lease' AND d.deptype = 'e'
 ORDER BY 1;
-- ... and every object in schema lease that does NOT (a script that forgot
-- an object, or one created by hand, shows up here).
SELECT 'not_member ' || x.descr
  FROM (SELECT pg_catalog.pg_describe_object('pg_catalog.pg_class'::regclass, c.oid, 0) AS descr, c.oid,
               'pg_catalog.pg_class'::regclass AS cls
          FROM pg_catalog.pg_class c
         WHERE c.relnamespace = 'lease'::regnamespace
           AND c.relkind NOT IN ('i', 'I', 't')     -- indexes belong through their table
        UNION ALL
        SELECT pg_catalog.pg_describe_object('pg_catalog.pg_proc'::regclass, p.oid, 0), p.oid,
               'pg_catalog.pg_proc'::regclass
          FROM pg_catalog.pg_proc p WHERE p.pronamespace = 'lease'::regnamespace
        UNION ALL
        SELECT pg_catalog.pg_describe_object('pg_catalog.pg_type'::regclass, t.oid, 0), t.oid,
               'pg_catalog.pg_type'::regclass
          FROM pg_catalog.pg_type t
         WHERE t.typnamespace = 'lease'::regnamespace
           AND t.typrelid = 0 AND t.typelem = 0     -- row and array types belong through their table
       ) x
 WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                    WHERE d.classid = x.cls AND d.objid = x.oid AND d.deptype = 'e')
 ORDER BY 1;

-- The schema and its privileges.
SELECT 'schema ' || n.nspname || ' owner=' || n.nspowner::regrole
       || ' acl=' || COALESCE(n.nspacl::text, '(default)')
  FROM pg_catalog.pg_namespace n WHERE n.nspname = 'lease';

-- Functions: the full definition (language, volatility, strictness,
-- SECURITY DEFINER, SET search_path, cost, rows, parallel safety, C symbol),
-- plus owner and ACL.
SELECT 'function ' || p.oid::regprocedure
       || ' owner=' || p.proowner::regrole
       || ' acl=' || COALESCE(p.proacl::text, '(default)')
       || ' prosecdef=' || p.prosecdef
       || ' proconfig=' || COALESCE(p.proconfig::text, '(none)')
       || E'\n' || pg_catalog.pg_get_functiondef(p.oid)
  FROM pg_catalog.pg_proc p
 WHERE p.pronamespace = 'lease'::regnamespace
 ORDER BY p.oid::regprocedure::text;

-- Relations: kind, persistence, storage options, owner, ACL, comment.
SELECT 'relation ' || c.oid::regclass || ' kind=' || c.relkind::text
       || ' persistence=' || c.relpersistence::text
       || ' options=' || COALESCE(c.reloptions::text, '(none)')
       || ' owner=' || c.relowner::regrole
       || ' acl=' || COALESCE(c.relacl::text, '(default)')
       || ' rls=' || c.relrowsecurity
       || ' comment=' || COALESCE(pg_catalog.quote_literal(pg_catalog.obj_description(c.oid, 'pg_class')), '(none)')
  FROM pg_catalog.pg_class c
 WHERE c.relnamespace = 'lease'::regnamespace AND c.relkind <> 't'
 ORDER BY c.oid::regclass::text;

-- Columns, in the order a SELECT * returns them (dropped columns left out:
-- an upgrade that dropped one differs only physically).
SELECT 'column ' || a.attrelid::regclass || '.' || pg_catalog.quote_ident(a.attname)
       || ' position=' || pg_catalog.row_number() OVER (PARTITION BY a.attrelid ORDER BY a.attnum)
       || ' type=' || pg_catalog.format_type(a.atttypid, a.atttypmod)
       || ' not_null=' || a.attnotnull
       || ' default=' || COALESCE(pg_catalog.pg_get_expr(ad.adbin, ad.adrelid), '(none)')
       || ' identity=' || pg_catalog.quote_literal(a.attidentity::text)
       || ' generated=' || pg_catalog.quote_literal(a.attgenerated::text)
       || ' collation=' || COALESCE(NULLIF(a.attcollation, 0)::regcollation::text, '(none)')
       || ' storage=' || a.attstorage::text
       || ' acl=' || COALESCE(a.attacl::text, '(default)')
       || ' comment=' || COALESCE(pg_catalog.quote_literal(pg_catalog.col_description(a.attrelid, a.attnum)), '(none)')
  FROM pg_catalog.pg_attribute a
  JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
  LEFT JOIN pg_catalog.pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
 WHERE c.relnamespace = 'lease'::regnamespace AND c.relkind IN ('r', 'v', 'm', 'p', 'f')
   AND a.attnum > 0 AND NOT a.attisdropped
 ORDER BY a.attrelid::regclass::text, a.attnum;

-- Constraints (checks, keys, foreign keys with their actions and deferral).
SELECT 'constraint ' || r.conrelid::regclass || ' ' || pg_catalog.quote_ident(r.conname)
       || ' ' || pg_catalog.pg_get_constraintdef(r.oid)
       || ' deferrable=' || r.condeferrable || ' deferred=' || r.condeferred
       || ' validated=' || r.convalidated
  FROM pg_catalog.pg_constraint r
 WHERE r.connamespace = 'lease'::regnamespace
 ORDER BY 1;

-- Indexes with their predicates, uniqueness, NULLS NOT DISTINCT, comments.
SELECT 'index ' || pg_catalog.pg_get_indexdef(i.indexrelid)
       || ' comment=' || COALESCE(pg_catalog.quote_literal(pg_catalog.obj_description(i.indexrelid, 'pg_class')), '(none)')
  FROM pg_catalog.pg_index i
  JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid
 WHERE c.relnamespace = 'lease'::regnamespace
 ORDER BY 1;

-- Views: their defining query.
SELECT 'view ' || c.oid::regclass || E'\n' || pg_catalog.pg_get_viewdef(c.oid, true)
  FROM pg_catalog.pg_class c
 WHERE c.relnamespace = 'lease'::regnamespace AND c.relkind IN ('v', 'm')
 ORDER BY 1;

-- Sequences: parameters and the column owning them (identity or serial).
SELECT 'sequence ' || s.seqrelid::regclass || ' type=' || s.seqtypid::regtype
       || ' start=' || s.seqstart || ' increment=' || s.seqincrement
       || ' min=' || s.seqmin || ' max=' || s.seqmax || ' cache=' || s.seqcache
       || ' cycle=' || s.seqcycle
       || ' owned_by=' || COALESCE((SELECT d.refobjid::regclass || '.' || a.attname || ' (' || d.deptype::text || ')'
                                       FROM pg_catalog.pg_depend d
                                       JOIN pg_catalog.pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
                                      WHERE d.classid = 'pg_catalog.pg_class'::regclass AND d.objid = s.seqrelid
                                        AND d.refclassid = 'pg_catalog.pg_class'::regclass
                                        AND d.deptype IN ('a', 'i')), '(none)')
  FROM pg_catalog.pg_sequence s
  JOIN pg_catalog.pg_class c ON c.oid = s.seqrelid
 WHERE c.relnamespace = 'lease'::regnamespace
 ORDER BY 1;

-- Triggers, rules and policies (none today; an upgrade must not add strays).
SELECT 'trigger ' || pg_catalog.pg_get_triggerdef(t.oid)
  FROM pg_catalog.pg_trigger t
  JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid
 WHERE c.relnamespace = 'lease'::regnamespace AND NOT t.tgisinternal
 ORDER BY 1;
SELECT 'rule ' || r.ev_class::regclass || ' ' || r.rulename
  FROM pg_catalog.pg_rewrite r
  JOIN pg_catalog.pg_class c ON c.oid = r.ev_class
 WHERE c.relnamespace = 'lease'::regnamespace AND r.rulename <> '_RETURN'
 ORDER BY 1;
SELECT 'policy ' || p.polrelid::regclass || ' ' || p.polname
  FROM pg_catalog.pg_policy p
  JOIN pg_catalog.pg_class c ON c.oid = p.polrelid
 WHERE c.relnamespace = 'lease'::regnamespace
 ORDER BY 1;

-- Types other than the row and array types of tables.
SELECT 'type ' || t.oid::regtype || ' kind=' || t.typtype::text
  FROM pg_catalog.pg_type t
 WHERE t.typnamespace = 'lease'::regnamespace AND t.typrelid = 0 AND t.typelem = 0
 ORDER BY 1;

-- Initial privileges recorded for the extension's objects (what pg_dump
-- treats as the extension's own ACLs rather than the user's).
SELECT 'init_privs ' || pg_catalog.pg_describe_object(i.classoid, i.objoid, i.objsubid)
       || ' ' || i.privtype::text || ' ' || i.initprivs::text
  FROM pg_catalog.pg_init_privs i
  JOIN pg_catalog.pg_depend d ON d.classid = i.classoid AND d.objid = i.objoid AND d.deptype = 'e'
  JOIN pg_catalog.pg_extension e ON d.refobjid = e.oid AND e.extname = 'pg_lease'
 ORDER BY 1;

-- Rows the install script itself writes, which no dump keeps: the one row
-- of the admission gate (0.4.0), without which admission cannot lock.
SELECT 'admission_gate ' || pg_catalog.string_agg(g.only_row::text, ',')
  FROM lease.admission_gate g;
