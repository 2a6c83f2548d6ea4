package org.pglease;

import java.sql.Connection;

/**
 * Writes a shard's checkpoint, fenced with the epoch its lease was taken or renewed at;
 * shaped like KCL's {@code RecordProcessorCheckpointer}.
 *
 * <p>In processRecords the checkpoint is written with the other checkpoints that become
 * ready within the worker's checkpoint tick (Options.checkpointTick, default 5 ms), in
 * one {@code lease.update_checkpoints} call: a refused one ends that shard's processor
 * with leaseLost() after the call returns (with a tick of 0 each checkpoint is its own
 * call, and a refused one throws LeaseLostException here).  In shutdownRequested and
 * shardEnded it is written at once, and a refused one throws.  A write that failed
 * (connection lost, server unavailable) is logged and written again before the lease is
 * handed off or released; a later checkpoint covers it too.
 */
public interface Checkpointer {
    /** Checkpoints the last record delivered to the processor (in shardEnded: closes the shard). */
    void checkpoint() throws LeaseLostException;

    /** Checkpoints at the given sequence number (one delivered to the processor), sub-sequence 0. */
    void checkpoint(String sequenceNumber) throws LeaseLostException;

    /** Checkpoints at a user record of a KPL-aggregated record: its sequence and sub-sequence number. */
    void checkpoint(String sequenceNumber, long subSequenceNumber) throws LeaseLostException;

    /** Checkpoints at the given record (its sequence and sub-sequence number). */
    default void checkpoint(StreamRecord record) throws LeaseLostException {
        checkpoint(record.sequenceNumber(), record.subSequenceNumber());
    }

    /**
     * The first phase of a two-phase checkpoint (KCL's prepareCheckpoint): records the last
     * record delivered as the shard's pending checkpoint ({@code lease.prepare_checkpoint}),
     * which the next owner is given in initialize() until a checkpoint completes it.
     */
    PreparedCheckpointer prepareCheckpoint() throws LeaseLostException;

    /** As prepareCheckpoint(), at the given sequence number. */
    PreparedCheckpointer prepareCheckpoint(String sequenceNumber) throws LeaseLostException;

    /**
     * Transactional mode (Options.transactional): the batch's transaction, in which the
     * processor writes its output; the worker adds {@code lease.hold_lease} and the fenced
     * checkpoint and commits it after processRecords returns, or rolls it back when
     * processRecords did not checkpoint.  Do not commit or roll back yourself.
     */
    default Connection transaction() {
        throw new IllegalStateException("transaction(): only in transactional mode, inside processRecords");
    }
}
