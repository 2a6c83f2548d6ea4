'use strict';
// What to do when a call fails: docs/client-rules.md, as code.
//
// The table is clients/rules.json's: test/clients/rules_table.py checks that
// these sets, patterns and tries are exactly the ones there, and the clients
// suite that classify() answers every case of test/clients/rules_cases.json
// as the page says.

// Rolled back, nothing happened: repeat the same call after a short backoff.
const REPEAT = new Set(['40001', '40P01', '55P03', '57014', '40L01']);
// No usable connection, nothing happened: reconnect, then repeat.
const RECONNECT = new Set(['53300', '57P03', '25006']);
// The connection is gone and the call may or may not have committed (so is
// any error without a SQLSTATE, and every class 08 error).
const AMBIGUOUS = new Set(['57P01', '57P02']);
// Through the router: PL/Proxy's own XX000 whose message names a lost
// partition connection (or a timeout on it) is ambiguous too; any other
// XX000 is raised.
const PLPROXY_CONNECTION_LOST = new RegExp(
  String.raw`^PL/Proxy function [^ ]+ (\[[^ ]+\] )?(PQconnectStart|PQconnectPoll|PQsendQuery|PQflush|PQconsumeInput|connect timeout|query timeout)`);

// Transactional mode: hold_lease's 55000 (the lease is not held at the
// worker's epoch; its transaction is aborted): drop the shard.  Any other
// 55000 is raised.
const LEASE_NOT_HELD = new RegExp(String.raw`(^|REMOTE ERROR: )lease .+ is not held by `);

// The server refused the credentials or the database (at connect): a
// configuration error no retry fixes.  After the rules' tries the worker
// stops, with the cause logged.  A driver that gives no SQLSTATE at connect
// is matched by its message (only when there is no SQLSTATE).
const FATAL = new Set(['28P01', '28000', '3D000']);
const CONNECT_REFUSED = new RegExp(
  String.raw`(password authentication failed|Peer authentication failed|Ident authentication failed|no pg_hba\.conf entry|role "[^"]+" does not exist|database "[^"]+" does not exist)`);

// The SQLSTATE of an error node-postgres raised, or undefined when it has
// none: a server error (DatabaseError) carries it in `code`, but so does a
// socket error its own (EPIPE, ECONNRESET: with `errno` and `syscall`), and
// 'EPIPE' looks like a SQLSTATE.  A socket error is a lost connection.
function sqlstate(e) {
  if (e === null || typeof e !== 'object' || e.errno !== undefined || e.syscall !== undefined) return undefined;
  return typeof e.code === 'string' && /^[0-9A-Z]{5}$/.test(e.code) ? e.code : undefined;
}

// A call, or the COMMIT of a transaction, that comes back with this WARNING
// committed locally but may not have been replicated (a waiting backend's
// synchronous replication wait was cancelled, by an operator or a failover
// manager): ambiguous, not success.
const SYNC_REP_CANCELLED = new RegExp(String.raw`canceling (the )?wait for synchronous replication`);

const TRIES = 5;

// 'repeat', 'reconnect', 'ambiguous', 'drop', 'fatal' or 'raise' for an
// error's SQLSTATE (undefined, or a Node error code like ECONNRESET: no
// SQLSTATE) and primary message.
function classify(sqlstate, message) {
  const hasState = typeof sqlstate === 'string' && /^[0-9A-Z]{5}$/.test(sqlstate);
  if ((hasState && FATAL.has(sqlstate)) ||
      (!hasState && typeof message === 'string' && CONNECT_REFUSED.test(message))) return 'fatal';
  if (typeof sqlstate !== 'string' || !/^[0-9A-Z]{5}$/.test(sqlstate) ||
      sqlstate.startsWith('08') || AMBIGUOUS.has(sqlstate)) return 'ambiguous';
  if (sqlstate === 'XX000' && typeof message === 'string' &&
      PLPROXY_CONNECTION_LOST.test(message)) return 'ambiguous';
  if (sqlstate === '55000' && typeof message === 'string' &&
      LEASE_NOT_HELD.test(message)) return 'drop';
  if (REPEAT.has(sqlstate)) return 'repeat';
  if (RECONNECT.has(sqlstate)) return 'reconnect';
  return 'raise';
}

// True when a notice (its severity and primary message; node-postgres'
// 'notice' event) makes the call that raised it ambiguous: the cancelled wait
// for synchronous replication.
function ambiguousNotice(severity, message) {
  return severity === 'WARNING' && typeof message === 'string' && SYNC_REP_CANCELLED.test(message);
}

// Milliseconds to wait before try number attempt + 1 (random, growing).
function backoff(attempt) {
  return Math.min(1000, 20 * 2 ** attempt) * (0.5 + Math.random());
}

module.exports = {
  REPEAT, RECONNECT, AMBIGUOUS, PLPROXY_CONNECTION_LOST, LEASE_NOT_HELD, FATAL, CONNECT_REFUSED, SYNC_REP_CANCELLED,
  TRIES, classify, ambiguousNotice, backoff, sqlstate,
};
