package pglease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"
)

// Checkpoints with a meaning of their own, and why a processor stopped.
const (
	// ShardEnd is the checkpoint of a shard with no more records:
	// Checkpointer.Checkpoint(ctx, ShardEnd) closes the shard (lease.close_shard).
	ShardEnd = "SHARD_END"
	// TrimHorizon is the checkpoint of a shard nothing was acknowledged of yet.
	TrimHorizon = "TRIM_HORIZON"

	// The reasons the journal gives for a shard's processor stopping.
	ReasonLeaseLost     = "lease lost"
	ReasonHandedOff     = "handed off"
	ReasonShardEnded    = "shard ended"
	ReasonWorkerStopped = "worker stopped"
)

var (
	// ErrShardEnd is what ProcessRecords returns when the shard has no more
	// records: the worker calls ShardEnded.
	ErrShardEnd = errors.New("pglease: shard ended")
	// ErrNoRecords is what ProcessRecords returns when there was nothing to
	// process: the worker waits a little before the next batch.
	ErrNoRecords = errors.New("pglease: no records")
	// ErrLeaseLost is what Checkpointer.Checkpoint returns when the server
	// refused a fenced checkpoint (or a close): the lease is not this
	// worker's any more.  The worker calls LeaseLost; do not retry.
	ErrLeaseLost = errors.New("pglease: lease lost")
)

// Processor processes one shard; a ProcessorFactory makes one for every
// shard the worker starts (again after a lease is lost and taken back).
// Its callbacks map KCL's ShardRecordProcessor onto pg_lease's protocol
// (docs/clients/go.md).  Every ctx a callback gets is done at the shard's
// local deadline (the send time of its last acknowledged renewal + the lease
// duration - the margin, as it stood when the callback started): stop and
// return then.
type Processor interface {
	// Initialize: the worker now processes the shard, after checkpoint (the
	// last acknowledged one; TrimHorizon for a fresh shard).  An error stops
	// the worker.
	Initialize(ctx context.Context, shardID, checkpoint string) error
	// ProcessRecords processes the next batch and checkpoints it through cp
	// (written fenced, before the next batch).  It returns nil, ErrNoRecords
	// when there was nothing to process, or ErrShardEnd when the shard has no
	// more records.  Any other error that is not Transient stops the worker.
	ProcessRecords(ctx context.Context, cp Checkpointer) error
	// LeaseLost: the lease is no longer this worker's (a refused checkpoint,
	// a renewal that no longer lists it, the local deadline): stop, do not
	// checkpoint.  The processor is then dropped.
	LeaseLost(ctx context.Context)
	// ShardEnded: ProcessRecords returned ErrShardEnd.  Checkpoint anything
	// outstanding, then call cp.Checkpoint(ctx, ShardEnd) to close the shard
	// (the worker closes it if you return without).  The processor is then
	// dropped (after LeaseLost, if the close was refused).
	ShardEnded(ctx context.Context, cp Checkpointer) error
	// ShutdownRequested: the shard is being handed off to another worker
	// (renew_leases reported handoff_to) or the worker is stopping.
	// Checkpoint what you processed through cp; the worker then releases the
	// lease.  The processor is then dropped.
	ShutdownRequested(ctx context.Context, cp Checkpointer) error
}

// ProcessorFactory returns a new Processor for a shard.
type ProcessorFactory func(shardID string) Processor

// Checkpointer writes a shard's checkpoint, fenced with the lease epoch the
// worker learned for it.  It is valid during the callback it was given to,
// on that callback's goroutine.
type Checkpointer interface {
	// Checkpoint writes checkpoint (lease.update_checkpoint with the lease
	// epoch; ShardEnd: lease.close_shard), repeating it per the rules until
	// ctx is done.  nil: acknowledged.  ErrLeaseLost: refused, the lease is
	// lost.  A Transient error: not acknowledged (it may have committed); the
	// worker writes it again before the lease is handed off or released, or
	// the next checkpoint covers it.
	Checkpoint(ctx context.Context, checkpoint string) error
}

// ShardLister returns the shards the stream has now (for example from the
// stream's API), each with its parents; see Config.ListShards.
type ShardLister func(ctx context.Context) ([]ListedShard, error)

// Config configures a Worker.
type Config struct {
	ConnString   string           // libpq URL or key=value string; PG* variables fill in the rest
	App, Stream  string           // the lease table's app_name and stream_name
	Owner        string           // this worker's name, unique in the fleet
	NewProcessor ProcessorFactory // required

	LeaseDuration time.Duration // default 10 s
	Margin        time.Duration // default LeaseDuration / 5
	BalanceEvery  time.Duration // between take_leases rounds; default LeaseDuration / 3
	MaxSteal      int           // handoffs one round may request; default 1
	JournalPath   string        // append what the server acknowledged, one JSON line per event
	Logger        *Logger       // default DefaultLogger()

	// ListShards, when set, is called every SyncEvery (default one minute)
	// and its answer passed to lease.sync_shards: the leases of new shards
	// are created with their lineage, and leases of shards it no longer
	// lists are reported (logged at WARN; nothing is ended).
	ListShards ShardLister
	SyncEvery  time.Duration
}

// lease is what the worker knows of one lease it holds.
type lease struct {
	epoch     int64
	sent      time.Time // when the last acknowledged take or renewal was sent
	learned   time.Time // when this epoch became known here
	handoffTo string
	lost      bool
}

// running is a started processor.
type running struct {
	proc    Processor
	epoch   int64
	ending  bool // ShardEnded was called; the close is still to be acknowledged
	leaving bool // ShutdownRequested was called for a handoff; the release is still to be done
}

// Worker runs the worker loop of docs/client-rules.md for one owner on one
// stream: a renewal timer on its own connection, a processing loop on
// another, the local deadline, fenced checkpoints, graceful handoff.
type Worker struct {
	cfg      Config
	log      *Logger
	interval time.Duration
	db       *Session // taking, reading, checkpointing
	renewDB  *Session // renewing only
	journal  *journal

	mu        sync.Mutex
	held      map[string]*lease    // shared with the renewer
	forgotten map[string]time.Time // when a shard was dropped here
	fatal     error                // what stopped the renewer

	running map[string]*running
	unacked map[string]string // a processed checkpoint whose write failed
}

// NewWorker checks cfg and returns a worker; Run runs it.
func NewWorker(cfg Config) (*Worker, error) {
	if cfg.App == "" || cfg.Stream == "" || cfg.Owner == "" || cfg.NewProcessor == nil {
		return nil, errors.New("pglease: Config needs App, Stream, Owner and NewProcessor")
	}
	if cfg.LeaseDuration <= 0 {
		cfg.LeaseDuration = 10 * time.Second
	}
	if cfg.Margin <= 0 {
		cfg.Margin = cfg.LeaseDuration / 5
	}
	if cfg.BalanceEvery <= 0 {
		cfg.BalanceEvery = cfg.LeaseDuration / 3
	}
	if cfg.MaxSteal <= 0 {
		cfg.MaxSteal = 1
	}
	if cfg.SyncEvery <= 0 {
		cfg.SyncEvery = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = DefaultLogger()
	}
	j, err := openJournal(cfg.JournalPath, cfg.Owner)
	if err != nil {
		return nil, err
	}
	return &Worker{
		cfg: cfg, log: cfg.Logger, interval: cfg.LeaseDuration.Truncate(time.Millisecond),
		db: NewSession(cfg.ConnString, cfg.Owner), renewDB: NewSession(cfg.ConnString, cfg.Owner+" renewer"),
		journal: j, held: map[string]*lease{}, forgotten: map[string]time.Time{},
		running: map[string]*running{}, unacked: map[string]string{},
	}, nil
}

const (
	sqlTake       = "SELECT shard_id, action, lease_epoch FROM lease.take_leases($1, $2, $3, $4::interval, NULL, $5::integer)"
	sqlRenew      = "SELECT shard_id, handoff_to, lease_epoch FROM lease.renew_leases($1, $2, $3, $4::interval)"
	sqlMine       = "SELECT shard_id, lease_epoch, checkpoint, handoff_from FROM lease.my_leases($1, $2, $3)"
	sqlCheckpoint = "SELECT lease.update_checkpoint($1, $2, $3, $4, $5, 0, $6::bigint)"
	sqlRelease    = "SELECT lease.release_lease($1, $2, $3, $4)"
	sqlClose      = "SELECT lease.close_shard($1, $2, $3, $4)"
)

// journal appends what the server acknowledged, one JSON line per event
// (O_APPEND: whole lines survive a SIGKILL); the format of the other clients,
// read by test/clients/check.py.
type journal struct {
	mu    sync.Mutex
	f     *os.File
	owner string
}

func openJournal(path, owner string) (*journal, error) {
	j := &journal{owner: owner}
	if path != "" {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return nil, err
		}
		j.f = f
	}
	return j, nil
}

// Seconds returns t as seconds since the epoch (the journals' time format).
func Seconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

func (j *journal) write(ev string, fields map[string]interface{}) {
	if j.f == nil {
		return
	}
	if fields == nil {
		fields = map[string]interface{}{}
	}
	fields["ev"], fields["w"], fields["t"] = ev, j.owner, Seconds(time.Now())
	line, _ := json.Marshal(fields)
	j.mu.Lock()
	defer j.mu.Unlock()
	_, _ = j.f.Write(append(line, '\n'))
}

type fields = map[string]interface{}

// callCtx bounds one of the worker's own calls (a renewal, a take, a
// release) by a lease duration: an answer later than that is of no use, and
// a call stuck behind a lock must not hold up a stop.
func (w *Worker) callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), w.cfg.LeaseDuration)
}

func (w *Worker) key(extra ...interface{}) []interface{} {
	return append([]interface{}{w.cfg.App, w.cfg.Stream}, extra...)
}

// -- the renewer ---------------------------------------------------------------

func (w *Worker) renewOnce(ctx context.Context) error {
	sent := time.Now()
	rows, err := w.renewDB.Call(ctx, sqlRenew, w.key(w.cfg.Owner, w.interval)...)
	if err != nil && errors.Is(ctx.Err(), context.Canceled) {
		return nil // the worker is stopping (renewer)
	}
	if Transient(err) {
		w.journal.write("renew_failed", fields{"error": err.Error()})
		w.log.Warnf("renewal failed: %v", err)
		return nil
	}
	if err != nil {
		return err
	}
	acked := map[string]int64{}
	w.mu.Lock()
	seen := map[string]bool{}
	for _, r := range rows {
		shard, epoch := r[0].(string), r[2].(int64)
		handoffTo, _ := r[1].(string)
		seen[shard] = true
		l := w.held[shard]
		if f, ok := w.forgotten[shard]; (ok && f.After(sent)) || (l != nil && l.learned.After(sent)) {
			continue // this answer predates what we know now
		}
		if l == nil || l.epoch != epoch {
			l = &lease{epoch: epoch, learned: time.Now()}
			w.held[shard] = l
		}
		l.sent = sent
		l.handoffTo = handoffTo
		acked[shard] = epoch
	}
	for shard, l := range w.held {
		if !seen[shard] && l.learned.Before(sent) {
			l.lost = true
		}
	}
	w.mu.Unlock()
	w.journal.write("renewed", fields{"sent": Seconds(sent), "leases": acked})
	return nil
}

func (w *Worker) renewer(ctx context.Context, stop func()) {
	tick := time.NewTicker(w.cfg.LeaseDuration / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		// a tick and the stop may both be ready, and select picks either
		if ctx.Err() != nil {
			return
		}
		// the stop ends a renewal that waits (for a locked row, a server
		// that does not answer) at once: the stop releases every lease
		// anyway, and the stuck renewal would hold up Run by a lease
		// duration, once for every tick it found ready
		callCtx, cancel := context.WithTimeout(ctx, w.cfg.LeaseDuration)
		err := w.renewOnce(callCtx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			// an error the rules say to raise: stop the worker with it
			w.journal.write("renewer_failed", fields{"error": err.Error()})
			w.mu.Lock()
			w.fatal = fmt.Errorf("renew_leases: %w", err)
			w.mu.Unlock()
			stop()
			return
		}
	}
}

// -- the processing loop -----------------------------------------------------------

func (w *Worker) balance(ctx context.Context) error {
	sent := time.Now()
	rows, err := w.db.Call(ctx, sqlTake, w.key(w.cfg.Owner, w.interval, w.cfg.MaxSteal)...)
	if Transient(err) {
		w.journal.write("take_failed", fields{"error": err.Error()})
		w.log.Warnf("take_leases failed: %v", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("take_leases: %w", err)
	}
	learned := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range rows {
		if r[1].(string) == "taken" {
			shard, epoch := r[0].(string), r[2].(int64)
			w.held[shard] = &lease{epoch: epoch, sent: sent, learned: learned}
			w.journal.write("taken", fields{"shard": shard, "epoch": epoch, "sent": Seconds(sent)})
			w.log.Debugf("took %s at epoch %d", shard, epoch)
		}
	}
	return nil
}

// drop forgets the shard's processor (calling LeaseLost first when reason is
// ReasonLeaseLost) and, unless keepLease, the lease.
func (w *Worker) drop(shard, reason, why string, keepLease bool) {
	if r, ok := w.running[shard]; ok {
		delete(w.running, shard)
		if reason == ReasonLeaseLost {
			ctx, cancel := context.WithTimeout(context.Background(), w.cfg.Margin)
			r.proc.LeaseLost(ctx)
			cancel()
		}
	}
	delete(w.unacked, shard)
	if !keepLease {
		w.mu.Lock()
		delete(w.held, shard)
		w.forgotten[shard] = time.Now()
		w.mu.Unlock()
	}
	w.journal.write("shutdown", fields{"shard": shard, "reason": reason, "why": why})
	if reason == ReasonLeaseLost {
		w.log.Infof("%s: lease lost (%s)", shard, why)
	}
}

// start starts a processor from the checkpoint in my_leases; false when
// my_leases disagrees.
func (w *Worker) start(shard string, l *lease, deadline time.Time) (bool, error) {
	callCtx, cancel := w.callCtx()
	rows, err := w.db.Call(callCtx, sqlMine, w.key(w.cfg.Owner)...)
	cancel()
	if err != nil {
		return false, err
	}
	for _, r := range rows {
		if r[0].(string) != shard || r[3] != nil || r[1].(int64) != l.epoch {
			continue
		}
		checkpoint, _ := r[2].(string)
		if checkpoint == ShardEnd {
			return false, nil
		}
		proc := w.cfg.NewProcessor(shard)
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		err := proc.Initialize(ctx, shard, checkpoint)
		cancel()
		if err != nil {
			return false, fmt.Errorf("processor of %s: Initialize: %w", shard, err)
		}
		w.running[shard] = &running{proc: proc, epoch: l.epoch}
		w.journal.write("initialized", fields{"shard": shard, "epoch": l.epoch, "checkpoint": checkpoint})
		return true, nil
	}
	return false, nil
}

// checkpointer is a shard's Checkpointer for one callback.
type checkpointer struct {
	w      *Worker
	shard  string
	epoch  int64
	lost   bool // a checkpoint or the close was refused
	closed bool // the close was acknowledged
}

func (c *checkpointer) Checkpoint(ctx context.Context, checkpoint string) error {
	w := c.w
	if checkpoint == ShardEnd {
		v, err := w.db.One(ctx, sqlClose, w.key(c.shard, w.cfg.Owner)...)
		if err != nil {
			return err
		}
		ok := v.(bool)
		w.journal.write("closed", fields{"shard": c.shard, "ok": ok})
		if !ok {
			c.lost = true
			return ErrLeaseLost
		}
		c.closed = true
		return nil
	}
	v, err := w.db.One(ctx, sqlCheckpoint, w.key(c.shard, w.cfg.Owner, checkpoint, c.epoch)...)
	if Transient(err) {
		// it may have committed, but it is not acknowledged: the next one covers it
		w.unacked[c.shard] = checkpoint
		w.journal.write("checkpoint_failed", fields{"shard": c.shard, "epoch": c.epoch,
			"checkpoint": checkpoint, "error": err.Error()})
		return err
	}
	if err != nil {
		return err
	}
	ok := v.(bool)
	delete(w.unacked, c.shard)
	w.journal.write("checkpoint", fields{"shard": c.shard, "epoch": c.epoch, "checkpoint": checkpoint, "ok": ok})
	if !ok {
		c.lost = true
		return ErrLeaseLost
	}
	return nil
}

// flush writes a processed checkpoint whose write failed, before a handoff
// or a release; true when nothing is left unacknowledged.
func (w *Worker) flush(ctx context.Context, cp *checkpointer) bool {
	if v, ok := w.unacked[cp.shard]; ok {
		return cp.Checkpoint(ctx, v) == nil
	}
	return true
}

// callbackError is a processor's error that stops the worker.
func callbackError(shard, callback string, err error) error {
	return fmt.Errorf("processor of %s: %s: %w", shard, callback, err)
}

// work takes one step for one shard; true when a batch was processed.
func (w *Worker) work(shard string, l *lease) (bool, error) {
	if r, ok := w.running[shard]; ok && r.epoch != l.epoch {
		// it changed hands meanwhile (e.g. expired and taken again): restart from the checkpoint
		w.drop(shard, ReasonLeaseLost, "epoch changed", true)
		return false, nil
	}
	w.mu.Lock()
	lost, sent, handoffTo := l.lost, l.sent, l.handoffTo
	w.mu.Unlock()
	if lost {
		w.drop(shard, ReasonLeaseLost, "not renewed", false)
		return false, nil
	}
	deadline := sent.Add(w.cfg.LeaseDuration - w.cfg.Margin)
	if !time.Now().Before(deadline) {
		w.drop(shard, ReasonLeaseLost, "local deadline", false)
		return false, nil
	}
	if _, ok := w.running[shard]; !ok {
		started, err := w.start(shard, l, deadline)
		if err != nil {
			return false, err
		}
		if !started {
			w.drop(shard, ReasonLeaseLost, "not in my_leases", false)
			return false, nil
		}
	}
	r := w.running[shard]
	cp := &checkpointer{w: w, shard: shard, epoch: l.epoch}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if handoffTo != "" {
		// hand it over once every processed batch is checkpointed
		if !r.leaving {
			r.leaving = true
			err := r.proc.ShutdownRequested(ctx, cp)
			if err != nil && !Transient(err) && !errors.Is(err, ErrLeaseLost) {
				return false, callbackError(shard, "ShutdownRequested", err)
			}
		}
		if cp.lost {
			w.drop(shard, ReasonLeaseLost, "checkpoint refused", false)
			return false, nil
		}
		if !w.flush(ctx, cp) {
			if cp.lost {
				w.drop(shard, ReasonLeaseLost, "checkpoint refused", false)
			}
			return false, nil
		}
		callCtx, cancel := w.callCtx()
		ok, err := w.db.One(callCtx, sqlRelease, w.key(shard, w.cfg.Owner)...)
		cancel()
		if err != nil {
			return false, err
		}
		w.journal.write("released", fields{"shard": shard, "ok": ok, "to": handoffTo})
		delete(w.running, shard) // ShutdownRequested was its last callback
		w.drop(shard, ReasonHandedOff, "handoff to "+handoffTo, false)
		return false, nil
	}
	var err error
	if !r.ending {
		err = r.proc.ProcessRecords(ctx, cp)
	}
	switch {
	case cp.lost:
		w.drop(shard, ReasonLeaseLost, "checkpoint refused", false)
		return false, nil
	case r.ending || errors.Is(err, ErrShardEnd):
		return w.end(ctx, shard, r, cp)
	case err == nil:
		return true, nil
	case errors.Is(err, ErrNoRecords):
		return false, nil
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil:
		w.drop(shard, ReasonLeaseLost, "local deadline", false)
		return false, nil
	case errors.Is(err, ErrLeaseLost):
		w.drop(shard, ReasonLeaseLost, "lease lost", false)
		return false, nil
	case Transient(err):
		return true, err
	}
	return false, callbackError(shard, "ProcessRecords", err)
}

// end runs ShardEnded and closes the shard.
func (w *Worker) end(ctx context.Context, shard string, r *running, cp *checkpointer) (bool, error) {
	if !r.ending {
		r.ending = true
		if err := r.proc.ShardEnded(ctx, cp); err != nil && !Transient(err) && !errors.Is(err, ErrLeaseLost) {
			return false, callbackError(shard, "ShardEnded", err)
		}
	}
	if !cp.closed && !cp.lost {
		if err := cp.Checkpoint(ctx, ShardEnd); Transient(err) {
			return false, err // ShardEnded is not called again: the next round closes it
		} else if err != nil && !errors.Is(err, ErrLeaseLost) {
			return false, err
		}
	}
	if cp.lost {
		w.drop(shard, ReasonLeaseLost, "closed", false)
		return true, nil
	}
	delete(w.running, shard) // ShardEnded was its last callback
	w.drop(shard, ReasonShardEnded, "closed", false)
	w.log.Infof("%s: shard ended", shard)
	return true, nil
}

func (w *Worker) sync(ctx context.Context) error {
	shards, err := w.cfg.ListShards(ctx)
	if err != nil {
		w.log.Warnf("ListShards: %v", err)
		w.journal.write("sync_failed", fields{"error": err.Error()})
		return nil
	}
	results, err := SyncShards(ctx, w.db, w.cfg.App, w.cfg.Stream, shards)
	if Transient(err) {
		w.log.Warnf("sync_shards: %v", err)
		w.journal.write("sync_failed", fields{"error": err.Error()})
		return nil
	}
	if err != nil {
		return fmt.Errorf("sync_shards: %w", err)
	}
	created, unlisted := []string{}, []string{}
	for _, r := range results {
		switch r.Action {
		case "created":
			created = append(created, r.ShardID)
		case "unlisted":
			unlisted = append(unlisted, r.ShardID)
		}
	}
	w.journal.write("synced", fields{"listed": len(shards), "created": created, "unlisted": unlisted})
	if len(created) > 0 {
		w.log.Infof("sync_shards created the leases of %v", created)
	}
	if len(unlisted) > 0 {
		w.log.Warnf("sync_shards: leases %v are not listed by the stream and not ended", unlisted)
	}
	return nil
}

// every runs step (bounded by callCtx) once *next has come, and sets the
// next time.
func (w *Worker) every(next *time.Time, period time.Duration, step func(context.Context) error) error {
	if time.Now().Before(*next) {
		return nil
	}
	ctx, cancel := w.callCtx()
	defer cancel()
	if err := step(ctx); err != nil {
		return err
	}
	*next = time.Now().Add(period)
	return nil
}

func (w *Worker) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fatal
}

// Run runs the worker until ctx is done, then stops gracefully: each
// processor gets ShutdownRequested, its last checkpoint is written, and every
// lease is released.  It returns nil after a graceful stop, or the error that
// stopped the worker (one the rules say to raise, such as a role the server
// refuses, or a processor's), after releasing what it could.
func (w *Worker) Run(ctx context.Context) error {
	w.journal.write("started", fields{"lease_duration": w.cfg.LeaseDuration.Seconds(), "margin": w.cfg.Margin.Seconds()})
	w.log.Infof("%s: working on %s/%s (lease %v, margin %v)", w.cfg.Owner, w.cfg.App, w.cfg.Stream,
		w.cfg.LeaseDuration, w.cfg.Margin)
	loopCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); w.renewer(loopCtx, stop) }()
	var fatal error
	var nextBalance, nextSync time.Time
	for loopCtx.Err() == nil && fatal == nil {
		if fatal = w.every(&nextBalance, w.cfg.BalanceEvery, w.balance); fatal != nil {
			break
		}
		if w.cfg.ListShards != nil {
			if fatal = w.every(&nextSync, w.cfg.SyncEvery, w.sync); fatal != nil {
				break
			}
		}
		w.mu.Lock()
		shards := make([]string, 0, len(w.held))
		leases := map[string]*lease{}
		for s, l := range w.held {
			shards = append(shards, s)
			leases[s] = l
		}
		w.mu.Unlock()
		sort.Strings(shards)
		busy := false
		for _, shard := range shards {
			if loopCtx.Err() != nil {
				break
			}
			b, err := w.work(shard, leases[shard])
			if Transient(err) {
				w.journal.write("call_failed", fields{"shard": shard, "error": err.Error()})
				w.log.Warnf("%s: %v", shard, err)
			} else if err != nil {
				fatal = err
				break
			}
			busy = busy || b
		}
		if !busy {
			select {
			case <-loopCtx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	stop()
	wg.Wait()
	if fatal == nil {
		fatal = w.failed()
	}
	w.stopAll()
	w.db.Close()
	w.renewDB.Close()
	if fatal != nil {
		w.journal.write("failed", fields{"error": fatal.Error()})
		w.log.Errorf("%s: stopped: %v", w.cfg.Owner, fatal)
	}
	return fatal
}

// stopAll shuts every processor down (ShutdownRequested), writes what is
// unacknowledged, and releases every lease.
func (w *Worker) stopAll() {
	w.mu.Lock()
	shards := make([]string, 0, len(w.held))
	for s := range w.held {
		shards = append(shards, s)
	}
	w.mu.Unlock()
	sort.Strings(shards)
	w.journal.write("stopping", fields{"held": shards})
	for _, shard := range shards {
		w.mu.Lock()
		l := w.held[shard]
		w.mu.Unlock()
		deadline := l.sent.Add(w.cfg.LeaseDuration - w.cfg.Margin)
		if r, ok := w.running[shard]; ok && r.epoch == l.epoch && !r.leaving && time.Now().Before(deadline) {
			ctx, cancel := context.WithDeadline(context.Background(), deadline)
			cp := &checkpointer{w: w, shard: shard, epoch: l.epoch}
			if err := r.proc.ShutdownRequested(ctx, cp); err != nil {
				w.log.Warnf("%s: ShutdownRequested: %v", shard, err)
			}
			if !cp.lost {
				w.flush(ctx, cp) // before the release
			}
			cancel()
			delete(w.running, shard)
		} else if ok && !r.leaving {
			// past its local deadline (or at another epoch): it may be lost
			w.drop(shard, ReasonLeaseLost, "stopped after the local deadline", true)
		}
		delete(w.running, shard)
		callCtx, cancel := w.callCtx()
		ok, err := w.db.One(callCtx, sqlRelease, w.key(shard, w.cfg.Owner)...)
		cancel()
		if err != nil {
			w.journal.write("call_failed", fields{"shard": shard, "error": err.Error()})
			continue
		}
		w.journal.write("released", fields{"shard": shard, "ok": ok})
	}
}
