'use strict';
// Hooks for pg_lease's own tests (test/clients), not part of the API (not in
// the package's "files").
//
//   const testing = require('../../clients/node/_testing');
//   testing.journal(worker, path);      // what the server acknowledged, as JSON lines
//   testing.ignoreRule6(worker);        // the negative control of fast failover
const { journal: open } = require('./journal');

// Appends what the server acknowledged to worker (takes and renewals with
// their send times and epochs, processor starts, checkpoints, releases,
// closes, shutdowns) to path, one JSON line per event: what
// test/clients/check.py reads.  Before run().
function journal(worker, path) {
  worker._journal = open(path, worker.owner);
}

// Fast-failover mode without rule 6's deadline (docs/client-rules.md): the
// negative control, which must let the worker process after its leases were taken.
function ignoreRule6(worker) {
  worker._contract = false;
}

module.exports = { journal, ignoreRule6 };
