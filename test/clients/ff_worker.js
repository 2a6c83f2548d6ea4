#!/usr/bin/node
// A fast-failover Node worker for the clients suite (docs/client-rules.md, rule 6).
//
//     ff_worker.js DSN APP STREAM OWNER DIR LEASE_SECONDS RENEW_EVERY
//
// Appends each record to DIR/OWNER.records as the example worker does, under
// Worker(..., { renewEvery: RENEW_EVERY }).  SIGTERM stops it gracefully.
'use strict';
const fs = require('fs');
const path = require('path');
const { RecordProcessor, Worker } = require('../../clients/node/pg_lease');
const testing = require('../../clients/node/_testing');

class AppendToLog extends RecordProcessor {
  constructor(file, owner) { super(); this.log = fs.openSync(file, 'a'); this.owner = owner; this.position = new Map(); }
  initialize(shardId, checkpoint) { this.position.set(shardId, checkpoint === 'TRIM_HORIZON' ? 0 : Number(checkpoint)); }
  async process(shardId) {
    const first = this.position.get(shardId) + 1;
    for (let seq = first; seq < first + 5; seq++) {
      fs.writeSync(this.log, JSON.stringify({ w: this.owner, shard: shardId, seq, t: Date.now() / 1000 }) + '\n');
    }
    await new Promise((resolve) => setTimeout(resolve, 10));
    this.position.set(shardId, first + 4);
    return String(first + 4);
  }
  shutdown(shardId) { this.position.delete(shardId); }
}

const [dsn, app, stream, owner, out, leaseSeconds, renewEvery] = process.argv.slice(2);
const worker = new Worker(dsn, app, stream, owner, new AppendToLog(path.join(out, `${owner}.records`), owner),
  { leaseDuration: Number(leaseSeconds), maxSteal: 2, renewEvery: Number(renewEvery) });
testing.journal(worker, path.join(out, `${owner}.journal`));
process.on('SIGTERM', () => worker.stop());
worker.run().then(() => process.exit(0), (e) => { console.error(e); process.exit(1); });
