package org.pglease;

import java.sql.SQLException;
import java.util.List;

/**
 * The channel-rotation helper: rotate_channel, start the replacement, confirm it (which
 * ends the previous conversation), restore on failure.
 *
 * <p>Follows docs/channel-bindings.md (the rotation protocol and the lifecycle of a
 * rotation) and docs/client-rules.md (rotate_channel is not safe to repeat after an
 * ambiguous commit; confirm_rotation and restore_rotated_channel are).  The same helper
 * as clients/python/pg_lease/channels.py and clients/node/channels.js.
 */
public final class Channels {
    private Channels() {
    }

    static final String FIND = "SELECT lease.find_channel_conversation(?, ?, ?, ?, ?)";
    static final String ROTATE = "SELECT outcome, conversation_id, previous_conversation_id, detail"
        + "  FROM lease.rotate_channel(?, ?, ?, ?, ?, ?::bigint)";
    static final String RESTORE = "SELECT lease.restore_rotated_channel(?::bigint, ?::bigint)";
    static final String CONFIRM = "SELECT lease.confirm_rotation(?::bigint, ?::bigint)";

    /** Starts the replacement conversation's worker: true when it started; false or throw when not. */
    @FunctionalInterface
    public interface Starter {
        boolean start(long conversationId) throws Exception;
    }

    /**
     * What a rotation came to.  outcome: rotated (the replacement started and was confirmed:
     * the previous conversation has ended and its sandbox slot is free), ended (the
     * replacement started but had been ended, e.g. restored by someone else, before it could
     * be confirmed), restored / superseded / failed (it did not start; what
     * restore_rotated_channel answered), refused, busy, binding_changed (still so after the
     * retries), unbound (no conversation holds the channel), ambiguous (the connection broke
     * during the rotation and the channel is now bound to conversationId: maybe ours, maybe a
     * competitor's; see docs/client-rules.md).
     */
    public record Rotation(String outcome, Long conversationId, Long previousConversationId, String detail) {
    }

    /** Rotates the channel to a fresh conversation, from the one bound now, in at most 5 tries. */
    public static Rotation rotateChannel(Session session, String userId, String agentId, String vaultId,
                                         String environmentId, String channelId, Starter startReplacement)
        throws SQLException, Session.CallFailed, InterruptedException {
        return rotateChannel(session, new String[] {userId, agentId, vaultId, environmentId, channelId},
                             startReplacement, null, 5);
    }

    /** The same, from a given conversation (rotateFrom; null: the one bound now) in tries tries. */
    public static Rotation rotateChannel(Session session, String[] scope, Starter startReplacement, Long rotateFrom,
                                         int tries)
        throws SQLException, Session.CallFailed, InterruptedException {
        Object[] find = scope.clone();
        if (rotateFrom == null) {
            rotateFrom = (Long) session.one(FIND, find, true, 0);
        }
        String outcome = "binding_changed";
        String detail = null;
        for (int attempt = 0; attempt < tries; attempt++) {
            if (rotateFrom == null) {
                return new Rotation("unbound", null, null, null);
            }
            Object[] args = {scope[0], scope[1], scope[2], scope[3], scope[4], rotateFrom};
            List<Object[]> rows;
            try {
                rows = session.call(ROTATE, args, false, 0);
            } catch (Session.Ambiguous e) {
                Long bound = (Long) session.one(FIND, find, true, 0);
                if (rotateFrom.equals(bound)) {
                    continue;                   // nothing happened: rotate again
                }
                return new Rotation("ambiguous", bound, rotateFrom, e.getMessage());
            }
            Object[] row = rows.get(0);
            outcome = (String) row[0];
            Long newId = (Long) row[1];
            Long previous = (Long) row[2];
            detail = (String) row[3];
            if (outcome.equals("rotated")) {
                boolean started = false;
                String error = null;
                try {
                    started = startReplacement.start(newId);
                } catch (Exception e) {         // the user's callback: any failure means "did not start"
                    error = e.toString();
                }
                if (started) {
                    // The replacement runs: ending the previous conversation now frees its slot (a
                    // restore is no longer needed).  Safe to repeat; its first turn would do the same.
                    if ("ended".equals(session.one(CONFIRM, new Object[] {previous, newId}, true, 0))) {
                        return new Rotation("ended", newId, previous, "the replacement was ended before it was confirmed");
                    }
                    return new Rotation(outcome, newId, previous, detail);
                }
                String restored = (String) session.one(RESTORE, new Object[] {previous, newId}, true, 0);
                return new Rotation(restored, newId, previous, error != null ? error : "the replacement did not start");
            }
            if (outcome.equals("refused")) {
                return new Rotation(outcome, null, rotateFrom, detail);
            }
            if (outcome.equals("binding_changed")) {
                rotateFrom = (Long) session.one(FIND, find, true, 0);
            }
            Thread.sleep(20L * (attempt + 1)); // busy: the previous conversation is admitting a turn
        }
        return new Rotation(outcome, null, rotateFrom, detail);
    }
}
