'use strict';
// The worker loop: take, renew, process, fenced checkpoints, handoff.
//
// The same loop as the Python client (clients/python/pg_lease/worker.py), a
// port of the demo client (test/demo/pg_lease_demo.c) following
// docs/client-rules.md: a renewal timer on its own connection, a processing
// loop on another, the local deadline, graceful handoff, and every checkpoint
// fenced with the lease_epoch learned from take_leases or renew_leases.
//
// Transactional mode ({ transactional: true }, docs/exactly-once.md): each
// batch is one transaction on the processing connection: the processor
// writes its output through the client it is given, then the worker runs
// hold_lease and the fenced checkpoint and commits, so output and checkpoint
// commit together or not at all, and never from a worker that lost the lease.
//
// Through the router (pg_lease_router), the batch transactions run on a
// direct connection to the stream's partition: the worker asks the router
// where (lease_router.stream_conninfo), connects to the first of its hosts
// that is writable with its own credentials, and asks again after the
// stream moved (40L01) or that connection failed.
//
// Shard discovery ({ shardLister: f }): the worker calls f() (it may return a
// promise) when it starts and every syncEvery seconds, and passes the shards
// it returns to lease.sync_shards, which creates the missing leases
// (docs/shard-leases.md, "Who creates a stream's leases").
//
// Logging ({ logger }, default consoleLogger() of session.js): connection and
// authentication failures at error, retries at warn, lease changes at info
// (the same events as the Python client's).  A refused connection (bad
// credentials, no such database) stops the worker after the rules' tries:
// run() rejects with Fatal.
//
// Checkpoints are opaque text (a Kinesis sequence number has up to 128 bits,
// beyond a JavaScript number): the worker never parses one.  process()
// returns a string, or { sequence, subSequence } for a KPL-aggregated record
// (KCL's ExtendedSequenceNumber); initialize() gets the string and, third,
// { sequence, subSequence, pending } (pending: what a previous owner
// prepared and did not complete).  A processor may prepare its next
// checkpoint (KCL's prepareCheckpoint) with RecordProcessor's
// prepareCheckpoint() before acting on a batch.
//
// An unexpected exception (the processor's, or an error the rules say to
// raise) stops the worker as stop() does, at once: the processors are shut
// down (WORKER_STOPPED), the checkpoints of batches already processed are
// written while their deadlines allow, every lease held is released (one
// whose release fails goes by its local deadline and expiry), then run()
// rejects with the exception.  A refused connection (Fatal) releases
// nothing.
const { performance } = require('perf_hooks');
const { Session, Ambiguous, Unavailable, Fatal, consoleLogger, sleep } = require('./session');
const rules = require('./rules');
const { rotateChannel } = require('./channels');
const { journal } = require('./journal');

const SHARD_END = 'SHARD_END';
const LEASE_LOST = 'lease lost';
const HANDED_OFF = 'handed off';
const SHARD_ENDED = 'shard ended';
const WORKER_STOPPED = 'worker stopped';

const TAKE = 'SELECT shard_id, action, lease_epoch'
  + ' FROM lease.take_leases($1, $2, $3, $4::interval, NULL, $5::integer, renew_every => $6::interval)';
const RENEW = 'SELECT shard_id, handoff_to, lease_epoch FROM lease.renew_leases($1, $2, $3, $4::interval, $5::interval)';
const HEARTBEAT = 'SELECT leases, leases_version, handoffs_pending'
  + ' FROM lease.heartbeat($1, $2, $3, $4::interval, $5::interval)';
const MINE = 'SELECT shard_id, lease_epoch, checkpoint, handoff_from, checkpoint_sub_sequence, pending_checkpoint'
  + ' FROM lease.my_leases($1, $2, $3)';
const CHECKPOINT = 'SELECT lease.update_checkpoint($1, $2, $3, $4, $5, $6::bigint, $7::bigint)';
const PREPARE = 'SELECT lease.prepare_checkpoint($1, $2, $3, $4, $5)';
const RELEASE = 'SELECT lease.release_lease($1, $2, $3, $4)';
const CLOSE = 'SELECT lease.close_shard($1, $2, $3, $4)';
const HOLD = 'SELECT lease.hold_lease($1, $2, $3, $4, $5::bigint)';
const SYNC = 'SELECT shard_id, action FROM lease.sync_shards($1, $2, $3::text[], $4::text[])';
// transactional mode through the router: where the stream's transactions run
const WHERE = 'SELECT conninfo FROM lease_router.stream_conninfo($1, $2)';

// A libpq key=value connection string's pairs ('' quoting as libpq's).
function conninfoPairs(conninfo) {
  const pairs = {};
  const re = /([A-Za-z_]+)\s*=\s*('(?:[^'\\]|\\.)*'|[^\s']+)/g;
  let m;
  while ((m = re.exec(conninfo)) !== null) {
    pairs[m[1]] = m[2].startsWith("'") ? m[2].slice(1, -1).replace(/\\(.)/g, '$1') : m[2];
  }
  return pairs;
}

// Seconds on a monotonic clock, and its wall-clock equivalent.
const now = () => performance.now() / 1000;
const wall = (mono) => Date.now() / 1000 - (now() - mono);

// The worker that runs a processor (set by the Worker; a WeakMap, not a property of yours).
const workers = new WeakMap();

// What the user supplies; one object serves every shard the worker holds.
// Each method may return a promise.
class RecordProcessor {
  // The worker now processes shardId, from checkpoint (the last acknowledged
  // one, a string), with extended = { sequence, subSequence, pending }.
  initialize(shardId, checkpoint, extended) {}
  // Process the next batch; return its checkpoint (a string, or { sequence,
  // subSequence }), null (nothing to do), or SHARD_END.
  // In transactional mode client is the batch's transaction (a node-postgres
  // client): write the output through it (the checkpoint must move forward
  // with every batch that writes output).
  process(shardId, client) { return null; }
  // The worker stopped processing shardId: LEASE_LOST, HANDED_OFF, SHARD_ENDED or WORKER_STOPPED.
  shutdown(shardId, reason) {}
  // Records checkpoint (its sequence number) as the shard's pending
  // checkpoint, the first phase of a two-phase checkpoint (KCL's
  // prepareCheckpoint), before the batch acts on the world; the checkpoint
  // the batch returns completes it.  Called from process(); resolves true when
  // recorded, false when the shard is no longer this worker's.
  async prepareCheckpoint(shardId, checkpoint) {
    const worker = workers.get(this);
    if (worker === undefined) throw new Error('prepareCheckpoint: this processor is not run by a Worker');
    return worker.prepare(shardId, checkpoint);
  }
}

// [sequence, subSequence] of what a processor returned: a string
// (sub-sequence 0) or { sequence, subSequence }.
function position(checkpoint) {
  if (typeof checkpoint === 'object' && checkpoint !== null) {
    return [String(checkpoint.sequence), Number(checkpoint.subSequence || 0)];
  }
  return [String(checkpoint), 0];
}


// sync_shards' shard_ids and parent_ids for a shard list: each item a shard
// id, or a [shardId, parents] pair (parents: an array, e.g. Kinesis'
// ParentShardId and AdjacentParentShardId; null entries ignored).
// parent_ids is n x k, null-padded.
function shardListArrays(shards) {
  const ids = [];
  const rows = [];
  for (const item of shards) {
    const [shard, parents] = typeof item === 'string' ? [item, []] : item;
    ids.push(shard);
    rows.push((parents || []).filter((p) => p !== null && p !== undefined));
  }
  const width = Math.max(0, ...rows.map((r) => r.length));
  if (width === 0) return [ids, ids.map(() => null)];
  return [ids, rows.map((r) => [...r, ...Array(width - r.length).fill(null)])];
}

class Worker {
  constructor(config, appName, streamName, owner, processor,
              { leaseDuration = 10, margin = null, balanceEvery = null, maxSteal = 1,
                transactional = false, logger = consoleLogger(), shardLister = null, syncEvery = 60,
                renewEvery = null } = {}) {
    this.log = logger;
    this.shardLister = shardLister;   // () -> the stream's shards, for lease.sync_shards
    this.syncEvery = syncEvery;
    this.unlisted = new Set();
    this.error = null;                // what stopped the renewer, thrown by run()
    this.key = [appName, streamName];
    this.owner = owner;
    this.processor = processor;
    if (processor instanceof RecordProcessor) workers.set(processor, this);
    this.processing = null;           // the shard whose process() runs now
    this.leaseDuration = leaseDuration;
    this.margin = margin === null ? leaseDuration / 5 : margin;
    // fast failover (docs/client-rules.md rule 6): renew and balance every
    // renewEvery seconds, process only while the last acknowledged renewal or
    // round was sent less than renewEvery + margin ago (lease.liveness_grace
    // must cover the margin); _contract false (_testing.js): the negative control
    this.renewEvery = renewEvery;
    this.every = renewEvery ? `${Math.round(renewEvery * 1000)} milliseconds` : null;
    if (renewEvery && margin === null) this.margin = Math.min(this.margin, renewEvery / 2);
    this._contract = true;
    this.contactSent = null;
    this.balanceEvery = balanceEvery || renewEvery || leaseDuration / 3;
    this.maxSteal = maxSteal;
    this.interval = `${Math.round(leaseDuration * 1000)} milliseconds`;
    this._journal = journal(null, owner);
    this.transactional = transactional;
    this.config = config;
    this.logger = logger;
    this.txDb = null;             // transactional: the session the batch transactions run on
    // fast failover: a call that gets no answer (a proxy that lost its server, a
    // half-open connection) is given up after a fifth of the lease duration and
    // its connection dropped, so the loop goes on (and reconnects)
    this.db = new Session(config, owner, null, logger,
      renewEvery ? { callTimeout: Math.round(leaseDuration * 200),
                     connectionTimeoutMillis: Math.round(leaseDuration * 200) } : {});
    // transactional: a renewal waits behind a batch transaction holding one of
    // its leases for at most a tenth of the lease duration (55P03: repeated)
    const renewOptions = [];
    if (transactional) renewOptions.push(`-c lock_timeout=${Math.round(leaseDuration * 100)}`);
    if (renewEvery) renewOptions.push(`-c statement_timeout=${Math.round(renewEvery * 1000)}`);
    // a renewal that hangs (a half-open connection included) gives up within renewEvery
    this.renewDb = new Session(config, `${owner} renewer`, renewOptions.join(' ') || null, logger,
      renewEvery ? { query_timeout: Math.round(renewEvery * 1000),
                     connectionTimeoutMillis: Math.round(renewEvery * 1000) } : {});
    this.held = new Map();        // shardId -> { epoch, sent, learned, handoffTo, lost }
    // the last renew_leases list (shardId -> epoch) and the leases_version of
    // the heartbeat sent before it; null: list again at the next tick (rule 5)
    this.listed = null;
    this.listedVersion = null;
    this.listedStaleSince = 0;    // when a take last answered
    this.forgotten = new Map();   // shardId -> when it was dropped here
    this.running = new Map();     // shardId -> epoch its processor was started with
    this.unacked = new Map();     // shardId -> a processed [sequence, subSequence] whose write failed
    this.committed = new Map();   // transactional: shardId -> the checkpoint the next batch starts from
    this.stopping = false;
  }

  stop() { this.stopping = true; }

  // -- the renewer -------------------------------------------------------

  // One renewal tick (docs/client-rules.md rule 5): a heartbeat; while its
  // leases_version is the one remembered with the last list and no handoff
  // is pending, it renews every lease on that list at the epoch listed;
  // otherwise renew_leases lists them again.
  async renewOnce() {
    const sent = now();
    let row;
    try {
      [row] = await this.renewDb.call(HEARTBEAT, [...this.key, this.owner, this.interval, this.every]);
    } catch (e) {
      if (!(e instanceof Unavailable || e instanceof Ambiguous)) throw e;
      this._journal('renew_failed', { error: e.message });   // not acknowledged: no deadline moves
      return;
    }
    const [count, version, pending] = row;
    this.contactSent = Math.max(this.contactSent ?? sent, sent);   // it recorded the session too
    const listed = this.listed;
    if (listed === null || version === null || version !== this.listedVersion
        || Number(pending) !== 0 || Number(count) !== listed.size) {
      this.listed = null;   // stale until a list succeeds (a take sets it stale too)
      await this.list(version);
      return;
    }
    const acked = this.renewed(sent, [...listed].map(([shard, epoch]) => [shard, null, epoch]));
    this._journal('renewed', { sent: wall(sent), leases: acked, via: 'heartbeat' });
  }

  // renew_leases: the truth about what the worker holds (rule 5), remembered
  // with the leases_version of the heartbeat sent before it.
  async list(version) {
    const sent = now();
    let rows;
    try {
      rows = await this.renewDb.call(RENEW, [...this.key, this.owner, this.interval, this.every]);
    } catch (e) {
      if (!(e instanceof Unavailable || e instanceof Ambiguous)) throw e;
      this._journal('renew_failed', { error: e.message });
      return;
    }
    this.contactSent = Math.max(this.contactSent ?? sent, sent);
    const acked = this.renewed(sent, rows.map(([shard, handoffTo, epoch]) => [shard, handoffTo, Number(epoch)]));
    if (this.listedStaleSince < sent) {   // no take answered since this list was sent
      this.listed = new Map(rows.map(([shard, , epoch]) => [shard, Number(epoch)]));
      this.listedVersion = version;
    }
    this._journal('renewed', { sent: wall(sent), leases: acked, via: 'list' });
  }

  // Applies an acknowledged renewal sent at sent that renewed rows [shard,
  // handoffTo, epoch]: the worker holds those and no others (but for what it
  // learned since).  Returns {shard: epoch}.
  renewed(sent, rows) {
    const seen = new Set();
    const acked = {};
    for (const [shard, handoffTo, epoch] of rows) {
      seen.add(shard);
      let lease = this.held.get(shard);
      if ((this.forgotten.get(shard) ?? -1) > sent || (lease && lease.learned > sent)) continue;
      if (!lease || lease.epoch !== epoch) {
        lease = { epoch, sent, learned: now(), handoffTo: null, lost: false };
        this.held.set(shard, lease);
      }
      lease.sent = sent;
      lease.handoffTo = handoffTo;
      acked[shard] = epoch;
    }
    for (const [shard, lease] of this.held) {
      if (!seen.has(shard) && lease.learned < sent) lease.lost = true;
    }
    return acked;
  }

  async renewer() {
    while (!this.stopping) {
      await sleep((this.renewEvery || this.leaseDuration / 3) * 1000);
      if (this.stopping) break;
      try {
        await this.renewOnce();
      } catch (e) {   // an error the rules say to raise (a refused connection): stop the worker with it
        this.log.error(`${this.owner}: renewals stopped, stopping the worker: ${e.message}`);
        this._journal('renewer_failed', { error: e.message });
        this.error = e;
        this.stopping = true;
      }
    }
  }

  // -- the processing loop -----------------------------------------------

  async balance() {
    const sent = now();
    let rows;
    try {
      rows = await this.db.call(TAKE, [...this.key, this.owner, this.interval, this.maxSteal, this.every]);
    } catch (e) {
      if (!(e instanceof Unavailable || e instanceof Ambiguous)) throw e;
      this._journal('take_failed', { error: e.message });
      return;
    }
    this.contactSent = Math.max(this.contactSent ?? sent, sent);   // the round recorded the session too
    const learned = now();
    for (const [shard, action, epochText] of rows) {
      if (action === 'taken') {
        const epoch = Number(epochText);
        // the renewer lists again before it trusts a heartbeat (rule 5)
        this.listed = null;
        this.listedStaleSince = learned;
        this.held.set(shard, { epoch, sent, learned, handoffTo: null, lost: false });
        this._journal('taken', { shard, epoch, sent: wall(sent) });
        this.log.info(`${this.owner}: took ${shard} (epoch ${epoch})`);
      }
    }
  }

  // Shard discovery: the lister's shards to lease.sync_shards.
  async sync() {
    let ids;
    let parents;
    try {
      [ids, parents] = shardListArrays(await this.shardLister());
    } catch (e) {   // the user's lister: log it, try again next time
      this.log.error(`${this.owner}: the shard lister failed: ${e.stack || e}`);
      return;
    }
    let rows;
    try {
      rows = await this.db.call(SYNC, [...this.key, ids, parents]);
    } catch (e) {
      if (!(e instanceof Unavailable || e instanceof Ambiguous)) throw e;
      this._journal('sync_failed', { error: e.message });
      return;
    }
    const created = rows.filter(([, action]) => action === 'created').map(([shard]) => shard).sort();
    const unlisted = new Set(rows.filter(([, action]) => action === 'unlisted').map(([shard]) => shard));
    for (const shard of created) this.log.info(`${this.owner}: created the lease of ${shard} (shard discovery)`);
    for (const shard of [...unlisted].sort()) {
      if (!this.unlisted.has(shard)) {
        this.log.info(`${this.owner}: ${shard} is no longer listed (its lease is not ended: a worker ends it at its end)`);
      }
    }
    this.unlisted = unlisted;
    this._journal('synced', { created, unlisted: [...unlisted].sort() });
  }

  // Shuts the shard's processor down; forgets the lease unless keepLease.
  async drop(shard, reason, why, keepLease = false) {
    if (this.running.has(shard)) {
      this.running.delete(shard);
      await this.processor.shutdown(shard, reason);
    }
    this.unacked.delete(shard);
    if (!keepLease) {
      this.held.delete(shard);
      this.forgotten.set(shard, now());
    }
    this._journal('shutdown', { shard, reason, why });
    this.log.info(`${this.owner}: stopped processing ${shard}: ${reason} (${why})`);
  }

  // Starts the processor from the checkpoint; false when my_leases disagrees.
  async start(shard, epoch) {
    for (const [rowShard, rowEpoch, checkpoint, handoffFrom, sub, pending] of
      await this.db.call(MINE, [...this.key, this.owner])) {
      if (rowShard === shard && handoffFrom === null && Number(rowEpoch) === epoch) {
        if (checkpoint === SHARD_END) return false;
        await this.processor.initialize(shard, checkpoint, { sequence: checkpoint, subSequence: Number(sub), pending });
        this.committed.set(shard, checkpoint);
        this.running.set(shard, epoch);
        this._journal('initialized', { shard, epoch, checkpoint, sub: Number(sub), pending });
        return true;
      }
    }
    return false;
  }

  // The processor's batch of shard (process(), with this.processing set for prepareCheckpoint).
  async batch(shard, client) {
    this.processing = shard;
    try {
      return await this.processor.process(shard, client);
    } finally {
      this.processing = null;
    }
  }

  // One step for one shard: [true when a batch was processed, a [shard,
  // lease, [sequence, subSequence], deadline] checkpoint to write, or null].
  async work(shard, lease) {
    const key = [...this.key, shard, this.owner];
    if (this.running.has(shard) && this.running.get(shard) !== lease.epoch) {
      // it changed hands meanwhile (e.g. expired and taken again): restart from the checkpoint
      await this.drop(shard, LEASE_LOST, 'epoch changed', true);
      return [false, null];
    }
    if (lease.lost) { await this.drop(shard, LEASE_LOST, 'not renewed'); return [false, null]; }
    const deadline = this.deadline(lease);
    if (now() >= deadline) {
      await this.drop(shard, LEASE_LOST, 'local deadline');
      return [false, null];
    }
    if (!this.running.has(shard) && !(await this.start(shard, lease.epoch))) {
      await this.drop(shard, LEASE_LOST, 'not in my_leases');
      return [false, null];
    }
    if (lease.handoffTo !== null) {
      // hand it over once every processed batch is checkpointed
      if (this.unacked.has(shard) &&
          !(await this.checkpoint(shard, lease, this.unacked.get(shard), deadline))) return [false, null];
      this._journal('released', { shard, ok: await this.db.one(RELEASE, key), to: lease.handoffTo });
      await this.drop(shard, HANDED_OFF, `handoff to ${lease.handoffTo}`);
      return [false, null];
    }
    if (this.stale(lease)) {
      // the deadline passed since the check above (a pause, a slow my_leases): no batch starts
      await this.drop(shard, LEASE_LOST, 'local deadline');
      return [false, null];
    }
    if (this.transactional) return [await this.transaction(shard, lease), null];
    const checkpoint = await this.batch(shard);
    if (checkpoint === null || checkpoint === undefined) return [false, null];
    if (checkpoint === SHARD_END) {
      const closed = await this.db.one(CLOSE, key);
      this._journal('closed', { shard, ok: closed });
      await this.drop(shard, closed ? SHARD_ENDED : LEASE_LOST, 'closed');
      return [true, null];
    }
    return [true, [shard, lease, position(checkpoint), deadline]];
  }

  // The local deadline (rule 3); in fast-failover mode also rule 6's: the last
  // acknowledged renewal or round was sent less than renewEvery + margin ago.
  deadline(lease) {
    const deadline = lease.sent + this.leaseDuration - this.margin;
    if (!this.renewEvery || !this._contract) return deadline;
    return Math.min(deadline, (this.contactSent ?? lease.sent) + this.renewEvery + this.margin);
  }

  // True when the lease may no longer be processed: its deadline passed, or
  // the last renewal said it is not held.
  stale(lease) {
    return lease.lost || now() >= this.deadline(lease);
  }

  // Writes the checkpoints of a tick's batches (work()'s results), each
  // fenced; one call each for now (lease.update_checkpoints will take them together).
  async checkpoints(done) {
    for (const [shard, lease, pos, deadline] of done) await this.checkpoint(shard, lease, pos, deadline);
  }

  // Writes a fenced checkpoint, a [sequence, subSequence], repeating no later than the local deadline; true
  // when acknowledged.  None is sent past the deadline (a pause since the batch began): the batch stays
  // unacknowledged, and the next step drops the shard unless a fresh renewal says it is still held.
  async checkpoint(shard, lease, pos, deadline) {
    const [checkpoint, sub] = pos;
    if (this.stale(lease)) {
      this.unacked.set(shard, pos);
      this._journal('checkpoint_skipped', { shard, epoch: lease.epoch, checkpoint, sub });
      return false;
    }
    const sent = now();
    let ok;
    try {
      ok = await this.db.one(CHECKPOINT, [...this.key, shard, this.owner, checkpoint, sub, lease.epoch], true, deadline);
    } catch (e) {
      if (!(e instanceof Unavailable || e instanceof Ambiguous)) throw e;
      // it may have committed, but it is not acknowledged: the next one covers it
      this.unacked.set(shard, pos);
      this._journal('checkpoint_failed', { shard, epoch: lease.epoch, checkpoint, sub, error: e.message, sent: wall(sent) });
      return false;
    }
    this.unacked.delete(shard);
    this._journal('checkpoint', { shard, epoch: lease.epoch, checkpoint, sub, ok, sent: wall(sent) });
    if (!ok) await this.drop(shard, LEASE_LOST, 'checkpoint refused');
    return ok;
  }

  // RecordProcessor's prepareCheckpoint: lease.prepare_checkpoint of the
  // sequence number, sent only while the shard's deadline allows (in
  // transactional mode, inside the batch's transaction).
  async prepare(shard, checkpoint) {
    if (this.processing !== shard) throw new Error(`prepareCheckpoint(${shard}): only inside process() of that shard`);
    const [sequence] = position(checkpoint);
    const lease = this.held.get(shard);
    if (lease === undefined || this.stale(lease)) {
      this._journal('prepare_skipped', { shard, pending: sequence });
      return false;
    }
    const args = [...this.key, shard, this.owner, sequence];
    const ok = this.transactional
      ? (await (await this.txSession()).client.query({ text: PREPARE, values: args, rowMode: 'array' })).rows[0][0]
      : await this.db.one(PREPARE, args, true, this.deadline(lease));
    this._journal('prepared', { shard, epoch: lease.epoch, pending: sequence, ok });
    return ok;
  }

  // The session the batch transactions run on: through a router, a direct
  // connection to the stream's partition (lease_router.stream_conninfo: the
  // first writable host, with the worker's own credentials); on a single
  // server, the processing connection.
  async txSession() {
    if (this.txDb !== null) return this.txDb;
    let where;
    try {
      where = await this.db.call(WHERE, this.key);
    } catch (e) {
      if (e.code !== '3F000' && e.code !== '42883') throw e;   // not a router
      this.txDb = this.db;
      return this.txDb;
    }
    const pairs = conninfoPairs(where[0][0]);
    const mine = typeof this.config === 'string' ? { connectionString: this.config } : this.config;
    const hosts = (pairs.host || 'localhost').split(',');
    const ports = (pairs.port || '5432').split(',');
    let last = null;
    for (let i = 0; i < hosts.length; i++) {
      const config = { ...mine, host: hosts[i], port: Number(ports[Math.min(i, ports.length - 1)]),
                       database: pairs.dbname };
      if (mine.connectionString) {
        // the worker's own credentials from its string; where to go from the router's
        const { parse } = require('pg-connection-string');
        const own = parse(mine.connectionString);
        delete config.connectionString;
        if (own.user) config.user = own.user;
        if (own.password) config.password = own.password;
      }
      const session = new Session(config, `${this.owner} transactions`, null, this.logger);
      try {
        const [[readOnly]] = await session.call('SHOW transaction_read_only');
        if (readOnly === 'off') {
          this.logger.info(`${this.owner}: transactions of ${this.key.join('/')} run on ${hosts[i]}:${config.port}`);
          this.txDb = session;
          return session;
        }
      } catch (e) {
        last = e;
      }
      session.close();
    }
    throw new Unavailable(`no writable host for the transactions of ${this.key.join('/')}${last ? ': ' + last.message : ''}`);
  }

  // One batch as one transaction: output, hold_lease, fenced checkpoint (or
  // close), commit.  True when a batch committed.
  async transaction(shard, lease) {
    const key = [...this.key, shard, this.owner];
    const tx = await this.txSession();
    let client;
    try {
      client = await tx.connect();
    } catch (e) {
      tx.close();
      if (tx !== this.db) this.txDb = null;
      throw new Unavailable(e.message);
    }
    let tried = null;
    let sequence = null;
    let sub = 0;
    let committing = false;
    const q = async (text, values = []) => (await client.query({ text, values, rowMode: 'array' })).rows;
    try {
      await q('BEGIN');
      tried = await this.batch(shard, client);
      if (tried === null || tried === undefined) { await q('ROLLBACK'); return false; }
      [sequence, sub] = tried === SHARD_END ? [SHARD_END, 0] : position(tried);
      const [[heldAt]] = await q(HOLD, [...key, lease.epoch]);
      if (heldAt !== this.committed.get(shard)) {
        // a commit acknowledged to us is not there (lost in a crash with
        // synchronous_commit off, or a failover): go on from the server's
        await q('ROLLBACK');
        this._journal('tx_diverged', { shard, epoch: lease.epoch, expected: this.committed.get(shard), checkpoint: heldAt });
        await this.processor.initialize(shard, heldAt, { sequence: heldAt, subSequence: 0, pending: null });
        this.committed.set(shard, heldAt);
        return false;
      }
      const [[ok]] = tried === SHARD_END ? await q(CLOSE, key) : await q(CHECKPOINT, [...key, sequence, sub, lease.epoch]);
      if (!ok) {
        await q('ROLLBACK');
        this._journal('checkpoint', { shard, epoch: lease.epoch, checkpoint: sequence, sub, ok: false });
        await this.drop(shard, LEASE_LOST, 'checkpoint refused');
        return false;
      }
      committing = true;
      tx.notices = [];
      await q('COMMIT');
      const warning = tx.ambiguousNotice();
      if (warning !== null) throw new Ambiguous(warning);    // committed here, perhaps only here
    } catch (e) {
      const state = rules.sqlstate(e);
      let kind;
      if (e instanceof Ambiguous) kind = 'ambiguous';
      else kind = state ? rules.classify(state, e.message) : (e.code || tx.client !== client ? 'ambiguous' : 'raise');
      if (tx.client !== client) kind = 'ambiguous';
      else if (!(e instanceof Ambiguous)) {
        try { await q('ROLLBACK'); } catch (e2) { tx.close(); kind = kind === 'raise' ? kind : 'ambiguous'; }
      }
      if (tx !== this.db && (state === '40L01' || kind === 'ambiguous')) {
        tx.close();
        this.txDb = null;         // the stream moved, or its partition failed over: ask again
      }
      if (kind === 'drop') {
        this._journal('checkpoint', { shard, epoch: lease.epoch, checkpoint: sequence, ok: false,
          error: String(e.message).split('\n')[0] });
        await this.drop(shard, LEASE_LOST, 'not held');
        return false;
      }
      if (kind === 'raise') throw e;
      tx.close();
      this._journal('tx_failed', { shard, epoch: lease.epoch, checkpoint: sequence,
        unknown: committing && kind === 'ambiguous', error: String(e.message).split('\n')[0] });
      await this.resolve(shard, lease, committing ? sequence : null);
      return false;
    }
    this.committed.set(shard, sequence);
    this._journal('checkpoint', { shard, epoch: lease.epoch, checkpoint: sequence, sub, ok: true, tx: true });
    if (tried === SHARD_END) await this.drop(shard, SHARD_ENDED, 'closed');
    return true;
  }

  // After a batch transaction failed: restart the processor from the
  // checkpoint my_leases holds (tried: the checkpoint of a COMMIT whose
  // outcome is unknown; equal means it committed).
  async resolve(shard, lease, tried) {
    let rows;
    try {
      rows = await this.db.call(MINE, [...this.key, this.owner]);
    } catch (e) {
      if (e instanceof Unavailable || e instanceof Ambiguous) {
        await this.drop(shard, LEASE_LOST, 'unresolved', true);   // start() reads it again
      }
      throw e;
    }
    for (const [rowShard, rowEpoch, checkpoint, , sub, pending] of rows) {
      if (rowShard === shard && Number(rowEpoch) === lease.epoch) {
        this._journal('tx_resolved', { shard, epoch: lease.epoch, checkpoint,
          committed: tried !== null && checkpoint === tried });
        if (checkpoint === SHARD_END) await this.drop(shard, SHARD_ENDED, 'closed');
        else {
          await this.processor.initialize(shard, checkpoint, { sequence: checkpoint, subSequence: Number(sub), pending });
          this.committed.set(shard, checkpoint);
        }
        return;
      }
    }
    await this.drop(shard, LEASE_LOST, 'not in my_leases');
  }

  // Runs until stop(); then shuts every processor down and releases every
  // lease.  On an unexpected exception (the processor's, or an error the
  // rules say to raise) it does the same at once and rejects with it; so it
  // does when the renewer stopped with one.  A refused connection (Fatal)
  // releases nothing: the leases go by their local deadlines.
  async run() {
    this._journal('started', { lease_duration: this.leaseDuration, margin: this.margin });
    const renewer = this.renewer();
    try {
      await this.loop();
    } catch (e) {
      // a refused connection (Fatal), an error the rules say to raise, or the processor's
      this.log.error(`${this.owner}: stopping the worker: ${e.message}`);
      this._journal('worker_failed', { error: e.message });
      this.stopping = true;
      await renewer;
      await this.release(!(e instanceof Fatal));
      throw e;
    }
    await renewer;
    await this.release();
    if (this.error !== null) throw this.error;
  }

  async loop() {
    let nextBalance = 0;
    let nextSync = 0;
    while (!this.stopping) {
      if (this.shardLister !== null && now() >= nextSync) {
        await this.sync();
        nextSync = now() + this.syncEvery;
      }
      if (now() >= nextBalance) {
        await this.balance();
        nextBalance = now() + this.balanceEvery;
      }
      let busy = false;
      const done = [];    // this tick's checkpoints, written together
      for (const [shard, lease] of [...this.held]) {
        if (this.stopping) break;
        try {
          const [processed, checkpoint] = await this.work(shard, lease);
          busy = busy || processed;
          if (checkpoint !== null) done.push(checkpoint);
        } catch (e) {
          if (!(e instanceof Unavailable || e instanceof Ambiguous)) throw e;
          this._journal('call_failed', { shard, error: e.message });
        }
      }
      try {
        await this.checkpoints(done);
      } catch (e) {
        if (!(e instanceof Unavailable || e instanceof Ambiguous)) throw e;
        this._journal('call_failed', { error: e.message });
      }
      // yield to the renewal timer even when every shard is busy
      await sleep(busy ? 0 : 20);
    }
  }

  // After stop() (or an unexpected exception): shuts every processor down
  // and releases every lease (unless not release: the database refused the
  // connection).
  async release(release = true) {
    const held = [...this.held.keys()].sort();
    this._journal('stopping', { held });
    for (const shard of held) {
      const lease = this.held.get(shard);
      const deadline = lease ? this.deadline(lease) : 0;
      try {
        if (release && this.unacked.has(shard) && this.running.has(shard) && now() < deadline) {
          await this.checkpoint(shard, lease, this.unacked.get(shard), deadline);   // before the release
        }
        if (this.running.has(shard)) {
          this.running.delete(shard);
          await this.processor.shutdown(shard, WORKER_STOPPED);
        }
        if (release) {
          this._journal('released', { shard, ok: await this.db.one(RELEASE, [...this.key, shard, this.owner]) });
          this.log.info(`${this.owner}: released ${shard}`);
        }
      } catch (e) {   // stopping anyway: this lease goes by its deadline and expiry
        this._journal('call_failed', { shard, error: e.message });
        this.log.warn(`${this.owner}: could not release ${shard} (it expires by itself): ${e.message}`);
      }
    }
    this.db.close();
    this.renewDb.close();
    if (this.txDb && this.txDb !== this.db) this.txDb.close();
  }
}

module.exports = {
  Worker, RecordProcessor, Session, Ambiguous, Unavailable, Fatal, consoleLogger, shardListArrays, rotateChannel,
  SHARD_END, LEASE_LOST, HANDED_OFF, SHARD_ENDED, WORKER_STOPPED,
};
