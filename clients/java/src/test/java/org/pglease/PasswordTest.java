package org.pglease;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.logging.Handler;
import java.util.logging.Level;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import org.junit.jupiter.api.Test;

/**
 * No password in an exception, a log record (the client's, or pgjdbc's at any level), or
 * a URL the driver logs (docs/clients/java.md, Connecting).
 */
class PasswordTest {
    static final String SECRET = "s3cret-Pw-java";

    @Test
    void thePasswordGoesToTheDriverAsAPropertyNotInTheUrl() {
        String[][] cases = {
            {"postgres://u:" + SECRET + "@db.example:6432/orders?sslmode=require",
             "jdbc:postgresql://db.example:6432/orders?sslmode=require&user=u"},
            {"postgresql://db.example/orders?password=" + SECRET + "&user=u",
             "jdbc:postgresql://db.example:5432/orders?user=u"},
            {"jdbc:postgresql://h/d?user=u&password=" + SECRET, "jdbc:postgresql://h/d?user=u"},
            {"jdbc:postgresql://h/d?password=" + SECRET, "jdbc:postgresql://h/d"},
        };
        for (String[] c : cases) {
            Session s = new Session(c[0], "java password test", null);
            assertEquals(c[1], s.url(), c[0]);
            assertEquals(SECRET, s.password(), c[0]);
        }
        assertNull(new Session("jdbc:postgresql://h/d?user=u", "java password test", null).password());
    }

    @Test
    void aUrlThatCannotBeReadIsReportedWithoutItsPassword() {
        for (String dsn : new String[] {"postgresql://u:" + SECRET + " x@h/db", "mysql://u:" + SECRET + "@h/db",
                                        "postgresql://h/d?password=" + SECRET + "&x=%zz"}) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> new Session(dsn, "java password test", null));
            assertFalse(e.getMessage().contains(SECRET), e.getMessage());
            assertTrue(e.getMessage().contains("xxxxx"), e.getMessage());
        }
    }

    /** A URL the driver cannot use: what call() throws and every record logged, pgjdbc's at FINEST. */
    @Test
    void aFailedConnectionIsLoggedAndThrownWithoutThePassword() {
        ConcurrentLinkedQueue<String> logged = new ConcurrentLinkedQueue<>();
        Handler capture = new Handler() {
            @Override
            public void publish(LogRecord r) {
                logged.add(r.getLevel() + " " + r.getLoggerName() + " " + r.getMessage() + " "
                    + java.util.Arrays.toString(r.getParameters()) + " " + r.getThrown());
            }

            @Override
            public void flush() {
            }

            @Override
            public void close() {
            }
        };
        capture.setLevel(Level.ALL);
        Logger pgjdbc = Logger.getLogger("org.postgresql");
        Level was = pgjdbc.getLevel();
        pgjdbc.setLevel(Level.ALL);
        pgjdbc.addHandler(capture);
        Session.LOG.addHandler(capture);
        try (Session s = new Session("postgresql://u:" + SECRET + "@localhost:notaport/db", "java password test", null)) {
            Exception e = assertThrows(Exception.class, () -> s.call("SELECT 1", new Object[0], true, 0));
            assertFalse(String.valueOf(e.getMessage()).contains(SECRET), e.getMessage());
        } finally {
            Session.LOG.removeHandler(capture);
            pgjdbc.removeHandler(capture);
            pgjdbc.setLevel(was);
        }
        assertTrue(logged.stream().anyMatch(l -> l.contains("cannot connect (try 5 of 5)")), String.join("\n", logged));
        assertTrue(logged.stream().noneMatch(l -> l.contains(SECRET)), String.join("\n", logged));
    }
}
