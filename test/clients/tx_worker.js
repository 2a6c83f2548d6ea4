'use strict';
// A transactional-mode worker for the clients suite (docs/exactly-once.md):
// the Node twin of tx_worker.py.
//
//   node tx_worker.js DSN APP STREAM OWNER DIR [LEASE_SECONDS]
const path = require('path');
const { Worker, RecordProcessor } = require('../../clients/node/pg_lease');
const testing = require('../../clients/node/_testing');

const BATCH = 5;
// TX_WORKER_SYNCHRONOUS=1: every batch commits with synchronous_commit on (test/clients/syncrep.sh)
const SYNCHRONOUS = process.env.TX_WORKER_SYNCHRONOUS === '1';

class WriteRows extends RecordProcessor {
  constructor(owner) { super(); this.owner = owner; this.position = new Map(); }
  initialize(shardId, checkpoint) {
    this.position.set(shardId, checkpoint === 'TRIM_HORIZON' ? 0 : Number(checkpoint));
  }
  async process(shardId, client) {
    if (SYNCHRONOUS) await client.query('SET LOCAL synchronous_commit = on');   // this batch's COMMIT waits for a standby
    const first = this.position.get(shardId) + 1;
    const last = first + BATCH - 1;
    await client.query('INSERT INTO public.tx_out SELECT $1, s, $2 FROM generate_series($3::int, $4::int) AS s',
      [shardId, this.owner, first, last]);
    this.position.set(shardId, last);
    return String(last);
  }
  shutdown(shardId) { this.position.delete(shardId); }
}

async function main() {
  const [dsn, app, stream, owner, out, leaseSeconds] = process.argv.slice(2);
  const worker = new Worker(dsn, app, stream, owner, new WriteRows(owner), {
    leaseDuration: leaseSeconds ? Number(leaseSeconds) : 10, maxSteal: 2,
    transactional: true,
  });
  testing.journal(worker, path.join(out, `${owner}.journal`));
  process.on('SIGTERM', () => worker.stop());
  await worker.run();
}

main().catch((e) => { console.error(e); process.exit(1); });
