-- import_kcl_ex_rows through the router (by hand; src/router/generate.sql
-- puts it here): the rows are split by stream (PL/Proxy SPLIT), each
-- partition imports the rows of its streams.  Partitions commit one by one,
-- so every row is checked here first, as pg_lease checks it: input a
-- partition would refuse goes whole to partition 0, which raises pg_lease's
-- own error and writes nothing.  A partition that still refuses (42501: the
-- caller may not insert there) leaves the others' rows imported; the import
-- never overwrites, so running it again once fixed completes it.

-- How many rows cannot become leases: src/leases/import.c's check
-- (KCL_CHECK_SQL), where a blank owner or checkpoint counts as none.
CREATE FUNCTION lease_router.kcl_bad_rows(app_names text[], stream_names text[], shard_ids text[],
                                          checkpoints text[], lease_owners text[], lease_counts bigint[])
RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN (SELECT pg_catalog.count(*)
          FROM ROWS FROM (pg_catalog.unnest(app_names), pg_catalog.unnest(stream_names),
                          pg_catalog.unnest(shard_ids), pg_catalog.unnest(checkpoints),
                          pg_catalog.unnest(lease_owners), pg_catalog.unnest(lease_counts))
               AS r(app_name, stream_name, shard_id, checkpoint, lease_owner, lease_count)
         WHERE ((r.app_name IS NOT NULL AND pg_catalog.btrim(r.app_name, E' \t\n\r\f' OPERATOR(pg_catalog.||) pg_catalog.chr(11)) OPERATOR(pg_catalog.<>) ''
                AND pg_catalog.octet_length(r.app_name) OPERATOR(pg_catalog.<=) 256)
                AND (r.stream_name IS NOT NULL AND pg_catalog.btrim(r.stream_name, E' \t\n\r\f' OPERATOR(pg_catalog.||) pg_catalog.chr(11)) OPERATOR(pg_catalog.<>) ''
                AND pg_catalog.octet_length(r.stream_name) OPERATOR(pg_catalog.<=) 256)
                AND (r.shard_id IS NOT NULL AND pg_catalog.btrim(r.shard_id, E' \t\n\r\f' OPERATOR(pg_catalog.||) pg_catalog.chr(11)) OPERATOR(pg_catalog.<>) ''
                AND pg_catalog.octet_length(r.shard_id) OPERATOR(pg_catalog.<=) 256)
                AND (r.lease_owner IS NULL OR pg_catalog.btrim(r.lease_owner, E' \t\n\r\f' OPERATOR(pg_catalog.||) pg_catalog.chr(11)) OPERATOR(pg_catalog.=) ''
                OR pg_catalog.octet_length(r.lease_owner) OPERATOR(pg_catalog.<=) 256)
                AND (r.checkpoint IS NULL OR pg_catalog.btrim(r.checkpoint, E' \t\n\r\f' OPERATOR(pg_catalog.||) pg_catalog.chr(11)) OPERATOR(pg_catalog.=) ''
                OR pg_catalog.octet_length(r.checkpoint) OPERATOR(pg_catalog.<=) 1024)
                AND COALESCE(r.lease_count, 0) OPERATOR(pg_catalog.>=) 0) IS NOT TRUE);

-- Each partition gets the rows of its streams.
CREATE FUNCTION lease_router.import_kcl_ex_rows_split(app_names text[], stream_names text[], shard_ids text[],
                                                      checkpoints text[], lease_owners text[], lease_counts bigint[],
                                                      completed boolean[])
RETURNS SETOF bigint
LANGUAGE plproxy AS $$
    CLUSTER 'pg_lease';
    SPLIT ALL;
    RUN ON lease_router.stream_partition(app_names, stream_names);
    SELECT lease.import_kcl_ex_rows(app_names, stream_names, shard_ids, checkpoints, lease_owners,
                                    lease_counts, completed);
$$;

-- Input pg_lease refuses as a whole: partition 0 says why.
CREATE FUNCTION lease_router.import_kcl_ex_rows_refused(app_names text[], stream_names text[], shard_ids text[],
                                                        checkpoints text[], lease_owners text[], lease_counts bigint[],
                                                        completed boolean[])
RETURNS bigint
LANGUAGE plproxy AS $$
    CLUSTER 'pg_lease';
    RUN ON 0;
    SELECT lease.import_kcl_ex_rows(app_names, stream_names, shard_ids, checkpoints, lease_owners,
                                    lease_counts, completed);
$$;

CREATE FUNCTION lease.import_kcl_ex_rows(app_names text[], stream_names text[], shard_ids text[],
                                         checkpoints text[], lease_owners text[], lease_counts bigint[],
                                         completed boolean[])
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n integer := pg_catalog.cardinality(app_names);
BEGIN
    IF app_names IS NULL OR stream_names IS NULL OR shard_ids IS NULL OR checkpoints IS NULL
       OR lease_owners IS NULL OR lease_counts IS NULL OR completed IS NULL
       OR COALESCE(pg_catalog.array_ndims(app_names), 1) OPERATOR(pg_catalog.>) 1
       OR COALESCE(pg_catalog.array_ndims(stream_names), 1) OPERATOR(pg_catalog.>) 1
       OR COALESCE(pg_catalog.array_ndims(shard_ids), 1) OPERATOR(pg_catalog.>) 1
       OR COALESCE(pg_catalog.array_ndims(checkpoints), 1) OPERATOR(pg_catalog.>) 1
       OR COALESCE(pg_catalog.array_ndims(lease_owners), 1) OPERATOR(pg_catalog.>) 1
       OR COALESCE(pg_catalog.array_ndims(lease_counts), 1) OPERATOR(pg_catalog.>) 1
       OR COALESCE(pg_catalog.array_ndims(completed), 1) OPERATOR(pg_catalog.>) 1
       OR pg_catalog.cardinality(stream_names) OPERATOR(pg_catalog.<>) n
       OR pg_catalog.cardinality(shard_ids) OPERATOR(pg_catalog.<>) n
       OR pg_catalog.cardinality(checkpoints) OPERATOR(pg_catalog.<>) n
       OR pg_catalog.cardinality(lease_owners) OPERATOR(pg_catalog.<>) n
       OR pg_catalog.cardinality(lease_counts) OPERATOR(pg_catalog.<>) n
       OR pg_catalog.cardinality(completed) OPERATOR(pg_catalog.<>) n
       OR lease_router.kcl_bad_rows(app_names, stream_names, shard_ids, checkpoints, lease_owners,
                                    lease_counts) OPERATOR(pg_catalog.>) 0 THEN
        RETURN lease_router.import_kcl_ex_rows_refused(app_names, stream_names, shard_ids, checkpoints,
                                                       lease_owners, lease_counts, completed);
    END IF;
    IF n OPERATOR(pg_catalog.=) 0 THEN
        RETURN 0;
    END IF;
    RETURN (SELECT CAST(COALESCE(pg_catalog.sum(r), 0) AS bigint)
              FROM lease_router.import_kcl_ex_rows_split(app_names, stream_names, shard_ids, checkpoints,
                                                         lease_owners, lease_counts, completed) AS r);
END
$$;
