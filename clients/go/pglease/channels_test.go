package pglease_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/pg-lease/pg_lease/clients/go/pglease"
)

// TestRotateChannel: a replacement that starts is kept and confirmed (the
// previous conversation has ended and freed its sandbox slot); one whose
// start fails (an error, or false) is restored; an unbound channel is
// reported; at a tenant limit of 2 the helper rotates 100 times without a
// refusal.  As the application role (PGLEASE_TEST_APP_USER).
func TestRotateChannel(t *testing.T) {
	workerDSN(t)
	t.Parallel()
	ctx := context.Background()
	conn := admin(t)
	s := pglease.NewSession("user="+os.Getenv("PGLEASE_TEST_APP_USER"), "go rotation test")
	defer s.Close()
	// a tenant of its own per run: the test can be run again on one database
	tenant := fmt.Sprintf("clients-go-tenant-%d", time.Now().UnixNano())
	scope := pglease.ChannelScope{UserID: tenant, AgentID: "bot", ChannelID: "C1"}
	rows, err := s.Call(ctx, "SELECT outcome, conversation_id FROM lease.start_conversation($1, $2, $3, $4, $5)",
		scope.UserID, scope.AgentID, nil, nil, scope.ChannelID)
	if err != nil || rows[0][0] != "started" {
		t.Fatalf("start_conversation: %v %v", rows, err)
	}
	first := rows[0][1].(int64)
	bound := func() int64 {
		v, err := s.One(ctx, "SELECT lease.find_channel_conversation($1, $2, $3, $4, $5)",
			scope.UserID, scope.AgentID, nil, nil, scope.ChannelID)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := v.(int64)
		return n
	}
	status := func(id int64) string {
		return scalar(t, conn, `SELECT c.status || '/' || s.status FROM lease.conversations c
		    JOIN lease.sandboxes s ON s.id = c.sandbox_id WHERE c.id = $1`, id)
	}

	var started []int64
	r, err := pglease.RotateChannel(ctx, s, scope, func(ctx context.Context, id int64) (bool, error) {
		started = append(started, id)
		return true, nil
	}, pglease.RotateOptions{})
	if err != nil || r.Outcome != "rotated" || r.PreviousConversationID != first ||
		len(started) != 1 || started[0] != r.ConversationID {
		t.Fatalf("rotate: %+v %v, started %v", r, err, started)
	}
	second := r.ConversationID
	if bound() != second || status(second) != "running/pending" || status(first) != "terminated/terminated" {
		t.Fatalf("after the rotation: bound %d, %s, %s", bound(), status(second), status(first))
	}

	for _, start := range []pglease.StartReplacement{
		func(ctx context.Context, id int64) (bool, error) { return false, errors.New("sandbox did not come up") },
		func(ctx context.Context, id int64) (bool, error) { return false, nil },
	} {
		r, err := pglease.RotateChannel(ctx, s, scope, start, pglease.RotateOptions{})
		if err != nil || r.Outcome != "restored" || r.PreviousConversationID != second || bound() != second {
			t.Fatalf("failed start: %+v %v, bound %d", r, err, bound())
		}
		if st := scalar(t, conn, "SELECT status FROM lease.conversations WHERE id = $1", r.ConversationID); st != "failed" {
			t.Fatalf("the replacement is %s, want failed", st)
		}
	}

	unbound := scope
	unbound.ChannelID = "no-such-channel"
	if r, err := pglease.RotateChannel(ctx, s, unbound, nil, pglease.RotateOptions{}); err != nil || r.Outcome != "unbound" {
		t.Fatalf("unbound channel: %+v %v", r, err)
	}

	exec(t, conn, "SELECT lease.set_tenant_limit($1, 2)", scope.UserID)
	for i := 0; i < 100; i++ {
		r, err := pglease.RotateChannel(ctx, s, scope, func(context.Context, int64) (bool, error) { return true, nil },
			pglease.RotateOptions{})
		if err != nil || r.Outcome != "rotated" {
			t.Fatalf("rotation %d at limit 2: %+v %v", i+1, r, err)
		}
	}
	if n := scalar(t, conn, `SELECT string_agg(status, ',') FROM lease.conversations
	    WHERE user_id = $1 AND status NOT IN ('terminated', 'failed')`, scope.UserID); n != "running" {
		t.Fatalf("live conversations after 100 rotations: %s, want one running", n)
	}
}
