package org.pglease;

import java.util.List;

/**
 * What the user supplies, shaped like the AWS Kinesis Client Library's
 * {@code ShardRecordProcessor}: the worker makes one per shard it processes (from a
 * {@code Supplier<ShardRecordProcessor>}, KCL's {@code ShardRecordProcessorFactory}),
 * calls {@link #initialize} once, {@link #processRecords} for every batch, and ends it with
 * exactly one of {@link #leaseLost}, {@link #shardEnded}, or {@link #shutdownRequested}
 * followed by {@link #leaseLost} (as KCL does).  docs/clients/java.md maps each callback
 * to pg_lease's calls.
 */
public interface ShardRecordProcessor {
    /** This processor now owns shardId; records start after checkpoint (TRIM_HORIZON: from the first). */
    void initialize(String shardId, String checkpoint);

    /**
     * As KCL's {@code initialize(InitializationInput)}: the checkpoint with its sub-sequence
     * number, and the pending checkpoint a previous owner prepared and did not complete
     * (null when none).  The worker calls this one; by default it calls
     * {@link #initialize(String, String)} with the sequence number.
     */
    default void initialize(String shardId, ExtendedSequenceNumber checkpoint, ExtendedSequenceNumber pendingCheckpoint) {
        initialize(shardId, checkpoint.sequenceNumber());
    }

    /**
     * The next records of the shard.  Checkpoint with the checkpointer (a fenced
     * {@code lease.update_checkpoint}) when they are done; a refused checkpoint throws
     * {@link LeaseLostException} and {@link #leaseLost} follows.
     */
    void processRecords(List<StreamRecord> records, Checkpointer checkpointer);

    /** The lease is gone (taken over, expired, fenced out): stop, do not checkpoint. */
    void leaseLost();

    /**
     * The shard has no more records: finish, then call {@code checkpointer.checkpoint()},
     * which closes the shard ({@code lease.close_shard}) so its children can be taken.
     * Without that checkpoint the shard stays open and this is called again.
     */
    void shardEnded(Checkpointer checkpointer);

    /**
     * The worker is stopping, or hands the lease to another worker that asked for it
     * (a graceful handoff): checkpoint what was processed; the lease is released next,
     * then {@link #leaseLost} is called.
     */
    void shutdownRequested(Checkpointer checkpointer);
}
