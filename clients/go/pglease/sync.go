package pglease

import (
	"context"

	"github.com/jackc/pgtype"
)

// ListedShard is one shard of the stream as its source lists it: its id and
// its parents (one for a split, two for a merge, none for a first shard).
type ListedShard struct {
	ID      string
	Parents []string
}

// SyncResult is one row of lease.sync_shards: action "created" (its lease
// was created, with its lineage) or "unlisted" (a lease of a shard not listed
// and not ended).
type SyncResult struct {
	ShardID string
	Action  string
}

const sqlSync = "SELECT shard_id, action FROM lease.sync_shards($1, $2, $3::text[], $4::text[])"

// parentIDs is sync_shards' parent_ids: NULL when no shard has a parent,
// one-dimensional (aligned with the shard ids, NULL for none) when none has
// two, otherwise n x k with NULL padding.
func parentIDs(shards []ListedShard) pgtype.TextArray {
	k := 0
	for _, s := range shards {
		if len(s.Parents) > k {
			k = len(s.Parents)
		}
	}
	if k == 0 {
		return pgtype.TextArray{Status: pgtype.Null}
	}
	elems := make([]pgtype.Text, 0, len(shards)*k)
	for _, s := range shards {
		for i := 0; i < k; i++ {
			if i < len(s.Parents) {
				elems = append(elems, pgtype.Text{String: s.Parents[i], Status: pgtype.Present})
			} else {
				elems = append(elems, pgtype.Text{Status: pgtype.Null})
			}
		}
	}
	dims := []pgtype.ArrayDimension{{Length: int32(len(shards)), LowerBound: 1}}
	if k > 1 {
		dims = append(dims, pgtype.ArrayDimension{Length: int32(k), LowerBound: 1})
	}
	return pgtype.TextArray{Elements: elems, Dimensions: dims, Status: pgtype.Present}
}

// SyncShards calls lease.sync_shards with the shards listed: it creates the
// missing leases with their lineage and reports the leases not listed (and
// not ended); it ends nothing, and is safe to repeat.
func SyncShards(ctx context.Context, s *Session, app, stream string, shards []ListedShard) ([]SyncResult, error) {
	ids := make([]string, len(shards))
	for i, sh := range shards {
		ids[i] = sh.ID
	}
	rows, err := s.Call(ctx, sqlSync, app, stream, ids, parentIDs(shards))
	if err != nil {
		return nil, err
	}
	out := make([]SyncResult, len(rows))
	for i, r := range rows {
		out[i] = SyncResult{ShardID: r[0].(string), Action: r[1].(string)}
	}
	return out, nil
}
