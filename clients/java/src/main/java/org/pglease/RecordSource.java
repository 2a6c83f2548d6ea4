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
}
