package org.pglease;

import java.io.FileOutputStream;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.List;

/**
 * The Java worker of the clients suite's fast-failover and transactional runs
 * (test/clients/fast_failover.sh, the transactional fleet of test/clients/run.sh), as
 * test/clients/ff_worker.py and tx_worker.py are for Python:
 *
 * <pre>
 *   SuiteWorker ff DSN APP STREAM OWNER DIR LEASE_SECONDS RENEW_EVERY [nocontract]
 *   SuiteWorker tx DSN APP STREAM OWNER DIR LEASE_SECONDS
 * </pre>
 *
 * ff: the example worker's records (one JSON line per record in DIR/OWNER.records) under
 * Options.fastFailover(RENEW_EVERY); "nocontract" ignores rule 6's deadline (the negative
 * control).  tx: every record becomes a row (shard, seq, worker) of public.tx_out,
 * written in the batch's transaction with its checkpoint.  The journal goes to
 * DIR/OWNER.journal; SIGTERM stops the worker gracefully.
 */
public final class SuiteWorker {
    static final int BATCH = 5;

    private SuiteWorker() {
    }

    /**
     * Synthetic records as in ExampleWorker (WorkerTest's too): record i of a shard is i;
     * "<name>-end<N>" ends after N.  Checkpoints are opaque strings: these are decimal
     * sequence numbers of any length.
     */
    static List<StreamRecord> records(String shard, String after) {
        BigInteger first = after.equals("TRIM_HORIZON") ? BigInteger.ONE : new BigInteger(after).add(BigInteger.ONE);
        BigInteger last = first.add(BigInteger.valueOf(BATCH - 1));
        if (shard.contains("-end")) {
            BigInteger end = new BigInteger(shard.substring(shard.lastIndexOf("-end") + 4));
            if (first.compareTo(end) > 0) {
                return null;
            }
            last = last.min(end);
        }
        List<StreamRecord> out = new ArrayList<>();
        for (BigInteger i = first; i.compareTo(last) <= 0; i = i.add(BigInteger.ONE)) {
            out.add(new StreamRecord(i.toString(), null));
        }
        return out;
    }

    /** Appends each record to the records file, checkpoints each batch (in tx mode: writes rows). */
    static final class Processor implements ShardRecordProcessor {
        final FileOutputStream log;
        final String owner;
        final boolean tx;
        String shard;

        Processor(FileOutputStream log, String owner, boolean tx) {
            this.log = log;
            this.owner = owner;
            this.tx = tx;
        }

        @Override
        public void initialize(String shardId, String checkpoint) {
            shard = shardId;
        }

        @Override
        public void processRecords(List<StreamRecord> records, Checkpointer checkpointer) {
            try {
                if (tx) {
                    try (PreparedStatement ps = checkpointer.transaction().prepareStatement(
                             "INSERT INTO public.tx_out SELECT ?, s, ? FROM pg_catalog.generate_series(?, ?) AS s")) {
                        ps.setString(1, shard);
                        ps.setString(2, owner);
                        ps.setInt(3, Integer.parseInt(records.get(0).sequenceNumber()));
                        ps.setInt(4, Integer.parseInt(records.get(records.size() - 1).sequenceNumber()));
                        ps.executeUpdate();
                    }
                } else {
                    for (StreamRecord r : records) {
                        String line = String.format("{\"w\": \"%s\", \"shard\": \"%s\", \"seq\": %s, \"t\": %.3f}%n",
                            owner, shard, r.sequenceNumber(), System.currentTimeMillis() / 1000.0);
                        log.write(line.getBytes(StandardCharsets.UTF_8));
                    }
                    Thread.sleep(10);
                }
                checkpointer.checkpoint();
            } catch (SQLException e) {
                throw new IllegalStateException(e);     // the transaction's: the worker's rules handle it
            } catch (java.io.IOException e) {
                throw new java.io.UncheckedIOException(e);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            } catch (LeaseLostException e) {
                // leaseLost() follows
            }
        }

        @Override
        public void leaseLost() {
        }

        @Override
        public void shardEnded(Checkpointer checkpointer) {
            try {
                checkpointer.checkpoint();
            } catch (LeaseLostException e) {
                // leaseLost() follows
            }
        }

        @Override
        public void shutdownRequested(Checkpointer checkpointer) {
            try {
                checkpointer.checkpoint();
            } catch (LeaseLostException e) {
                // leaseLost() follows
            }
        }
    }

    public static void main(String[] args) throws Exception {
        boolean tx = args[0].equals("tx");
        String owner = args[4];
        FileOutputStream log = new FileOutputStream(Path.of(args[5], owner + ".records").toFile(), true);
        Worker.Options options = new Worker.Options().leaseDuration(Double.parseDouble(args[6])).maxSteal(2)
            .journal(Path.of(args[5], owner + ".journal").toString());
        if (tx) {
            options.transactional(true);
        } else {
            options.fastFailover(Double.parseDouble(args[7]));
            if (args.length > 8 && args[8].equals("nocontract")) {
                options.ignoreRule6();
            }
        }
        new Worker(args[1], args[2], args[3], owner, () -> new Processor(log, owner, tx), SuiteWorker::records, options)
            .runUntilTerminated();
    }
}
