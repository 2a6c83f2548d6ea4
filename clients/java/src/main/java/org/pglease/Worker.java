package org.pglease;

import java.sql.SQLException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.function.Supplier;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * The worker loop: take, renew, process, fenced checkpoints, handoff, shard end.
 *
 * <p>The loop of the Python and Node clients (clients/python/pg_lease/worker.py,
 * clients/node/pg_lease.js), following docs/client-rules.md: a renewal thread on its own
 * connection, a processing thread on another, the local deadline, graceful handoff, and
 * every checkpoint fenced with the lease_epoch learned from take_leases or renew_leases;
 * with KCL's processor callbacks (ShardRecordProcessor) and, optionally, KCL's shard
 * syncer (lease.sync_shards on a schedule).
 */
public final class Worker {
    static final Logger LOG = Session.LOG;

    public static final String SHARD_END = "SHARD_END";
    public static final String LEASE_LOST = "lease lost";
    public static final String HANDED_OFF = "handed off";
    public static final String SHARD_ENDED = "shard ended";
    public static final String WORKER_STOPPED = "worker stopped";

    static final String TAKE =
        "SELECT shard_id, action, lease_epoch FROM lease.take_leases(?, ?, ?, ?::interval, NULL, ?)";
    static final String RENEW = "SELECT shard_id, handoff_to, lease_epoch FROM lease.renew_leases(?, ?, ?, ?::interval)";
    static final String MINE = "SELECT shard_id, lease_epoch, checkpoint, handoff_from FROM lease.my_leases(?, ?, ?)";
    static final String CHECKPOINT = "SELECT lease.update_checkpoint(?, ?, ?, ?, ?, 0, ?::bigint)";
    static final String RELEASE = "SELECT lease.release_lease(?, ?, ?, ?)";
    static final String CLOSE = "SELECT lease.close_shard(?, ?, ?, ?)";
    static final String SYNC = "SELECT shard_id, action FROM lease.sync_shards(?, ?, ?::text[], ?::text[])";

    /** The worker's settings; every one has a default. */
    public static final class Options {
        double leaseDuration = 10;
        Double margin;
        Double balanceEvery;
        int maxSteal = 1;
        String journal;
        ShardLister shardLister;
        double syncEvery = 60;

        /** Seconds; a dead worker's leases are taken over after at most this long (default 10). */
        public Options leaseDuration(double seconds) {
            leaseDuration = seconds;
            return this;
        }

        /** Seconds before the lease's earliest possible expiry at which processing stops (default a fifth). */
        public Options margin(double seconds) {
            margin = seconds;
            return this;
        }

        /** Seconds between take_leases rounds (default a third of the lease duration). */
        public Options balanceEvery(double seconds) {
            balanceEvery = seconds;
            return this;
        }

        /** Handoffs one take_leases round may request (default 1). */
        public Options maxSteal(int n) {
            maxSteal = n;
            return this;
        }

        /** A file to append what the server acknowledged to, one JSON line per event. */
        public Options journal(String path) {
            journal = path;
            return this;
        }

        /** Runs lease.sync_shards with what lister returns, every syncEvery seconds (default 60). */
        public Options shardLister(ShardLister lister, double syncEverySeconds) {
            shardLister = lister;
            syncEvery = syncEverySeconds;
            return this;
        }
    }

    /** A lease this worker holds, as the server last acknowledged it. */
    private static final class Lease {
        final long epoch;
        volatile long sent;          // System.nanoTime() when the acknowledging call was sent
        final long learned;
        volatile String handoffTo;
        volatile boolean lost;

        Lease(long epoch, long sent, long learned) {
            this.epoch = epoch;
            this.sent = sent;
            this.learned = learned;
        }
    }

    /** A shard's processor and where it is. */
    private static final class Running {
        final long epoch;
        final ShardRecordProcessor processor;
        String position;             // the last record delivered (or the starting checkpoint)
        String acked;                // the last checkpoint acknowledged
        boolean shutdownRequested;

        Running(long epoch, ShardRecordProcessor processor, String checkpoint) {
            this.epoch = epoch;
            this.processor = processor;
            this.position = checkpoint;
            this.acked = checkpoint;
        }
    }

    private final String app;
    private final String stream;
    private final String owner;
    private final Supplier<ShardRecordProcessor> factory;
    private final RecordSource source;
    private final Options opt;
    private final long durationNanos;
    private final long marginNanos;
    private final long balanceNanos;
    private final String interval;
    private final Journal journal;
    private final Session db;
    private final Session renewDb;
    private final Map<String, Lease> held = new ConcurrentHashMap<>();
    private final Map<String, Long> forgotten = new ConcurrentHashMap<>();
    private final Map<String, Running> running = new HashMap<>();
    private final Map<String, String> unacked = new HashMap<>();
    private final CountDownLatch finished = new CountDownLatch(1);
    private volatile boolean stopping;
    private volatile Exception fatal;
    private volatile boolean failed;

    /**
     * dsn: a JDBC URL or a libpq {@code postgresql://} URL (Session.jdbcUrl); the worker opens
     * two connections.  owner: this worker's name, unique in the fleet.
     */
    public Worker(String dsn, String appName, String streamName, String owner,
                  Supplier<ShardRecordProcessor> factory, RecordSource source, Options options) {
        this.app = appName;
        this.stream = streamName;
        this.owner = owner;
        this.factory = factory;
        this.source = source;
        this.opt = options == null ? new Options() : options;
        this.durationNanos = nanos(opt.leaseDuration);
        this.marginNanos = nanos(opt.margin == null ? opt.leaseDuration / 5 : opt.margin);
        this.balanceNanos = nanos(opt.balanceEvery == null ? opt.leaseDuration / 3 : opt.balanceEvery);
        this.interval = Math.round(opt.leaseDuration * 1000) + " milliseconds";
        this.journal = new Journal(opt.journal, owner);
        this.db = new Session(dsn, owner, null);
        this.renewDb = new Session(dsn, owner + " renewer", null);
    }

    private static long nanos(double seconds) {
        return Math.round(seconds * 1e9);
    }

    /** Wall-clock seconds of a System.nanoTime() reading. */
    private static double wall(long mono) {
        return Journal.wallNow() - (System.nanoTime() - mono) / 1e9;
    }

    /** Asks run() to finish: processors get shutdownRequested, every lease is released. */
    public void stop() {
        stopping = true;
    }

    // -- the renewer ------------------------------------------------------------

    void renewOnce() throws SQLException {
        long sent = System.nanoTime();
        List<Object[]> rows;
        try {
            rows = renewDb.call(RENEW, new Object[] {app, stream, owner, interval}, true, 0);
        } catch (Session.CallFailed e) {
            LOG.warning("renewal failed: " + e.getMessage());
            journal.write("renew_failed", "error", e.getMessage());
            return;
        }
        Map<String, Long> acked = new TreeMap<>();
        synchronized (held) {
            java.util.Set<String> seen = new java.util.HashSet<>();
            for (Object[] row : rows) {
                String shard = (String) row[0];
                long epoch = ((Number) row[2]).longValue();
                seen.add(shard);
                Lease lease = held.get(shard);
                Long dropped = forgotten.get(shard);
                if ((dropped != null && dropped - sent > 0) || (lease != null && lease.learned - sent > 0)) {
                    continue;
                }
                if (lease == null || lease.epoch != epoch) {
                    LOG.info(lease == null ? "adopted lease " + shard + " at epoch " + epoch + " (renewal)"
                                           : "lease " + shard + " is now at epoch " + epoch);
                    lease = new Lease(epoch, sent, System.nanoTime());
                    held.put(shard, lease);
                }
                lease.sent = sent;
                lease.handoffTo = (String) row[1];
                acked.put(shard, epoch);
            }
            for (Map.Entry<String, Lease> e : held.entrySet()) {
                if (!seen.contains(e.getKey()) && e.getValue().learned - sent < 0) {
                    e.getValue().lost = true;
                }
            }
        }
        journal.write("renewed", "sent", wall(sent), "leases", acked);
    }

    private void renewer() {
        long every = durationNanos / 3;
        while (!stopping) {
            try {
                Thread.sleep(every / 1_000_000, (int) (every % 1_000_000));
            } catch (InterruptedException e) {
                return;
            }
            if (stopping) {
                return;
            }
            try {
                renewOnce();
            } catch (SQLException | RuntimeException e) {
                fail(e);
                return;
            }
        }
    }

    private void fail(Exception e) {
        if (fatal == null) {
            fatal = e;
        }
        stopping = true;
    }

    // -- the processing loop --------------------------------------------------------

    void balance() throws SQLException {
        long sent = System.nanoTime();
        List<Object[]> rows;
        try {
            rows = db.call(TAKE, new Object[] {app, stream, owner, interval, opt.maxSteal}, true, 0);
        } catch (Session.CallFailed e) {
            LOG.warning("take_leases failed: " + e.getMessage());
            journal.write("take_failed", "error", e.getMessage());
            return;
        }
        long learned = System.nanoTime();
        for (Object[] row : rows) {
            String shard = (String) row[0];
            if ("taken".equals(row[1])) {
                long epoch = ((Number) row[2]).longValue();
                held.put(shard, new Lease(epoch, sent, learned));
                LOG.info("took lease " + shard + " at epoch " + epoch);
                journal.write("taken", "shard", shard, "epoch", epoch, "sent", wall(sent));
            } else {
                LOG.fine(row[1] + " " + shard);
            }
        }
    }

    /** lease.sync_shards with what the lister says; logs what it created and what is unlisted. */
    void syncShards() throws Exception {
        Map<String, List<String>> shards = opt.shardLister.listShards();
        String[] ids = shards.keySet().toArray(new String[0]);
        int k = 0;
        for (List<String> p : shards.values()) {
            k = Math.max(k, p == null ? 0 : p.size());
        }
        Object parents;
        if (k <= 1) {
            String[] one = new String[ids.length];
            for (int i = 0; i < ids.length; i++) {
                List<String> p = shards.get(ids[i]);
                one[i] = p == null || p.isEmpty() ? null : p.get(0);
            }
            parents = one;
        } else {
            String[][] many = new String[ids.length][k];
            for (int i = 0; i < ids.length; i++) {
                List<String> p = shards.get(ids[i]);
                for (int j = 0; p != null && j < p.size(); j++) {
                    many[i][j] = p.get(j);
                }
            }
            parents = many;
        }
        List<Object[]> rows;
        try {
            rows = db.call(SYNC, new Object[] {app, stream, ids, parents}, true, 0);
        } catch (Session.CallFailed e) {
            LOG.warning("sync_shards failed: " + e.getMessage());
            journal.write("sync_failed", "error", e.getMessage());
            return;
        }
        List<String> created = new ArrayList<>();
        List<String> unlisted = new ArrayList<>();
        for (Object[] row : rows) {
            ("created".equals(row[1]) ? created : unlisted).add((String) row[0]);
        }
        if (!created.isEmpty()) {
            LOG.info("sync_shards created leases " + created);
        }
        if (!unlisted.isEmpty()) {
            LOG.warning("sync_shards: leases not listed by the stream and not ended: " + unlisted);
        }
        journal.write("synced", "shards", ids.length, "created", String.join(",", created),
                      "unlisted", String.join(",", unlisted));
    }

    private void drop(String shard, String reason, String why) {
        drop(shard, reason, why, false);
    }

    /** Ends the shard's processor (leaseLost, unless it ended); forgets the lease unless keepLease. */
    private void drop(String shard, String reason, String why, boolean keepLease) {
        Running r = running.remove(shard);
        unacked.remove(shard);
        if (!keepLease) {
            synchronized (held) {            // not between the renewer's reading and its updating
                forgotten.put(shard, System.nanoTime());
                held.remove(shard);
            }
        }
        LOG.log(reason.equals(LEASE_LOST) ? Level.WARNING : Level.INFO, shard + ": " + reason + " (" + why + ")");
        journal.write("shutdown", "shard", shard, "reason", reason, "why", why);
        if (r != null && !reason.equals(SHARD_ENDED)) {
            r.processor.leaseLost();
        }
    }

    /** Starts a processor from the checkpoint in my_leases; false when my_leases disagrees. */
    private boolean start(String shard, long epoch) throws SQLException, Session.CallFailed {
        for (Object[] row : db.call(MINE, new Object[] {app, stream, owner}, true, 0)) {
            if (shard.equals(row[0]) && row[3] == null && ((Number) row[1]).longValue() == epoch) {
                String checkpoint = (String) row[2];
                if (SHARD_END.equals(checkpoint)) {
                    return false;
                }
                ShardRecordProcessor p = factory.get();
                p.initialize(shard, checkpoint);
                running.put(shard, new Running(epoch, p, checkpoint));
                journal.write("initialized", "shard", shard, "epoch", epoch, "checkpoint", checkpoint);
                return true;
            }
        }
        return false;
    }

    /** The checkpointer handed to a callback: fenced writes for one shard at one epoch. */
    private final class ShardCheckpointer implements Checkpointer {
        final String shard;
        final Lease lease;
        final Running run;
        final long deadline;
        final boolean ending;
        boolean refused;
        boolean closed;
        SQLException fatalError;

        ShardCheckpointer(String shard, Lease lease, Running run, long deadline, boolean ending) {
            this.shard = shard;
            this.lease = lease;
            this.run = run;
            this.deadline = deadline;
            this.ending = ending;
        }

        @Override
        public void checkpoint() throws LeaseLostException {
            checkpoint(run.position);
        }

        @Override
        public void checkpoint(String sequenceNumber) throws LeaseLostException {
            if (refused || fatalError != null) {
                throw new LeaseLostException("lease " + shard + " is lost");
            }
            try {
                if (ending) {
                    close();
                } else if (!sequenceNumber.equals(run.acked) && !write(shard, lease, run, sequenceNumber, deadline)) {
                    refused = true;
                }
            } catch (SQLException e) {
                fatalError = e;
            }
            if (refused || fatalError != null) {
                throw new LeaseLostException("lease " + shard + " is lost: the checkpoint was refused");
            }
        }

        private void close() throws SQLException {
            try {
                boolean ok = (Boolean) db.one(CLOSE, new Object[] {app, stream, shard, owner}, true, 0);
                journal.write("closed", "shard", shard, "ok", ok);
                closed = ok;
                refused = !ok;
            } catch (Session.CallFailed e) {
                LOG.warning(shard + ": close_shard failed, tried again: " + e.getMessage());
                journal.write("call_failed", "shard", shard, "error", e.getMessage());
            }
        }

        /** After the callback: a fatal error it caught is the worker's. */
        void rethrow() throws SQLException {
            if (fatalError != null) {
                throw fatalError;
            }
        }
    }

    /** Writes a fenced checkpoint, repeating no later than the local deadline; false when refused. */
    private boolean write(String shard, Lease lease, Running run, String checkpoint, long deadline)
        throws SQLException {
        boolean ok;
        try {
            ok = (Boolean) db.one(CHECKPOINT, new Object[] {app, stream, shard, owner, checkpoint, lease.epoch},
                                  true, deadline);
        } catch (Session.CallFailed e) {
            // it may have committed, but it is not acknowledged: written again before a release
            unacked.put(shard, checkpoint);
            LOG.warning(shard + ": checkpoint " + checkpoint + " failed: " + e.getMessage());
            journal.write("checkpoint_failed", "shard", shard, "epoch", lease.epoch, "checkpoint", checkpoint,
                          "error", e.getMessage());
            return true;
        }
        unacked.remove(shard);
        journal.write("checkpoint", "shard", shard, "epoch", lease.epoch, "checkpoint", checkpoint, "ok", ok);
        if (ok) {
            run.acked = checkpoint;
        }
        return ok;
    }

    /** One step for one shard; true when a batch was processed. */
    private boolean work(String shard, Lease lease) throws Exception {
        Running run = running.get(shard);
        if (run != null && run.epoch != lease.epoch) {
            // it changed hands meanwhile (e.g. expired and taken again): restart from the checkpoint
            drop(shard, LEASE_LOST, "epoch changed", true);
            return false;
        }
        if (lease.lost) {
            drop(shard, LEASE_LOST, "not renewed");
            return false;
        }
        long deadline = lease.sent + durationNanos - marginNanos;
        if (System.nanoTime() - deadline >= 0) {
            drop(shard, LEASE_LOST, "local deadline");
            return false;
        }
        if (run == null) {
            if (!start(shard, lease.epoch)) {
                drop(shard, LEASE_LOST, "not in my_leases");
                return false;
            }
            run = running.get(shard);
        }
        String to = lease.handoffTo;
        if (to != null) {
            return handOff(shard, lease, run, deadline, to);
        }
        List<StreamRecord> records = source.getRecords(shard, run.position);
        if (System.nanoTime() - deadline >= 0) {
            // the deadline passed since the check above (a slow my_leases or getRecords): no batch starts
            drop(shard, LEASE_LOST, "local deadline");
            return false;
        }
        if (records == null) {
            ShardCheckpointer cp = new ShardCheckpointer(shard, lease, run, deadline, true);
            run.processor.shardEnded(cp);
            cp.rethrow();
            if (cp.closed) {
                drop(shard, SHARD_ENDED, "closed");
            } else if (cp.refused) {
                drop(shard, LEASE_LOST, "close refused");
            } else {
                LOG.warning(shard + ": shardEnded returned without a checkpoint; the shard stays open");
            }
            return true;
        }
        if (records.isEmpty()) {
            return false;
        }
        ShardCheckpointer cp = new ShardCheckpointer(shard, lease, run, deadline, false);
        String last = records.get(records.size() - 1).sequenceNumber();
        String before = run.position;
        run.position = last;
        try {
            run.processor.processRecords(records, cp);
        } catch (RuntimeException e) {
            run.position = before;
            throw e;
        }
        cp.rethrow();
        if (cp.refused) {
            drop(shard, LEASE_LOST, "checkpoint refused");
        }
        return true;
    }

    /** A graceful handoff: shutdownRequested, the unacknowledged checkpoint, release, leaseLost. */
    private boolean handOff(String shard, Lease lease, Running run, long deadline, String to) throws Exception {
        if (!run.shutdownRequested) {
            run.shutdownRequested = true;
            ShardCheckpointer cp = new ShardCheckpointer(shard, lease, run, deadline, false);
            run.processor.shutdownRequested(cp);
            cp.rethrow();
            if (cp.refused) {
                drop(shard, LEASE_LOST, "checkpoint refused");
                return false;
            }
        }
        if (unacked.containsKey(shard)) {
            if (!write(shard, lease, run, unacked.get(shard), deadline)) {
                drop(shard, LEASE_LOST, "checkpoint refused");
                return false;
            }
            if (unacked.containsKey(shard)) {
                return false;                    // failed again: tried next round, until the local deadline
            }
        }
        boolean ok = (Boolean) db.one(RELEASE, new Object[] {app, stream, shard, owner}, true, 0);
        journal.write("released", "shard", shard, "ok", ok, "to", to);
        drop(shard, HANDED_OFF, "handoff to " + to);
        return false;
    }

    /**
     * Runs until stop(); then asks every processor to shut down and releases every lease.
     * Throws what the rules call fatal (an SQLException: authentication, privileges, a bug),
     * and whatever a processor throws, after closing its connections.
     */
    public void run() throws Exception {
        Thread renewer = new Thread(this::renewer, owner + " renewer");
        renewer.setDaemon(true);
        try {
            journal.write("started", "lease_duration", opt.leaseDuration, "margin", marginNanos / 1e9);
            LOG.info(owner + " started on " + app + "/" + stream);
            renewer.start();
            long nextBalance = System.nanoTime();
            long nextSync = nextBalance;
            while (!stopping) {
                if (opt.shardLister != null && System.nanoTime() - nextSync >= 0) {
                    syncShards();
                    nextSync = System.nanoTime() + nanos(opt.syncEvery);
                }
                if (System.nanoTime() - nextBalance >= 0) {
                    balance();
                    nextBalance = System.nanoTime() + balanceNanos;
                }
                boolean busy = false;
                for (String shard : new TreeSet<>(held.keySet())) {
                    Lease lease = held.get(shard);
                    if (stopping || lease == null) {
                        break;
                    }
                    try {
                        busy = work(shard, lease) || busy;
                    } catch (Session.CallFailed e) {
                        LOG.warning(shard + ": " + e.getMessage());
                        journal.write("call_failed", "shard", shard, "error", e.getMessage());
                    }
                }
                Thread.sleep(busy ? 0 : 20);
            }
            renewer.interrupt();
            renewer.join();
            if (fatal != null) {
                throw fatal;
            }
            releaseAll();
        } catch (Exception e) {
            failed = true;
            stopping = true;
            renewer.interrupt();
            LOG.log(Level.SEVERE, owner + " failed: "
                    + (e instanceof SQLException ? Session.describe((SQLException) e) : e.toString()), e);
            throw e;
        } finally {
            db.close();
            renewDb.close();
            finished.countDown();
        }
    }

    /** The stop: shutdownRequested, the unacknowledged checkpoint, release, leaseLost, for each lease. */
    private void releaseAll() throws Exception {
        List<String> shards = new ArrayList<>(new TreeSet<>(held.keySet()));
        journal.write("stopping", "held", String.join(",", shards));
        for (String shard : shards) {
            Lease lease = held.get(shard);
            long deadline = lease.sent + durationNanos - marginNanos;
            Running run = running.get(shard);
            try {
                if (run != null && System.nanoTime() - deadline < 0) {
                    if (!run.shutdownRequested) {
                        run.shutdownRequested = true;
                        ShardCheckpointer cp = new ShardCheckpointer(shard, lease, run, deadline, false);
                        run.processor.shutdownRequested(cp);
                        cp.rethrow();
                    }
                    if (unacked.containsKey(shard)) {
                        write(shard, lease, run, unacked.get(shard), deadline);     // before the release
                    }
                }
                boolean ok = (Boolean) db.one(RELEASE, new Object[] {app, stream, shard, owner}, true, 0);
                journal.write("released", "shard", shard, "ok", ok);
            } catch (Session.CallFailed e) {
                LOG.warning(shard + ": " + e.getMessage());
                journal.write("call_failed", "shard", shard, "error", e.getMessage());
            }
            drop(shard, WORKER_STOPPED, "stopped");
        }
        LOG.info(owner + " stopped; its leases are released");
    }

    /**
     * Runs until the JVM is asked to stop (SIGTERM, SIGINT): then stops gracefully, releases
     * every lease and exits 0 (1 when the run failed).  Returns only by throwing, when the
     * run fails on its own.
     */
    public void runUntilTerminated() throws Exception {
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            stop();
            try {
                finished.await();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            Runtime.getRuntime().halt(failed ? 1 : 0);
        }, owner + " stop"));
        run();
    }
}
