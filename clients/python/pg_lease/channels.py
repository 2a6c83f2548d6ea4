"""The channel-rotation helper: rotate_channel, start the replacement, confirm
it (which ends the previous conversation), restore on failure.

Follows docs/channel-bindings.md (the rotation protocol and the lifecycle of
a rotation) and docs/client-rules.md (rotate_channel is not safe to repeat
after an ambiguous commit; confirm_rotation and restore_rotated_channel are).
"""
import time
from collections import namedtuple

from .session import Ambiguous

FIND = "SELECT lease.find_channel_conversation(%s, %s, %s, %s, %s)"
ROTATE = ("SELECT outcome, conversation_id, previous_conversation_id, detail"
          "  FROM lease.rotate_channel(%s, %s, %s, %s, %s, %s)")
RESTORE = "SELECT lease.restore_rotated_channel(%s, %s)"
CONFIRM = "SELECT lease.confirm_rotation(%s, %s)"

# outcome: rotated (the replacement started and was confirmed: the previous
# conversation has ended and its sandbox slot is free), ended (the
# replacement started but had been ended, e.g. restored by someone else,
# before it could be confirmed), restored / superseded / failed
# (it did not start; what restore_rotated_channel answered), refused, busy,
# binding_changed (still so after the retries), unbound (no conversation
# holds the channel), ambiguous (the connection broke during the rotation
# and the channel is now bound to conversation_id: maybe ours, maybe a
# competitor's; see docs/client-rules.md).
RotationResult = namedtuple("RotationResult", "outcome conversation_id previous_conversation_id detail")


def rotate_channel(session, user_id, agent_id, vault_id, environment_id, channel_id,
                   start_replacement, rotate_from=None, tries=5):
    """Rotates the channel to a fresh conversation; start_replacement(conversation_id)
    starts its worker and returns True, or returns False / raises when it could not."""
    scope = (user_id, agent_id, vault_id, environment_id, channel_id)
    if rotate_from is None:
        rotate_from = session.one(FIND, scope)
    outcome, detail = "binding_changed", None
    for attempt in range(tries):
        if rotate_from is None:
            return RotationResult("unbound", None, None, None)
        try:
            outcome, new_id, previous, detail = session.call(ROTATE, scope + (rotate_from,),
                                                             repeat_safe=False)[0]
        except Ambiguous as e:
            bound = session.one(FIND, scope)
            if bound == rotate_from:
                continue          # nothing happened: rotate again
            return RotationResult("ambiguous", bound, rotate_from, str(e))
        if outcome == "rotated":
            try:
                started = start_replacement(new_id)
                error = None
            except Exception as e:   # the user's callback: any failure means "did not start"
                started, error = False, repr(e)
            if started:
                # The replacement runs: ending the previous conversation now
                # frees its slot (a restore is no longer needed).  Safe to
                # repeat; its first turn would do the same.
                confirmed = session.one(CONFIRM, (previous, new_id))
                if confirmed == "ended":
                    return RotationResult("ended", new_id, previous,
                                          "the replacement was ended before it was confirmed")
                return RotationResult("rotated", new_id, previous, detail)
            restored = session.one(RESTORE, (previous, new_id))
            return RotationResult(restored, new_id, previous, error or "the replacement did not start")
        if outcome == "refused":
            return RotationResult(outcome, None, rotate_from, detail)
        if outcome == "binding_changed":
            rotate_from = session.one(FIND, scope)
        time.sleep(0.02 * (attempt + 1))   # busy: the previous conversation is admitting a turn
    return RotationResult(outcome, None, rotate_from, detail)
