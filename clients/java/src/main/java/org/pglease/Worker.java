package org.pglease;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Properties;
import java.util.Set;
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
 * <p>The loop of the Python, Node and Elixir clients (clients/python/pg_lease/worker.py),
 * following docs/client-rules.md: a renewal thread on its own connection that renews by
 * {@code lease.heartbeat} and lists with {@code renew_leases} only when the heartbeat
 * says the list moved (rule 5), a processing thread on another, the local deadline,
 * graceful handoff, and every checkpoint fenced with the lease_epoch learned from
 * take_leases or renew_leases; the checkpoints that become ready within one short tick
 * go together in one {@code lease.update_checkpoints} call.  With KCL's processor
 * callbacks (ShardRecordProcessor) and, optionally, KCL's shard syncer (lease.sync_shards
 * on a schedule), the fast-failover mode (rule 6) and the transactional mode
 * (docs/exactly-once.md).
 */
public final class Worker {
    static final Logger LOG = Session.LOG;

    public static final String SHARD_END = "SHARD_END";
    public static final String LEASE_LOST = "lease lost";
    public static final String HANDED_OFF = "handed off";
    public static final String SHARD_ENDED = "shard ended";
    public static final String WORKER_STOPPED = "worker stopped";

    static final String TAKE = "SELECT shard_id, action, lease_epoch"
        + " FROM lease.take_leases(?, ?, ?, ?::interval, NULL, ?, renew_every => ?::interval)";
    static final String RENEW =
        "SELECT shard_id, handoff_to, lease_epoch FROM lease.renew_leases(?, ?, ?, ?::interval, ?::interval)";
    static final String HEARTBEAT =
        "SELECT leases, leases_version, handoffs_pending FROM lease.heartbeat(?, ?, ?, ?::interval, ?::interval)";
    static final String MINE = "SELECT shard_id, lease_epoch, checkpoint, handoff_from, checkpoint_sub_sequence,"
        + " pending_checkpoint FROM lease.my_leases(?, ?, ?)";
    static final String CHECKPOINT = "SELECT lease.update_checkpoint(?, ?, ?, ?, ?, ?::bigint, ?::bigint)";
    static final String CHECKPOINTS = "SELECT shard_id, ok, reason FROM lease.update_checkpoints(?, ?, ?, ?::text[],"
        + " ?::text[], ?::bigint[], ?::bigint[])";
    static final String PREPARE = "SELECT lease.prepare_checkpoint(?, ?, ?, ?, ?)";
    static final String HOLD = "SELECT lease.hold_lease(?, ?, ?, ?, ?::bigint)";
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
        Double renewEvery;               // fast failover, when set
        boolean transactional;
        double checkpointTick = 0.005;
        boolean contract = true;         // false: the negative control of rule 6 (tests only)

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

        /**
         * Fast failover (docs/client-rules.md rule 6): renews (and balances) every
         * renewEvery seconds, declares it to the server, and processes only while the last
         * acknowledged renewal was sent less than renewEvery + margin ago (the margin
         * defaults to at most renewEvery / 2; the server's lease.liveness_grace must be at
         * least the margin).  Other workers may then take this worker's leases once its
         * database session ended.
         */
        public Options fastFailover(double renewEverySeconds) {
            renewEvery = renewEverySeconds;
            return this;
        }

        /**
         * Transactional (exactly-once) mode, docs/exactly-once.md: each batch is one
         * transaction on the processing connection (Checkpointer.transaction()), with
         * lease.hold_lease and the fenced checkpoint.
         */
        public Options transactional(boolean on) {
            transactional = on;
            return this;
        }

        /**
         * Seconds within which the checkpoints that become ready go together in one
         * lease.update_checkpoints call (default 0.005); 0: each its own update_checkpoint.
         */
        public Options checkpointTick(double seconds) {
            checkpointTick = seconds;
            return this;
        }

        /** The negative control of rule 6 (tests): the fast-failover deadline is ignored. */
        Options ignoreRule6() {
            contract = false;
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
        ExtendedSequenceNumber position;   // the last record delivered (or the starting checkpoint)
        ExtendedSequenceNumber acked;      // the last checkpoint acknowledged
        String committed;                  // transactional: the checkpoint the next batch starts from
        boolean shutdownRequested;

        Running(long epoch, ShardRecordProcessor processor, ExtendedSequenceNumber checkpoint) {
            this.epoch = epoch;
            this.processor = processor;
            this.position = checkpoint;
            this.acked = checkpoint;
            this.committed = checkpoint.sequenceNumber();
        }
    }

    /** A checkpoint waiting for the tick's update_checkpoints call. */
    private record Queued(String shard, Lease lease, Running run, ExtendedSequenceNumber position, long deadline) {
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
    private final long renewEveryNanos;      // 0: not in fast-failover mode
    private final long tickNanos;
    private final String interval;
    private final String every;              // renew_every as an interval, or null
    private final Journal journal;
    private final Session db;
    private final Session renewDb;
    private final Map<String, Lease> held = new ConcurrentHashMap<>();    // its monitor: the renewer's lock
    private final Map<String, Long> forgotten = new ConcurrentHashMap<>();
    private final Map<String, Running> running = new HashMap<>();
    private final Map<String, ExtendedSequenceNumber> unacked = new HashMap<>();
    private final Map<String, Queued> queued = new LinkedHashMap<>();
    private Long queuedSince;                // when the first queued checkpoint of the tick was queued
    // the last renew_leases list {shard: epoch} and the leases_version of the heartbeat
    // sent before it; null: list again at the next tick (rule 5).  Under held's monitor.
    private Map<String, Long> listed;
    private Long listedVersion;
    private Long listedStaleSince;           // when a take last answered
    private Long contactSent;                // when the last acknowledged renewal or round was sent
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
        double margin = opt.margin == null ? opt.leaseDuration / 5 : opt.margin;
        if (opt.renewEvery != null && opt.margin == null) {
            margin = Math.min(margin, opt.renewEvery / 2);
        }
        this.marginNanos = nanos(margin);
        this.renewEveryNanos = opt.renewEvery == null ? 0 : nanos(opt.renewEvery);
        double balance = opt.balanceEvery != null ? opt.balanceEvery
            : opt.renewEvery != null ? opt.renewEvery : opt.leaseDuration / 3;
        this.balanceNanos = nanos(balance);
        this.tickNanos = nanos(opt.checkpointTick);
        this.interval = Math.round(opt.leaseDuration * 1000) + " milliseconds";
        this.every = opt.renewEvery == null ? null : Math.round(opt.renewEvery * 1000) + " milliseconds";
        this.journal = new Journal(opt.journal, owner);
        Properties processing = new Properties();
        List<String> renewOptions = new ArrayList<>();
        Properties renewing = new Properties();
        if (opt.renewEvery != null) {
            // a call that gets no answer (a proxy that lost its server, a half-open
            // connection) has its connection dropped: here after a fifth of the lease
            // duration, on the renewer after twice renew_every
            int call = (int) Math.max(1, Math.ceil(opt.leaseDuration / 5));
            processing.setProperty("connectTimeout", String.valueOf(call));
            processing.setProperty("socketTimeout", String.valueOf(call));
            // a renewal that hangs gives up within renew_every; rule 6 stops processing meanwhile
            renewOptions.add("-c statement_timeout=" + Math.round(opt.renewEvery * 1000));
            renewing.setProperty("connectTimeout", String.valueOf((int) Math.max(1, Math.ceil(opt.renewEvery))));
            renewing.setProperty("socketTimeout", String.valueOf((int) Math.max(1, Math.ceil(2 * opt.renewEvery))));
        }
        if (opt.transactional) {
            // a renewal waits behind a batch transaction holding one of its leases for at
            // most a tenth of the lease duration (55P03: repeated)
            renewOptions.add("-c lock_timeout=" + Math.round(opt.leaseDuration * 100));
        }
        this.db = new Session(dsn, owner, null, processing);
        this.renewDb = new Session(dsn, owner + " renewer", renewOptions.isEmpty() ? null : String.join(" ", renewOptions),
                                   renewing);
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

    /** Under held's monitor: an acknowledged call sent at sent recorded this session. */
    private void contact(long sent) {
        if (contactSent == null || sent - contactSent > 0) {
            contactSent = sent;
        }
    }

    /**
     * One renewal tick (docs/client-rules.md rule 5): a heartbeat; while its leases_version
     * is the one remembered with the last list, no handoff is pending and it counts as
     * many leases as the list has, it renews every lease on that list at the epoch listed;
     * otherwise renew_leases lists them again.
     */
    void renewOnce() throws SQLException {
        long sent = System.nanoTime();
        Object[] beat;
        try {
            beat = renewDb.call(HEARTBEAT, new Object[] {app, stream, owner, interval, every}, true, 0).get(0);
        } catch (Session.CallFailed e) {
            LOG.warning(owner + ": heartbeat failed: " + e.getMessage());
            journal.write("renew_failed", "error", e.getMessage());     // not acknowledged: no deadline moves
            return;
        }
        long count = ((Number) beat[0]).longValue();
        Long version = beat[1] == null ? null : ((Number) beat[1]).longValue();
        long pending = ((Number) beat[2]).longValue();
        synchronized (held) {
            contact(sent);
            if (listed != null && version != null && version.equals(listedVersion) && pending == 0
                && count == listed.size()) {
                List<Object[]> rows = new ArrayList<>();
                for (Map.Entry<String, Long> e : listed.entrySet()) {
                    rows.add(new Object[] {e.getKey(), null, e.getValue()});
                }
                Map<String, Long> acked = renewed(sent, rows);
                // under the lock: nothing the processing loop does on this answer precedes its entry
                journal.write("renewed", "sent", wall(sent), "leases", acked, "via", "heartbeat");
                return;
            }
            listed = null;     // stale until a list succeeds (a take sets it stale too)
        }
        list(version);
    }

    /** renew_leases: the truth about what the worker holds, remembered with the heartbeat's version. */
    private void list(Long version) throws SQLException {
        long sent = System.nanoTime();
        List<Object[]> rows;
        try {
            rows = renewDb.call(RENEW, new Object[] {app, stream, owner, interval, every}, true, 0);
        } catch (Session.CallFailed e) {
            LOG.warning(owner + ": renewal failed: " + e.getMessage());
            journal.write("renew_failed", "error", e.getMessage());
            return;
        }
        synchronized (held) {
            contact(sent);
            Map<String, Long> acked = renewed(sent, rows);
            if (listedStaleSince == null || listedStaleSince - sent < 0) {    // no take answered since it was sent
                Map<String, Long> list = new TreeMap<>();
                for (Object[] row : rows) {
                    list.put((String) row[0], ((Number) row[2]).longValue());
                }
                listed = list;
                listedVersion = version;
            }
            journal.write("renewed", "sent", wall(sent), "leases", acked, "via", "list");
        }
    }

    /**
     * Under held's monitor: applies an acknowledged renewal sent at sent that renewed rows
     * (shard, handoff_to, epoch): the worker holds those and no others (but for what it
     * learned since).  Returns {shard: epoch}.
     */
    private Map<String, Long> renewed(long sent, List<Object[]> rows) {
        Map<String, Long> acked = new TreeMap<>();
        Set<String> seen = new HashSet<>();
        for (Object[] row : rows) {
            String shard = (String) row[0];
            long epoch = ((Number) row[2]).longValue();
            seen.add(shard);
            Lease lease = held.get(shard);
            Long dropped = forgotten.get(shard);
            if ((dropped != null && dropped - sent > 0) || (lease != null && lease.learned - sent > 0)) {
                continue;        // this answer predates what we know now
            }
            if (lease == null || lease.epoch != epoch) {
                LOG.fine(owner + ": " + (lease == null ? "adopted " + shard + " at epoch " + epoch + " (renewal)"
                                         : shard + " is now at epoch " + epoch));
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
        return acked;
    }

    private void renewer() {
        long period = renewEveryNanos > 0 ? renewEveryNanos : durationNanos / 3;
        while (!stopping) {
            try {
                Thread.sleep(period / 1_000_000, (int) (period % 1_000_000));
            } catch (InterruptedException e) {
                return;
            }
            if (stopping) {
                return;
            }
            try {
                renewOnce();
            } catch (SQLException | RuntimeException e) {
                LOG.severe(owner + ": renewals stopped, stopping the worker: " + e);
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
            rows = db.call(TAKE, new Object[] {app, stream, owner, interval, opt.maxSteal, every}, true, 0);
        } catch (Session.CallFailed e) {
            LOG.warning(owner + ": take_leases failed: " + e.getMessage());
            journal.write("take_failed", "error", e.getMessage());
            return;
        }
        long learned = System.nanoTime();
        synchronized (held) {
            contact(sent);        // the round recorded the session too
            for (Object[] row : rows) {
                String shard = (String) row[0];
                if ("taken".equals(row[1])) {
                    long epoch = ((Number) row[2]).longValue();
                    listed = null;       // the renewer lists again before it trusts a heartbeat (rule 5)
                    listedStaleSince = learned;
                    held.put(shard, new Lease(epoch, sent, learned));
                    LOG.info(owner + ": took " + shard + " (epoch " + epoch + ")");
                    journal.write("taken", "shard", shard, "epoch", epoch, "sent", wall(sent));
                } else {
                    LOG.fine(owner + ": asked for " + shard + " (" + row[1] + ")");
                }
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
        queued.remove(shard);
        if (!keepLease) {
            synchronized (held) {            // not between the renewer's reading and its updating
                forgotten.put(shard, System.nanoTime());
                held.remove(shard);
            }
        }
        // a lost lease at WARNING; the stop's own at FINE ("released" says it at INFO, as Python's)
        LOG.log(reason.equals(LEASE_LOST) ? Level.WARNING : reason.equals(WORKER_STOPPED) ? Level.FINE : Level.INFO,
                owner + ": stopped processing " + shard + ": " + reason + " (" + why + ")");
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
                long sub = row[4] == null ? 0 : ((Number) row[4]).longValue();
                String pending = (String) row[5];
                ExtendedSequenceNumber at = new ExtendedSequenceNumber(checkpoint, sub);
                ShardRecordProcessor p = factory.get();
                p.initialize(shard, at, pending == null ? null : new ExtendedSequenceNumber(pending));
                running.put(shard, new Running(epoch, p, at));
                journal.write("initialized", "shard", shard, "epoch", epoch, "checkpoint", checkpoint, "sub", sub,
                              "pending", pending);
                return true;
            }
        }
        return false;
    }

    /** The local deadline (rule 3); in fast-failover mode also rule 6's. */
    private long deadline(Lease lease) {
        synchronized (held) {
            long d = lease.sent + durationNanos - marginNanos;
            if (renewEveryNanos > 0 && opt.contract) {
                long contact = contactSent != null ? contactSent : lease.sent;
                long ff = contact + renewEveryNanos + marginNanos;
                if (ff - d < 0) {
                    d = ff;
                }
            }
            return d;
        }
    }

    /** True when the lease may no longer be processed: its deadline passed, or a renewal said it is not held. */
    private boolean stale(Lease lease) {
        return lease.lost || System.nanoTime() - deadline(lease) >= 0;
    }

    /** The checkpointer handed to a callback: fenced writes for one shard at one epoch. */
    private final class ShardCheckpointer implements Checkpointer {
        final String shard;
        final Lease lease;
        final Running run;
        final long deadline;
        final boolean ending;
        final boolean batched;
        final Connection tx;             // transactional: the batch's transaction
        ExtendedSequenceNumber requested;   // transactional: the checkpoint asked for
        boolean refused;
        boolean closed;
        SQLException fatalError;

        ShardCheckpointer(String shard, Lease lease, Running run, long deadline, boolean ending, boolean batched,
                          Connection tx) {
            this.shard = shard;
            this.lease = lease;
            this.run = run;
            this.deadline = deadline;
            this.ending = ending;
            this.batched = batched;
            this.tx = tx;
        }

        @Override
        public void checkpoint() throws LeaseLostException {
            checkpoint(run.position.sequenceNumber(), run.position.subSequenceNumber());
        }

        @Override
        public void checkpoint(String sequenceNumber) throws LeaseLostException {
            checkpoint(sequenceNumber, 0);
        }

        @Override
        public void checkpoint(String sequenceNumber, long subSequenceNumber) throws LeaseLostException {
            if (refused || fatalError != null) {
                throw new LeaseLostException("lease " + shard + " is lost");
            }
            ExtendedSequenceNumber at = new ExtendedSequenceNumber(sequenceNumber, subSequenceNumber);
            try {
                if (ending) {
                    close();
                } else if (tx != null) {
                    requested = at;         // written in the batch's transaction after processRecords
                } else if (at.equals(run.acked)) {
                    return;
                } else if (batched && tickNanos > 0) {
                    queue(new Queued(shard, lease, run, at, deadline));
                } else if (!write(shard, lease, run, at, deadline)) {
                    refused = true;
                }
            } catch (SQLException e) {
                fatalError = e;
            }
            if (refused || fatalError != null) {
                throw new LeaseLostException("lease " + shard + " is lost: the checkpoint was refused");
            }
        }

        @Override
        public PreparedCheckpointer prepareCheckpoint() throws LeaseLostException {
            return prepareCheckpoint(run.position.sequenceNumber());
        }

        @Override
        public PreparedCheckpointer prepareCheckpoint(String sequenceNumber) throws LeaseLostException {
            boolean ok = false;
            if (!stale(lease)) {
                try {
                    Object[] args = {app, stream, shard, owner, sequenceNumber};
                    ok = tx != null ? (Boolean) single(tx, PREPARE, args) : (Boolean) db.one(PREPARE, args, true, deadline);
                } catch (SQLException e) {
                    fatalError = e;
                } catch (Session.CallFailed e) {
                    LOG.warning(owner + ": " + shard + ": prepare_checkpoint failed: " + e.getMessage());
                }
            }
            journal.write("prepared", "shard", shard, "epoch", lease.epoch, "pending", sequenceNumber, "ok", ok);
            if (!ok) {
                throw new LeaseLostException("lease " + shard + ": the pending checkpoint was not recorded");
            }
            return new PreparedCheckpointer() {
                @Override
                public String pendingCheckpoint() {
                    return sequenceNumber;
                }

                @Override
                public void checkpoint() throws LeaseLostException {
                    ShardCheckpointer.this.checkpoint(sequenceNumber, 0);
                }
            };
        }

        @Override
        public Connection transaction() {
            if (tx == null) {
                return Checkpointer.super.transaction();
            }
            return tx;
        }

        private void close() throws SQLException {
            try {
                boolean ok = (Boolean) db.one(CLOSE, new Object[] {app, stream, shard, owner}, true, 0);
                journal.write("closed", "shard", shard, "ok", ok);
                closed = ok;
                refused = !ok;
            } catch (Session.CallFailed e) {
                LOG.warning(owner + ": " + shard + ": close_shard failed, tried again: " + e.getMessage());
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

    /** The first column of the only row of a statement on the caller's connection (a transaction). */
    private static Object single(Connection c, String sql, Object[] params) throws SQLException {
        try (PreparedStatement ps = c.prepareStatement(sql)) {
            for (int i = 0; i < params.length; i++) {
                ps.setObject(i + 1, params[i]);
            }
            try (ResultSet rs = ps.executeQuery()) {
                rs.next();
                return rs.getObject(1);
            }
        }
    }

    /**
     * Writes a fenced checkpoint now, repeating no later than the local deadline; false when
     * refused.  None is sent past the deadline (a pause since the batch began): it stays
     * unacknowledged.
     */
    private boolean write(String shard, Lease lease, Running run, ExtendedSequenceNumber at, long deadline)
        throws SQLException {
        if (stale(lease)) {
            unacked.put(shard, at);
            journal.write("checkpoint_skipped", "shard", shard, "epoch", lease.epoch, "checkpoint", at.sequenceNumber(),
                          "sub", at.subSequenceNumber());
            return true;
        }
        long sent = System.nanoTime();
        boolean ok;
        try {
            ok = (Boolean) db.one(CHECKPOINT, new Object[] {app, stream, shard, owner, at.sequenceNumber(),
                                                            at.subSequenceNumber(), lease.epoch}, true, deadline);
        } catch (Session.CallFailed e) {
            // it may have committed, but it is not acknowledged: written again before a release
            unacked.put(shard, at);
            LOG.warning(owner + ": " + shard + ": checkpoint " + at.sequenceNumber() + " failed: " + e.getMessage());
            journal.write("checkpoint_failed", "shard", shard, "epoch", lease.epoch, "checkpoint", at.sequenceNumber(),
                          "sub", at.subSequenceNumber(), "error", e.getMessage(), "sent", wall(sent));
            return true;
        }
        unacked.remove(shard);
        journal.write("checkpoint", "shard", shard, "epoch", lease.epoch, "checkpoint", at.sequenceNumber(),
                      "sub", at.subSequenceNumber(), "ok", ok, "sent", wall(sent));
        if (ok) {
            run.acked = at;
        }
        return ok;
    }

    /** Queues a checkpoint for the tick's update_checkpoints call (a later one of the shard replaces it). */
    private void queue(Queued q) {
        if (queued.isEmpty()) {
            queuedSince = System.nanoTime();
        }
        queued.put(q.shard(), q);
    }

    /** Writes the queued checkpoints when the tick since the first of them has passed (or when now). */
    private void flushIfDue(boolean now) throws SQLException {
        if (!queued.isEmpty() && (now || System.nanoTime() - queuedSince >= tickNanos)) {
            flush();
        }
    }

    /**
     * The queued checkpoints in one lease.update_checkpoints call (one statement, one
     * commit).  A refused shard drops only that shard (leaseLost); a batch whose outcome
     * is unknown (the connection lost, a cancelled sync-rep wait) is resolved per shard
     * from my_leases; a batch that did not go through leaves each checkpoint
     * unacknowledged (written again before a release, or covered by the next).
     */
    private void flush() throws SQLException {
        List<Queued> send = new ArrayList<>();
        for (Queued q : queued.values()) {
            if (stale(q.lease())) {           // read again just before it is sent (rule 6)
                unacked.put(q.shard(), q.position());
                journal.write("checkpoint_skipped", "shard", q.shard(), "epoch", q.lease().epoch,
                              "checkpoint", q.position().sequenceNumber(), "sub", q.position().subSequenceNumber());
            } else {
                send.add(q);
            }
        }
        queued.clear();
        if (send.isEmpty()) {
            return;
        }
        int n = send.size();
        String[] shards = new String[n];
        String[] checkpoints = new String[n];
        Long[] subs = new Long[n];
        Long[] epochs = new Long[n];
        long until = send.get(0).deadline();
        for (int i = 0; i < n; i++) {
            Queued q = send.get(i);
            shards[i] = q.shard();
            checkpoints[i] = q.position().sequenceNumber();
            subs[i] = q.position().subSequenceNumber();
            epochs[i] = q.lease().epoch;
            if (q.deadline() - until < 0) {
                until = q.deadline();
            }
        }
        long sent = System.nanoTime();
        List<Object[]> rows;
        try {
            rows = db.call(CHECKPOINTS, new Object[] {app, stream, owner, shards, checkpoints, subs, epochs}, false, until);
        } catch (Session.Ambiguous e) {
            LOG.warning(owner + ": update_checkpoints of " + n + " shards is ambiguous, resolved from my_leases: "
                        + e.getMessage());
            resolveBatch(send, sent, e.getMessage());
            return;
        } catch (Session.CallFailed e) {
            LOG.warning(owner + ": update_checkpoints of " + n + " shards failed: " + e.getMessage());
            for (Queued q : send) {
                failedCheckpoint(q, sent, e.getMessage());
            }
            return;
        }
        Map<String, Object[]> answers = new HashMap<>();
        for (Object[] row : rows) {
            answers.put((String) row[0], row);
        }
        for (Queued q : send) {
            Object[] row = answers.get(q.shard());
            boolean ok = row != null && Boolean.TRUE.equals(row[1]);
            acknowledged(q, ok, sent, n, row == null ? "no answer" : (String) row[2]);
        }
    }

    /** A batch's answer for one shard. */
    private void acknowledged(Queued q, boolean ok, long sent, int batch, String reason) {
        journal.write("checkpoint", "shard", q.shard(), "epoch", q.lease().epoch, "checkpoint",
                      q.position().sequenceNumber(), "sub", q.position().subSequenceNumber(), "ok", ok,
                      "sent", wall(sent), "batch", batch, "reason", ok ? null : reason);
        if (ok) {
            unacked.remove(q.shard());
            q.run().acked = q.position();
        } else if (running.get(q.shard()) == q.run()) {
            drop(q.shard(), LEASE_LOST, "checkpoint refused: " + reason);
        }
    }

    private void failedCheckpoint(Queued q, long sent, String error) {
        unacked.put(q.shard(), q.position());
        journal.write("checkpoint_failed", "shard", q.shard(), "epoch", q.lease().epoch, "checkpoint",
                      q.position().sequenceNumber(), "sub", q.position().subSequenceNumber(), "error", error,
                      "sent", wall(sent));
    }

    /**
     * After an ambiguous batch: each shard's checkpoint in my_leases says whether it
     * committed (equal to what was sent, at the epoch sent) or not (then it stays
     * unacknowledged); a shard missing from my_leases, or at another epoch, is lost.
     */
    private void resolveBatch(List<Queued> send, long sent, String error) throws SQLException {
        List<Object[]> rows;
        try {
            rows = db.call(MINE, new Object[] {app, stream, owner}, true, 0);
        } catch (Session.CallFailed e) {
            for (Queued q : send) {
                failedCheckpoint(q, sent, error);
            }
            return;
        }
        Map<String, Object[]> mine = new HashMap<>();
        for (Object[] row : rows) {
            mine.put((String) row[0], row);
        }
        for (Queued q : send) {
            Object[] row = mine.get(q.shard());
            if (row == null || ((Number) row[1]).longValue() != q.lease().epoch) {
                journal.write("checkpoint_resolved", "shard", q.shard(), "epoch", q.lease().epoch, "held", false);
                if (running.get(q.shard()) == q.run()) {
                    drop(q.shard(), LEASE_LOST, "not in my_leases");
                }
                continue;
            }
            long sub = row[4] == null ? 0 : ((Number) row[4]).longValue();
            boolean committed = q.position().equals(new ExtendedSequenceNumber((String) row[2], sub));
            journal.write("checkpoint_resolved", "shard", q.shard(), "epoch", q.lease().epoch, "held", true,
                          "committed", committed);
            if (committed) {
                acknowledged(q, true, sent, send.size(), null);
            } else {
                failedCheckpoint(q, sent, error);
            }
        }
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
        long deadline = deadline(lease);
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
        List<StreamRecord> records = source.getRecords(shard, run.position.sequenceNumber(),
                                                       run.position.subSequenceNumber());
        if (stale(lease)) {
            // the deadline passed since the check above (a pause, a slow my_leases or getRecords): no batch starts
            drop(shard, LEASE_LOST, "local deadline");
            return false;
        }
        if (records == null) {
            ShardCheckpointer cp = new ShardCheckpointer(shard, lease, run, deadline, true, false, null);
            run.processor.shardEnded(cp);
            cp.rethrow();
            if (cp.closed) {
                drop(shard, SHARD_ENDED, "closed");
            } else if (cp.refused) {
                drop(shard, LEASE_LOST, "close refused");
            } else {
                LOG.warning(owner + ": " + shard + ": shardEnded returned without a checkpoint; the shard stays open");
            }
            return true;
        }
        if (records.isEmpty()) {
            return false;
        }
        if (opt.transactional) {
            return transaction(shard, lease, run, records, deadline);
        }
        ShardCheckpointer cp = new ShardCheckpointer(shard, lease, run, deadline, false, true, null);
        StreamRecord last = records.get(records.size() - 1);
        ExtendedSequenceNumber before = run.position;
        run.position = new ExtendedSequenceNumber(last.sequenceNumber(), last.subSequenceNumber());
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

    /**
     * One batch as one transaction (docs/exactly-once.md): the processor's output,
     * hold_lease, the fenced checkpoint, commit.  True when a batch committed.
     */
    private boolean transaction(String shard, Lease lease, Running run, List<StreamRecord> records, long deadline)
        throws Exception {
        Connection c;
        try {
            c = db.connect();
        } catch (SQLException e) {
            Rules.Kind kind = Session.kind(e);
            if (kind == Rules.Kind.FATAL || kind == Rules.Kind.RAISE) {
                throw e;
            }
            db.close();
            journal.write("call_failed", "shard", shard, "error", Session.describe(e));
            return false;
        }
        ShardCheckpointer cp = new ShardCheckpointer(shard, lease, run, deadline, false, false, c);
        StreamRecord last = records.get(records.size() - 1);
        ExtendedSequenceNumber before = run.position;
        ExtendedSequenceNumber tried = null;
        boolean committing = false;
        try {
            c.setAutoCommit(false);
            run.position = new ExtendedSequenceNumber(last.sequenceNumber(), last.subSequenceNumber());
            try {
                run.processor.processRecords(records, cp);
            } catch (RuntimeException e) {
                if (e.getCause() instanceof SQLException) {
                    throw (SQLException) e.getCause();     // the transaction's own error, by the rules
                }
                throw e;
            }
            cp.rethrow();
            tried = cp.requested;
            if (tried == null) {
                c.rollback();
                run.position = before;
                return false;
            }
            Object[] key = {app, stream, shard, owner};
            String heldAt = (String) single(c, HOLD, new Object[] {app, stream, shard, owner, lease.epoch});
            if (!Objects.equals(heldAt, run.committed)) {
                // a commit acknowledged to us is not there (lost in a crash with
                // synchronous_commit off, or a failover): start again from the server's
                c.rollback();
                journal.write("tx_diverged", "shard", shard, "epoch", lease.epoch, "expected", run.committed,
                              "checkpoint", heldAt);
                drop(shard, LEASE_LOST, "diverged: restarted from my_leases", true);
                return false;
            }
            boolean ok = (Boolean) single(c, CHECKPOINT, new Object[] {key[0], key[1], key[2], key[3],
                tried.sequenceNumber(), tried.subSequenceNumber(), lease.epoch});
            if (!ok) {
                c.rollback();
                journal.write("checkpoint", "shard", shard, "epoch", lease.epoch, "checkpoint", tried.sequenceNumber(),
                              "sub", tried.subSequenceNumber(), "ok", false, "tx", true);
                drop(shard, LEASE_LOST, "checkpoint refused");
                return false;
            }
            committing = true;
            c.clearWarnings();
            c.commit();
            String warning = Session.ambiguousWarning(c.getWarnings());
            if (warning != null) {
                throw new Session.Ambiguous(warning);      // committed here, perhaps only here
            }
        } catch (SQLException | Session.Ambiguous e) {
            Rules.Kind kind = e instanceof SQLException ? Session.kind((SQLException) e) : Rules.Kind.AMBIGUOUS;
            if (c.isClosed()) {
                kind = Rules.Kind.AMBIGUOUS;
            } else if (!(e instanceof Session.Ambiguous)) {
                try {
                    c.rollback();
                } catch (SQLException r) {
                    db.close();
                }
            }
            String error = e instanceof SQLException ? Session.describe((SQLException) e) : e.getMessage();
            if (kind == Rules.Kind.DROP) {
                journal.write("checkpoint", "shard", shard, "epoch", lease.epoch, "checkpoint",
                              tried == null ? null : tried.sequenceNumber(), "ok", false, "tx", true, "error", error);
                drop(shard, LEASE_LOST, "not held");
                return false;
            }
            if (kind == Rules.Kind.RAISE || kind == Rules.Kind.FATAL) {
                throw e;
            }
            db.close();
            journal.write("tx_failed", "shard", shard, "epoch", lease.epoch, "checkpoint",
                          tried == null ? null : tried.sequenceNumber(),
                          "unknown", committing && kind == Rules.Kind.AMBIGUOUS, "error", error);
            // my_leases says where it is: the next step starts a processor from there
            drop(shard, LEASE_LOST, "transaction failed: restarted from my_leases", true);
            return false;
        } catch (RuntimeException e) {            // the processor's own: roll back and raise
            try {
                c.rollback();
            } catch (SQLException r) {
                db.close();
            }
            throw e;
        } finally {
            try {
                if (!c.isClosed()) {
                    c.setAutoCommit(true);
                }
            } catch (SQLException e) {
                db.close();
            }
        }
        run.committed = tried.sequenceNumber();
        run.acked = tried;
        journal.write("checkpoint", "shard", shard, "epoch", lease.epoch, "checkpoint", tried.sequenceNumber(),
                      "sub", tried.subSequenceNumber(), "ok", true, "tx", true);
        return true;
    }

    /** A graceful handoff: shutdownRequested, the unacknowledged checkpoint, release, leaseLost. */
    private boolean handOff(String shard, Lease lease, Running run, long deadline, String to) throws Exception {
        if (queued.containsKey(shard)) {
            flushIfDue(true);
            if (running.get(shard) != run) {
                return false;
            }
        }
        if (!run.shutdownRequested) {
            run.shutdownRequested = true;
            ShardCheckpointer cp = new ShardCheckpointer(shard, lease, run, deadline, false, false, null);
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
            journal.write("started", "lease_duration", opt.leaseDuration, "margin", marginNanos / 1e9,
                          "renew_every", opt.renewEvery, "transactional", opt.transactional);
            LOG.fine(owner + ": started on " + app + "/" + stream);
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
                    if (stopping) {
                        break;
                    }
                    if (lease == null) {
                        continue;
                    }
                    try {
                        busy = work(shard, lease) || busy;
                        flushIfDue(false);
                    } catch (Session.CallFailed e) {
                        LOG.warning(owner + ": " + shard + ": " + e.getMessage());
                        journal.write("call_failed", "shard", shard, "error", e.getMessage());
                    }
                }
                flushIfDue(true);             // nothing else becomes ready in this tick
                Thread.sleep(busy ? 0 : 20);
            }
            renewer.interrupt();
            renewer.join();
            if (fatal != null) {
                throw fatal;
            }
            flushIfDue(true);
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
        LOG.fine(owner + ": stopping; releasing " + shards);
        for (String shard : shards) {
            Lease lease = held.get(shard);
            if (lease == null) {
                continue;
            }
            long deadline = deadline(lease);
            Running run = running.get(shard);
            try {
                if (run != null && System.nanoTime() - deadline < 0 && !opt.transactional) {
                    if (!run.shutdownRequested) {
                        run.shutdownRequested = true;
                        ShardCheckpointer cp = new ShardCheckpointer(shard, lease, run, deadline, false, false, null);
                        run.processor.shutdownRequested(cp);
                        cp.rethrow();
                    }
                    if (unacked.containsKey(shard)) {
                        write(shard, lease, run, unacked.get(shard), deadline);     // before the release
                    }
                }
                boolean ok = (Boolean) db.one(RELEASE, new Object[] {app, stream, shard, owner}, true, 0);
                journal.write("released", "shard", shard, "ok", ok);
                LOG.info(owner + ": released " + shard);
            } catch (Session.CallFailed e) {
                LOG.warning(owner + ": could not release " + shard + " (it expires by itself): " + e.getMessage());
                journal.write("call_failed", "shard", shard, "error", e.getMessage());
            }
            drop(shard, WORKER_STOPPED, "stopped");
        }
        LOG.fine(owner + ": stopped; its leases are released");
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
