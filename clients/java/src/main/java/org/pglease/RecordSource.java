package org.pglease;

import java.util.List;

/**
 * Where the records come from (what KCL's retrieval does against Kinesis; pg_lease does not
 * know the stream).  Called by the worker's processing thread only.
 */
public interface RecordSource {
    /**
     * The next records of shardId after the given sequence number (TRIM_HORIZON: from the
     * first): an empty list when there are none yet, null when the shard has ended and
     * every record of it was returned.
     */
    List<StreamRecord> getRecords(String shardId, String afterSequenceNumber) throws Exception;

    /**
     * The next records after a user record of a KPL-aggregated record (its sequence and
     * sub-sequence number); the worker calls this one.  By default, with a sub-sequence of
     * 0, getRecords(shardId, afterSequenceNumber); otherwise the rest of that aggregate is
     * the source's to return, and the default cannot: it throws.
     */
    default List<StreamRecord> getRecords(String shardId, String afterSequenceNumber, long afterSubSequenceNumber)
        throws Exception {
        if (afterSubSequenceNumber != 0) {
            throw new UnsupportedOperationException("this RecordSource does not resume inside an aggregated record ("
                + shardId + " at " + afterSequenceNumber + "/" + afterSubSequenceNumber + ")");
        }
        return getRecords(shardId, afterSequenceNumber);
    }
}
