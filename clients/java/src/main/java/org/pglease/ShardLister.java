package org.pglease;

import java.util.List;
import java.util.Map;

/**
 * The stream's shards as the stream itself lists them, with each shard's parents (empty:
 * none; two for a merge), for {@code lease.sync_shards}: KCL's shard syncer.
 */
@FunctionalInterface
public interface ShardLister {
    Map<String, List<String>> listShards() throws Exception;
}
