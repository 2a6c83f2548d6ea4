#!/usr/bin/node
// The Node channel-rotation helper against the cluster (test/clients/run.sh).
//
//     rotation_test.js APP_URL ADMIN_URL
//
// A replacement that starts is kept; one whose start fails (the callback
// throws, or resolves false) is restored: the previous conversation holds the
// channel again and the replacement is failed.
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
  app.close();
  admin.close();
  console.log('node rotation helper: rotated, restored twice, unbound');
}

main().catch((e) => { console.error(e); process.exit(1); });
