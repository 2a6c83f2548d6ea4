-- pgTAP: search_path hijack.  A role creates look-alike functions and
-- operators in public and pg_temp (=, <>, +, now(), clock_timestamp(),
-- hashtext(), pg_notify(), btrim(), ...), each of which would log its call,
-- puts them first in its search_path and runs every function (checked
-- against pg_proc, so a new function must be added to the scenario).  The same
-- scenario with a clean search_path must give the same results and leave the
-- same rows, and no look-alike may ever be called.
BEGIN;
SELECT plan(8);

-- count every function call of this transaction (pg_stat_xact_user_functions)
SET LOCAL track_functions = 'all';
CREATE ROLE tap_hj;
CREATE ROLE tap_hj2;
GRANT USAGE ON SCHEMA lease TO tap_hj;
GRANT CREATE ON SCHEMA public TO tap_hj;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA lease TO tap_hj;
GRANT SELECT, INSERT ON lease.shard_leases TO tap_hj;   -- for import_kcl_ex
SELECT lease.grant_app('hj', 'tap_hj'), lease.grant_app('hjc', 'tap_hj');
CREATE TABLE public.hj_log (what text);
GRANT SELECT, INSERT ON public.hj_log TO PUBLIC;

SET LOCAL ROLE tap_hj;
CREATE TEMP TABLE r (app text, step int, result text);
CREATE TEMP TABLE kcl_hjc (shard_id text, app_name text, stream_name text, checkpoint text,
                           lease_owner text, lease_count int, completed boolean);
CREATE TEMP TABLE kcl_hj (LIKE kcl_hjc);
INSERT INTO kcl_hjc VALUES ('k0', 'hjc', 's', '1', 'old', 3, false);
INSERT INTO kcl_hj VALUES ('k0', 'hj', 's', '1', 'old', 3, false);

-- the clean run
\set app hjc
\ir 31_hijack_scenario.inc

-- the look-alikes
CREATE FUNCTION public.hj_text_eq(text, text) RETURNS boolean LANGUAGE plpgsql
    AS $$BEGIN INSERT INTO public.hj_log VALUES ('='); RETURN true; END$$;
CREATE OPERATOR public.= (LEFTARG = text, RIGHTARG = text, FUNCTION = public.hj_text_eq);
CREATE FUNCTION public.hj_text_ne(text, text) RETURNS boolean LANGUAGE plpgsql
    AS $$BEGIN INSERT INTO public.hj_log VALUES ('<>'); RETURN false; END$$;
CREATE OPERATOR public.<> (LEFTARG = text, RIGHTARG = text, FUNCTION = public.hj_text_ne);
CREATE FUNCTION public.hj_int8_eq(bigint, bigint) RETURNS boolean LANGUAGE plpgsql
    AS $$BEGIN INSERT INTO public.hj_log VALUES ('int8 ='); RETURN true; END$$;
CREATE OPERATOR public.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = public.hj_int8_eq);
CREATE FUNCTION public.hj_plus(timestamptz, interval) RETURNS timestamptz LANGUAGE plpgsql
    AS $$BEGIN INSERT INTO public.hj_log VALUES ('+'); RETURN 'infinity'; END$$;
CREATE OPERATOR public.+ (LEFTARG = timestamptz, RIGHTARG = interval, FUNCTION = public.hj_plus);
CREATE FUNCTION public.now() RETURNS timestamptz LANGUAGE plpgsql
    AS $$BEGIN INSERT INTO public.hj_log VALUES ('now'); RETURN 'infinity'; END$$;
CREATE FUNCTION public.clock_timestamp() RETURNS timestamptz LANGUAGE plpgsql
    AS $$BEGIN INSERT INTO public.hj_log VALUES ('clock_timestamp'); RETURN 'infinity'; END$$;
CREATE FUNCTION public.hashtext(text) RETURNS integer LANGUAGE plpgsql
    AS $$BEGIN INSERT INTO public.hj_log VALUES ('hashtext'); RETURN 0; END$$;
CREATE FUNCTION public.pg_notify(text, text) RETURNS void LANGUAGE plpgsql
    AS $$BEGIN INSERT INTO public.hj_log VALUES ('pg_notify'); END$$;
CREATE FUNCTION public.btrim(text, text) RETURNS text LANGUAGE plpgsql
    AS $$BEGIN INSERT INTO public.hj_log VALUES ('btrim'); RETURN ''; END$$;
CREATE FUNCTION public.octet_length(text) RETURNS integer LANGUAGE plpgsql
    AS $$BEGIN INSERT INTO public.hj_log VALUES ('octet_length'); RETURN 0; END$$;
CREATE FUNCTION public.json_build_object(VARIADIC text[]) RETURNS json LANGUAGE plpgsql
    AS $$BEGIN INSERT INTO public.hj_log VALUES ('json_build_object'); RETURN '{}'; END$$;
CREATE FUNCTION pg_temp.now() RETURNS timestamptz LANGUAGE plpgsql
    AS $$BEGIN INSERT INTO public.hj_log VALUES ('pg_temp.now'); RETURN 'infinity'; END$$;
CREATE FUNCTION pg_temp.clock_timestamp() RETURNS timestamptz LANGUAGE plpgsql
    AS $$BEGIN INSERT INTO public.hj_log VALUES ('pg_temp.clock_timestamp'); RETURN 'infinity'; END$$;
CREATE FUNCTION pg_temp.hashtext(text) RETURNS integer LANGUAGE plpgsql
    AS $$BEGIN INSERT INTO public.hj_log VALUES ('pg_temp.hashtext'); RETURN 0; END$$;
-- a look-alike table too: an unqualified name would find it first
CREATE TABLE public.shard_leases (app_name text);

-- the hijacked run
SET LOCAL search_path = pg_temp, public, pg_catalog;
\set app hj
\ir 31_hijack_scenario.inc
CREATE TEMP TABLE calls AS SELECT count(*)::int AS n FROM public.hj_log;
-- the control: unqualified SQL of the role's own does call the look-alikes
SELECT 'a'::text = 'b'::text AS hijacked_eq, now() AS hijacked_now;
RESET search_path;
RESET ROLE;

SELECT is((SELECT n FROM pg_temp.calls), 0, 'no look-alike was ever called by pg_lease');
SELECT is((SELECT array_agg(what ORDER BY what COLLATE "C") FROM public.hj_log), ARRAY['=', 'now'],
          'control: the look-alikes do capture the role''s own unqualified SQL');
SELECT is((SELECT count(*)::int FROM pg_temp.r WHERE app = 'hj'), (SELECT count(*)::int FROM pg_temp.r WHERE app = 'hjc'),
          'both runs ran every step');
SELECT is(array_agg(p.oid::regprocedure::text ORDER BY p.oid::regprocedure::text COLLATE "C"), NULL,
          'the scenario calls every function of the extension (none left out)')
  FROM pg_proc p WHERE p.pronamespace = 'lease'::regnamespace
   AND NOT EXISTS (SELECT FROM pg_stat_xact_user_functions f WHERE f.funcid = p.oid AND f.calls > 0);
SELECT set_eq($$SELECT step, result FROM pg_temp.r WHERE app = 'hj'$$,
              $$SELECT step, result FROM pg_temp.r WHERE app = 'hjc'$$,
              'every function returned the same under the hijacked search_path');
SELECT set_eq($$SELECT stream_name, shard_id, lease_owner, lease_count, checkpoint, checkpoint_sub_sequence,
                       pending_checkpoint, lease_epoch, handoff_to,
                       lease_expires_at < clock_timestamp() + interval '1 hour'
                  FROM lease.shard_leases WHERE app_name = 'hj'$$,
              $$SELECT stream_name, shard_id, lease_owner, lease_count, checkpoint, checkpoint_sub_sequence,
                       pending_checkpoint, lease_epoch, handoff_to,
                       lease_expires_at < clock_timestamp() + interval '1 hour'
                  FROM lease.shard_leases WHERE app_name = 'hjc'$$,
              'the leases are the same');
SELECT results_eq($$SELECT event, from_owner, to_owner, lease_count, lease_epoch
                      FROM lease.lease_events WHERE app_name = 'hj' ORDER BY event_id$$,
                  $$SELECT event, from_owner, to_owner, lease_count, lease_epoch
                      FROM lease.lease_events WHERE app_name = 'hjc' ORDER BY event_id$$,
                  'the events are the same');
SELECT results_eq($$SELECT agent_id, channel_id, status, rotated_from IS NULL
                      FROM lease.conversations WHERE user_id = 'hj' ORDER BY id$$,
                  $$SELECT agent_id, channel_id, status, rotated_from IS NULL
                      FROM lease.conversations WHERE user_id = 'hjc' ORDER BY id$$,
                  'the conversations are the same');

SELECT * FROM finish();
ROLLBACK;
