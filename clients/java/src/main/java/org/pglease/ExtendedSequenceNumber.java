package org.pglease;

/**
 * A checkpoint as KCL's {@code ExtendedSequenceNumber}: the sequence number (opaque text:
 * a Kinesis sequence number has up to 128 bits, or a sentinel such as TRIM_HORIZON) and
 * the sub-sequence number of a user record inside a KPL-aggregated record (0 for a plain
 * record).
 */
public record ExtendedSequenceNumber(String sequenceNumber, long subSequenceNumber) {
    /** A plain record's checkpoint (sub-sequence 0). */
    public ExtendedSequenceNumber(String sequenceNumber) {
        this(sequenceNumber, 0);
    }
}
