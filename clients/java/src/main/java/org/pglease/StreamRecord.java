package org.pglease;

/** One record of a shard: its sequence number (what a checkpoint names) and its data. */
public record StreamRecord(String sequenceNumber, byte[] data) {
}
