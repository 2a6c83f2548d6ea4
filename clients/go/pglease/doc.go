// Package pglease is a pg_lease worker for Go, on pgx v4: it takes its fair
// share of a stream's shard leases, renews them from a timer on its own
// connection, runs a Processor per shard with a context that is done at the
// shard's local deadline, writes every checkpoint fenced with the lease
// epoch, hands shards off gracefully, and releases everything on a stop.
// It follows docs/client-rules.md: Classify is its retry table.
//
// A Processor has KCL's shape (Initialize, ProcessRecords, LeaseLost,
// ShardEnded, ShutdownRequested), each callback with a context.
// RotateChannel is the channel-rotation helper of pg_lease's channel
// bindings, and SyncShards (or Config.ListShards) keeps the lease table in
// step with the stream's shards through lease.sync_shards.
//
// docs/clients/go.md shows a complete worker (cmd/example_worker) and how to
// build it offline from Debian's packages.
package pglease
