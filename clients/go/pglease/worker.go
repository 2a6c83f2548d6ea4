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

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
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

// ExtendedCheckpoint is a shard's checkpoint as KCL's checkpointer knows it:
// the sequence number (opaque text, never parsed), the sub-sequence of a
// KPL-aggregated record (KCL's ExtendedSequenceNumber; 0 for a plain
// record) and the pending checkpoint a previous owner prepared and did not
// complete (KCL's pendingCheckpointSequenceNumber), or nil.
type ExtendedCheckpoint struct {
	Sequence    string
	SubSequence int64
	Pending     *string
}

// ExtendedInitializer is a Processor that wants the whole checkpoint: the
// worker calls InitializeExtended instead of Initialize.
type ExtendedInitializer interface {
	InitializeExtended(ctx context.Context, shardID string, checkpoint ExtendedCheckpoint) error
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
	// Ready hands the worker the batch's checkpoint, sequence and
	// subSequence (KCL's ExtendedSequenceNumber: the record's place in a
	// KPL aggregate, 0 for a plain record), to write without waiting: the
	// worker gathers the checkpoints of all its shards that become ready
	// within Config.CheckpointTick into one lease.update_checkpoints call,
	// each fenced with its shard's epoch.  A refused one ends that shard
	// only (LeaseLost); one not acknowledged is written again before the
	// shard is handed off or released, or the next one covers it.  In
	// transactional mode it is Checkpoint.
	Ready(sequence string, subSequence int64)
	// Prepare records sequence as the shard's pending checkpoint
	// (lease.prepare_checkpoint, fenced by owner), the first phase of a
	// two-phase checkpoint (KCL's prepareCheckpoint), before the batch acts
	// on the world; the checkpoint the batch then writes completes it.  A
	// later owner's processor is given it (ExtendedCheckpoint.Pending).
	// ErrLeaseLost: the shard is no longer this worker's.  In transactional
	// mode it runs inside the batch's transaction.
	Prepare(ctx context.Context, sequence string) error
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

	// RenewEvery, when set, turns fast failover on (docs/client-rules.md
	// rule 6): the worker declares it on every heartbeat, renew_leases and
	// take_leases, renews (and balances) that often, and processes a shard
	// only while its last acknowledged renewal or round was sent less than
	// RenewEvery + Margin ago (Margin then defaults to the smaller of
	// LeaseDuration / 5 and RenewEvery / 2).  The renewer's connection has a
	// statement timeout of RenewEvery and gives up a call after twice
	// RenewEvery; the processing connection's calls after a fifth of the
	// lease duration: the worker reconnects.  lease.liveness_grace must be
	// at least the margin.
	RenewEvery time.Duration

	// CheckpointTick is how long the worker gathers the checkpoints that
	// processors hand it with Checkpointer.Ready before it writes them in
	// one lease.update_checkpoints call (it writes them sooner at the end
	// of a round over its shards); default 5 ms.
	CheckpointTick time.Duration

	// Transactional turns the transactional (exactly-once) mode on
	// (docs/exactly-once.md): each batch is one transaction on the
	// processing connection.  ProcessRecords gets a Checkpointer that is
	// also a TxCheckpointer: write the batch's output through its Tx(), then
	// call Checkpoint; when ProcessRecords returns nil the worker runs
	// lease.hold_lease and the fenced checkpoint in that transaction and
	// commits, so output and checkpoint commit together or not at all, and
	// never from a worker that lost the lease.
	Transactional bool
}

// TxCheckpointer is the Checkpointer of a batch in transactional mode.
type TxCheckpointer interface {
	Checkpointer
	// Tx is the batch's transaction: the processor's output goes there.
	Tx() pgx.Tx
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

	running    map[string]*running
	unacked    map[string]string // a processed checkpoint whose write failed
	unackedSub map[string]int64  // and its sub-sequence
	ready      []readyCheckpoint // handed over by Checkpointer.Ready, to write together
	readySince time.Time         // when the first of them was handed over
	committed  map[string]string // transactional: the checkpoint the next batch starts from
	unlisted   map[string]bool   // the shards sync_shards last said the lister no longer lists

	renewEveryArg interface{} // fast failover: RenewEvery as the calls' renew_every; nil otherwise
	contract      bool        // false (PG_LEASE_IGNORE_RULE_6=1, a test's negative control): rule 6 ignored
	contactSent   time.Time   // when the last acknowledged renewal or round was sent

	// the last renew_leases list {shard: epoch} and the leases_version of
	// the heartbeat sent before it; nil: list again at the next tick (rule 5)
	listed           map[string]int64
	listedVersion    int64
	listedVersioned  bool      // false: the heartbeat's version was NULL
	listedStaleSince time.Time // when a take last took something
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
		if cfg.RenewEvery > 0 && cfg.RenewEvery/2 < cfg.Margin {
			cfg.Margin = cfg.RenewEvery / 2
		}
	}
	if cfg.BalanceEvery <= 0 {
		cfg.BalanceEvery = cfg.LeaseDuration / 3
		if cfg.RenewEvery > 0 {
			cfg.BalanceEvery = cfg.RenewEvery
		}
	}
	if cfg.MaxSteal <= 0 {
		cfg.MaxSteal = 1
	}
	if cfg.SyncEvery <= 0 {
		cfg.SyncEvery = time.Minute
	}
	if cfg.CheckpointTick <= 0 {
		cfg.CheckpointTick = 5 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = DefaultLogger()
	}
	j, err := openJournal(cfg.JournalPath, cfg.Owner)
	if err != nil {
		return nil, err
	}
	w := &Worker{
		cfg: cfg, log: cfg.Logger, interval: cfg.LeaseDuration.Truncate(time.Millisecond),
		db: NewSession(cfg.ConnString, cfg.Owner), renewDB: NewSession(cfg.ConnString, cfg.Owner+" renewer"),
		journal: j, held: map[string]*lease{}, forgotten: map[string]time.Time{},
		running: map[string]*running{}, unacked: map[string]string{}, unackedSub: map[string]int64{}, committed: map[string]string{},
		contract: os.Getenv("PG_LEASE_IGNORE_RULE_6") != "1",
	}
	if cfg.Transactional {
		// a renewal waits behind a batch transaction holding one of its
		// leases for at most a tenth of the lease duration (55P03: repeated)
		w.renewDB.runtimeParams = map[string]string{"lock_timeout": fmt.Sprint(cfg.LeaseDuration.Milliseconds() / 10)}
	}
	if cfg.RenewEvery > 0 {
		w.renewEveryArg = cfg.RenewEvery.Truncate(time.Millisecond)
		// a renewal that hangs (a slow server, a half-open connection)
		// gives up within RenewEvery; rule 6's deadline stops processing meanwhile
		if w.renewDB.runtimeParams == nil {
			w.renewDB.runtimeParams = map[string]string{}
		}
		w.renewDB.runtimeParams["statement_timeout"] = fmt.Sprint(cfg.RenewEvery.Milliseconds())
		w.renewDB.connectTimeout = cfg.RenewEvery
		if w.renewDB.connectTimeout < time.Second {
			w.renewDB.connectTimeout = time.Second
		}
		w.db.connectTimeout = cfg.LeaseDuration / 5
	}
	return w, nil
}

const (
	sqlTake = "SELECT shard_id, action, lease_epoch" +
		" FROM lease.take_leases($1, $2, $3, $4::interval, NULL, $5::integer, renew_every => $6::interval)"
	sqlRenew     = "SELECT shard_id, handoff_to, lease_epoch FROM lease.renew_leases($1, $2, $3, $4::interval, $5::interval)"
	sqlHeartbeat = "SELECT leases, leases_version, handoffs_pending" +
		" FROM lease.heartbeat($1, $2, $3, $4::interval, $5::interval)"
	sqlHold          = "SELECT lease.hold_lease($1, $2, $3, $4, $5::bigint)"
	sqlMine          = "SELECT shard_id, lease_epoch, checkpoint, handoff_from, checkpoint_sub_sequence, pending_checkpoint FROM lease.my_leases($1, $2, $3)"
	sqlPrepare       = "SELECT lease.prepare_checkpoint($1, $2, $3, $4, $5)"
	sqlCheckpoint    = "SELECT lease.update_checkpoint($1, $2, $3, $4, $5, 0, $6::bigint)"
	sqlCheckpointSub = "SELECT lease.update_checkpoint($1, $2, $3, $4, $5, $6::bigint, $7::bigint)"
	sqlCheckpoints   = "SELECT shard_id, ok, reason" +
		" FROM lease.update_checkpoints($1, $2, $3, $4::text[], $5::text[], $6::bigint[], $7::bigint[])"
	sqlRelease = "SELECT lease.release_lease($1, $2, $3, $4)"
	sqlClose   = "SELECT lease.close_shard($1, $2, $3, $4)"
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
	if w.cfg.RenewEvery > 0 {
		// fast failover: a call that gets no answer (a proxy that lost its
		// server) is given up, its connection dropped, after a fifth of it
		return context.WithTimeout(context.Background(), w.cfg.LeaseDuration/5)
	}
	return context.WithTimeout(context.Background(), w.cfg.LeaseDuration)
}

// deadline is a lease's local deadline (rule 3); in fast-failover mode also
// rule 6's: the last acknowledged renewal or round was sent less than
// RenewEvery + Margin ago.  Under w.mu.
func (w *Worker) deadline(l *lease) time.Time {
	d := l.sent.Add(w.cfg.LeaseDuration - w.cfg.Margin)
	if w.cfg.RenewEvery > 0 && w.contract {
		contact := w.contactSent
		if contact.IsZero() {
			contact = l.sent
		}
		if c := contact.Add(w.cfg.RenewEvery + w.cfg.Margin); c.Before(d) {
			d = c
		}
	}
	return d
}

func (w *Worker) key(extra ...interface{}) []interface{} {
	return append([]interface{}{w.cfg.App, w.cfg.Stream}, extra...)
}

// -- the renewer ---------------------------------------------------------------

// renewOnce is one renewal tick (docs/client-rules.md rule 5): a heartbeat;
// while its leases_version is the one remembered with the last list, no
// handoff is pending and it counts as many leases as the list has, every
// lease on that list is renewed at the epoch listed; otherwise renew_leases
// lists them again.
func (w *Worker) renewOnce(ctx context.Context) error {
	sent := time.Now()
	rows, err := w.renewDB.Call(ctx, sqlHeartbeat, w.key(w.cfg.Owner, w.interval, w.renewEveryArg)...)
	if err == nil && len(rows) != 1 {
		err = fmt.Errorf("heartbeat: %d rows, want 1", len(rows))
	}
	if done, err := w.renewFailed(ctx, "heartbeat", err); done {
		return err
	}
	count, _ := rows[0][0].(int64)
	version, versioned := rows[0][1].(int64)
	pending, _ := rows[0][2].(int64)
	w.mu.Lock()
	w.contacted(sent) // the heartbeat recorded the session too
	if w.listed != nil && versioned && w.listedVersioned && version == w.listedVersion &&
		pending == 0 && count == int64(len(w.listed)) {
		renewed := make([]renewal, 0, len(w.listed))
		for shard, epoch := range w.listed {
			renewed = append(renewed, renewal{shard: shard, epoch: epoch})
		}
		acked := w.renewed(sent, renewed)
		// under the lock: nothing the processing loop does on this answer precedes its entry
		w.journal.write("renewed", fields{"sent": Seconds(sent), "leases": acked, "via": "heartbeat"})
		w.mu.Unlock()
		return nil
	}
	w.listed = nil // stale until a list succeeds (a take sets it stale too)
	w.mu.Unlock()
	return w.list(ctx, version, versioned)
}

// list calls renew_leases: the truth about what the worker holds (rule 5),
// remembered with the leases_version of the heartbeat sent before it.
func (w *Worker) list(ctx context.Context, version int64, versioned bool) error {
	sent := time.Now()
	rows, err := w.renewDB.Call(ctx, sqlRenew, w.key(w.cfg.Owner, w.interval, w.renewEveryArg)...)
	if done, err := w.renewFailed(ctx, "renew_leases", err); done {
		return err
	}
	renewed := make([]renewal, 0, len(rows))
	for _, r := range rows {
		handoffTo, _ := r[1].(string)
		renewed = append(renewed, renewal{shard: r[0].(string), handoffTo: handoffTo, epoch: r[2].(int64)})
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.contacted(sent)
	acked := w.renewed(sent, renewed)
	if !w.listedStaleSince.After(sent) { // no take answered since this list was sent
		w.listed = map[string]int64{}
		for _, r := range renewed {
			w.listed[r.shard] = r.epoch
		}
		w.listedVersion, w.listedVersioned = version, versioned
	}
	w.journal.write("renewed", fields{"sent": Seconds(sent), "leases": acked, "via": "list"})
	return nil
}

// renewFailed sorts out a renewal call's error: done (with nil) when the
// worker is stopping or the call was not acknowledged (no deadline moves),
// done with the error when the rules say to raise it.
func (w *Worker) renewFailed(ctx context.Context, call string, err error) (bool, error) {
	switch {
	case err == nil:
		return false, nil
	case errors.Is(ctx.Err(), context.Canceled):
		return true, nil // the worker is stopping (renewer)
	case Transient(err) || errors.Is(err, context.DeadlineExceeded):
		w.journal.write("renew_failed", fields{"error": err.Error()})
		w.log.Warnf("%s: %s failed: %v", w.cfg.Owner, call, err)
		return true, nil
	}
	return true, err
}

// renewal is one lease an acknowledged renewal renewed.
type renewal struct {
	shard, handoffTo string
	epoch            int64
}

// contacted notes an acknowledged call that recorded the worker's session
// (rule 6's deadline counts from the last one's send time).  Under w.mu.
func (w *Worker) contacted(sent time.Time) {
	if sent.After(w.contactSent) {
		w.contactSent = sent
	}
}

// renewed applies an acknowledged renewal sent at sent: the worker holds
// those leases and no others (but for what it learned since).  Under w.mu;
// returns {shard: epoch}.
func (w *Worker) renewed(sent time.Time, rows []renewal) map[string]int64 {
	acked := map[string]int64{}
	seen := map[string]bool{}
	for _, r := range rows {
		seen[r.shard] = true
		l := w.held[r.shard]
		if f, ok := w.forgotten[r.shard]; (ok && f.After(sent)) || (l != nil && l.learned.After(sent)) {
			continue // this answer predates what we know now
		}
		if l == nil || l.epoch != r.epoch {
			l = &lease{epoch: r.epoch, learned: time.Now()}
			w.held[r.shard] = l
		}
		l.sent = sent
		l.handoffTo = r.handoffTo
		acked[r.shard] = r.epoch
	}
	for shard, l := range w.held {
		if !seen[shard] && l.learned.Before(sent) {
			l.lost = true
		}
	}
	return acked
}

func (w *Worker) renewer(ctx context.Context, stop func()) {
	period, limit := w.cfg.LeaseDuration/3, w.cfg.LeaseDuration
	if w.cfg.RenewEvery > 0 {
		period, limit = w.cfg.RenewEvery, 2*w.cfg.RenewEvery
	}
	tick := time.NewTicker(period)
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
		callCtx, cancel := context.WithTimeout(ctx, limit)
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
	rows, err := w.db.Call(ctx, sqlTake, w.key(w.cfg.Owner, w.interval, w.cfg.MaxSteal, w.renewEveryArg)...)
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
	w.contacted(sent) // the round recorded the session too
	for _, r := range rows {
		if r[1].(string) == "taken" {
			shard, epoch := r[0].(string), r[2].(int64)
			// the renewer lists again before it trusts a heartbeat (rule 5)
			w.listed = nil
			w.listedStaleSince = learned
			w.held[shard] = &lease{epoch: epoch, sent: sent, learned: learned}
			w.journal.write("taken", fields{"shard": shard, "epoch": epoch, "sent": Seconds(sent)})
			w.log.Infof("%s: took %s (epoch %d)", w.cfg.Owner, shard, epoch)
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
	delete(w.unackedSub, shard)
	w.dropReady(shard)
	if !keepLease {
		w.mu.Lock()
		delete(w.held, shard)
		w.forgotten[shard] = time.Now()
		w.mu.Unlock()
	}
	w.journal.write("shutdown", fields{"shard": shard, "reason": reason, "why": why})
	w.log.Infof("%s: stopped processing %s: %s (%s)", w.cfg.Owner, shard, reason, why)
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
		err := initialize(ctx, proc, shard, extended(r))
		cancel()
		if err != nil {
			return false, fmt.Errorf("processor of %s: Initialize: %w", shard, err)
		}
		w.running[shard] = &running{proc: proc, epoch: l.epoch}
		w.committed[shard] = checkpoint
		w.journal.write("initialized", fields{"shard": shard, "epoch": l.epoch, "checkpoint": checkpoint})
		return true, nil
	}
	return false, nil
}

// extended is the ExtendedCheckpoint of a sqlMine row.
func extended(row []interface{}) ExtendedCheckpoint {
	cp := ExtendedCheckpoint{}
	cp.Sequence, _ = row[2].(string)
	cp.SubSequence, _ = row[4].(int64)
	if p, ok := row[5].(string); ok {
		cp.Pending = &p
	}
	return cp
}

// initialize calls the processor's InitializeExtended, or its Initialize.
func initialize(ctx context.Context, proc Processor, shard string, cp ExtendedCheckpoint) error {
	if e, ok := proc.(ExtendedInitializer); ok {
		return e.InitializeExtended(ctx, shard, cp)
	}
	return proc.Initialize(ctx, shard, cp.Sequence)
}

// Prepare: see Checkpointer.
func (c *checkpointer) Prepare(ctx context.Context, sequence string) error {
	w := c.w
	v, err := w.db.One(ctx, sqlPrepare, w.key(c.shard, w.cfg.Owner, sequence)...)
	if err != nil {
		return err
	}
	w.journal.write("prepared", fields{"shard": c.shard, "epoch": c.epoch, "pending": sequence, "ok": v})
	if ok, _ := v.(bool); !ok {
		c.lost = true
		return ErrLeaseLost
	}
	return nil
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
	return c.write(ctx, checkpoint, 0)
}

// Ready: see Checkpointer.
func (c *checkpointer) Ready(sequence string, subSequence int64) {
	c.w.dropReady(c.shard)
	if len(c.w.ready) == 0 {
		c.w.readySince = time.Now()
	}
	c.w.ready = append(c.w.ready, readyCheckpoint{shard: c.shard, epoch: c.epoch, sequence: sequence, sub: subSequence})
}

// write writes one fenced checkpoint with its sub-sequence.
func (c *checkpointer) write(ctx context.Context, checkpoint string, sub int64) error {
	w := c.w
	if err := ctx.Err(); err != nil {
		w.unacked[c.shard], w.unackedSub[c.shard] = checkpoint, sub
		w.journal.write("checkpoint_skipped", fields{"shard": c.shard, "epoch": c.epoch, "checkpoint": checkpoint, "sub": sub})
		return &UnavailableError{Call: "SELECT lease.update_checkpoint", Last: "past the local deadline"}
	}
	if w.cfg.RenewEvery > 0 {
		// fast failover: a checkpoint that gets no answer (a proxy that lost
		// its server) is given up after a fifth of the lease duration, as
		// the worker's other calls on this connection are
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, w.cfg.LeaseDuration/5)
		defer cancel()
	}
	sent := time.Now()
	v, err := w.db.One(ctx, sqlCheckpointSub, w.key(c.shard, w.cfg.Owner, checkpoint, sub, c.epoch)...)
	if Transient(err) {
		// it may have committed, but it is not acknowledged: the next one covers it
		w.unacked[c.shard], w.unackedSub[c.shard] = checkpoint, sub
		w.journal.write("checkpoint_failed", fields{"shard": c.shard, "epoch": c.epoch,
			"checkpoint": checkpoint, "error": err.Error()})
		return err
	}
	if err != nil {
		return err
	}
	ok := v.(bool)
	delete(w.unacked, c.shard)
	delete(w.unackedSub, c.shard)
	w.journal.write("checkpoint", fields{"shard": c.shard, "epoch": c.epoch, "checkpoint": checkpoint, "sub": sub,
		"ok": ok, "sent": Seconds(sent)})
	if !ok {
		c.lost = true
		return ErrLeaseLost
	}
	return nil
}

// flush writes a processed checkpoint whose write failed, before a handoff
// or a release; true when nothing is left unacknowledged.
func (w *Worker) flush(ctx context.Context, cp *checkpointer) bool {
	w.writeReady() // a checkpoint handed over by Ready and not written yet
	if cp.lost {
		return false
	}
	if _, ok := w.running[cp.shard]; !ok {
		return false // the batch refused it: dropped already
	}
	if v, ok := w.unacked[cp.shard]; ok {
		return cp.write(ctx, v, w.unackedSub[cp.shard]) == nil
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
	lost, deadline, handoffTo := l.lost, w.deadline(l), l.handoffTo
	w.mu.Unlock()
	if lost {
		w.drop(shard, ReasonLeaseLost, "not renewed", false)
		return false, nil
	}
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
	if w.stale(l) {
		// the deadline passed since the check above (a pause, a slow my_leases): no batch starts
		w.drop(shard, ReasonLeaseLost, "local deadline", false)
		return false, nil
	}
	var err error
	if !r.ending && w.cfg.Transactional {
		var processed bool
		processed, err = w.transaction(ctx, shard, l, r)
		if errors.Is(err, ErrNoRecords) {
			return false, nil // rolled back: nothing to do
		}
		if !errors.Is(err, ErrShardEnd) {
			return processed, err
		}
	} else if !r.ending {
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

// stale: the lease may no longer be processed (its deadline passed, or the
// last renewal said it is not held).
func (w *Worker) stale(l *lease) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return l.lost || !time.Now().Before(w.deadline(l))
}

// txCheckpointer is a batch's Checkpointer in transactional mode: it notes
// the checkpoint, which the worker writes, fenced, in the batch's
// transaction before the commit.
type txCheckpointer struct {
	tx         pgx.Tx
	checkpoint string
	key        func(extra ...interface{}) []interface{} // app, stream, shard, owner, extra
}

func (c *txCheckpointer) Checkpoint(ctx context.Context, checkpoint string) error {
	c.checkpoint = checkpoint
	return nil
}

func (c *txCheckpointer) Tx() pgx.Tx { return c.tx }

// Ready is Checkpoint in transactional mode (the sub-sequence is not kept there).
func (c *txCheckpointer) Ready(sequence string, subSequence int64) { c.checkpoint = sequence }

// Prepare: lease.prepare_checkpoint in the batch's transaction.
func (c *txCheckpointer) Prepare(ctx context.Context, sequence string) error {
	var ok bool
	if err := c.tx.QueryRow(ctx, sqlPrepare, c.key(sequence)...).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return ErrLeaseLost
	}
	return nil
}

// readyCheckpoint is a checkpoint handed over by Checkpointer.Ready.
type readyCheckpoint struct {
	shard, sequence string
	epoch, sub      int64
}

// dropReady forgets the shard's checkpoint handed over and not written.
func (w *Worker) dropReady(shard string) {
	for i, r := range w.ready {
		if r.shard == shard {
			w.ready = append(w.ready[:i], w.ready[i+1:]...)
			return
		}
	}
}

// writeReady writes the checkpoints handed over by Ready in one
// lease.update_checkpoints call, each fenced with its epoch (those past
// their shard's deadline are not sent: they stay unacknowledged).  A
// refused shard ends only that shard; a call whose outcome is unknown is
// resolved per shard from lease.my_leases.
func (w *Worker) writeReady() {
	batch := w.ready
	w.ready = nil
	if len(batch) == 0 {
		return
	}
	var ids, seqs []string
	var subs, epochs []int64
	sent := time.Now()
	deadline := sent.Add(w.cfg.LeaseDuration)
	for _, r := range batch {
		w.unacked[r.shard], w.unackedSub[r.shard] = r.sequence, r.sub
		w.mu.Lock()
		l := w.held[r.shard]
		stale := l == nil || l.epoch != r.epoch || l.lost || !sent.Before(w.deadline(l))
		if !stale && w.deadline(l).Before(deadline) {
			deadline = w.deadline(l)
		}
		w.mu.Unlock()
		if stale {
			w.journal.write("checkpoint_skipped", fields{"shard": r.shard, "epoch": r.epoch, "checkpoint": r.sequence, "sub": r.sub})
			continue
		}
		ids, seqs, subs, epochs = append(ids, r.shard), append(seqs, r.sequence), append(subs, r.sub), append(epochs, r.epoch)
	}
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	rows, err := w.db.Call(ctx, sqlCheckpoints, w.key(w.cfg.Owner, ids, seqs, subs, epochs)...)
	if err != nil {
		w.journal.write("checkpoints_failed", fields{"shards": ids, "error": err.Error(), "sent": Seconds(sent)})
		if !Transient(err) && !errors.Is(err, context.DeadlineExceeded) {
			w.log.Warnf("%s: update_checkpoints: %v", w.cfg.Owner, err)
		}
		w.resolveReady(ids, seqs, subs, epochs)
		return
	}
	for _, row := range rows {
		shard, ok := row[0].(string), row[1].(bool)
		reason, _ := row[2].(string)
		i := indexOf(ids, shard)
		if i < 0 {
			continue
		}
		w.journal.write("checkpoint", fields{"shard": shard, "epoch": epochs[i], "checkpoint": seqs[i], "sub": subs[i],
			"ok": ok, "sent": Seconds(sent), "batch": len(ids)})
		if ok {
			delete(w.unacked, shard)
			delete(w.unackedSub, shard)
		} else {
			w.drop(shard, ReasonLeaseLost, "checkpoint refused: "+reason, false)
		}
	}
}

// resolveReady: after an update_checkpoints call whose outcome is unknown,
// each shard's checkpoint in lease.my_leases says whether it was written.
// A shard still held at its epoch whose checkpoint is not there stays
// unacknowledged (written again); one no longer held ends.
func (w *Worker) resolveReady(ids, seqs []string, subs, epochs []int64) {
	ctx, cancel := w.callCtx()
	defer cancel()
	rows, err := w.db.Call(ctx, sqlMine, w.key(w.cfg.Owner)...)
	if err != nil {
		return // all stay unacknowledged: the next checkpoint, or the flush before a release, covers them
	}
	for i, shard := range ids {
		held := false
		for _, row := range rows {
			if row[0].(string) != shard || row[1].(int64) != epochs[i] {
				continue
			}
			held = true
			checkpoint, _ := row[2].(string)
			sub, _ := row[4].(int64)
			if checkpoint == seqs[i] && sub == subs[i] {
				delete(w.unacked, shard)
				delete(w.unackedSub, shard)
				w.journal.write("checkpoint", fields{"shard": shard, "epoch": epochs[i], "checkpoint": seqs[i],
					"sub": subs[i], "ok": true, "resolved": true})
			}
		}
		if !held {
			w.drop(shard, ReasonLeaseLost, "not in my_leases", false)
		}
	}
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}

// transaction runs one batch as one transaction: the processor's output,
// hold_lease, the fenced checkpoint, commit.  true when a batch committed;
// ErrShardEnd (rolled back) when the shard has no more records.
func (w *Worker) transaction(ctx context.Context, shard string, l *lease, r *running) (bool, error) {
	conn, err := w.db.connect(ctx)
	if err != nil {
		return false, &UnavailableError{Call: "BEGIN", Last: firstLine(err.Error())}
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		w.db.Close()
		return false, &UnavailableError{Call: "BEGIN", Last: firstLine(err.Error())}
	}
	cp := &txCheckpointer{tx: tx, key: func(extra ...interface{}) []interface{} {
		return w.key(append([]interface{}{shard, w.cfg.Owner}, extra...)...)
	}}
	committing, diverged := false, ""
	err = func() error {
		if err := r.proc.ProcessRecords(ctx, cp); err != nil {
			return err
		}
		if cp.checkpoint == "" {
			return ErrNoRecords
		}
		var held *string
		if err := tx.QueryRow(ctx, sqlHold, w.key(shard, w.cfg.Owner, l.epoch)...).Scan(&held); err != nil {
			return err
		}
		if held == nil || *held != w.committed[shard] {
			// a commit acknowledged to us is not there (lost in a crash with
			// synchronous_commit off, or a failover): go on from the server's
			if held != nil {
				diverged = *held
			}
			return errDiverged
		}
		var ok bool
		if err := tx.QueryRow(ctx, sqlCheckpoint, w.key(shard, w.cfg.Owner, cp.checkpoint, l.epoch)...).Scan(&ok); err != nil {
			return err
		}
		if !ok {
			return ErrLeaseLost
		}
		committing = true
		w.db.warning = ""
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		if w.db.warning != "" {
			return &AmbiguousError{Err: &noticeError{w.db.warning}} // committed here, perhaps only here
		}
		return nil
	}()
	if err == nil {
		w.committed[shard] = cp.checkpoint
		w.journal.write("checkpoint", fields{"shard": shard, "epoch": l.epoch, "checkpoint": cp.checkpoint,
			"ok": true, "tx": true})
		return true, nil
	}
	if !committing && !conn.IsClosed() {
		rbCtx, cancel := w.callCtx()
		if tx.Rollback(rbCtx) != nil {
			w.db.Close()
		}
		cancel()
	}
	code, message := sqlState(err)
	var pgErr *pgconn.PgError
	var ambiguous *AmbiguousError
	isDB := errors.As(err, &pgErr) || conn.IsClosed() || errors.As(err, &ambiguous) ||
		errors.Is(err, context.DeadlineExceeded)
	switch {
	case errors.Is(err, ErrNoRecords), errors.Is(err, ErrShardEnd):
		return false, err
	case errors.Is(err, errDiverged):
		w.journal.write("tx_diverged", fields{"shard": shard, "epoch": l.epoch,
			"expected": w.committed[shard], "checkpoint": diverged})
		return false, w.reinitialize(ctx, shard, r, ExtendedCheckpoint{Sequence: diverged})
	case errors.Is(err, ErrLeaseLost):
		w.journal.write("checkpoint", fields{"shard": shard, "epoch": l.epoch, "checkpoint": cp.checkpoint, "ok": false})
		w.drop(shard, ReasonLeaseLost, "checkpoint refused", false)
		return false, nil
	case !isDB && !Transient(err):
		return false, callbackError(shard, "ProcessRecords", err)
	case code != "" && Classify(code, message) == ActionDrop:
		w.journal.write("checkpoint", fields{"shard": shard, "epoch": l.epoch, "checkpoint": cp.checkpoint,
			"ok": false, "error": firstLine(err.Error())})
		w.drop(shard, ReasonLeaseLost, "not held", false)
		return false, nil
	case code != "" && (Classify(code, message) == ActionRaise || Classify(code, message) == ActionFatal) &&
		!conn.IsClosed():
		return false, fmt.Errorf("processor of %s: transaction: %w", shard, err)
	}
	w.db.Close()
	w.journal.write("tx_failed", fields{"shard": shard, "epoch": l.epoch, "checkpoint": cp.checkpoint,
		"unknown": committing, "error": firstLine(err.Error())})
	return false, w.resolve(shard, l, r, committing, cp.checkpoint)
}

var errDiverged = errors.New("pglease: the server's checkpoint is not the one committed here")

// reinitialize restarts a processor from checkpoint (the server's).
func (w *Worker) reinitialize(ctx context.Context, shard string, r *running, checkpoint ExtendedCheckpoint) error {
	w.committed[shard] = checkpoint.Sequence
	if err := initialize(ctx, r.proc, shard, checkpoint); err != nil {
		return callbackError(shard, "Initialize", err)
	}
	return nil
}

// resolve restarts the processor from the checkpoint my_leases holds after
// a batch transaction failed (committing: the COMMIT's outcome is unknown,
// tried its checkpoint; equal means it committed).
func (w *Worker) resolve(shard string, l *lease, r *running, committing bool, tried string) error {
	ctx, cancel := w.callCtx()
	defer cancel()
	rows, err := w.db.Call(ctx, sqlMine, w.key(w.cfg.Owner)...)
	if err != nil {
		w.drop(shard, ReasonLeaseLost, "unresolved", true) // start reads it again
		return err
	}
	for _, row := range rows {
		if row[0].(string) != shard || row[1].(int64) != l.epoch {
			continue
		}
		cp := extended(row)
		w.journal.write("tx_resolved", fields{"shard": shard, "epoch": l.epoch, "checkpoint": cp.Sequence,
			"committed": committing && cp.Sequence == tried})
		if cp.Sequence == ShardEnd {
			delete(w.running, shard)
			w.drop(shard, ReasonShardEnded, "closed", false)
			return nil
		}
		return w.reinitialize(ctx, shard, r, cp)
	}
	w.drop(shard, ReasonLeaseLost, "not in my_leases", false)
	return nil
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
	sort.Strings(created)
	for _, shard := range created {
		w.log.Infof("%s: created the lease of %s (shard discovery)", w.cfg.Owner, shard)
	}
	sort.Strings(unlisted)
	now := map[string]bool{}
	for _, shard := range unlisted {
		now[shard] = true
		if !w.unlisted[shard] {
			w.log.Infof("%s: %s is no longer listed (its lease is not ended: a worker ends it at its end)", w.cfg.Owner, shard)
		}
	}
	w.unlisted = now
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
	w.log.Debugf("%s: working on %s/%s (lease %v, margin %v)", w.cfg.Owner, w.cfg.App, w.cfg.Stream,
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
			if len(w.ready) > 0 && time.Since(w.readySince) >= w.cfg.CheckpointTick {
				w.writeReady()
			}
		}
		w.writeReady() // the round's checkpoints handed over by Ready
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
	w.writeReady() // before the releases
	w.journal.write("stopping", fields{"held": shards})
	w.log.Debugf("%s: stopping, releasing %d leases", w.cfg.Owner, len(shards))
	for _, shard := range shards {
		w.mu.Lock()
		l := w.held[shard]
		deadline := w.deadline(l)
		w.mu.Unlock()
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
		w.log.Infof("%s: released %s", w.cfg.Owner, shard)
	}
}
