'use strict';
// The channel-rotation helper: rotate_channel, start the replacement, confirm
// it (which ends the previous conversation), restore on failure.
//
// Follows docs/channel-bindings.md (the rotation protocol and the lifecycle
// of a rotation) and docs/client-rules.md (rotate_channel is not safe to
// repeat after an ambiguous commit; confirm_rotation and
// restore_rotated_channel are).  The same helper as
// clients/python/pg_lease/channels.py.
const { Ambiguous, sleep } = require('./session');

const FIND = 'SELECT lease.find_channel_conversation($1, $2, $3, $4, $5)';
const ROTATE = 'SELECT outcome, conversation_id, previous_conversation_id, detail' +
  '  FROM lease.rotate_channel($1, $2, $3, $4, $5, $6::bigint)';
const RESTORE = 'SELECT lease.restore_rotated_channel($1::bigint, $2::bigint)';
const CONFIRM = 'SELECT lease.confirm_rotation($1::bigint, $2::bigint)';

// Rotates the channel to a fresh conversation.  startReplacement(conversationId)
// starts its worker and resolves true, or resolves false / throws when it could
// not.  Resolves { outcome, conversationId, previousConversationId, detail }:
// outcome rotated (the replacement started and was confirmed: the previous
// conversation has ended and its sandbox slot is free), ended (the
// replacement started but had been ended, e.g. restored by someone else,
// before it could be confirmed), restored / superseded / failed
// (it did not start; what restore_rotated_channel answered), refused, busy,
// binding_changed (still so after the retries), unbound (no conversation holds
// the channel), ambiguous (the connection broke during the rotation and the
// channel is now bound to conversationId: maybe ours, maybe a competitor's;
// see docs/client-rules.md).  Conversation ids are strings (bigint).
async function rotateChannel(session, [userId, agentId, vaultId, environmentId, channelId],
                             startReplacement, { rotateFrom = null, tries = 5 } = {}) {
  const scope = [userId, agentId, vaultId, environmentId, channelId];
  if (rotateFrom === null) rotateFrom = await session.one(FIND, scope);
  let outcome = 'binding_changed';
  let detail = null;
  for (let attempt = 0; attempt < tries; attempt++) {
    if (rotateFrom === null) return { outcome: 'unbound', conversationId: null, previousConversationId: null, detail: null };
    let newId, previous;
    try {
      [[outcome, newId, previous, detail]] = await session.call(ROTATE, [...scope, rotateFrom], false);
    } catch (e) {
      if (!(e instanceof Ambiguous)) throw e;
      const bound = await session.one(FIND, scope);
      if (bound === rotateFrom) continue;       // nothing happened: rotate again
      return { outcome: 'ambiguous', conversationId: bound, previousConversationId: rotateFrom, detail: e.message };
    }
    if (outcome === 'rotated') {
      let started = false;
      let error = null;
      try {
        started = await startReplacement(newId);
      } catch (e) {                              // the user's callback: any failure means "did not start"
        error = String(e);
      }
      if (started) {
        // The replacement runs: ending the previous conversation now frees its
        // slot (a restore is no longer needed).  Safe to repeat; its first turn
        // would do the same.
        const confirmed = await session.one(CONFIRM, [previous, newId]);
        if (confirmed === 'ended') {
          return { outcome: 'ended', conversationId: newId, previousConversationId: previous,
                   detail: 'the replacement was ended before it was confirmed' };
        }
        return { outcome, conversationId: newId, previousConversationId: previous, detail };
      }
      const restored = await session.one(RESTORE, [previous, newId]);
      return { outcome: restored, conversationId: newId, previousConversationId: previous,
               detail: error || 'the replacement did not start' };
    }
    if (outcome === 'refused') return { outcome, conversationId: null, previousConversationId: rotateFrom, detail };
    if (outcome === 'binding_changed') rotateFrom = await session.one(FIND, scope);
    await sleep(20 * (attempt + 1));            // busy: the previous conversation is admitting a turn
  }
  return { outcome, conversationId: null, previousConversationId: rotateFrom, detail };
}

module.exports = { rotateChannel };
