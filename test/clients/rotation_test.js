#!/usr/bin/node
// The Node channel-rotation helper against the cluster (test/clients/run.sh).
//
//     rotation_test.js APP_URL ADMIN_URL
//
// A replacement that starts is kept and confirmed: the previous conversation
// has ended and freed its sandbox slot.  One whose start fails (the callback
// throws, or resolves false) is restored: the previous conversation holds the
// channel again and the replacement is failed.  At a tenant limit of 2 the
// helper rotates 100 times without a refusal.
'use strict';
const assert = require('assert');
const { Session, rotateChannel } = require('../../clients/node/pg_lease');

async function main() {
  const app = new Session(process.argv[2]);
  const admin = new Session(process.argv[3]);
  const scope = ['clients-node-tenant', 'bot', null, null, 'C1'];
  const find = () => app.one('SELECT lease.find_channel_conversation($1, $2, $3, $4, $5)', scope);
  const [[outcome, first]] = await app.call('SELECT * FROM lease.start_conversation($1, $2, $3, $4, $5)', scope);
  assert.strictEqual(outcome, 'started');

  const started = [];
  let r = await rotateChannel(app, scope, async (id) => { started.push(id); return true; });
  assert.strictEqual(r.outcome, 'rotated', JSON.stringify(r));
  assert.strictEqual(r.previousConversationId, first);
  assert.deepStrictEqual(started, [r.conversationId]);
  const second = r.conversationId;
  assert.strictEqual(await find(), second);
  // confirmed: the replacement runs, the previous conversation and its sandbox ended
  const status = (id) => admin.one("SELECT c.status || '/' || s.status FROM lease.conversations c" +
                                   ' JOIN lease.sandboxes s ON s.id = c.sandbox_id WHERE c.id = $1', [id]);
  assert.strictEqual(await status(second), 'running/pending');
  assert.strictEqual(await status(first), 'terminated/terminated');

  for (const failing of [async (id) => { throw new Error(`sandbox for ${id} did not come up`); },
                         async () => false]) {
    r = await rotateChannel(app, scope, failing);
    assert.strictEqual(r.outcome, 'restored', JSON.stringify(r));
    assert.strictEqual(r.previousConversationId, second);
    assert.strictEqual(await find(), second);
    assert.strictEqual(await admin.one('SELECT status FROM lease.conversations WHERE id = $1', [r.conversationId]), 'failed');
  }

  r = await rotateChannel(app, ['clients-node-tenant', 'bot', null, null, 'no-such-channel'], async () => true);
  assert.strictEqual(r.outcome, 'unbound');

  // !rotate forever at a small limit: each confirmed rotation frees the slot
  // of the conversation it replaced, so none is refused
  await admin.one('SELECT lease.set_tenant_limit($1, 2)', [scope[0]]);
  const outcomes = [];
  for (let i = 0; i < 100; i++) outcomes.push((await rotateChannel(app, scope, async () => true)).outcome);
  assert.deepStrictEqual([...new Set(outcomes)], ['rotated']);
  assert.strictEqual(outcomes.length, 100);
  const live = await app.call('SELECT status FROM lease.list_conversations($1, $2, $3, $4)', scope.slice(0, 4));
  assert.deepStrictEqual(live.map((row) => row[0]), ['running']);
  app.close();
  admin.close();
  console.log('node rotation helper: rotated and confirmed, restored twice, unbound, 100 rotations at limit 2');
}

main().catch((e) => { console.error(e); process.exit(1); });
