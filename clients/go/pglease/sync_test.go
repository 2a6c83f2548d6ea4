package pglease_test

import (
	"context"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pg-lease/pg_lease/clients/go/pglease"
)

// TestSyncShards: SyncShards creates the missing leases with their lineage
// (a split's one parent, a merge's two), is idempotent, reports leases not
// listed; a worker with ListShards creates and processes a stream's new
// shards.
func TestSyncShards(t *testing.T) {
	workerDSN(t)
	ctx := context.Background()
	conn := admin(t)
	s := pglease.NewSession("", "go sync test") // the admin: sync_shards is the operator's call here
	defer s.Close()
	stream(t, conn, "go-sync")
	shards := []pglease.ListedShard{{ID: "a"}, {ID: "b"}, {ID: "a1", Parents: []string{"a"}},
		{ID: "m", Parents: []string{"a1", "b"}}}
	actions := func(rs []pglease.SyncResult) string {
		var out []string
		for _, r := range rs {
			out = append(out, r.ShardID+"="+r.Action)
		}
		sort.Strings(out)
		return strings.Join(out, " ")
	}
	rs, err := pglease.SyncShards(ctx, s, app, "go-sync", shards)
	if err != nil || actions(rs) != "a1=created a=created b=created m=created" {
		t.Fatalf("first sync: %v %v", actions(rs), err)
	}
	lineage := scalar(t, conn, `SELECT string_agg(shard_id || ':' || array_to_string(parent_shard_ids, '+'), ' ' ORDER BY shard_id)
	    FROM lease.shard_leases WHERE app_name = $1 AND stream_name = 'go-sync'`, app)
	if lineage != "a: a1:a b: m:a1+b" {
		t.Fatalf("lineage %q", lineage)
	}
	if rs, err = pglease.SyncShards(ctx, s, app, "go-sync", shards); err != nil || actions(rs) != "" {
		t.Fatalf("second sync (idempotent): %v %v", actions(rs), err)
	}
	if rs, err = pglease.SyncShards(ctx, s, app, "go-sync", shards[1:]); err != nil || actions(rs) != "a=unlisted" {
		t.Fatalf("sync without a: %v %v", actions(rs), err)
	}
	// one-dimensional parent_ids: no shard with two parents
	stream(t, conn, "go-sync1")
	if rs, err = pglease.SyncShards(ctx, s, app, "go-sync1", shards[:3]); err != nil || actions(rs) != "a1=created a=created b=created" {
		t.Fatalf("one-dimensional sync: %v %v", actions(rs), err)
	}

	// a worker whose ListShards lists two shards (as the admin: the worker
	// recipe's role is not granted sync_shards here)
	stream(t, conn, "go-sync-worker")
	rec := &recorder{}
	var mu sync.Mutex
	calls := 0
	w := start(t, pglease.Config{ConnString: "", Stream: "go-sync-worker", Owner: "go-sync-w", SyncEvery: 500 * time.Millisecond,
		ListShards: func(ctx context.Context) ([]pglease.ListedShard, error) {
			mu.Lock()
			defer mu.Unlock()
			calls++
			return []pglease.ListedShard{{ID: "x"}, {ID: "y"}}, nil
		},
		NewProcessor: func(shard string) pglease.Processor { return &proc{rec: rec, shard: shard} }})
	waitFor(t, "both listed shards processed", 10*time.Second, func() bool { return rec.has("process x") && rec.has("process y") })
	waitFor(t, "a second sync", 5*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return calls >= 2 })
	w.stop(t)
}
