package org.pglease;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import org.junit.jupiter.api.Test;

/**
 * The channel-rotation helper against the cluster, as test/clients/rotation_test.js does
 * for Node: a replacement that starts is kept and confirmed; one whose start fails (the
 * callback throws, or answers false) is restored; at a tenant limit of 2 the helper
 * rotates 100 times without a refusal.  System properties: pglease.app (the application
 * role), pglease.admin.
 */
class ChannelsTest {
    @Test
    void rotateChannelConfirmsWhatStartedAndRestoresWhatDidNot() throws Exception {
        String appDsn = System.getProperty("pglease.app");
        assertNotNull(appDsn, "-Dpglease.app");
        try (Session app = new Session(appDsn, "java rotation test", null);
             Session admin = new Session(System.getProperty("pglease.admin"), "java rotation admin", null)) {
            String[] scope = {"clients-java-tenant", "bot", null, null, "C1"};
            Object[] row = app.call("SELECT * FROM lease.start_conversation(?, ?, ?, ?, ?)", scope.clone(), true, 0).get(0);
            assertEquals("started", row[0]);
            long first = ((Number) row[1]).longValue();

            List<Long> started = new ArrayList<>();
            Channels.Rotation r = Channels.rotateChannel(app, scope, id -> started.add(id), null, 5);
            assertEquals("rotated", r.outcome(), r.toString());
            assertEquals(first, r.previousConversationId());
            assertEquals(List.of(r.conversationId()), started);
            long second = r.conversationId();
            assertEquals(second, app.one(Channels.FIND, scope.clone(), true, 0));
            String status = "SELECT c.status || '/' || s.status FROM lease.conversations c"
                + " JOIN lease.sandboxes s ON s.id = c.sandbox_id WHERE c.id = ?";
            assertEquals("running/pending", admin.one(status, new Object[] {second}, true, 0));
            assertEquals("terminated/terminated", admin.one(status, new Object[] {first}, true, 0));

            List<Channels.Starter> failing = List.of(
                id -> {
                    throw new IllegalStateException("sandbox for " + id + " did not come up");
                },
                id -> false);
            for (Channels.Starter f : failing) {
                r = Channels.rotateChannel(app, scope, f, null, 5);
                assertEquals("restored", r.outcome(), r.toString());
                assertEquals(second, r.previousConversationId());
                assertEquals(second, app.one(Channels.FIND, scope.clone(), true, 0));
                assertEquals("failed", admin.one("SELECT status FROM lease.conversations WHERE id = ?",
                                                 new Object[] {r.conversationId()}, true, 0));
            }

            r = Channels.rotateChannel(app, "clients-java-tenant", "bot", null, null, "no-such-channel", id -> true);
            assertEquals("unbound", r.outcome());

            // !rotate forever at a small limit: each confirmed rotation frees the slot of the
            // conversation it replaced, so none is refused
            admin.one("SELECT lease.set_tenant_limit(?, 2)", new Object[] {scope[0]}, true, 0);
            Set<String> outcomes = new TreeSet<>();
            for (int i = 0; i < 100; i++) {
                outcomes.add(Channels.rotateChannel(app, scope, id -> true, null, 5).outcome());
            }
            assertEquals(Set.of("rotated"), outcomes);
            List<Object[]> live = app.call("SELECT status FROM lease.list_conversations(?, ?, ?, ?)",
                                           new Object[] {scope[0], scope[1], scope[2], scope[3]}, true, 0);
            assertEquals(1, live.size());
            assertEquals("running", live.get(0)[0]);
        }
    }
}
