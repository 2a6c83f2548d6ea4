#!/usr/bin/node
// A complete pg_lease worker: it processes a synthetic stream by appending each record to a log.
//
//     example_worker.js DSN APP STREAM OWNER DIR [LEASE_SECONDS]
//
// Record n of a shard (sequence number n = 1, 2, ...) is "processed" by appending
// {"shard", "seq": "n", "sub": k} to DIR/OWNER.records.  Shard "<name>-end<N>" holds
// records 1..N and then ends; every other shard never ends.  On a stream named
// "kpl-...", every even record is a KPL aggregate of 5 user records (sub-sequences
// 0..4), and each batch is checkpointed in two phases.  Checkpoints are text, here
// BigInts: a Kinesis sequence number (up to 128 bits) does not fit a JavaScript number.
// SIGTERM stops the worker gracefully: it finishes its batch and releases its leases.
// Bad credentials (or no such database): the cause is logged, the exit status is 1.
'use strict';
const fs = require('fs');
const path = require('path');
const { SHARD_END, RecordProcessor, Worker } = require('./pg_lease');

const BATCH = 5;        // user records per batch; each batch is checkpointed
const AGGREGATE = 5;    // user records in an aggregated record

class AppendToLog extends RecordProcessor {
  constructor(file, owner, kpl) {
    super();
    this.log = fs.openSync(file, 'a');
    this.owner = owner;
    this.kpl = kpl;              // the stream's even records are aggregates
    this.position = new Map();   // shard -> [sequence, sub-sequence] of the last user record processed
  }

  initialize(shardId, checkpoint, { subSequence }) {
    // the last record acknowledged (its sub-sequence too), or TRIM_HORIZON at the start
    this.position.set(shardId, [checkpoint === 'TRIM_HORIZON' ? 0n : BigInt(checkpoint), subSequence]);
  }

  async process(shardId) {
    let [sequence, sub] = this.position.get(shardId);
    const end = shardId.includes('-end') ? BigInt(shardId.split('-end').pop()) : null;
    const batch = [];
    while (batch.length < BATCH) {
      const aggregated = this.kpl && sequence > 0n && sequence % 2n === 0n;
      [sequence, sub] = aggregated && sub + 1 < AGGREGATE ? [sequence, sub + 1] : [sequence + 1n, 0];
      if (end !== null && sequence > end) break;
      batch.push([sequence, sub]);
    }
    if (batch.length === 0) return SHARD_END;   // the worker closes the shard
    const last = { sequence: String(batch[batch.length - 1][0]), subSequence: batch[batch.length - 1][1] };
    if (this.kpl) await this.prepareCheckpoint(shardId, last);   // phase one: the intent, before acting on it
    for (const [seq, k] of batch) {
      const record = { w: this.owner, shard: shardId, seq: String(seq), sub: k, t: Date.now() / 1000 };
      fs.writeSync(this.log, JSON.stringify(record) + '\n');
    }
    await new Promise((resolve) => setTimeout(resolve, 10));   // the work a real processor would do
    this.position.set(shardId, batch[batch.length - 1]);
    return last;                             // phase two: the worker checkpoints it, fenced
  }

  shutdown(shardId, reason) {
    // lease lost, handed off, shard ended or worker stopped: forget the shard
    this.position.delete(shardId);
  }
}

async function main() {
  const [dsn, app, stream, owner, out, lease] = process.argv.slice(2);
  const processor = new AppendToLog(path.join(out, `${owner}.records`), owner, stream.startsWith('kpl-'));
  const worker = new Worker(dsn, app, stream, owner, processor,
    { leaseDuration: lease ? Number(lease) : 10, maxSteal: 2 });
  process.on('SIGTERM', () => worker.stop());
  process.on('SIGINT', () => worker.stop());
  await worker.run();
}

main().catch((e) => { console.error(`${e.code || ''} ${e.message}`); process.exit(1); });
