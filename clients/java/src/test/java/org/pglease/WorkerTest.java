package org.pglease;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.math.BigInteger;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ConcurrentSkipListMap;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.BooleanSupplier;
import java.util.function.Supplier;
import java.util.logging.Handler;
import java.util.logging.LogRecord;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The worker against the real extension (test/clients/run.sh's database, app "clients"):
 * the KCL callbacks each map to the pg_lease outcome docs/clients/java.md says.
 * System properties: pglease.dsn (the worker role), pglease.admin (a superuser).
 */
class WorkerTest {
    static final String DSN = System.getProperty("pglease.dsn");
    static final String ADMIN = System.getProperty("pglease.admin");
    static final double LEASE = 2.0;
    static final ConcurrentLinkedQueue<String> LOGGED = new ConcurrentLinkedQueue<>();
    static final Handler CAPTURE = new Handler() {
        @Override
        public void publish(LogRecord r) {
            LOGGED.add(r.getLevel() + " " + r.getMessage());
        }

        @Override
        public void flush() {
        }

        @Override
        public void close() {
        }
    };
    static Session admin;

    @TempDir
    Path dir;

    @BeforeAll
    static void setUp() {
        assertNotNull(DSN, "-Dpglease.dsn");
        admin = new Session(ADMIN, "java test admin", null);
        Session.LOG.addHandler(CAPTURE);
    }

    @AfterAll
    static void tearDown() {
        Session.LOG.removeHandler(CAPTURE);
        admin.close();
    }

    static synchronized Object sql(String q, Object... params) throws Exception {
        List<Object[]> rows = admin.call(q, params, true, 0);
        return rows.isEmpty() ? null : rows.get(0)[0];
    }

    static void createLeases(String stream, String... shards) throws Exception {
        for (String s : shards) {
            String[] parts = s.split("<");
            sql("SELECT lease.create_lease('clients', ?, ?, coalesce(?::text[], '{}'))", stream, parts[0],
                parts.length > 1 ? new Object[] {parts[1]} : null);
        }
    }

    static void waitFor(String what, double seconds, BooleanSupplier cond) throws InterruptedException {
        long until = System.nanoTime() + (long) (seconds * 1e9);
        while (!cond.getAsBoolean()) {
            assertTrue(System.nanoTime() < until, "timed out waiting for " + what);
            Thread.sleep(20);
        }
    }

    /** Records every callback as "shard event detail", with its time; checkpoints every batch. */
    static final class Recorder implements ShardRecordProcessor {
        final ConcurrentLinkedQueue<String> events;
        final ConcurrentLinkedQueue<Double> times;
        volatile Runnable beforeCheckpoint = () -> { };
        volatile boolean checkpoints = true;
        String shard;

        Recorder(ConcurrentLinkedQueue<String> events, ConcurrentLinkedQueue<Double> times) {
            this.events = events;
            this.times = times;
        }

        void event(String e) {
            synchronized (events) {
                events.add(shard + " " + e);
                times.add(System.currentTimeMillis() / 1000.0); // wall clock, as the journal
            }
        }

        @Override
        public void initialize(String shardId, String checkpoint) {
            shard = shardId;
            event("initialize " + checkpoint);
        }

        @Override
        public void processRecords(List<StreamRecord> records, Checkpointer checkpointer) {
            event("process " + records.get(records.size() - 1).sequenceNumber());
            beforeCheckpoint.run();
            if (checkpoints) {
                checkpoint(checkpointer);
            }
        }

        /** A checkpoint; a refused one is an event. */
        void checkpoint(Checkpointer checkpointer) {
            try {
                checkpointer.checkpoint();
            } catch (LeaseLostException e) {
                event("refused");
            }
        }

        @Override
        public void leaseLost() {
            event("leaseLost");
        }

        @Override
        public void shardEnded(Checkpointer checkpointer) {
            event("shardEnded");
            checkpoint(checkpointer);
        }

        @Override
        public void shutdownRequested(Checkpointer checkpointer) {
            event("shutdownRequested");
            checkpoint(checkpointer);
        }
    }

    /** A worker on its own thread. */
    final class Running implements AutoCloseable {
        final ConcurrentLinkedQueue<String> events = new ConcurrentLinkedQueue<>();
        final ConcurrentLinkedQueue<Double> times = new ConcurrentLinkedQueue<>();
        final List<Recorder> processors = new ArrayList<>();
        final Worker worker;
        final Thread thread;
        final AtomicReference<Exception> failure = new AtomicReference<>();
        final Path journal;

        Running(String owner, String stream, Worker.Options options) {
            journal = dir.resolve(owner + ".journal");
            worker = new Worker(DSN, "clients", stream, owner, () -> {
                Recorder r = new Recorder(events, times);
                synchronized (processors) {
                    processors.add(r);
                }
                return r;
            }, SuiteWorker::records, options.leaseDuration(LEASE).journal(journal.toString()));
            thread = new Thread(() -> {
                try {
                    worker.run();
                } catch (Exception e) {
                    failure.set(e);
                }
            });
            thread.start();
        }

        boolean saw(String event) {
            return events.contains(event);
        }

        String journalText() throws Exception {
            return Files.readString(journal);
        }

        @Override
        public void close() throws Exception {
            worker.stop();
            thread.join(10_000);
            if (failure.get() != null) {
                throw failure.get();
            }
        }
    }

    @Test
    void shardEndClosesTheShardAndItsChildStartsFromTheBeginning() throws Exception {
        createLeases("java-end", "p-end7", "c<p-end7");
        try (Running w = new Running("java-end-1", "java-end", new Worker.Options())) {
            waitFor("the child shard", 8, () -> w.saw("c process 5"));
            List<String> p = new ArrayList<>();
            for (String e : w.events) {
                if (e.startsWith("p-end7 ")) {
                    p.add(e.substring(7));
                }
            }
            assertEquals(List.of("initialize TRIM_HORIZON", "process 5", "process 7", "shardEnded"), p);
            assertEquals("SHARD_END", sql("SELECT checkpoint FROM lease.shard_leases WHERE stream_name = 'java-end'"
                                          + " AND shard_id = 'p-end7'"));
            assertTrue(w.saw("c initialize TRIM_HORIZON"));
            assertTrue(w.journalText().contains("\"ev\": \"closed\""));
        }
        assertTrue(LOGGED.stream().anyMatch(l -> l.startsWith("INFO java-end-1: took p-end7")), "lease changes are logged");
        assertNull(sql("SELECT lease_owner FROM lease.shard_leases WHERE stream_name = 'java-end' AND shard_id = 'c'"),
                   "released at the stop");
    }

    @Test
    void aRefusedCheckpointThrowsAndLeaseLostFollows() throws Exception {
        createLeases("java-fenced", "f1");
        // a checkpoint tick of 0: each checkpoint its own call, a refused one throws
        try (Running w = new Running("java-fenced-1", "java-fenced", new Worker.Options().checkpointTick(0))) {
            waitFor("the processor", 8, () -> !w.processors.isEmpty());
            Recorder r = w.processors.get(0);
            // before its next checkpoint, another owner takes the lease (a new epoch)
            r.beforeCheckpoint = () -> {
                r.beforeCheckpoint = () -> { };
                try {
                    sql("SELECT lease.take_lease('clients', 'java-fenced', 'f1', 'thief',"
                        + " (SELECT lease_count FROM lease.shard_leases WHERE stream_name = 'java-fenced'))");
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            };
            waitFor("leaseLost", 8, () -> w.saw("f1 leaseLost"));
            List<String> tail = new ArrayList<>(w.events);
            int refused = tail.indexOf("f1 refused");
            assertTrue(refused > 0 && tail.get(refused + 1).equals("f1 leaseLost"), tail.toString());
            assertTrue(w.journalText().contains("\"ok\": false"), "the refused checkpoint is in the journal");
            assertEquals("thief", sql("SELECT lease_owner FROM lease.shard_leases WHERE stream_name = 'java-fenced'"));
        }
    }

    @Test
    void theLocalDeadlineStopsProcessingWhileRenewalsHang() throws Exception {
        createLeases("java-deadline", "d1");
        try (Running w = new Running("java-deadline-1", "java-deadline", new Worker.Options())) {
            waitFor("processing", 8, () -> w.saw("d1 process 10"));
            w.processors.get(0).checkpoints = false;      // only the renewals write now
            waitFor("a renewal", 4, () -> {
                try {
                    return w.journalText().contains("\"leases\": {\"d1\"");
                } catch (Exception e) {
                    return false;
                }
            });
            String url = Session.jdbcUrl(ADMIN);
            double lost;
            double lastBatch;
            try (Connection c = DriverManager.getConnection(url); Statement st = c.createStatement()) {
                c.setAutoCommit(false);
                // renew_leases waits behind these row locks (its heartbeat writes the
                // worker's lease.stream_workers row): no renewal is acknowledged
                st.execute("SELECT * FROM lease.shard_leases WHERE stream_name = 'java-deadline' FOR UPDATE");
                st.execute("SELECT * FROM lease.stream_workers WHERE stream_name = 'java-deadline' FOR UPDATE");
                waitFor("leaseLost", 4, () -> w.saw("d1 leaseLost"));
                Thread.sleep(500);
                assertEquals("d1 leaseLost", new ArrayList<>(w.events).get(w.events.size() - 1),
                             "nothing processed after the local deadline");
                lost = lastTime(w, "d1 leaseLost");
                lastBatch = lastTime(w, "d1 process");
                c.rollback();
            }
            // every batch started before the last acknowledged renewal's send time + lease
            // duration - margin (1.6 s), by the journal's clock
            double lastSent = 0;
            Matcher m = Pattern.compile("\\{\"sent\": ([0-9.E]+), \"leases\": \\{[^}]*\"d1\"[^\n]*\"t\": ([0-9.E]+)\\}")
                .matcher(w.journalText());
            while (m.find()) {
                if (Double.parseDouble(m.group(2)) < lost) {
                    lastSent = Double.parseDouble(m.group(1));
                }
            }
            assertTrue(lastSent > 0 && lastBatch <= lastSent + 1.6 + 0.05,
                       "last batch " + lastBatch + ", deadline " + (lastSent + 1.6));
            assertTrue(w.journalText().contains("local deadline"));
            waitFor("the restart from the checkpoint", 6, () -> countOf(w, "d1 initialize") == 2);
        }
    }

    @Test
    void aHandoffIsShutdownRequestedThenLeaseLost() throws Exception {
        createLeases("java-handoff", "h1", "h2");
        try (Running w = new Running("java-handoff-1", "java-handoff", new Worker.Options())) {
            waitFor("both shards", 8, () -> w.saw("h1 process 5") && w.saw("h2 process 5"));
            Object asked = sql("SELECT string_agg(shard_id || ' ' || action, ',') FROM lease.take_leases("
                               + "'clients', 'java-handoff', 'java-handoff-2', '2 seconds', NULL, 1)");
            assertTrue(String.valueOf(asked).endsWith("handoff_requested"), String.valueOf(asked));
            waitFor("the handoff", 4, () -> w.events.stream().anyMatch(e -> e.endsWith(" shutdownRequested")));
            waitFor("leaseLost after it", 4, () -> w.events.stream().anyMatch(e -> e.endsWith(" leaseLost")));
            String shard = w.events.stream().filter(e -> e.endsWith(" shutdownRequested")).findFirst().get().split(" ")[0];
            List<String> mine = new ArrayList<>();
            for (String e : w.events) {
                if (e.startsWith(shard + " ")) {
                    mine.add(e.substring(shard.length() + 1));
                }
            }
            assertEquals(List.of("shutdownRequested", "leaseLost"), mine.subList(mine.size() - 2, mine.size()));
            String lastProcessed = mine.get(mine.size() - 3).replace("process ", "");
            Object[] row = admin.call("SELECT lease_owner, checkpoint FROM lease.shard_leases"
                                      + " WHERE stream_name = 'java-handoff' AND shard_id = ?",
                                      new Object[] {shard}, true, 0).get(0);
            assertEquals("java-handoff-2", row[0], "released straight to the requester");
            assertEquals(lastProcessed, row[1], "every record processed was checkpointed before the release");
        }
    }

    @Test
    void theStopIsShutdownRequestedAndReleasesEveryLease() throws Exception {
        createLeases("java-stop", "t1", "t2");
        Running w = new Running("java-stop-1", "java-stop", new Worker.Options());
        waitFor("both shards", 8, () -> w.saw("t1 process 5") && w.saw("t2 process 5"));
        w.close();
        for (String s : new String[] {"t1", "t2"}) {
            List<String> mine = new ArrayList<>();
            for (String e : w.events) {
                if (e.startsWith(s + " ")) {
                    mine.add(e.substring(3));
                }
            }
            assertEquals(List.of("shutdownRequested", "leaseLost"), mine.subList(mine.size() - 2, mine.size()));
        }
        assertEquals(0L, sql("SELECT count(*) FROM lease.shard_leases WHERE stream_name = 'java-stop'"
                             + " AND lease_owner IS NOT NULL"));
    }

    @Test
    void badCredentialsFailLoudlyAfterTheRetries() {
        String bad = DSN.replaceAll("user=[^&]*", "user=no_such_role");
        Worker w = new Worker(bad, "clients", "java-none", "java-bad", () -> new Recorder(new ConcurrentLinkedQueue<>(), new ConcurrentLinkedQueue<>()), SuiteWorker::records,
                              new Worker.Options().leaseDuration(LEASE));
        SQLException e = assertThrows(SQLException.class, w::run);
        assertEquals("28000", e.getSQLState(), e.getMessage());
        assertTrue(LOGGED.stream().anyMatch(l -> l.startsWith("WARNING cannot connect (try 5 of 5): 28000")),
                   "each refused connection is logged");
        assertTrue(LOGGED.stream().anyMatch(l -> l.startsWith("SEVERE java-bad failed")), "the failure is logged");
    }

    /**
     * A call answered with the WARNING of a cancelled wait for synchronous replication is
     * ambiguous, not success (docs/client-rules.md), as the server sends it (a function
     * raises it the first times it is called): not safe to repeat, Ambiguous at once; safe
     * to repeat, tried again, then Unavailable after the rules' tries; the same text at
     * NOTICE is no warning at all.
     */
    @Test
    void aCancelledSyncRepWaitIsAmbiguous() throws Exception {
        sql("CREATE OR REPLACE FUNCTION public.java_syncrep_warn(seq regclass, severity text, times int)"
            + " RETURNS text LANGUAGE plpgsql AS $$ BEGIN"
            + " IF pg_catalog.nextval(seq) <= times THEN"
            + "  IF severity = 'WARNING' THEN"
            + "   RAISE WARNING 'canceling wait for synchronous replication due to user request'"
            + "    USING DETAIL = 'The transaction has already committed locally, but might not have been replicated to the standby.';"
            + "  ELSE RAISE NOTICE 'canceling wait for synchronous replication due to user request'; END IF;"
            + " END IF; RETURN 'answered'; END $$");
        String[][] cases = {
            // severity, times, repeat safe, outcome, calls
            {"WARNING", "1", "false", "ambiguous", "1"},
            {"WARNING", "1", "true", "answered", "2"},
            {"WARNING", "9", "true", "unavailable", String.valueOf(Rules.TRIES)},
            {"NOTICE", "9", "false", "answered", "1"},
        };
        int i = 0;
        for (String[] c : cases) {
            String seq = "public.java_syncrep_" + (++i);
            sql("DROP SEQUENCE IF EXISTS " + seq);
            sql("CREATE SEQUENCE " + seq);
            String got;
            try (Session s = new Session(ADMIN, "java syncrep test", null)) {
                Object v = s.one("SELECT public.java_syncrep_warn(?::regclass, ?, ?)",
                                 new Object[] {seq, c[0], Integer.parseInt(c[1])}, Boolean.parseBoolean(c[2]), 0);
                got = String.valueOf(v);
            } catch (Session.Ambiguous e) {
                got = e.getMessage().startsWith("canceling wait for synchronous replication") ? "ambiguous" : e.getMessage();
            } catch (Session.Unavailable e) {
                got = e.getMessage().contains("WARNING canceling wait for synchronous replication")
                    ? "unavailable" : e.getMessage();
            }
            assertEquals(c[3] + " after " + c[4] + " calls",
                         got + " after " + sql("SELECT last_value::text FROM " + seq) + " calls",
                         String.join(" ", c));
        }
        assertTrue(LOGGED.stream().anyMatch(l -> l.contains("answered with a warning (ambiguous, try 1 of 5)")),
                   "each warned answer is logged");
    }

    /**
     * Checkpoints are opaque strings: a shard whose checkpoint is a 56-digit Kinesis sequence
     * number (no long holds it) reaches initialize verbatim, and the next checkpoint, 5
     * records on, is written as the processor gave it: greater, compared as BigIntegers.
     */
    @Test
    void aFiftySixDigitCheckpointIsOpaque() throws Exception {
        String seq = "49590338271490256608559692538361571095921575989136588898";
        createLeases("java-big", "k1");
        sql("SELECT lease.take_lease('clients', 'java-big', 'k1', 'java-big-prev')");
        sql("SELECT lease.update_checkpoint('clients', 'java-big', 'k1', 'java-big-prev', ?)", seq);
        sql("SELECT lease.release_lease('clients', 'java-big', 'k1', 'java-big-prev')");
        BigInteger next = new BigInteger(seq).add(BigInteger.valueOf(5));
        try (Running w = new Running("java-big-w", "java-big", new Worker.Options())) {
            waitFor("k1 processed", 10, () -> w.saw("k1 process " + next));
            assertTrue(w.saw("k1 initialize " + seq), "initialize got the checkpoint verbatim: " + w.events);
            waitFor("k1 checkpointed past " + seq, 10, () -> {
                try {
                    return new BigInteger((String) sql("SELECT checkpoint FROM lease.shard_leases"
                        + " WHERE app_name = 'clients' AND stream_name = 'java-big' AND shard_id = 'k1'")).compareTo(next) >= 0;
                } catch (Exception e) {
                    return false;
                }
            });
        }
    }

    @Test
    void textArraysReachTheServerAsOneAndTwoDimensions() throws Exception {
        assertEquals("[1:3] [1:2][1:2] {a,NULL,b}",
                     sql("SELECT array_dims(?::text[]) || ' ' || array_dims(?::text[]) || ' ' || (?::text[])::text",
                         new Object[] {"x", null, "y"}, new String[][] {{"a", null}, {"b", "c"}},
                         new Object[] {"a", null, "b"}));
    }

    @Test
    void syncShardsKeepsTheLeasesInStepWithTheShardList() throws Exception {
        if (sql("SELECT to_regprocedure('lease.sync_shards(text, text, text[], text[])')") == null) {
            System.out.println("SKIP (lease.sync_shards not installed): WorkerTest.syncShards");
            Assumptions.abort("lease.sync_shards not installed");
        }
        sql("GRANT EXECUTE ON FUNCTION lease.sync_shards(text, text, text[], text[]) TO clients_worker");
        createLeases("java-sync", "gone");
        Map<String, List<String>> shards = new ConcurrentSkipListMap<>();
        shards.put("a", List.of());
        shards.put("b", List.of());
        shards.put("m", List.of("a", "b"));           // a merge: two parents, sent as a 2-D array
        try (Running w = new Running("java-sync-1", "java-sync", new Worker.Options().shardLister(() -> shards, 1))) {
            waitFor("a and b processed", 8, () -> w.saw("a process 5") && w.saw("b process 5"));
            assertEquals("{a,b}", sql("SELECT parent_shard_ids::text FROM lease.shard_leases"
                                      + " WHERE stream_name = 'java-sync' AND shard_id = 'm'"));
            assertTrue(w.journalText().contains("\"unlisted\": \"gone\""), "the unlisted lease is reported");
            assertTrue(LOGGED.stream().anyMatch(l -> l.startsWith("WARNING sync_shards: leases not listed")
                                                     && l.contains("gone")));
            shards.put("c", List.of("m"));            // the stream reshards: one parent, a 1-D array
            waitFor("c created", 4, () -> {
                try {
                    return "{m}".equals(sql("SELECT parent_shard_ids::text FROM lease.shard_leases"
                                            + " WHERE stream_name = 'java-sync' AND shard_id = 'c'"));
                } catch (Exception e) {
                    return false;
                }
            });
        }
    }

    /** When the last event starting with prefix happened (wall-clock seconds). */
    static double lastTime(Running w, String prefix) {
        List<String> es;
        List<Double> ts;
        synchronized (w.events) {
            es = new ArrayList<>(w.events);
            ts = new ArrayList<>(w.times);
        }
        for (int i = es.size() - 1; i >= 0; i--) {
            if (es.get(i).startsWith(prefix)) {
                return ts.get(i);
            }
        }
        return 0;
    }

    /** The journal's events of one kind, as text lines. */
    static List<String> journalEvents(Running w, String ev) throws Exception {
        List<String> out = new ArrayList<>();
        for (String line : w.journalText().split("\n")) {
            if (line.contains("\"ev\": \"" + ev + "\"")) {
                out.add(line);
            }
        }
        return out;
    }

    /**
     * The checkpoints of a tick go together in one lease.update_checkpoints call; a shard
     * the batch's answer refuses is dropped (leaseLost) and only that one: the other goes on.
     */
    @Test
    void batchedCheckpointsGoTogetherAndARefusedShardDropsOnlyThatShard() throws Exception {
        createLeases("java-batch", "b1", "b2");
        try (Running w = new Running("java-batch-1", "java-batch", new Worker.Options().checkpointTick(0.05))) {
            waitFor("both shards", 8, () -> w.saw("b1 process 10") && w.saw("b2 process 10"));
            assertTrue(journalEvents(w, "checkpoint").stream().anyMatch(l -> l.contains("\"batch\": 2")),
                       "two shards' checkpoints in one call");
            Recorder r = w.processors.stream().filter(p -> "b1".equals(p.shard)).findFirst().get();
            r.beforeCheckpoint = () -> {
                r.beforeCheckpoint = () -> { };
                try {
                    sql("SELECT lease.take_lease('clients', 'java-batch', 'b1', 'thief',"
                        + " (SELECT lease_count FROM lease.shard_leases WHERE stream_name = 'java-batch' AND shard_id = 'b1'))");
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            };
            waitFor("leaseLost", 8, () -> w.saw("b1 leaseLost"));
            long b2Before = countOf(w, "b2 process");
            waitFor("b2 going on", 8, () -> countOf(w, "b2 process") > b2Before + 2);
            assertTrue(!w.saw("b2 leaseLost") && !w.saw("b1 refused"), w.events.toString());
            assertTrue(journalEvents(w, "checkpoint").stream().anyMatch(l -> l.contains("\"shard\": \"b1\"")
                && l.contains("\"ok\": false") && l.contains("\"reason\": \"")), "the refusal and its reason journaled");
            assertEquals("thief", sql("SELECT lease_owner FROM lease.shard_leases WHERE stream_name = 'java-batch'"
                                      + " AND shard_id = 'b1'"));
        }
    }

    /**
     * A batch answered with the WARNING of a cancelled wait for synchronous replication is
     * ambiguous: it is resolved per shard from my_leases (here it committed), not retried,
     * and the worker goes on; the server's checkpoints are the last acknowledged ones.
     */
    @Test
    void anAmbiguousBatchIsResolvedPerShardFromMyLeases() throws Exception {
        createLeases("java-ambiguous", "a1", "a2");
        sql("CREATE SEQUENCE IF NOT EXISTS public.java_ambiguous_seq");
        sql("CREATE OR REPLACE FUNCTION public.java_ambiguous_warn() RETURNS trigger LANGUAGE plpgsql"
            + " SECURITY DEFINER AS $$ BEGIN"
            + " IF NEW.checkpoint IS DISTINCT FROM OLD.checkpoint AND pg_catalog.nextval('public.java_ambiguous_seq') <= 2 THEN"
            + "  RAISE WARNING 'canceling wait for synchronous replication due to user request';"
            + " END IF; RETURN NEW; END $$");
        sql("CREATE TRIGGER java_ambiguous AFTER UPDATE ON lease.shard_leases FOR EACH ROW"
            + " WHEN (NEW.stream_name = 'java-ambiguous') EXECUTE FUNCTION public.java_ambiguous_warn()");
        try {
            try (Running w = new Running("java-ambiguous-1", "java-ambiguous", new Worker.Options().checkpointTick(0.05))) {
                waitFor("a resolved batch", 8, () -> {
                    try {
                        return !journalEvents(w, "checkpoint_resolved").isEmpty();
                    } catch (Exception e) {
                        return false;
                    }
                });
                waitFor("more batches", 8, () -> w.saw("a1 process 30") && w.saw("a2 process 30"));
                assertTrue(journalEvents(w, "checkpoint_resolved").stream().allMatch(l -> l.contains("\"committed\": true")),
                           journalEvents(w, "checkpoint_resolved").toString());
                assertTrue(journalEvents(w, "checkpoint_failed").isEmpty(), "nothing left unresolved");
                assertTrue(!w.saw("a1 leaseLost") && !w.saw("a2 leaseLost"), w.events.toString());
            }
        } finally {
            sql("DROP TRIGGER java_ambiguous ON lease.shard_leases");
        }
        assertEquals(0L, sql("SELECT count(*) FROM lease.shard_leases WHERE stream_name = 'java-ambiguous'"
                             + " AND (lease_owner IS NOT NULL OR checkpoint::int % 5 <> 0)"), "released, at a batch's end");
    }

    /** Renewals go by lease.heartbeat while the list has not moved (client rule 5), by renew_leases otherwise. */
    @Test
    void renewalsGoByHeartbeatWhileTheListHasNotMoved() throws Exception {
        createLeases("java-heartbeat", "hb1", "hb2");
        try (Running w = new Running("java-heartbeat-1", "java-heartbeat", new Worker.Options())) {
            waitFor("heartbeat renewals", 10, () -> {
                try {
                    return journalEvents(w, "renewed").stream()
                        .filter(l -> l.contains("\"via\": \"heartbeat\"") && l.contains("\"hb1\"") && l.contains("\"hb2\""))
                        .count() >= 3;
                } catch (Exception e) {
                    return false;
                }
            });
            assertTrue(journalEvents(w, "renewed").stream().anyMatch(l -> l.contains("\"via\": \"list\"")),
                       "it listed with renew_leases first");
            long lists = journalEvents(w, "renewed").stream().filter(l -> l.contains("\"via\": \"list\"")).count();
            // a handoff request moves the version: the next tick lists again and hands over
            sql("SELECT count(*) FROM lease.take_leases('clients', 'java-heartbeat', 'java-heartbeat-2', '2 seconds', NULL, 1)");
            waitFor("the handoff", 20, () -> w.events.stream().anyMatch(e -> e.endsWith(" shutdownRequested")));
            assertTrue(journalEvents(w, "renewed").stream().filter(l -> l.contains("\"via\": \"list\"")).count() > lists);
        }
    }

    /**
     * Fast failover (rule 6): the worker declares renew_every to the server on its calls
     * and renews that often (a lease of 2 s would renew every 0.67 s otherwise).  Rule 6's
     * deadline itself, and its negative control, are in test/clients/fast_failover.sh.
     */
    @Test
    void fastFailoverDeclaresAndRenewsAtRenewEvery() throws Exception {
        createLeases("java-ff", "ff1");
        try (Running w = new Running("java-ff-1", "java-ff", new Worker.Options().fastFailover(0.2))) {
            waitFor("processing", 8, () -> w.saw("ff1 process 10"));
            assertTrue(w.journalText().contains("\"renew_every\": 0.2"));
            Object declared = sql("SELECT renew_every::text FROM lease.stream_workers WHERE stream_name = 'java-ff'"
                                  + " AND worker = 'java-ff-1'");
            assertEquals("00:00:00.2", String.valueOf(declared));
            long before = journalEvents(w, "renewed").size();
            Thread.sleep(2000);
            long renewals = journalEvents(w, "renewed").size() - before;
            assertTrue(renewals >= 5, renewals + " renewals in 2 s");
        }
    }

    /** Sub-sequence numbers and the two-phase checkpoint, as KCL's RecordProcessorCheckpointer has them. */
    @Test
    void subSequencesAndPendingCheckpointsReachTheServerAndTheNextOwner() throws Exception {
        createLeases("java-kpl", "k1");
        sql("SELECT lease.take_lease('clients', 'java-kpl', 'k1', 'java-kpl-0', 0)");
        Object epoch = sql("SELECT lease_epoch FROM lease.shard_leases WHERE stream_name = 'java-kpl'");
        assertEquals(Boolean.TRUE, sql("SELECT lease.update_checkpoint('clients', 'java-kpl', 'k1', 'java-kpl-0',"
                                       + " '49590338271490256608559692538361571095921575989136588898', 3, ?::bigint)", epoch));
        sql("SELECT lease.prepare_checkpoint('clients', 'java-kpl', 'k1', 'java-kpl-0', '49590338271490256608559692538361571095921575989136588899')");
        sql("SELECT lease.release_lease('clients', 'java-kpl', 'k1', 'java-kpl-0')");
        ConcurrentLinkedQueue<String> seen = new ConcurrentLinkedQueue<>();
        ShardRecordProcessor p = new ShardRecordProcessor() {
            @Override
            public void initialize(String shardId, String checkpoint) {
                seen.add("plain " + checkpoint);
            }

            @Override
            public void initialize(String shardId, ExtendedSequenceNumber checkpoint, ExtendedSequenceNumber pending) {
                seen.add("initialize " + checkpoint.sequenceNumber() + "/" + checkpoint.subSequenceNumber() + " pending "
                         + (pending == null ? null : pending.sequenceNumber()));
            }

            @Override
            public void processRecords(List<StreamRecord> records, Checkpointer checkpointer) {
                StreamRecord r = records.get(0);
                seen.add("process " + r.sequenceNumber() + "/" + r.subSequenceNumber());
                try {
                    PreparedCheckpointer prepared = checkpointer.prepareCheckpoint(r.sequenceNumber());
                    seen.add("prepared " + prepared.pendingCheckpoint());
                    checkpointer.checkpoint(r);
                } catch (LeaseLostException e) {
                    seen.add("refused");
                }
            }

            @Override
            public void leaseLost() {
            }

            @Override
            public void shardEnded(Checkpointer checkpointer) {
            }

            @Override
            public void shutdownRequested(Checkpointer checkpointer) {
            }
        };
        // one user record of an aggregate per batch: the one after (sequence, sub-sequence)
        RecordSource source = new RecordSource() {
            @Override
            public List<StreamRecord> getRecords(String shardId, String after) {
                throw new AssertionError("the worker asks with the sub-sequence");
            }

            @Override
            public List<StreamRecord> getRecords(String shardId, String after, long afterSub) {
                return afterSub < 4 ? List.of(new StreamRecord(after, afterSub + 1, null))
                    : List.of(new StreamRecord(new BigInteger(after).add(BigInteger.ONE).toString(), 0, null));
            }
        };
        Worker worker = new Worker(DSN, "clients", "java-kpl", "java-kpl-1", () -> p, source,
                                   new Worker.Options().leaseDuration(LEASE));
        Thread t = new Thread(() -> {
            try {
                worker.run();
            } catch (Exception e) {
                seen.add("failed " + e);
            }
        });
        t.start();
        try {
            waitFor("the next aggregate", 8, () -> seen.contains("process 49590338271490256608559692538361571095921575989136588899/0"));
        } finally {
            worker.stop();
            t.join(10_000);
        }
        List<String> got = new ArrayList<>(seen);
        assertEquals(List.of("initialize 49590338271490256608559692538361571095921575989136588898/3 pending "
                             + "49590338271490256608559692538361571095921575989136588899",
                             "process 49590338271490256608559692538361571095921575989136588898/4",
                             "prepared 49590338271490256608559692538361571095921575989136588898"), got.subList(0, 3));
        Object[] row = admin.call("SELECT checkpoint, checkpoint_sub_sequence, pending_checkpoint FROM lease.shard_leases"
                                  + " WHERE stream_name = 'java-kpl'", new Object[0], true, 0).get(0);
        // moved past the import, compared as big integers; the checkpoint completed the pending one
        assertTrue(new BigInteger((String) row[0]).compareTo(new BigInteger("49590338271490256608559692538361571095921575989136588898")) > 0
                   && row[2] == null, java.util.Arrays.toString(row));
    }

    /**
     * Transactional mode: each batch's output and checkpoint commit together; a steal
     * makes hold_lease refuse the next batch (leaseLost), and nothing of it lands.
     */
    @Test
    void transactionalModeWritesEachRecordExactlyOnce() throws Exception {
        createLeases("java-tx", "x1", "x2");
        sql("CREATE TABLE IF NOT EXISTS public.java_tx_out (shard_id text, seq int)");
        sql("GRANT INSERT ON public.java_tx_out TO clients_worker");
        ConcurrentLinkedQueue<String> events = new ConcurrentLinkedQueue<>();
        Supplier<ShardRecordProcessor> txFactory = () -> new ShardRecordProcessor() {
            String shard;

            @Override
            public void initialize(String shardId, String checkpoint) {
                shard = shardId;
            }

            @Override
            public void processRecords(List<StreamRecord> records, Checkpointer checkpointer) {
                try (PreparedStatement ps = checkpointer.transaction().prepareStatement(
                         "INSERT INTO public.java_tx_out VALUES (?, ?)")) {
                    for (StreamRecord r : records) {
                        ps.setString(1, shard);
                        ps.setInt(2, Integer.parseInt(r.sequenceNumber()));
                        ps.executeUpdate();
                    }
                    checkpointer.checkpoint();
                } catch (SQLException | LeaseLostException e) {
                    throw new IllegalStateException(e);
                }
                events.add(shard + " process " + records.get(records.size() - 1).sequenceNumber());
            }

            @Override
            public void leaseLost() {
                events.add(shard + " leaseLost");
            }

            @Override
            public void shardEnded(Checkpointer checkpointer) {
            }

            @Override
            public void shutdownRequested(Checkpointer checkpointer) {
            }
        };
        Worker worker = new Worker(DSN, "clients", "java-tx", "java-tx-1", txFactory, SuiteWorker::records,
                                   new Worker.Options().leaseDuration(LEASE).transactional(true)
                                       .journal(dir.resolve("java-tx-1.journal").toString()));
        AtomicReference<Exception> failure = new AtomicReference<>();
        Thread t = new Thread(() -> {
            try {
                worker.run();
            } catch (Exception e) {
                failure.set(e);
            }
        });
        t.start();
        try {
            waitFor("batches", 8, () -> events.contains("x1 process 20") && events.contains("x2 process 20"));
            sql("SELECT lease.take_lease('clients', 'java-tx', 'x1', 'thief',"
                + " (SELECT lease_count FROM lease.shard_leases WHERE stream_name = 'java-tx' AND shard_id = 'x1'))");
            waitFor("x1 lost", 6, () -> events.contains("x1 leaseLost"));
            long x2 = events.stream().filter(e -> e.startsWith("x2 process")).count();
            waitFor("x2 going on", 6, () -> events.stream().filter(e -> e.startsWith("x2 process")).count() > x2 + 2);
        } finally {
            worker.stop();
            t.join(10_000);
        }
        if (failure.get() != null) {
            throw failure.get();
        }
        assertTrue(Files.readString(dir.resolve("java-tx-1.journal")).contains("\"tx\": true"));
        // every record up to each checkpoint exactly once, none past it
        assertEquals(0L, sql("WITH l AS (SELECT shard_id, checkpoint::int AS c FROM lease.shard_leases"
                             + " WHERE stream_name = 'java-tx'),"
                             + " o AS (SELECT shard_id, seq, count(*) AS n FROM public.java_tx_out GROUP BY 1, 2)"
                             + " SELECT (SELECT count(*) FROM o JOIN l USING (shard_id) WHERE o.n > 1 OR o.seq > l.c)"
                             + " + (SELECT count(*) FROM l, generate_series(1, l.c) AS s WHERE NOT EXISTS"
                             + " (SELECT FROM o WHERE o.shard_id = l.shard_id AND o.seq = s))"));
        assertTrue((Long) sql("SELECT count(*) FROM public.java_tx_out") >= 40L);
    }

    static long countOf(Running w, String prefix) {
        return w.events.stream().filter(e -> e.startsWith(prefix)).count();
    }
}
