'use strict';
// One autocommit connection that follows docs/client-rules.md.
const { Client } = require('pg');
const { performance } = require('perf_hooks');
const util = require('util');
const rules = require('./rules');

// The connection was lost after the call was sent: it may or may not have committed.
class Ambiguous extends Error {}
// The call did not go through after its retries; nothing is known to have happened.
class Unavailable extends Error {}
// The server refused the credentials or the database after the rules' tries
// (docs/client-rules.md: authentication): a configuration error, the worker stops.
class Fatal extends Error {}

const LEVELS = { error: 0, warn: 1, info: 2, debug: 3 };

// A logger on the console (stderr), one line per message at or above
// `level` ('error', 'warn', 'info' or 'debug'; PG_LEASE_LOG_LEVEL, default
// 'info').  The clients log connection and authentication failures at
// error, retries at warn, lease changes at info.  Any object with these four
// methods can replace it (the worker's `logger` option).
function consoleLogger(level = process.env.PG_LEASE_LOG_LEVEL || 'info', name = 'pg_lease') {
  const wanted = String(level).toLowerCase();
  const max = LEVELS[wanted === 'warning' ? 'warn' : wanted] ?? LEVELS.info;
  const logger = {};
  for (const [lvl, n] of Object.entries(LEVELS)) {
    logger[lvl] = n > max ? () => {} : (...args) =>
      console.error(`${new Date().toISOString()} ${lvl.toUpperCase()} ${name}: ${util.format(...args)}`);
  }
  return logger;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

class Session {
  // config: a node-postgres connection string or config object.
  // options: e.g. '-c lock_timeout=1000' (the renewer in transactional mode).
  // logger: where connection failures and retries are logged.
  // extra: more node-postgres settings (the renewer's timeouts in fast-failover mode),
  // and callTimeout: milliseconds each of this session's own calls may wait for its
  // answer (the connection is then dropped: ambiguous), leaving other queries on the
  // client (a transactional batch's) unbounded.
  constructor(config, applicationName = 'pg_lease', options = null, logger = consoleLogger(), extra = {}) {
    this.log = logger;
    this.config = typeof config === 'string' ? { connectionString: config } : { ...config };
    const { callTimeout = null, ...settings } = extra;
    Object.assign(this.config, settings);
    this.callTimeout = callTimeout;
    this.config.application_name = applicationName;
    if (options) this.config.options = options;
    this.client = null;
    this.notices = [];     // the notices of the connection's statement in progress
  }

  async connect() {
    if (this.client === null) {
      const client = new Client(this.config);
      client.on('error', () => { if (this.client === client) this.client = null; });
      client.on('notice', (notice) => { if (this.client === client) this.notices.push(notice); });
      await client.connect();
      this.client = client;
    }
    return this.client;
  }

  // The primary message of a notice of the statement in progress that makes it
  // ambiguous (docs/client-rules.md: a cancelled wait for synchronous
  // replication), or null.
  ambiguousNotice() {
    const notice = this.notices.find((n) => rules.ambiguousNotice(n.severity, n.message));
    return notice ? notice.message : null;
  }

  close() {
    if (this.client !== null) {
      this.client.end().catch(() => {});
      this.client = null;
    }
  }

  // Rows (arrays) of one statement.  Throws Ambiguous (only when not
  // repeatSafe), Unavailable, or the driver's error for anything the rules
  // say to raise.  No repeat starts after until (seconds on performance.now()'s
  // clock), if given.  An answer that came with the WARNING of a cancelled
  // wait for synchronous replication is ambiguous too (it committed locally,
  // perhaps only there).
  async call(sql, params = [], repeatSafe = true, until = null) {
    let last = 'not sent';
    let refused = 0;
    const name = sql.split('(')[0];
    const who = this.config.application_name;
    for (let attempt = 0; attempt < rules.TRIES; attempt++) {
      if (attempt) {
        await sleep(rules.backoff(attempt));
        if (until !== null && performance.now() / 1000 >= until) break;
      }
      let client;
      try {
        client = await this.connect();
      } catch (e) {
        this.close();
        const state = rules.sqlstate(e);
        last = `${state || 'no SQLSTATE'} ${String(e.message).split('\n')[0]}`;
        if (rules.classify(state, e.message) === 'fatal') refused++;
        this.log.warn(`${who}: cannot connect (try ${attempt + 1} of ${rules.TRIES}): ${last}`);
        continue;                     // could not connect: nothing was sent
      }
      let res;
      try {
        this.notices = [];
        res = await client.query({ text: sql, values: params, rowMode: 'array',
                                   ...(this.callTimeout ? { query_timeout: this.callTimeout } : {}) });
      } catch (e) {
        const state = rules.sqlstate(e);
        last = `${state || 'no SQLSTATE'} ${String(e.message).split('\n')[0]}`;
        const kind = rules.classify(state, e.message);
        if (kind === 'raise' || kind === 'drop' || kind === 'fatal') throw e;
        if (kind !== 'repeat') this.close();
        if (kind === 'ambiguous' && !repeatSafe) throw new Ambiguous(e.message);
        this.log.warn(`${who}: ${name} failed (${kind}, try ${attempt + 1} of ${rules.TRIES}), retrying: ${last}`);
        continue;
      }
      const warning = this.ambiguousNotice();
      if (warning === null) return res.rows;
      last = `WARNING ${warning}`;
      if (!repeatSafe) throw new Ambiguous(warning);
      this.log.warn(`${who}: ${name} answered with a warning (ambiguous, try ${attempt + 1} of ${rules.TRIES}), retrying: ${warning}`);
    }
    if (refused > 0 && refused === rules.TRIES) {
      this.log.error(`${who}: the server refused the connection ${refused} times, stopping: ${last}`);
      throw new Fatal(last);
    }
    this.log.error(`${who}: ${name} did not go through after ${rules.TRIES} tries: ${last}`);
    throw new Unavailable(`${name}: ${last}`);
  }

  // The first column of the only row.
  async one(sql, params = [], repeatSafe = true, until = null) {
    return (await this.call(sql, params, repeatSafe, until))[0][0];
  }
}

module.exports = { Session, Ambiguous, Unavailable, Fatal, consoleLogger, sleep };
