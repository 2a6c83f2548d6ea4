package org.pglease;

/**
 * A pending checkpoint recorded by {@link Checkpointer#prepareCheckpoint} (KCL's
 * {@code PreparedCheckpointer}): {@link #checkpoint} completes it.
 */
public interface PreparedCheckpointer {
    /** The pending checkpoint's sequence number. */
    String pendingCheckpoint();

    /** Writes the pending checkpoint as the shard's checkpoint (as Checkpointer.checkpoint does). */
    void checkpoint() throws LeaseLostException;
}
