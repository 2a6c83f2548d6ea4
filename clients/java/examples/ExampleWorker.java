// A complete pg_lease worker: it processes a synthetic stream by appending each record to a log.
//
//     java -cp pg-lease-0.5.0.jar:/usr/share/java/postgresql.jar:. ExampleWorker DSN APP STREAM OWNER DIR [LEASE_SECONDS]
//
// Shard "<name>-end<N>" holds records 1..N and then ends; every other shard never
// ends.  Record i of a shard is "processed" by appending {"shard", "seq": i} to
// DIR/OWNER.records; the worker's journal (what the server acknowledged to it:
// takes, renewals with their epochs, checkpoints) goes to DIR/OWNER.journal.
// SIGTERM stops the worker gracefully: it finishes its batch and releases its leases.
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.pglease.Checkpointer;
import org.pglease.LeaseLostException;
import org.pglease.ShardRecordProcessor;
import org.pglease.StreamRecord;
import org.pglease.Worker;

public class ExampleWorker {
    static final int BATCH = 5;    // records per batch; each batch is checkpointed

    // The stream: record i of a shard is i; "<name>-end<N>" ends after N.  Checkpoints are
    // opaque strings: these are decimal sequence numbers of any length (BigInteger).
    static List<StreamRecord> getRecords(String shardId, String after) {
        BigInteger first = after.equals("TRIM_HORIZON") ? BigInteger.ONE : new BigInteger(after).add(BigInteger.ONE);
        BigInteger last = first.add(BigInteger.valueOf(BATCH - 1));
        if (shardId.contains("-end")) {
            BigInteger end = new BigInteger(shardId.substring(shardId.lastIndexOf("-end") + 4));
            if (first.compareTo(end) > 0) return null;        // the shard has ended
            last = last.min(end);
        }
        List<StreamRecord> records = new ArrayList<>();
        for (BigInteger seq = first; seq.compareTo(last) <= 0; seq = seq.add(BigInteger.ONE)) {
            records.add(new StreamRecord(seq.toString(), null));
        }
        return records;
    }

    // One per shard: appends each record to the log, checkpoints each batch.
    static class AppendToLog implements ShardRecordProcessor {
        final FileOutputStream log;
        final String owner;
        String shardId;

        AppendToLog(FileOutputStream log, String owner) { this.log = log; this.owner = owner; }

        public void initialize(String shardId, String checkpoint) { this.shardId = shardId; }

        public void processRecords(List<StreamRecord> records, Checkpointer checkpointer) {
            try {
                for (StreamRecord r : records) {
                    String line = String.format("{\"w\": \"%s\", \"shard\": \"%s\", \"seq\": %s, \"t\": %.3f}%n",
                        owner, shardId, r.sequenceNumber(), System.currentTimeMillis() / 1000.0);
                    log.write(line.getBytes(StandardCharsets.UTF_8));   // one write, O_APPEND
                }
                Thread.sleep(10);                // the work a real processor would do
                checkpointer.checkpoint();       // fenced with the lease's epoch
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            } catch (LeaseLostException e) {
                // the lease is lost: leaseLost() follows
            }
        }

        public void leaseLost() {}

        public void shardEnded(Checkpointer checkpointer) {
            try { checkpointer.checkpoint(); } catch (LeaseLostException e) {}   // closes the shard
        }

        public void shutdownRequested(Checkpointer checkpointer) {
            try { checkpointer.checkpoint(); } catch (LeaseLostException e) {}   // then the lease goes
        }
    }

    public static void main(String[] args) throws Exception {
        String owner = args[3];
        FileOutputStream log = new FileOutputStream(Path.of(args[4], owner + ".records").toFile(), true);
        Worker worker = new Worker(args[0], args[1], args[2], owner, () -> new AppendToLog(log, owner),
            ExampleWorker::getRecords,
            new Worker.Options().leaseDuration(args.length > 5 ? Double.parseDouble(args[5]) : 10).maxSteal(2)
                .journal(Path.of(args[4], owner + ".journal").toString()));
        worker.runUntilTerminated();   // SIGTERM: shutdownRequested, release every lease, exit 0
    }
}
