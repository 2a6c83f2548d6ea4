-- The bad-input matrix, generated from pg_proc: every function in schema
-- lease (so a new function is covered without editing this file), every
-- argument, every value class that fits the argument's type.  Each call runs
-- in a subtransaction as a role with EXECUTE on everything and one app
-- ('bim-mine'), with every other argument at a neutral, valid value.  The
-- outcome is 'ok' (returned, wrote nothing), 'ok+w' (returned and wrote;
-- the driver rolls it back) or the SQLSTATE it raised.  Every outcome must
-- be on its class's allow-list, and 'ok+w' is allowed only for the
-- functions whose job is to create rows; the summary table is the
-- documentation of what each function does with each kind of bad value.
\set VERBOSITY terse
SET client_min_messages = warning;

CREATE ROLE lease_test_bim;
GRANT USAGE ON SCHEMA lease TO lease_test_bim;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA lease TO lease_test_bim;
GRANT SELECT, INSERT ON lease.shard_leases TO lease_test_bim;   -- import_kcl_ex
SELECT lease.grant_app('bim-mine', 'lease_test_bim');

-- another tenant's data: an app the role is not granted, with a live lease
-- under the neutral stream and shard, and another user's conversation
SELECT lease.create_lease('bim-theirs', 'bim-s', 'bim-shard'),
       lease.take_lease('bim-theirs', 'bim-s', 'bim-shard', 'bim-w') AS theirs;
SELECT outcome FROM lease.start_conversation('bim-other-user', 'bim-a', NULL, NULL, 'bim-theirs-c');
CREATE TABLE lease_test.bim_ids AS
SELECT lease.find_channel_conversation('bim-other-user', 'bim-a', NULL, NULL, 'bim-theirs-c') AS foreign_id;
-- an empty kcl_ex table: the neutral import source
CREATE TABLE lease_test.bim_kcl (shard_id text, app_name text, stream_name text, checkpoint text,
                                 lease_owner text, lease_count int, completed boolean);
GRANT SELECT ON lease_test.bim_kcl TO lease_test_bim;

-- The neutral value of an argument, as SQL: valid, and naming nothing that
-- exists, so that a call with only neutral values changes nothing (except
-- in the functions that create rows).
CREATE FUNCTION lease_test.bim_neutral(argname text, argtype regtype) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
SELECT CASE
    WHEN argname = 'app_name' THEN $q$'bim-mine'::text$q$
    WHEN argname = 'checkpoint' OR argname = 'pending_checkpoint' THEN $q$'42'::text$q$
    WHEN argname = 'grantee' THEN $q$'lease_test_bim'::regrole$q$
    WHEN argname = 'source' THEN $q$'lease_test.bim_kcl'::regclass$q$
    WHEN argname = 'export' THEN $q$''::text$q$
    WHEN argname = 'older_than' THEN $q$'100 years'::interval$q$
    WHEN argname = 'max_steal' THEN $q$1::integer$q$
    WHEN argname = 'sandbox_limit' THEN $q$1::integer$q$
    -- a stream move's steps: from partition 0 to 1, generation 1
    WHEN argname = 'this_partition' THEN $q$0::integer$q$
    WHEN argname = 'from_partition' THEN $q$1::integer$q$
    WHEN argname = 'to_partition' THEN $q$1::integer$q$
    WHEN argname = 'generation' THEN $q$1::bigint$q$
    WHEN argtype = 'jsonb'::regtype THEN $q$'{}'::jsonb$q$
    WHEN argtype = 'text'::regtype THEN format('%L::text', 'bim-' || argname)
    WHEN argtype = 'text[]'::regtype THEN $q$'{}'::text[]$q$
    WHEN argtype = 'bigint[]'::regtype THEN $q$'{}'::bigint[]$q$
    WHEN argtype = 'boolean[]'::regtype THEN $q$'{}'::boolean[]$q$
    WHEN argtype = 'bigint'::regtype THEN $q$0::bigint$q$
    WHEN argtype = 'integer'::regtype THEN $q$NULL::integer$q$
    WHEN argtype = 'interval'::regtype THEN $q$'10 seconds'::interval$q$
    WHEN argtype = 'double precision'::regtype THEN $q$1::double precision$q$
    WHEN argtype = 'timestamp with time zone'::regtype THEN $q$'2000-01-01 00:00:00+00'::timestamptz$q$
END $$;

-- The value classes and the SQL of each, per argument type.
CREATE TABLE lease_test.bim_class (ord int, class text, argtype regtype, value text);
INSERT INTO lease_test.bim_class VALUES
    (1, 'null', NULL, 'NULL'),
    (2, 'empty', 'text', $q$''::text$q$),
    (2, 'empty', 'text[]', $q$'{""}'::text[]$q$),
    (3, 'blank', 'text', $q$E' \t\n'::text$q$),
    (3, 'blank', 'text[]', $q$ARRAY[NULL]::text[]$q$),
    (4, '1MB', 'text', $q$repeat('x', 1048576)$q$),
    (4, '1MB', 'text[]', $q$ARRAY[repeat('x', 1048576)]$q$),
    (5, 'negative', 'bigint', '-1::bigint'),
    (5, 'negative', 'integer', '-1::integer'),
    (5, 'negative', 'interval', $q$'-1 second'::interval$q$),
    (5, 'negative', 'double precision', '-1::double precision'),
    (6, 'zero', 'bigint', '0::bigint'),
    (6, 'zero', 'integer', '0::integer'),
    (6, 'zero', 'interval', $q$'0'::interval$q$),
    (6, 'zero', 'double precision', '0::double precision'),
    (7, 'max', 'bigint', '9223372036854775807::bigint'),
    (7, 'max', 'integer', '2147483647::integer'),
    (7, 'max', 'interval', $q$'100000 years'::interval$q$),
    (7, 'max', 'text[]', $q$array_fill('p'::text, ARRAY[1000])$q$),
    (7, 'max', 'double precision', $q$'Infinity'::double precision$q$),
    (8, 'min', 'bigint', '(-9223372036854775807 - 1)::bigint'),
    (8, 'min', 'integer', '(-2147483647 - 1)::integer'),
    (8, 'min', 'interval', $q$'-100000 years'::interval$q$),
    (8, 'min', 'double precision', $q$'-Infinity'::double precision$q$),
    (9, 'unknown', 'double precision', $q$'NaN'::double precision$q$),
    (9, 'unknown', 'text', $q$'bim-no-such'::text$q$),
    (9, 'unknown', 'bigint', '8000000000::bigint'),
    (9, 'unknown', 'regclass', '4294967295::oid::regclass'),
    (9, 'unknown', 'regrole', '4294967295::oid::regrole');
-- another tenant: the app the role is not granted, another user's
-- conversation id (set per argument name below)

-- Allowed outcomes per class.  'ok+w' is separately limited to the
-- functions whose job is to create or delete rows (bim_writers).  An
-- unknown app is one the role is not granted: 42501.
CREATE TABLE lease_test.bim_allowed (class text, outcome text);
INSERT INTO lease_test.bim_allowed VALUES
    ('null', '22004'), ('null', 'ok'), ('null', 'ok+w'),
    ('empty', '22023'), ('blank', '22023'), ('blank', '22004'),
    ('1MB', '22023'),
    ('negative', '22023'), ('negative', 'ok'),
    ('zero', '22023'), ('zero', 'ok'), ('zero', 'ok+w'),
    ('max', '22023'), ('max', 'ok'), ('max', 'ok+w'),
    ('min', '22023'), ('min', 'ok'),
    ('unknown', 'ok'), ('unknown', 'ok+w'), ('unknown', '22023'),
    ('unknown', '42P01'), ('unknown', '42704'), ('unknown', '42501'),
    ('foreign', '42501'), ('foreign', 'ok'), ('foreign', 'ok+w'), ('foreign', '22023'),
    -- hold_lease's answer for a lease the owner does not hold at that epoch
    -- (neutral values name no lease), and a stream move's step for a move
    -- that is not there; from no other function
    ('unknown', '55000'), ('zero', '55000'), ('max', '55000'),
    -- import_kcl_dynamodb's export: empty or blank is an empty table (no
    -- row), other text is not JSON; from no other function
    ('empty', 'ok'), ('blank', 'ok'), ('1MB', '22P02'), ('unknown', '22P02');
CREATE TABLE lease_test.bim_writers (proname name);
INSERT INTO lease_test.bim_writers VALUES
    ('create_lease'), ('grant_app'), ('start_conversation'), ('rotate_channel'),
    ('admit_turn'), ('end_conversation'), ('prune_events'), ('set_tenant_limit'),
    ('set_balance_tolerance'),
    -- a stream move's steps that record a placement (freeze, import)
    ('move_stream_freeze'), ('move_stream_import');

CREATE TABLE lease_test.bim_result (fn text, argno int, arg text, ord int, class text, outcome text);

-- The driver.
CREATE FUNCTION lease_test.bim_run() RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    f record;
    c record;
    args text[];
    call text;
    outcome text;
    before text := lease_test.digest();
    foreign_id bigint := (SELECT foreign_id FROM lease_test.bim_ids);
BEGIN
    FOR f IN
        SELECT p.oid, p.proname, p.pronargs, p.proargnames, p.proargtypes::regtype[] AS types,
               p.proname || CASE WHEN count(*) OVER (PARTITION BY p.proname) > 1
                                 THEN '/' || p.pronargs ELSE '' END AS label
          FROM pg_proc p WHERE p.pronamespace = 'lease'::regnamespace
         ORDER BY p.proname, p.pronargs
    LOOP
        FOR i IN 0 .. f.pronargs - 1 LOOP
            FOR c IN
                SELECT k.ord, k.class, k.value FROM lease_test.bim_class k
                 WHERE k.argtype IS NULL OR k.argtype = f.types[i]
                UNION ALL
                SELECT 10, 'foreign', CASE WHEN f.proargnames[i + 1] = 'app_name' THEN $q$'bim-theirs'::text$q$
                                           WHEN f.proargnames[i + 1] = 'user_id' THEN $q$'bim-other-user'::text$q$
                                           ELSE foreign_id || '::bigint' END
                 WHERE f.proargnames[i + 1] IN ('app_name', 'user_id')
                    OR (f.types[i] = 'bigint'::regtype
                        AND f.proargnames[i + 1] LIKE '%conversation_id' OR f.proargnames[i + 1] = 'rotate_from')
                ORDER BY 1
            LOOP
                args := ARRAY[]::text[];
                FOR j IN 0 .. f.pronargs - 1 LOOP
                    args := args || CASE WHEN j = i THEN c.value || '::' || f.types[j]
                                         ELSE lease_test.bim_neutral(f.proargnames[j + 1], f.types[j]) END;
                END LOOP;
                call := format('SELECT count(*) FROM lease.%I(%s) AS t', f.proname, array_to_string(args, ', '));
                BEGIN
                    SET LOCAL ROLE lease_test_bim;
                    EXECUTE call;
                    RESET ROLE;
                    outcome := CASE WHEN lease_test.digest() = before THEN 'ok' ELSE 'ok+w' END;
                    RAISE EXCEPTION USING ERRCODE = 'PBIM0';   -- roll the call back
                EXCEPTION
                    WHEN SQLSTATE 'PBIM0' THEN NULL;
                    WHEN OTHERS THEN outcome := SQLSTATE;
                END;
                INSERT INTO lease_test.bim_result
                VALUES (f.label, i + 1, f.proargnames[i + 1], c.ord, c.class, outcome);
            END LOOP;
        END LOOP;
    END LOOP;
    IF lease_test.digest() <> before THEN
        RAISE EXCEPTION 'the matrix changed a table';
    END IF;
END $$;

SELECT lease_test.bim_run();

-- Every function and every argument was called.
SELECT count(DISTINCT fn) = (SELECT count(*) FROM pg_proc WHERE pronamespace = 'lease'::regnamespace
                                AND pronargs > 0) AS every_function_with_arguments,
       count(DISTINCT (fn, argno)) = (SELECT sum(pronargs) FROM pg_proc
                                       WHERE pronamespace = 'lease'::regnamespace) AS every_argument
  FROM lease_test.bim_result;

-- Violations of the allow-lists: none.  (lease.liveness_cutoff, called by
-- the lease functions only, compares its text with the server's
-- incarnation: any text is a fine answer, "not this incarnation".)
SELECT r.fn, r.arg, r.class, r.outcome
  FROM lease_test.bim_result r
 WHERE (NOT EXISTS (SELECT 1 FROM lease_test.bim_allowed a WHERE a.class = r.class AND a.outcome = r.outcome)
        AND NOT (r.fn = 'liveness_cutoff' AND r.outcome = 'ok'))
    OR (r.outcome = 'ok+w' AND split_part(r.fn, '/', 1) NOT IN (SELECT proname FROM lease_test.bim_writers))
    OR (r.outcome = '55000' AND r.fn <> 'hold_lease' AND r.fn NOT LIKE 'move\_stream\_%')
    OR ((r.outcome = '22P02' OR (r.class IN ('empty', 'blank') AND r.outcome = 'ok'))
        AND r.fn <> 'import_kcl_dynamodb' AND NOT (r.fn = 'liveness_cutoff' AND r.outcome = 'ok'))
 ORDER BY 1, 2, 3;

-- The summary: function, argument, and the outcome of each value class
-- ('.' where the class does not fit the argument's type).
SELECT fn AS function, arg AS argument,
       max(outcome) FILTER (WHERE class = 'null') AS "null",
       coalesce(max(outcome) FILTER (WHERE class = 'empty'), '.') AS empty,
       coalesce(max(outcome) FILTER (WHERE class = 'blank'), '.') AS blank,
       coalesce(max(outcome) FILTER (WHERE class = '1MB'), '.') AS "1MB",
       coalesce(max(outcome) FILTER (WHERE class = 'negative'), '.') AS neg,
       coalesce(max(outcome) FILTER (WHERE class = 'zero'), '.') AS zero,
       coalesce(max(outcome) FILTER (WHERE class = 'max'), '.') AS max,
       coalesce(max(outcome) FILTER (WHERE class = 'min'), '.') AS min,
       coalesce(max(outcome) FILTER (WHERE class = 'unknown'), '.') AS unknown,
       coalesce(max(outcome) FILTER (WHERE class = 'foreign'), '.') AS "foreign"
  FROM lease_test.bim_result
 GROUP BY fn, argno, arg
 ORDER BY fn COLLATE "C", argno;

-- Invalid UTF-8 cannot reach a text argument: the server checks every text
-- value where it is made (the literal, convert_from, the input function),
-- so the call fails with 22021 before pg_lease runs.
SELECT lease_test.try($$SELECT lease.create_lease(convert_from('\xff'::bytea, 'UTF8'), 's', 'x')$$);
SELECT lease_test.try($$SELECT lease.create_lease(E'bim-\xff', 's', 'x')$$);
SELECT lease_test.try($$SELECT lease.create_lease(convert_from('\xc3'::bytea, 'UTF8'), 's', 'x')$$);
-- a bytea is not a text: there is no implicit cast to smuggle bytes in
SELECT lease_test.try($$SELECT lease.create_lease('\xff'::bytea, 's', 'x')$$);

-- update_checkpoints: the matrix above varies one array at a time, the
-- others empty, so each bad array is first of all of another length
-- (22023).  Here every array has one element per shard and one element
-- is bad: the whole batch is refused, and even the good shard (bim-u1,
-- owned, with the right token) is not written.
SELECT lease.create_lease('bim-mine', 'bim-u', 'bim-u1'),
       lease.take_lease('bim-mine', 'bim-u', 'bim-u1', 'bim-w') AS u1_count;
SELECT lease_test.digest() AS before \gset
SELECT v.label, lease_test.try(format(
           'SELECT * FROM lease.update_checkpoints(%L, %L, %L, %s, %s, %s, %s, %s)',
           'bim-mine', 'bim-u', 'bim-w', v.shards, v.checkpoints, v.subseqs, v.tokens, v.work)) AS outcome
  FROM (VALUES
    ('lengths differ',         $$ARRAY['bim-u1', 'bim-u2']$$, $$ARRAY['1']$$, $$ARRAY[0, 0]::bigint[]$$, $$ARRAY[1, 1]::bigint[]$$, 'NULL'),
    ('work length differs',    $$ARRAY['bim-u1']$$, $$ARRAY['1']$$, $$ARRAY[0]::bigint[]$$, $$ARRAY[1]::bigint[]$$, $$ARRAY[1, 2]::bigint[]$$),
    ('shard repeated',         $$ARRAY['bim-u1', 'bim-u1']$$, $$ARRAY['1', '2']$$, $$ARRAY[0, 0]::bigint[]$$, $$ARRAY[1, 1]::bigint[]$$, 'NULL'),
    ('shard NULL',             $$ARRAY['bim-u1', NULL]$$, $$ARRAY['1', '2']$$, $$ARRAY[0, 0]::bigint[]$$, $$ARRAY[1, 1]::bigint[]$$, 'NULL'),
    ('shard blank',            $$ARRAY['bim-u1', ' ']$$, $$ARRAY['1', '2']$$, $$ARRAY[0, 0]::bigint[]$$, $$ARRAY[1, 1]::bigint[]$$, 'NULL'),
    ('checkpoint NULL',        $$ARRAY['bim-u1', 'bim-u2']$$, $$ARRAY['1', NULL]$$, $$ARRAY[0, 0]::bigint[]$$, $$ARRAY[1, 1]::bigint[]$$, 'NULL'),
    ('checkpoint empty',       $$ARRAY['bim-u1', 'bim-u2']$$, $$ARRAY['1', '']$$, $$ARRAY[0, 0]::bigint[]$$, $$ARRAY[1, 1]::bigint[]$$, 'NULL'),
    ('checkpoint 1MB',         $$ARRAY['bim-u1', 'bim-u2']$$, $$ARRAY['1', repeat('x', 1048576)]$$, $$ARRAY[0, 0]::bigint[]$$, $$ARRAY[1, 1]::bigint[]$$, 'NULL'),
    ('checkpoint SHARD_END',   $$ARRAY['bim-u1', 'bim-u2']$$, $$ARRAY['1', 'SHARD_END']$$, $$ARRAY[0, 0]::bigint[]$$, $$ARRAY[1, 1]::bigint[]$$, 'NULL'),
    ('sub_sequence NULL',      $$ARRAY['bim-u1', 'bim-u2']$$, $$ARRAY['1', '2']$$, $$ARRAY[0, NULL]::bigint[]$$, $$ARRAY[1, 1]::bigint[]$$, 'NULL'),
    ('sub_sequence negative',  $$ARRAY['bim-u1', 'bim-u2']$$, $$ARRAY['1', '2']$$, $$ARRAY[0, -1]::bigint[]$$, $$ARRAY[1, 1]::bigint[]$$, 'NULL'),
    ('token NULL',             $$ARRAY['bim-u1', 'bim-u2']$$, $$ARRAY['1', '2']$$, $$ARRAY[0, 0]::bigint[]$$, $$ARRAY[1, NULL]::bigint[]$$, 'NULL'),
    ('token negative',         $$ARRAY['bim-u1', 'bim-u2']$$, $$ARRAY['1', '2']$$, $$ARRAY[0, 0]::bigint[]$$, $$ARRAY[1, -1]::bigint[]$$, 'NULL'),
    ('work negative',          $$ARRAY['bim-u1', 'bim-u2']$$, $$ARRAY['1', '2']$$, $$ARRAY[0, 0]::bigint[]$$, $$ARRAY[1, 1]::bigint[]$$, $$ARRAY[5, -1]::bigint[]$$),
    ('two dimensions',         $$ARRAY[['bim-u1'], ['bim-u2']]$$, $$ARRAY['1', '2']$$, $$ARRAY[0, 0]::bigint[]$$, $$ARRAY[1, 1]::bigint[]$$, 'NULL')
  ) AS v(label, shards, checkpoints, subseqs, tokens, work);
SELECT lease_test.digest() = :'before' AS nothing_written;
SELECT lease.delete_lease('bim-mine', 'bim-u', 'bim-u1');

DROP TABLE lease_test.bim_ids, lease_test.bim_kcl, lease_test.bim_class, lease_test.bim_allowed,
           lease_test.bim_writers, lease_test.bim_result;
DROP FUNCTION lease_test.bim_run(), lease_test.bim_neutral(text, regtype);
SELECT lease.delete_lease('bim-theirs', 'bim-s', 'bim-shard');
SELECT lease.revoke_app('bim-mine', 'lease_test_bim');
DROP OWNED BY lease_test_bim;
DROP ROLE lease_test_bim;
