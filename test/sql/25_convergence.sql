-- Convergence of take_leases: a deterministic driver simulating W workers x
-- R rounds over S shards, with workers joining and dying.  One round: every
-- live worker, in order, renews (renew_leases), honours the handoffs asked
-- of it (release_lease, which transfers to the requester), then calls
-- take_leases.  A worker dies by having its leases expire.
--
-- After each phase it checks: no lease is lost (every takeable lease is
-- owned, live, by a live worker; a lease cannot be doubly owned, the key is
-- the primary key), every worker holds floor or ceil of the fair share, and
-- a further full round changes nothing (no churn).

-- One round; returns how many leases it changed (handoffs honoured + rows
-- returned by take_leases).
CREATE FUNCTION lease_test.sim_round(app text, stream text, workers text[], steal int DEFAULT 1)
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    w text;
    r record;
    changed int := 0;
    n int;
BEGIN
    FOREACH w IN ARRAY workers LOOP
        FOR r IN SELECT * FROM lease.renew_leases(app, stream, w) WHERE handoff_to IS NOT NULL LOOP
            IF lease.release_lease(app, stream, r.shard_id, w) THEN
                changed := changed + 1;
            END IF;
        END LOOP;
        SELECT count(*) INTO n FROM lease.take_leases(app, stream, w, max_steal => steal);
        changed := changed + n;
    END LOOP;
    RETURN changed;
END $$;

-- Rounds until one changes nothing; returns the number of rounds that did.
CREATE FUNCTION lease_test.sim_converge(app text, stream text, workers text[], steal int DEFAULT 1)
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    rounds int := 0;
BEGIN
    WHILE lease_test.sim_round(app, stream, workers, steal) > 0 LOOP
        rounds := rounds + 1;
        IF rounds > 100 THEN
            RAISE EXCEPTION 'no convergence after 100 rounds';
        END IF;
    END LOOP;
    RETURN rounds;
END $$;

-- The invariants; returns 'ok' or what is wrong.
CREATE FUNCTION lease_test.sim_check(app text, stream text, workers text[])
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    takeable int;
    lost int;
    lo int;
    hi int;
    bad text;
BEGIN
    SELECT count(*) FILTER (WHERE state NOT IN ('ended', 'blocked')),
           count(*) FILTER (WHERE state NOT IN ('ended', 'blocked')
                              AND (state <> 'owned' OR lease_owner <> ALL (workers)))
      INTO takeable, lost
      FROM lease.lease_status WHERE app_name = app AND stream_name = stream;
    IF lost > 0 THEN
        RETURN lost || ' takeable leases not owned by a live worker';
    END IF;
    lo := takeable / cardinality(workers);
    hi := lo + CASE WHEN takeable % cardinality(workers) > 0 THEN 1 ELSE 0 END;
    SELECT string_agg(w || '=' || coalesce(l.live_leases, 0), ' ' ORDER BY w) INTO bad
      FROM unnest(workers) w
      LEFT JOIN lease.worker_loads l ON l.app_name = app AND l.stream_name = stream AND l.lease_owner = w
     WHERE coalesce(l.live_leases, 0) NOT BETWEEN lo AND hi;
    IF bad IS NOT NULL THEN
        RETURN 'outside ' || lo || '..' || hi || ': ' || bad;
    END IF;
    IF lease_test.sim_round(app, stream, workers) <> 0 THEN
        RETURN 'a further round changed something';
    END IF;
    RETURN 'ok';
END $$;

-- The loads, most loaded first.
CREATE FUNCTION lease_test.sim_loads(app text, stream text)
RETURNS text LANGUAGE sql AS $$
    SELECT string_agg(live_leases::text, '/' ORDER BY live_leases DESC, lease_owner)
      FROM lease.worker_loads WHERE app_name = app AND stream_name = stream
$$;

-- A worker dies: its leases and its heartbeat expire.
CREATE FUNCTION lease_test.sim_kill(app text, stream text, worker text)
RETURNS void LANGUAGE sql AS $$
    UPDATE lease.stream_workers AS w
       SET renewed_until = LEAST(w.renewed_until, clock_timestamp() - interval '1 s')
     WHERE w.app_name = app AND w.stream_name = stream AND w.worker = sim_kill.worker;
    UPDATE lease.shard_leases SET lease_expires_at = clock_timestamp() - interval '1 s'
     WHERE app_name = app AND stream_name = stream AND lease_owner = worker
$$;

-- The issue's case, literally: 12 leases held 3/3/3/3, a fifth worker joins.
SELECT count(*) FROM (SELECT lease.create_lease('cv', 'twelve', 's' || lpad(i::text, 2, '0'))
                        FROM generate_series(1, 12) i) x;
SELECT count(*) FROM lease.take_leases('cv', 'twelve', 'w1', max_leases => 3);
SELECT count(*) FROM lease.take_leases('cv', 'twelve', 'w2', max_leases => 3);
SELECT count(*) FROM lease.take_leases('cv', 'twelve', 'w3', max_leases => 3);
SELECT count(*) FROM lease.take_leases('cv', 'twelve', 'w4', max_leases => 3);
SELECT lease_test.sim_loads('cv', 'twelve') AS before,
       lease_test.sim_check('cv', 'twelve', '{w1,w2,w3,w4}') AS balanced;
SELECT lease_test.sim_converge('cv', 'twelve', '{w1,w2,w3,w4,w5}') AS rounds;
SELECT lease_test.sim_loads('cv', 'twelve') AS after,
       lease_test.sim_check('cv', 'twelve', '{w1,w2,w3,w4,w5}') AS check;
-- the newcomer took nothing abruptly: every move was a handoff the holder completed
SELECT event, count(*) FROM lease.lease_events
 WHERE app_name = 'cv' AND stream_name = 'twelve' AND event <> 'take' GROUP BY event ORDER BY event;

-- 30 shards (two of them a split's children, blocked until the parent
-- ends, and one ended): workers joining, dying, and joining again.
SELECT count(*) FROM (SELECT lease.create_lease('cv', 'sim', 's' || lpad(i::text, 2, '0'))
                        FROM generate_series(1, 27) i) x;
SELECT lease.create_lease('cv', 'sim', 'parent'),
       lease.create_lease('cv', 'sim', 'child-a', '{parent}'),
       lease.create_lease('cv', 'sim', 'child-b', '{parent}'),
       lease.create_lease('cv', 'sim', 'gone');
SELECT lease.take_lease('cv', 'sim', 'gone', 'w0'), lease.close_shard('cv', 'sim', 'gone', 'w0');

-- three workers start together: 28 takeable -> 10/9/9
SELECT lease_test.sim_converge('cv', 'sim', '{w1,w2,w3}') AS rounds;
SELECT lease_test.sim_loads('cv', 'sim') AS loads, lease_test.sim_check('cv', 'sim', '{w1,w2,w3}') AS check;
-- two more join -> 6/6/6/5/5
SELECT lease_test.sim_converge('cv', 'sim', '{w1,w2,w3,w4,w5}') AS rounds;
SELECT lease_test.sim_loads('cv', 'sim') AS loads, lease_test.sim_check('cv', 'sim', '{w1,w2,w3,w4,w5}') AS check;
-- w2 dies: its leases expire and are taken over -> 7/7/7/7
SELECT lease_test.sim_kill('cv', 'sim', 'w2');
SELECT lease_test.sim_converge('cv', 'sim', '{w1,w3,w4,w5}') AS rounds;
SELECT lease_test.sim_loads('cv', 'sim') AS loads, lease_test.sim_check('cv', 'sim', '{w1,w3,w4,w5}') AS check;
-- the parent ends: its two children become takeable -> 29 takeable: 8/7/7/7
SELECT lease.close_shard('cv', 'sim', 'parent', lease_owner) FROM lease.shard_leases
 WHERE app_name = 'cv' AND stream_name = 'sim' AND shard_id = 'parent';
SELECT lease_test.sim_converge('cv', 'sim', '{w1,w3,w4,w5}') AS rounds;
SELECT lease_test.sim_loads('cv', 'sim') AS loads, lease_test.sim_check('cv', 'sim', '{w1,w3,w4,w5}') AS check;
-- two die at once and three join, with max_steal 3 -> 29 over 5: 6/6/6/6/5
SELECT lease_test.sim_kill('cv', 'sim', 'w1'), lease_test.sim_kill('cv', 'sim', 'w4');
SELECT lease_test.sim_converge('cv', 'sim', '{w3,w5,w6,w7,w8}', 3) AS rounds;
SELECT lease_test.sim_loads('cv', 'sim') AS loads, lease_test.sim_check('cv', 'sim', '{w3,w5,w6,w7,w8}') AS check;
-- more workers than leases: one each, the rest idle and not churning
SELECT count(*) FROM (SELECT lease.create_lease('cv', 'few', 'f' || i) FROM generate_series(1, 3) i) x;
SELECT lease_test.sim_converge('cv', 'few', '{w1,w2,w3,w4,w5}') AS rounds;
SELECT lease_test.sim_loads('cv', 'few') AS loads;
SELECT lease_test.sim_round('cv', 'few', '{w1,w2,w3,w4,w5}') AS further_round;
