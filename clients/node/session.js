'use strict';
// One autocommit connection that follows docs/client-rules.md.
const { Client } = require('pg');
const { performance } = require('perf_hooks');
const rules = require('./rules');

// The connection was lost after the call was sent: it may or may not have committed.
class Ambiguous extends Error {}
// The call did not go through after its retries; nothing is known to have happened.
class Unavailable extends Error {}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

class Session {
  // config: a node-postgres connection string or config object.
  // options: e.g. '-c lock_timeout=1000' (the renewer in transactional mode).
  // extra: more node-postgres settings (the renewer's timeouts in fast-failover mode).
  constructor(config, applicationName = 'pg_lease', options = null, extra = {}) {
    this.config = typeof config === 'string' ? { connectionString: config } : { ...config };
    Object.assign(this.config, extra);
    this.config.application_name = applicationName;
    if (options) this.config.options = options;
    this.client = null;
  }

  async connect() {
    if (this.client === null) {
      const client = new Client(this.config);
      client.on('error', () => { if (this.client === client) this.client = null; });
      await client.connect();
      this.client = client;
    }
    return this.client;
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
  // clock), if given.
  async call(sql, params = [], repeatSafe = true, until = null) {
    let last = 'not sent';
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
        last = e.message;
        continue;                     // could not connect: nothing was sent
      }
      try {
        const res = await client.query({ text: sql, values: params, rowMode: 'array' });
        return res.rows;
      } catch (e) {
        last = `${e.code || 'no SQLSTATE'} ${String(e.message).split('\n')[0]}`;
        const kind = rules.classify(e.code, e.message);
        if (kind === 'raise' || kind === 'drop') throw e;
        if (kind !== 'repeat') this.close();
        if (kind === 'ambiguous' && !repeatSafe) throw new Ambiguous(e.message);
      }
    }
    throw new Unavailable(`${sql.split('(')[0]}: ${last}`);
  }

  // The first column of the only row.
  async one(sql, params = [], repeatSafe = true, until = null) {
    return (await this.call(sql, params, repeatSafe, until))[0][0];
  }
}

module.exports = { Session, Ambiguous, Unavailable, sleep };
