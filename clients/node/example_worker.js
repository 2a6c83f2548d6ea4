#!/usr/bin/node
// A complete pg_lease worker: it processes a synthetic stream by appending each record to a log.
//
//     example_worker.js DSN APP STREAM OWNER DIR [LEASE_SECONDS]
//
// Shard "<name>-end<N>" holds records 1..N and then ends; every other shard never
// ends.  Record i of a shard is "processed" by appending {"shard", "seq": i} to
// DIR/OWNER.records; the worker's journal (what the server acknowledged to it:
// takes, renewals with their epochs, checkpoints) goes to DIR/OWNER.journal.
// SIGTERM stops the worker gracefully: it finishes its batch and releases its leases.
// Bad credentials (or no such database): the cause is logged, the exit status is 1.
'use strict';
const fs = require('fs');
const path = require('path');
const { SHARD_END, RecordProcessor, Worker } = require('./pg_lease');

const BATCH = 5;    // records per batch; each batch is checkpointed

class AppendToLog extends RecordProcessor {
  constructor(file, owner) {
    super();
    this.log = fs.openSync(file, 'a');
    this.owner = owner;
    this.position = new Map();   // shard -> last record processed
  }

  initialize(shardId, checkpoint) {
    // the checkpoint is the last record acknowledged, or TRIM_HORIZON at the start
    this.position.set(shardId, checkpoint === 'TRIM_HORIZON' ? 0 : Number(checkpoint));
  }

  async process(shardId) {
    const first = this.position.get(shardId) + 1;
    let last = first + BATCH - 1;
    if (shardId.includes('-end')) {
      const end = Number(shardId.split('-end').pop());
      if (first > end) return SHARD_END;     // the worker closes the shard
      last = Math.min(last, end);
    }
    for (let seq = first; seq <= last; seq++) {
      const record = { w: this.owner, shard: shardId, seq, t: Date.now() / 1000 };
      fs.writeSync(this.log, JSON.stringify(record) + '\n');
    }
    await new Promise((resolve) => setTimeout(resolve, 10));   // the work a real processor would do
    this.position.set(shardId, last);
    return String(last);                     // the worker checkpoints it, fenced
  }

  shutdown(shardId, reason) {
    // lease lost, handed off, shard ended or worker stopped: forget the shard
    this.position.delete(shardId);
  }
}

async function main() {
  const [dsn, app, stream, owner, out, lease] = process.argv.slice(2);
  const worker = new Worker(dsn, app, stream, owner,
    new AppendToLog(path.join(out, `${owner}.records`), owner),
    { leaseDuration: lease ? Number(lease) : 10, maxSteal: 2,
      journalPath: path.join(out, `${owner}.journal`) });
  process.on('SIGTERM', () => worker.stop());
  process.on('SIGINT', () => worker.stop());
  await worker.run();
}

main().catch((e) => { console.error(`${e.code || ''} ${e.message}`); process.exit(1); });
