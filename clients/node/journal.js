'use strict';
// The worker's journal: what the server acknowledged, one JSON line per event
// (O_APPEND: survives a SIGKILL).  Off (path null) unless a test turns it on
// (_testing.js): the clients suite's checker reads it.  Not part of the API.
const fs = require('fs');

function journal(path, owner) {
  const fd = path ? fs.openSync(path, 'a') : null;
  return (ev, fields = {}) => {
    if (fd !== null) fs.writeSync(fd, JSON.stringify({ ...fields, ev, w: owner, t: Date.now() / 1000 }) + '\n');
  };
}

module.exports = { journal };
