package pglease_test

// The worker against the real extension: the database is the one the PG*
// environment variables name (test/clients/run.sh: the clients suite's,
// with PGLEASE_TEST_WORKER_USER and PGLEASE_TEST_APP_USER, the roles of the
// worker and application recipes).  Skipped when PGLEASE_TEST_WORKER_USER is
// not set.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v4"
	"github.com/pg-lease/pg_lease/clients/go/pglease"
)

const app = "clients"

func workerDSN(t *testing.T) string {
	user := os.Getenv("PGLEASE_TEST_WORKER_USER")
	if user == "" {
		t.Skip("PGLEASE_TEST_WORKER_USER is not set: no database to test against")
	}
	return "user=" + user
}

// admin is a superuser connection (the PG* variables).
func admin(t *testing.T) *pgx.Conn {
	conn, err := pgx.Connect(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func exec(t *testing.T, conn *pgx.Conn, sql string, args ...interface{}) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func scalar(t *testing.T, conn *pgx.Conn, sql string, args ...interface{}) string {
	t.Helper()
	var v *string
	if err := conn.QueryRow(context.Background(), sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	if v == nil {
		return "<null>"
	}
	return *v
}

// stream creates a fresh stream of the given shards ("child<parent" gives a parent).
func stream(t *testing.T, conn *pgx.Conn, name string, shards ...string) {
	exec(t, conn, "DELETE FROM lease.shard_leases WHERE app_name = $1 AND stream_name = $2", app, name)
	for _, s := range shards {
		id, parent, _ := strings.Cut(s, "<")
		parents := []string{}
		if parent != "" {
			parents = []string{parent}
		}
		exec(t, conn, "SELECT lease.create_lease($1, $2, $3, $4::text[])", app, name, id, parents)
	}
}

// begin starts a test of its own stream (in parallel with the others): the
// worker's connection string, an admin connection, a recorder.
func begin(t *testing.T, name string, shards ...string) (string, *pgx.Conn, *recorder) {
	dsn := workerDSN(t)
	t.Parallel()
	conn := admin(t)
	stream(t, conn, name, shards...)
	return dsn, conn, &recorder{}
}

// recorder collects what the processors were told, in order.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) add(format string, args ...interface{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, fmt.Sprintf(format, args...))
}

func (r *recorder) has(prefix string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		if strings.HasPrefix(e, prefix) {
			return true
		}
	}
	return false
}

func (r *recorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(timeout); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// proc counts records 1, 2, ... of a shard, checkpointing each batch of 5;
// hook, when set, runs before each batch.
type proc struct {
	rec   *recorder
	shard string
	pos   *big.Int // the last record; checkpoints are opaque strings, these decimal of any length
	end   int      // 0: never ends
	hook  func(ctx context.Context, p *proc, cp pglease.Checkpointer) error
}

func (p *proc) Initialize(ctx context.Context, shard, checkpoint string) error {
	p.rec.add("init %s %s", shard, checkpoint)
	p.pos = new(big.Int)
	if checkpoint != pglease.TrimHorizon {
		if _, ok := p.pos.SetString(checkpoint, 10); !ok {
			return fmt.Errorf("checkpoint %q is not a sequence number", checkpoint)
		}
	}
	return nil
}

func (p *proc) ProcessRecords(ctx context.Context, cp pglease.Checkpointer) error {
	p.rec.add("process %s", p.shard)
	if p.hook != nil {
		if err := p.hook(ctx, p, cp); err != nil {
			return err
		}
	}
	end := big.NewInt(int64(p.end))
	if p.end > 0 && p.pos.Cmp(end) >= 0 {
		return pglease.ErrShardEnd
	}
	p.pos.Add(p.pos, big.NewInt(5))
	if p.end > 0 && p.pos.Cmp(end) > 0 {
		p.pos.Set(end)
	}
	time.Sleep(5 * time.Millisecond)
	return cp.Checkpoint(ctx, p.pos.String())
}

func (p *proc) LeaseLost(ctx context.Context) { p.rec.add("lost %s", p.shard) }

func (p *proc) ShardEnded(ctx context.Context, cp pglease.Checkpointer) error {
	err := cp.Checkpoint(ctx, pglease.ShardEnd)
	p.rec.add("ended %s %v", p.shard, err)
	return err
}

func (p *proc) ShutdownRequested(ctx context.Context, cp pglease.Checkpointer) error {
	err := cp.Checkpoint(ctx, p.pos.String())
	p.rec.add("shutdown %s at %s: %v", p.shard, p.pos, err)
	return err
}

type running struct {
	cancel context.CancelFunc
	done   chan error
}

// start runs a worker until the test ends (or stop).
func start(t *testing.T, cfg pglease.Config) *running {
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = 2 * time.Second
	}
	cfg.App = app
	if cfg.Logger == nil {
		cfg.Logger = pglease.NewLogger(os.Stderr, pglease.LevelWarn)
	}
	w, err := pglease.NewWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- w.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop stops the worker gracefully; Run must return nil within 10 s.
func (r *running) stop(t *testing.T) {
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("Run did not return 10 s after the stop")
	}
}

// TestLocalDeadline: while no renewal is acknowledged (the lease row is
// locked), the processor's ctx is done at the send time of the last
// acknowledged take/renewal + lease duration - margin; no batch starts after
// it, and the processor gets LeaseLost.  A stop then is not held up by the
// renewal waiting for the lock.
func TestLocalDeadline(t *testing.T) {
	dsn, conn, rec := begin(t, "go-deadline", "d1")
	var mu sync.Mutex
	var locked time.Time
	var starts []time.Time
	var ended error
	var endedAt time.Time
	w := start(t, pglease.Config{ConnString: dsn, Stream: "go-deadline", Owner: "go-deadline-w",
		Margin: 400 * time.Millisecond,
		NewProcessor: func(shard string) pglease.Processor {
			return &proc{rec: rec, shard: shard, hook: func(ctx context.Context, p *proc, cp pglease.Checkpointer) error {
				mu.Lock()
				starts = append(starts, time.Now())
				l, done := locked, ended != nil
				mu.Unlock()
				if l.IsZero() || done {
					// no checkpoint: only the renewer waits for the lock; after the
					// deadline batch, nothing to do, so the stop is not held up
					return pglease.ErrNoRecords
				}
				<-ctx.Done() // a batch that would run past the deadline
				mu.Lock()
				ended, endedAt = ctx.Err(), time.Now()
				mu.Unlock()
				return ctx.Err()
			}}
		}})
	waitFor(t, "the first batch", 10*time.Second, func() bool { return rec.has("process d1") })
	tx, err := conn.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(context.Background(), "SELECT FROM lease.shard_leases WHERE app_name = $1 AND stream_name = 'go-deadline' FOR UPDATE", app); err != nil {
		t.Fatal(err)
	}
	// the renewal's heartbeat writes the worker's lease.stream_workers row
	if _, err := tx.Exec(context.Background(), "SELECT FROM lease.stream_workers WHERE app_name = $1 AND stream_name = 'go-deadline' FOR UPDATE", app); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	locked = time.Now()
	mu.Unlock()
	// renewals sent from now on wait for the lock: none is acknowledged
	limit := locked.Add(2*time.Second - 400*time.Millisecond)
	waitFor(t, "LeaseLost", 5*time.Second, func() bool { return rec.has("lost d1") })
	mu.Lock()
	defer mu.Unlock()
	if !errors.Is(ended, context.DeadlineExceeded) {
		t.Errorf("the batch's ctx ended with %v, want the deadline", ended)
	}
	if endedAt.After(limit.Add(100 * time.Millisecond)) {
		t.Errorf("the ctx ended %v after the latest possible local deadline", endedAt.Sub(limit))
	}
	for _, s := range starts {
		if s.After(limit) {
			t.Errorf("a batch started %v after the latest possible local deadline", s.Sub(limit))
		}
	}
	// a stop while the row is still locked: the stuck renewal and release
	// give up after a lease duration, Run returns
	w.stop(t)
	tx.Rollback(context.Background())
}

// TestCheckpointRefusedIsLeaseLost: a fenced checkpoint the server refuses
// (another owner took the lease) returns ErrLeaseLost, the processor gets
// LeaseLost and no further batch.
func TestCheckpointRefusedIsLeaseLost(t *testing.T) {
	dsn, conn, rec := begin(t, "go-fence", "f1")
	stolen := false
	w := start(t, pglease.Config{ConnString: dsn, Stream: "go-fence", Owner: "go-fence-w", LeaseDuration: 3 * time.Second,
		NewProcessor: func(shard string) pglease.Processor {
			return &proc{rec: rec, shard: shard, hook: func(ctx context.Context, p *proc, cp pglease.Checkpointer) error {
				if p.pos.Cmp(big.NewInt(10)) < 0 || stolen {
					return nil
				}
				stolen = true
				exec(t, conn, `SELECT lease.take_lease($1, 'go-fence', 'f1', 'thief',
				    (SELECT lease_count FROM lease.shard_leases WHERE app_name = $1 AND stream_name = 'go-fence'))`, app)
				err := cp.Checkpoint(ctx, "15")
				rec.add("refused %v", errors.Is(err, pglease.ErrLeaseLost))
				return err
			}}
		}})
	waitFor(t, "LeaseLost", 10*time.Second, func() bool { return rec.has("lost f1") })
	w.stop(t)
	ev := rec.all()
	i := indexOf(ev, "refused true")
	if i < 0 || i+1 >= len(ev) || ev[i+1] != "lost f1" {
		t.Fatalf("want the refusal then LeaseLost, got %v", ev)
	}
	if got := scalar(t, conn, "SELECT checkpoint FROM lease.shard_leases WHERE app_name = $1 AND stream_name = 'go-fence'", app); got != "10" {
		t.Errorf("the server's checkpoint is %s, want 10 (the refused 15 not written)", got)
	}
}

func indexOf(events []string, e string) int {
	for i, x := range events {
		if x == e {
			return i
		}
	}
	return -1
}

// TestHandoffIsShutdownRequested: a worker joining asks for a share; the
// holder's processor gets ShutdownRequested (no LeaseLost), checkpoints, and
// the joiner starts from that checkpoint.  Stopping both releases every lease.
func TestHandoffIsShutdownRequested(t *testing.T) {
	dsn, conn, recA := begin(t, "go-handoff", "h1", "h2", "h3", "h4")
	recB := &recorder{}
	factory := func(rec *recorder) pglease.ProcessorFactory {
		return func(shard string) pglease.Processor { return &proc{rec: rec, shard: shard} }
	}
	a := start(t, pglease.Config{ConnString: dsn, Stream: "go-handoff", Owner: "go-handoff-a", NewProcessor: factory(recA)})
	waitFor(t, "a holding all four", 10*time.Second, func() bool {
		return recA.has("process h1") && recA.has("process h2") && recA.has("process h3") && recA.has("process h4")
	})
	b := start(t, pglease.Config{ConnString: dsn, Stream: "go-handoff", Owner: "go-handoff-b", NewProcessor: factory(recB), MaxSteal: 2})
	waitFor(t, "b getting two shards", 15*time.Second, func() bool {
		n := 0
		for _, e := range recB.all() {
			if strings.HasPrefix(e, "init ") {
				n++
			}
		}
		return n >= 2
	})
	a.stop(t)
	b.stop(t)
	for _, e := range recA.all() {
		if strings.HasPrefix(e, "lost ") {
			t.Errorf("a lost a lease: %v", recA.all())
		}
	}
	handed := 0
	for _, e := range recA.all() {
		var shard string
		var pos int
		if n, _ := fmt.Sscanf(e, "shutdown %s at %d: <nil>", &shard, &pos); n == 2 && recB.has(fmt.Sprintf("init %s %d", shard, pos)) {
			handed++
		}
	}
	if handed < 2 {
		t.Errorf("want two shards handed off, each started by b from a's last checkpoint: a %v, b %v", recA.all(), recB.all())
	}
	if n := scalar(t, conn, "SELECT count(*)::text FROM lease.shard_leases WHERE app_name = $1 AND stream_name = 'go-handoff' AND lease_owner IS NOT NULL", app); n != "0" {
		t.Errorf("%s leases still owned after both workers stopped", n)
	}
}

// TestShardEnd: ProcessRecords returns ErrShardEnd, ShardEnded closes the
// shard through its Checkpointer, and the child starts from TRIM_HORIZON.
func TestShardEnd(t *testing.T) {
	dsn, conn, rec := begin(t, "go-end", "e1", "e2<e1")
	w := start(t, pglease.Config{ConnString: dsn, Stream: "go-end", Owner: "go-end-w",
		NewProcessor: func(shard string) pglease.Processor {
			end := 0
			if shard == "e1" {
				end = 12
			}
			return &proc{rec: rec, shard: shard, end: end}
		}})
	waitFor(t, "the child started", 10*time.Second, func() bool { return rec.has("init e2 ") })
	w.stop(t)
	if !rec.has("ended e1 <nil>") || !rec.has("init e2 TRIM_HORIZON") || rec.has("lost ") {
		t.Errorf("want e1 ended and closed, e2 started from TRIM_HORIZON, nothing lost: %v", rec.all())
	}
	if got := scalar(t, conn, "SELECT checkpoint FROM lease.shard_leases WHERE app_name = $1 AND stream_name = 'go-end' AND shard_id = 'e1'", app); got != pglease.ShardEnd {
		t.Errorf("e1's checkpoint is %s, want SHARD_END", got)
	}
}

// TestRefusedRoleFailsLoudly: a role the server refuses is not retried
// forever: Run returns the server's error (28000) at once.
func TestRefusedRoleFailsLoudly(t *testing.T) {
	workerDSN(t)
	t.Parallel()
	w, err := pglease.NewWorker(pglease.Config{ConnString: "user=pglease_no_such_role", App: app, Stream: "go-none",
		Owner: "go-none-w", NewProcessor: func(string) pglease.Processor { return nil },
		Logger: pglease.NewLogger(os.Stderr, pglease.LevelError)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = w.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "28000") || ctx.Err() != nil {
		t.Fatalf("Run returned %v, want the server's 28000 at once", err)
	}
}

// TestPasswordWrittenNowhere: a connection string with a password the
// worker cannot use (one pgconn cannot parse, in a URL's user:password@, a
// password= parameter, or key=value settings) is in neither what Run
// returns nor anything the worker logs, at every level.
func TestPasswordWrittenNowhere(t *testing.T) {
	workerDSN(t)
	t.Parallel()
	const secret = "s3cret-Pw-go"
	for i, dsn := range []string{
		"postgresql://u:" + secret + "@localhost:notaport/db",
		"postgresql://u@localhost:notaport/db?password=" + secret,
		"postgres://u:" + secret + "@[::1/db",
		"host=localhost port=notaport user=u password=" + secret,
	} {
		var logged strings.Builder
		w, err := pglease.NewWorker(pglease.Config{ConnString: dsn, App: app, Stream: "go-none",
			Owner: "go-pw-w", NewProcessor: func(string) pglease.Processor { return nil },
			LeaseDuration: time.Second, Logger: pglease.NewLogger(&logged, pglease.LevelDebug)})
		if err != nil {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("case %d: NewWorker's error shows the password: %v", i+1, err)
			}
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
		err = w.Run(ctx)
		cancel()
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("case %d: Run returned the password: %v", i+1, err)
		}
		if strings.Contains(logged.String(), secret) {
			t.Errorf("case %d: the log shows the password:\n%s", i+1, logged.String())
		}
		if !strings.Contains(logged.String(), "xxxxx") && !strings.Contains(logged.String(), "cannot parse") {
			t.Errorf("case %d: nothing logged about the connection string:\n%s", i+1, logged.String())
		}
	}
}

// TestBigCheckpoint: checkpoints are opaque strings.  A shard whose
// checkpoint is a 56-digit Kinesis sequence number (no machine integer holds
// it) reaches Initialize verbatim, and the processor's next checkpoint, 5
// records on, is written as it gave it: greater, compared as big integers.
func TestBigCheckpoint(t *testing.T) {
	const seq = "49590338271490256608559692538361571095921575989136588898"
	dsn, conn, rec := begin(t, "go-big", "k1")
	exec(t, conn, "SELECT lease.take_lease($1, 'go-big', 'k1', 'go-big-prev')", app)
	exec(t, conn, "SELECT lease.update_checkpoint($1, 'go-big', 'k1', 'go-big-prev', $2)", app, seq)
	exec(t, conn, "SELECT lease.release_lease($1, 'go-big', 'k1', 'go-big-prev')", app)
	r := start(t, pglease.Config{ConnString: dsn, Stream: "go-big", Owner: "go-big-w",
		NewProcessor: func(shard string) pglease.Processor { return &proc{rec: rec, shard: shard} }})
	waitFor(t, "k1 processed", 10*time.Second, func() bool { return rec.has("process k1") })
	if !rec.has("init k1 " + seq) {
		t.Errorf("Initialize got %v, want the checkpoint %s verbatim", rec.all(), seq)
	}
	want, _ := new(big.Int).SetString(seq, 10)
	want.Add(want, big.NewInt(5))
	waitFor(t, "k1 checkpointed past "+seq, 10*time.Second, func() bool {
		got, ok := new(big.Int).SetString(scalar(t, conn,
			"SELECT checkpoint FROM lease.shard_leases WHERE app_name = $1 AND stream_name = 'go-big' AND shard_id = 'k1'", app), 10)
		return ok && got.Cmp(want) >= 0
	})
	r.stop(t)
}

// journalEvents reads a worker's journal (Config.JournalPath).
func journalEvents(t *testing.T, path string) []map[string]interface{} {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]interface{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		e := map[string]interface{}{}
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("journal line %q: %v", line, err)
		}
		out = append(out, e)
	}
	return out
}

// TestHeartbeatRenews: the renewer renews by lease.heartbeat with the list
// of its last renew_leases (rule 5): the lease stays held over many lease
// durations with heartbeats the only renewals once listed; a take makes the
// list stale, and the next tick lists again, with the new lease on it.
func TestHeartbeatRenews(t *testing.T) {
	dsn, conn, rec := begin(t, "go-heartbeat", "h1")
	path := filepath.Join(t.TempDir(), "w.journal")
	w := start(t, pglease.Config{ConnString: dsn, Stream: "go-heartbeat", Owner: "go-heartbeat-w",
		LeaseDuration: 1500 * time.Millisecond, JournalPath: path,
		NewProcessor: func(shard string) pglease.Processor { return &proc{rec: rec, shard: shard} }})
	waitFor(t, "the first batch", 10*time.Second, func() bool { return rec.has("process h1") })
	time.Sleep(4 * time.Second) // about 8 renewals
	exec(t, conn, "SELECT lease.create_lease($1, 'go-heartbeat', 'h2')", app)
	waitFor(t, "the second shard", 10*time.Second, func() bool { return rec.has("process h2") })
	time.Sleep(2 * time.Second)
	if got := scalar(t, conn, "SELECT string_agg(shard_id || '=' || lease_owner, ',' ORDER BY shard_id) FROM lease.shard_leases WHERE app_name = $1 AND stream_name = 'go-heartbeat'", app); got != "h1=go-heartbeat-w,h2=go-heartbeat-w" {
		t.Errorf("held: %s", got)
	}
	w.stop(t)
	via := map[string]int{}
	tookH2, listedH2 := -1, -1
	for i, e := range journalEvents(t, path) {
		switch e["ev"] {
		case "renewed":
			via[fmt.Sprint(e["via"])]++
			leases, _ := e["leases"].(map[string]interface{})
			if _, ok := leases["h2"]; ok && e["via"] == "list" && listedH2 < 0 && tookH2 >= 0 {
				listedH2 = i
			}
			if _, ok := leases["h2"]; ok && e["via"] == "heartbeat" && listedH2 < 0 {
				t.Errorf("a heartbeat renewed h2 before a list had it: %v", e)
			}
		case "taken":
			if e["shard"] == "h2" {
				tookH2 = i
			}
		}
	}
	t.Logf("renewals by heartbeat / by renew_leases: %d/%d", via["heartbeat"], via["list"])
	if via["heartbeat"] < 5 || via["list"] < 2 || via["list"] > via["heartbeat"] {
		t.Errorf("renewals: %v, want mostly heartbeats, a list at the start and after the take", via)
	}
	if tookH2 < 0 || listedH2 < 0 {
		t.Errorf("h2 taken at journal line %d, first listed at %d", tookH2, listedH2)
	}
}

// TestFastFailover: with RenewEvery, the worker declares it (the server's
// stream_workers row), and a renewal that is not acknowledged (the
// heartbeat's row is locked) stops processing renew_every + margin after
// the last acknowledged one was sent (rule 6), long before the lease's own
// deadline: LeaseLost, and no batch after it.
func TestFastFailover(t *testing.T) {
	dsn, conn, rec := begin(t, "go-ff", "ff1")
	var mu sync.Mutex
	var starts []time.Time
	w := start(t, pglease.Config{ConnString: dsn, Stream: "go-ff", Owner: "go-ff-w",
		LeaseDuration: 10 * time.Second, RenewEvery: 300 * time.Millisecond,
		NewProcessor: func(shard string) pglease.Processor {
			return &proc{rec: rec, shard: shard, hook: func(ctx context.Context, p *proc, cp pglease.Checkpointer) error {
				mu.Lock()
				starts = append(starts, time.Now())
				mu.Unlock()
				return nil
			}}
		}})
	waitFor(t, "the first batch", 10*time.Second, func() bool { return rec.has("process ff1") })
	if got := scalar(t, conn, "SELECT renew_every::text FROM lease.stream_workers WHERE app_name = $1 AND stream_name = 'go-ff' AND worker = 'go-ff-w'", app); got != "00:00:00.3" {
		t.Errorf("the declared renew_every: %s", got)
	}
	tx, err := conn.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	for _, table := range []string{"stream_workers", "shard_leases"} {
		if _, err := tx.Exec(context.Background(), "SELECT FROM lease."+table+" WHERE app_name = $1 AND stream_name = 'go-ff' FOR UPDATE", app); err != nil {
			t.Fatal(err)
		}
	}
	locked := time.Now()
	// the last acknowledged renewal was sent before the lock; its deadline:
	// + renew_every + margin (150 ms, renew_every / 2)
	limit := locked.Add(450 * time.Millisecond)
	// (the processing loop's take_leases, also waiting for the lock, may
	// hold the news up by a fifth of the lease duration, but not a batch)
	waitFor(t, "LeaseLost", 8*time.Second, func() bool { return rec.has("lost ff1") })
	lostAfter := time.Since(locked)
	mu.Lock()
	for _, s := range starts {
		if s.After(limit.Add(50 * time.Millisecond)) {
			t.Errorf("a batch started %v after rule 6's deadline", s.Sub(limit))
		}
	}
	mu.Unlock()
	t.Logf("LeaseLost %v after the lock; processor events: %v", lostAfter, rec.all())
	tx.Rollback(context.Background())
	// the renewer's statement timeout gives the hung renewal up: it renews again, and processes again
	waitFor(t, "processing again", 10*time.Second, func() bool {
		events := rec.all()
		return len(events) > 0 && strings.HasPrefix(events[len(events)-1], "process ff1") &&
			indexOf(events, "lost ff1") < len(events)-1
	})
	w.stop(t)
}

// txProc writes each record of a batch as a row of go_tx_out through the
// batch's transaction; fail, when set, runs before the checkpoint.
type txProc struct {
	rec   *recorder
	shard string
	pos   int
	n     int // batches begun
	fail  func(p *txProc) error
}

func (p *txProc) Initialize(ctx context.Context, shard, checkpoint string) error {
	p.rec.add("init %s %s", shard, checkpoint)
	p.pos = 0
	if checkpoint != pglease.TrimHorizon {
		fmt.Sscan(checkpoint, &p.pos)
	}
	return nil
}

func (p *txProc) ProcessRecords(ctx context.Context, cp pglease.Checkpointer) error {
	tx := cp.(pglease.TxCheckpointer).Tx()
	if _, err := tx.Exec(ctx, "INSERT INTO public.go_tx_out SELECT $1, s FROM generate_series($2::int, $3::int) AS s",
		p.shard, p.pos+1, p.pos+5); err != nil {
		return err
	}
	if p.n++; p.n%7 == 3 {
		return pglease.ErrNoRecords // its rows are rolled back: the verdict would see them twice
	}
	p.pos += 5
	if p.fail != nil {
		if err := p.fail(p); err != nil {
			return err
		}
	}
	time.Sleep(5 * time.Millisecond)
	return cp.Checkpoint(ctx, fmt.Sprint(p.pos))
}

func (p *txProc) LeaseLost(ctx context.Context) { p.rec.add("lost %s", p.shard) }
func (p *txProc) ShardEnded(ctx context.Context, cp pglease.Checkpointer) error {
	return cp.Checkpoint(ctx, pglease.ShardEnd)
}
func (p *txProc) ShutdownRequested(ctx context.Context, cp pglease.Checkpointer) error { return nil }

// TestTransactional: each batch's rows and its checkpoint commit together
// (docs/exactly-once.md), a batch that ends with ErrNoRecords is rolled
// back, through a steal (hold_lease refuses the batch in
// flight: LeaseLost, rolled back), terminated processing connections
// (resolved from my_leases) and a graceful stop: every record up to each
// shard's checkpoint is in the table exactly once, none past it.  The
// verdict can fail: a row written outside the worker's transactions shows.
func TestTransactional(t *testing.T) {
	dsn, conn, rec := begin(t, "go-tx", "x1", "x2")
	user := os.Getenv("PGLEASE_TEST_WORKER_USER")
	exec(t, conn, "DROP TABLE IF EXISTS public.go_tx_out")
	exec(t, conn, "CREATE TABLE public.go_tx_out (shard_id text, seq int)") // no unique constraint, on purpose
	exec(t, conn, "GRANT INSERT ON public.go_tx_out TO "+pgx.Identifier{user}.Sanitize())
	var killed sync.Once
	killer := admin(t) // the processor's goroutine's own connection
	w := start(t, pglease.Config{ConnString: dsn, Stream: "go-tx", Owner: "go-tx-w", LeaseDuration: 2 * time.Second,
		Transactional: true,
		NewProcessor: func(shard string) pglease.Processor {
			return &txProc{rec: rec, shard: shard, fail: func(p *txProc) error {
				var err error
				if p.pos == 30 && p.shard == "x1" {
					// the batch's connection dies before its checkpoint, once
					killed.Do(func() {
						_, err = killer.Exec(context.Background(), "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'go-tx-w'")
					})
				}
				return err
			}}
		}})
	checkpoint := func(shard string) int {
		var n int
		fmt.Sscan(scalar(t, conn, "SELECT checkpoint FROM lease.shard_leases WHERE app_name = $1 AND stream_name = 'go-tx' AND shard_id = $2", app, shard), &n)
		return n
	}
	waitFor(t, "x1 past 50", 20*time.Second, func() bool { return checkpoint("x1") > 50 && checkpoint("x2") > 20 })
	// a steal: the thief never renews; the worker's next batch of x2 is refused by hold_lease
	exec(t, conn, "SELECT lease.take_lease($1, 'go-tx', 'x2', 'thief', lease_count) FROM lease.shard_leases WHERE app_name = $1 AND stream_name = 'go-tx' AND shard_id = 'x2'", app)
	waitFor(t, "LeaseLost of x2", 10*time.Second, func() bool { return rec.has("lost x2") })
	// after the thief's lease expires the worker takes x2 again
	waitFor(t, "x2 again", 40*time.Second, func() bool {
		return scalar(t, conn, "SELECT lease_owner FROM lease.shard_leases WHERE app_name = $1 AND stream_name = 'go-tx' AND shard_id = 'x2'", app) == "go-tx-w"
	})
	time.Sleep(time.Second)
	w.stop(t)
	verdict := func(table string) string {
		return scalar(t, conn, `WITH l AS (SELECT shard_id, CASE WHEN checkpoint = 'TRIM_HORIZON' THEN 0 ELSE checkpoint::int END AS ckpt
		                                     FROM lease.shard_leases WHERE app_name = 'clients' AND stream_name = 'go-tx'),
		                             o AS (SELECT shard_id, seq, count(*) AS n FROM public.`+table+` GROUP BY 1, 2)
		    SELECT format('%s of %s once, %s duplicates, %s gaps, %s past a checkpoint',
		                  (SELECT count(*) FROM o JOIN l USING (shard_id) WHERE o.n = 1 AND o.seq <= l.ckpt),
		                  (SELECT sum(ckpt) FROM l), (SELECT coalesce(sum(n - 1), 0) FROM o),
		                  (SELECT count(*) FROM l, generate_series(1, l.ckpt) AS s
		                    WHERE NOT EXISTS (SELECT FROM o WHERE o.shard_id = l.shard_id AND o.seq = s)),
		                  (SELECT count(*) FROM o JOIN l USING (shard_id) WHERE o.seq > l.ckpt))`)
	}
	got := verdict("go_tx_out")
	var once, total int
	fmt.Sscanf(got, "%d of %d", &once, &total)
	if once != total || total == 0 || !strings.HasSuffix(got, " once, 0 duplicates, 0 gaps, 0 past a checkpoint") {
		t.Errorf("records: %s", got)
	}
	t.Logf("records: %s; processor events: %d", got, len(rec.all()))
	// the negative control: a careless writer's row past the checkpoint, and a duplicate
	exec(t, conn, "INSERT INTO public.go_tx_out SELECT shard_id, seq FROM public.go_tx_out WHERE shard_id = 'x1' AND seq = 1")
	exec(t, conn, "INSERT INTO public.go_tx_out SELECT 'x1', checkpoint::int + 1 FROM lease.shard_leases WHERE app_name = 'clients' AND stream_name = 'go-tx' AND shard_id = 'x1'")
	if bad := verdict("go_tx_out"); !strings.Contains(bad, "1 duplicates, 0 gaps, 1 past a checkpoint") {
		t.Errorf("the verdict missed a duplicate and a row past the checkpoint: %s", bad)
	}
	if indexOf(rec.all(), "init x1 25") < 0 {
		t.Errorf("x1 was not restarted from the server's checkpoint after its connection died: %v", rec.all())
	}
}

// TestBatchedCheckpoints: checkpoints handed over with Ready are written
// together, one lease.update_checkpoints call for the shards of a round
// (the journal's "batch"), with their sub-sequences; a stolen shard's
// checkpoint is refused and ends that shard only (LeaseLost), the others
// go on; at the stop every shard's last checkpoint is the server's.
func TestBatchedCheckpoints(t *testing.T) {
	dsn, conn, rec := begin(t, "go-batch", "b1", "b2", "b3", "b4")
	user := os.Getenv("PGLEASE_TEST_WORKER_USER")
	exec(t, conn, "GRANT EXECUTE ON FUNCTION lease.update_checkpoints(text, text, text, text[], text[], bigint[], bigint[], bigint[]) TO "+pgx.Identifier{user}.Sanitize())
	path := filepath.Join(t.TempDir(), "w.journal")
	var mu sync.Mutex
	last := map[string]string{}
	w := start(t, pglease.Config{ConnString: dsn, Stream: "go-batch", Owner: "go-batch-w", LeaseDuration: 3 * time.Second,
		JournalPath: path, CheckpointTick: 50 * time.Millisecond,
		NewProcessor: func(shard string) pglease.Processor {
			return &proc{rec: rec, shard: shard, hook: func(ctx context.Context, p *proc, cp pglease.Checkpointer) error {
				p.pos.Add(p.pos, big.NewInt(5))
				sub := p.pos.Int64() % 3 // a KPL aggregate's sub-sequence
				cp.Ready(p.pos.String(), sub)
				mu.Lock()
				last[shard] = fmt.Sprintf("%s/%d", p.pos, sub)
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
				return pglease.ErrNoRecords // the hook did the batch
			}}
		}})
	checkpoint := func(shard string) string {
		return scalar(t, conn, "SELECT checkpoint || '/' || checkpoint_sub_sequence FROM lease.shard_leases WHERE app_name = $1 AND stream_name = 'go-batch' AND shard_id = $2", app, shard)
	}
	waitFor(t, "every shard checkpointed", 15*time.Second, func() bool {
		for _, s := range []string{"b1", "b2", "b3", "b4"} {
			if checkpoint(s) == "TRIM_HORIZON/0" {
				return false
			}
		}
		return true
	})
	exec(t, conn, "SELECT lease.take_lease($1, 'go-batch', 'b2', 'thief', lease_count) FROM lease.shard_leases WHERE app_name = $1 AND stream_name = 'go-batch' AND shard_id = 'b2'", app)
	waitFor(t, "LeaseLost of b2", 10*time.Second, func() bool { return rec.has("lost b2") })
	time.Sleep(500 * time.Millisecond)
	w.stop(t)
	mu.Lock()
	defer mu.Unlock()
	for _, s := range []string{"b1", "b3", "b4"} {
		// (ShutdownRequested checkpoints the same sequence at sub-sequence 0)
		if got := checkpoint(s); strings.Split(got, "/")[0] != strings.Split(last[s], "/")[0] {
			t.Errorf("%s: the server's checkpoint %s, the last one handed over %s", s, got, last[s])
		}
	}
	for _, s := range []string{"b1", "b3", "b4"} {
		if rec.has("lost " + s) {
			t.Errorf("%s was lost with b2: %v", s, rec.all())
		}
	}
	batches, refused, subs, largest := 0, 0, 0, 0.0
	for _, e := range journalEvents(t, path) {
		if e["ev"] != "checkpoint" {
			continue
		}
		if n, _ := e["batch"].(float64); n > largest {
			largest = n
		}
		if _, ok := e["batch"]; ok {
			batches++
			if sub, _ := e["sub"].(float64); sub > 0 && e["ok"] == true {
				subs++
			}
		}
		if e["ok"] == false {
			refused++
			if e["shard"] != "b2" {
				t.Errorf("refused: %v", e)
			}
		}
	}
	t.Logf("%d checkpoints written in batches (%d at a sub-sequence), the largest of %v shards; %d refused",
		batches, subs, largest, refused)
	if largest < 3 || refused != 1 || subs == 0 {
		t.Errorf("batches of at most %v shards (want all 4 together), %d refused (want b2's)", largest, refused)
	}
}

// extProc records the ExtendedCheckpoint it starts from; its first batch
// hands over 10/2 (a sub-sequence), its second prepares 15 and stops there.
type extProc struct {
	rec     *recorder
	batches int
}

func (p *extProc) Initialize(ctx context.Context, shard, checkpoint string) error {
	return errors.New("InitializeExtended is the one to call")
}

func (p *extProc) InitializeExtended(ctx context.Context, shard string, cp pglease.ExtendedCheckpoint) error {
	pending := "<nil>"
	if cp.Pending != nil {
		pending = *cp.Pending
	}
	p.rec.add("init %s %s/%d pending %s", shard, cp.Sequence, cp.SubSequence, pending)
	return nil
}

func (p *extProc) ProcessRecords(ctx context.Context, cp pglease.Checkpointer) error {
	p.batches++
	switch p.batches {
	case 1:
		cp.Ready("10", 2)
		return nil
	case 2:
		err := cp.Prepare(ctx, "15")
		p.rec.add("prepared %v", err)
		return err
	}
	return pglease.ErrNoRecords
}

func (p *extProc) LeaseLost(ctx context.Context) {}
func (p *extProc) ShardEnded(ctx context.Context, cp pglease.Checkpointer) error {
	return cp.Checkpoint(ctx, pglease.ShardEnd)
}
func (p *extProc) ShutdownRequested(ctx context.Context, cp pglease.Checkpointer) error { return nil }

// TestSubSequenceAndPending: KCL's checkpoint model: a checkpoint with its
// sub-sequence, and a pending checkpoint prepared (Prepare) and not
// completed, are what the next processor of the shard is given
// (InitializeExtended), from lease.my_leases.
func TestSubSequenceAndPending(t *testing.T) {
	dsn, conn, rec := begin(t, "go-ext", "e1")
	user := os.Getenv("PGLEASE_TEST_WORKER_USER")
	exec(t, conn, "GRANT EXECUTE ON FUNCTION lease.update_checkpoints(text, text, text, text[], text[], bigint[], bigint[], bigint[]) TO "+pgx.Identifier{user}.Sanitize())
	cfg := pglease.Config{ConnString: dsn, Stream: "go-ext", Owner: "go-ext-w",
		NewProcessor: func(shard string) pglease.Processor { return &extProc{rec: rec} }}
	w := start(t, cfg)
	waitFor(t, "the prepare", 10*time.Second, func() bool { return rec.has("prepared") })
	w.stop(t)
	if got := scalar(t, conn, "SELECT checkpoint || '/' || checkpoint_sub_sequence || ' pending ' || coalesce(pending_checkpoint, '<nil>') FROM lease.shard_leases WHERE app_name = $1 AND stream_name = 'go-ext'", app); got != "10/2 pending 15" {
		t.Errorf("the server's checkpoint: %s", got)
	}
	w = start(t, cfg)
	waitFor(t, "the second start", 10*time.Second, func() bool { return len(rec.all()) >= 3 })
	w.stop(t)
	events := rec.all()
	if events[0] != "init e1 TRIM_HORIZON/0 pending <nil>" || events[1] != "prepared <nil>" || events[2] != "init e1 10/2 pending 15" {
		t.Errorf("events: %v", events)
	}
}
