package org.pglease;

/**
 * One record of a shard: its sequence number (what a checkpoint names, opaque text), the
 * sub-sequence number of a user record of a KPL-aggregated record (0 for a plain record),
 * and its data.
 */
public record StreamRecord(String sequenceNumber, long subSequenceNumber, byte[] data) {
    /** A plain record (sub-sequence 0). */
    public StreamRecord(String sequenceNumber, byte[] data) {
        this(sequenceNumber, 0, data);
    }
}
