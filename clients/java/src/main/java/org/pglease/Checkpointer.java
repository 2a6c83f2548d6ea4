package org.pglease;

/** Writes a shard's checkpoint, fenced with the epoch its lease was taken or renewed at. */
public interface Checkpointer {
    /**
     * Checkpoints the last record delivered to the processor (in shardEnded: closes the
     * shard).  Throws LeaseLostException when the server refused it: the lease is lost.
     * A write that failed (connection lost, server unavailable) is logged and written again
     * before the lease is handed off or released; a later checkpoint covers it too.
     */
    void checkpoint() throws LeaseLostException;

    /** Checkpoints at the given sequence number (one delivered to the processor). */
    void checkpoint(String sequenceNumber) throws LeaseLostException;
}
