#!/usr/bin/node
// A worker with a shard-list callback (test/clients/packages.sh), run from
// the installed package (NODE_PATH: the test's node_modules).
//
//     discover_worker.js DSN APP STREAM OWNER SHARDS_JSON JOURNAL
//
// The lister reads SHARDS_JSON at every call (the test rewrites it to
// reshard).  The processor has nothing to process.  SIGTERM stops it.
'use strict';
const fs = require('fs');
const { RecordProcessor, Worker, consoleLogger } = require('pg-lease-client');
const { journal } = require('pg-lease-client/journal');   // the test's journal (not part of the API)

const [dsn, app, stream, owner, shards, journalPath] = process.argv.slice(2);
console.error(`pg-lease-client from ${require.resolve('pg-lease-client')}`);
const worker = new Worker(dsn, app, stream, owner, new RecordProcessor(),
  { leaseDuration: 3, logger: consoleLogger('info'), shardLister: () => JSON.parse(fs.readFileSync(shards, 'utf8')), syncEvery: 0.3 });
worker._journal = journal(journalPath, owner);
process.on('SIGTERM', () => worker.stop());
worker.run().catch((e) => { console.error(e.message); process.exit(1); });
