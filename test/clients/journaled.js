'use strict';
// Runs a Node worker script with every Worker it runs journaled (the clients suite).
//
//   node test/clients/journaled.js DIR SCRIPT ARGS...
//
// SCRIPT (clients/node/example_worker.js, or a test worker) runs with ARGS;
// every Worker of clients/node/pg_lease.js it runs appends what the server
// acknowledged to DIR/OWNER.journal (clients/node/_testing.js), which
// test/clients/check.py reads.  The example worker itself knows nothing of journals.
const path = require('path');
const { Worker } = require('../../clients/node/pg_lease');
const testing = require('../../clients/node/_testing');

const [dir, script, ...args] = process.argv.slice(2);
const run = Worker.prototype.run;
Worker.prototype.run = function journaledRun() {
  testing.journal(this, path.join(dir, `${this.owner}.journal`));
  return run.call(this);
};
process.argv = [process.argv[0], path.resolve(script), ...args];
require(path.resolve(script));
