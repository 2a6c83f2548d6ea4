package org.pglease;

import java.util.Set;
import java.util.concurrent.ThreadLocalRandom;
import java.util.regex.Pattern;

/**
 * What to do when a call fails: docs/client-rules.md, as code.
 *
 * <p>The table is clients/rules.json's: test/clients/rules_table.py checks that these
 * sets, patterns and tries are exactly the ones there, and RulesTest that classify() and
 * ambiguousNotice() answer every case of test/clients/rules_cases.json and
 * notice_cases.json as the page says.
 */
public final class Rules {
    private Rules() {
    }

    /** What the client does about an error. */
    public enum Kind {
        /** Rolled back, nothing happened: repeat the same call after a short backoff. */
        REPEAT,
        /** No usable connection, nothing happened: reconnect, then repeat. */
        RECONNECT,
        /** The connection is gone and the call may or may not have committed. */
        AMBIGUOUS,
        /** hold_lease's "not held" (transactional mode): drop the shard, do not repeat. */
        DROP,
        /**
         * The server refused the credentials or the database at connect: tried like any
         * failed connection, then the worker stops, loudly.
         */
        FATAL,
        /** A bug in the caller, a privilege, or pg_lease: do not repeat, raise to the caller. */
        RAISE;

        /** The name the rules-cases file uses ("repeat", "reconnect", ...). */
        public String label() {
            return name().toLowerCase(java.util.Locale.ROOT);
        }
    }

    /** Rolled back, nothing happened: repeat the same call after a short backoff. */
    public static final Set<String> REPEAT = Set.of("40001", "40P01", "55P03", "57014", "40L01");
    /** No usable connection, nothing happened: reconnect, then repeat. */
    public static final Set<String> RECONNECT = Set.of("53300", "57P03", "25006");
    /**
     * The connection is gone and the call may or may not have committed (so is any error
     * without a SQLSTATE, and every class 08 error).
     */
    public static final Set<String> AMBIGUOUS = Set.of("57P01", "57P02");
    /**
     * Through the router: PL/Proxy's own XX000 whose message names a lost partition
     * connection (or a timeout on it) is ambiguous too; any other XX000 is raised.
     */
    public static final Pattern PLPROXY_CONNECTION_LOST = Pattern.compile(
        "^PL/Proxy function [^ ]+ (\\[[^ ]+\\] )?(PQconnectStart|PQconnectPoll|PQsendQuery|PQflush|PQconsumeInput|connect timeout|query timeout)");
    /**
     * Transactional mode: hold_lease's 55000 (the lease is not held at the worker's epoch;
     * its transaction is aborted): drop the shard.  Any other 55000 is raised.
     */
    public static final Pattern LEASE_NOT_HELD = Pattern.compile("(^|REMOTE ERROR: )lease .+ is not held by ");

    /**
     * The server refused these credentials or this database, at connect: a configuration
     * error no retry fixes.
     */
    public static final Set<String> FATAL = Set.of("28P01", "28000", "3D000");
    /** The same refusal from a driver that gives no SQLSTATE at connect (only then). */
    public static final Pattern CONNECT_REFUSED = Pattern.compile("""
            (password authentication failed|Peer authentication failed|Ident authentication failed|no pg_hba\\.conf entry|role "[^"]+" does not exist|database "[^"]+" does not exist)
            """.strip());
    /**
     * A call, or the COMMIT of a transaction, that comes back with this WARNING committed
     * locally but may not have been replicated (a waiting backend's synchronous replication
     * wait was cancelled, by an operator or a failover manager): ambiguous, not success.
     */
    public static final Pattern SYNC_REP_CANCELLED = Pattern.compile("canceling (the )?wait for synchronous replication");
    /** Tries of one call before it is treated as a connection problem. */
    public static final int TRIES = 5;

    private static final Pattern SQLSTATE = Pattern.compile("[0-9A-Z]{5}");

    /**
     * The kind of an error, from its SQLSTATE (null: none, the driver raised before an
     * answer) and its primary message (null when there is none).
     */
    public static Kind classify(String sqlstate, String message) {
        if ((sqlstate != null && FATAL.contains(sqlstate))
            || (sqlstate == null && message != null && CONNECT_REFUSED.matcher(message).find())) {
            return Kind.FATAL;
        }
        if (sqlstate == null || !SQLSTATE.matcher(sqlstate).matches()
            || sqlstate.startsWith("08") || AMBIGUOUS.contains(sqlstate)) {
            return Kind.AMBIGUOUS;
        }
        if (sqlstate.equals("XX000") && message != null && PLPROXY_CONNECTION_LOST.matcher(message).find()) {
            return Kind.AMBIGUOUS;
        }
        if (sqlstate.equals("55000") && message != null && LEASE_NOT_HELD.matcher(message).find()) {
            return Kind.DROP;
        }
        if (REPEAT.contains(sqlstate)) {
            return Kind.REPEAT;
        }
        if (RECONNECT.contains(sqlstate)) {
            return Kind.RECONNECT;
        }
        return Kind.RAISE;
    }

    /**
     * True when a notice (its severity and primary message) makes the call that raised it
     * ambiguous: the cancelled wait for synchronous replication.
     */
    public static boolean ambiguousNotice(String severity, String message) {
        return "WARNING".equals(severity) && message != null && SYNC_REP_CANCELLED.matcher(message).find();
    }

    /** Milliseconds to wait before try number attempt + 1 (random, growing). */
    public static long backoffMillis(int attempt) {
        double base = Math.min(1000, 20 * Math.pow(2, attempt));
        return Math.round(base * (0.5 + ThreadLocalRandom.current().nextDouble()));
    }
}
