// Command go_worker runs the Go client in the clients suite's fast-failover
// and transactional fleets (test/clients/fast_failover.sh, test/clients/run.sh).
//
//	go_worker ff DSN APP STREAM OWNER DIR LEASE_SECONDS RENEW_EVERY
//	go_worker tx DSN APP STREAM OWNER DIR LEASE_SECONDS
//
// ff: Config.RenewEvery (docs/client-rules.md rule 6); each record of a
// batch of 5 is appended to DIR/OWNER.records as the other clients' ff
// workers do (PG_LEASE_IGNORE_RULE_6=1: the negative control, rule 6's
// deadline ignored).  tx: Config.Transactional (docs/exactly-once.md); every
// record becomes one row (shard, seq, worker) of public.tx_out, written in
// the batch's transaction with its checkpoint.  The journal goes to
// DIR/OWNER.journal.  SIGTERM stops the worker gracefully.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/pg-lease/pg_lease/clients/go/pglease"
)

const batch = 5

type proc struct {
	owner, shard string
	records      *os.File // ff: the records log
	tx           bool
	position     int64
}

func (p *proc) Initialize(ctx context.Context, shard, checkpoint string) error {
	p.position = 0
	if checkpoint == pglease.TrimHorizon {
		return nil
	}
	n, err := strconv.ParseInt(checkpoint, 10, 64) // this test's own sequence numbers are small
	p.position = n
	return err
}

func (p *proc) ProcessRecords(ctx context.Context, cp pglease.Checkpointer) error {
	first, last := p.position+1, p.position+batch
	if p.tx {
		tx := cp.(pglease.TxCheckpointer).Tx()
		if _, err := tx.Exec(ctx, "INSERT INTO public.tx_out SELECT $1, s, $2 FROM pg_catalog.generate_series($3::int, $4::int) AS s",
			p.shard, p.owner, first, last); err != nil {
			return err
		}
	} else {
		for seq := first; seq <= last; seq++ {
			line, _ := json.Marshal(map[string]interface{}{"w": p.owner, "shard": p.shard,
				"seq": strconv.FormatInt(seq, 10), "sub": 0, "t": pglease.Seconds(time.Now())})
			if _, err := p.records.Write(append(line, '\n')); err != nil {
				return err
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.position = last
	return cp.Checkpoint(ctx, strconv.FormatInt(last, 10))
}

func (p *proc) LeaseLost(ctx context.Context) {}

func (p *proc) ShardEnded(ctx context.Context, cp pglease.Checkpointer) error {
	return cp.Checkpoint(ctx, pglease.ShardEnd)
}

func (p *proc) ShutdownRequested(ctx context.Context, cp pglease.Checkpointer) error { return nil }

func seconds(s string) time.Duration {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		log.Fatalf("not a number of seconds: %q", s)
	}
	return time.Duration(f * float64(time.Second))
}

func main() {
	if len(os.Args) < 8 || (os.Args[1] == "ff" && len(os.Args) < 9) {
		log.Fatal("usage: go_worker ff|tx DSN APP STREAM OWNER DIR LEASE_SECONDS [RENEW_EVERY]")
	}
	mode, dsn, app, stream, owner, out := os.Args[1], os.Args[2], os.Args[3], os.Args[4], os.Args[5], os.Args[6]
	cfg := pglease.Config{
		ConnString: dsn, App: app, Stream: stream, Owner: owner, MaxSteal: 2,
		LeaseDuration: seconds(os.Args[7]), JournalPath: filepath.Join(out, owner+".journal"),
	}
	var records *os.File
	switch mode {
	case "ff":
		cfg.RenewEvery = seconds(os.Args[8])
		f, err := os.OpenFile(filepath.Join(out, owner+".records"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			log.Fatal(err)
		}
		records = f
	case "tx":
		cfg.Transactional = true
	default:
		log.Fatalf("no such mode: %q", mode)
	}
	cfg.NewProcessor = func(shard string) pglease.Processor {
		return &proc{owner: owner, shard: shard, records: records, tx: mode == "tx"}
	}
	worker, err := pglease.NewWorker(cfg)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := worker.Run(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", owner, err)
		os.Exit(1)
	}
}
