// Command example_worker is a complete pg_lease worker: it processes a
// synthetic stream by appending each record to a log.
//
//	example_worker DSN APP STREAM OWNER DIR [LEASE_SECONDS]
//
// Shard "<name>-end<N>" holds records 1..N and then ends; every other shard never
// ends.  Record i of a shard is "processed" by appending {"shard", "seq": i} to
// DIR/OWNER.records; the worker's journal (what the server acknowledged to it:
// takes, renewals with their epochs, checkpoints) goes to DIR/OWNER.journal.
// SIGTERM stops the worker gracefully: it finishes its batch and releases its leases.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"math/big"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pg-lease/pg_lease/clients/go/pglease"
)

const batch = 5 // records per batch; each batch is checkpointed

// appendToLog processes one shard.
type appendToLog struct {
	log      *os.File
	owner    string
	shard    string
	position *big.Int // the last record processed (checkpoints are opaque: these are decimal, of any length)
}

var one = big.NewInt(1)

func (p *appendToLog) Initialize(ctx context.Context, shardID, checkpoint string) error {
	// the checkpoint is the last record acknowledged, or TRIM_HORIZON at the start
	p.position = new(big.Int)
	if checkpoint == pglease.TrimHorizon {
		return nil
	}
	if _, ok := p.position.SetString(checkpoint, 10); !ok {
		return fmt.Errorf("checkpoint %q is not a sequence number", checkpoint)
	}
	return nil
}

func (p *appendToLog) ProcessRecords(ctx context.Context, cp pglease.Checkpointer) error {
	first := new(big.Int).Add(p.position, one)
	last := new(big.Int).Add(first, big.NewInt(batch-1))
	if i := strings.LastIndex(p.shard, "-end"); i >= 0 {
		end, _ := new(big.Int).SetString(p.shard[i+len("-end"):], 10)
		if first.Cmp(end) > 0 {
			return pglease.ErrShardEnd // the worker calls ShardEnded
		}
		if last.Cmp(end) > 0 {
			last = end
		}
	}
	for seq := new(big.Int).Set(first); seq.Cmp(last) <= 0; seq.Add(seq, one) {
		line, _ := json.Marshal(map[string]interface{}{
			"w": p.owner, "shard": p.shard, "seq": seq, "t": pglease.Seconds(time.Now())})
		if _, err := p.log.Write(append(line, '\n')); err != nil {
			return err
		}
	}
	time.Sleep(10 * time.Millisecond) // the work a real processor would do
	p.position = last
	return cp.Checkpoint(ctx, last.String()) // fenced; ErrLeaseLost if refused
}

// LeaseLost: another worker has the shard now; forget it (nothing to checkpoint).
func (p *appendToLog) LeaseLost(ctx context.Context) {}

func (p *appendToLog) ShardEnded(ctx context.Context, cp pglease.Checkpointer) error {
	return cp.Checkpoint(ctx, pglease.ShardEnd) // closes the shard
}

// ShutdownRequested: handed off or stopping; every batch is checkpointed already.
func (p *appendToLog) ShutdownRequested(ctx context.Context, cp pglease.Checkpointer) error {
	return nil
}

func main() {
	if len(os.Args) < 6 {
		log.Fatal("usage: example_worker DSN APP STREAM OWNER DIR [LEASE_SECONDS]")
	}
	dsn, app, stream, owner, out := os.Args[1], os.Args[2], os.Args[3], os.Args[4], os.Args[5]
	leaseSeconds := 10.0
	if len(os.Args) > 6 {
		leaseSeconds, _ = strconv.ParseFloat(os.Args[6], 64)
	}
	records, err := os.OpenFile(filepath.Join(out, owner+".records"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		log.Fatal(err)
	}
	worker, err := pglease.NewWorker(pglease.Config{
		ConnString: dsn, App: app, Stream: stream, Owner: owner,
		NewProcessor: func(shardID string) pglease.Processor {
			return &appendToLog{log: records, owner: owner, shard: shardID}
		},
		LeaseDuration: time.Duration(leaseSeconds * float64(time.Second)), MaxSteal: 2,
		JournalPath: filepath.Join(out, owner+".journal"),
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := worker.Run(ctx); err != nil {
		log.Fatalf("%s: %v", owner, err) // loud failure: exit 1 with the cause
	}
}
