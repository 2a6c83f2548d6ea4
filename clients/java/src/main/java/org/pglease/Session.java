package org.pglease;

import java.net.URI;
import java.net.URISyntaxException;
import java.net.URLDecoder;
import java.net.URLEncoder;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.SQLWarning;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.logging.Level;
import java.util.logging.Logger;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.postgresql.util.PSQLException;
import org.postgresql.util.PSQLWarning;
import org.postgresql.util.ServerErrorMessage;

/** One autocommit JDBC connection that follows docs/client-rules.md. */
public final class Session implements AutoCloseable {
    static final Logger LOG = Logger.getLogger("org.pglease");

    /** A call did not go through; nothing is known to have happened, or it may have. */
    public abstract static class CallFailed extends Exception {
        private static final long serialVersionUID = 1L;

        CallFailed(String message) {
            super(message);
        }
    }

    /**
     * The connection was lost after the call was sent, or its answer came with the WARNING
     * of a cancelled wait for synchronous replication: it may or may not have committed.
     */
    public static final class Ambiguous extends CallFailed {
        private static final long serialVersionUID = 1L;

        Ambiguous(String message) {
            super(message);
        }
    }

    /** The call did not go through after its retries; nothing is known to have happened. */
    public static final class Unavailable extends CallFailed {
        private static final long serialVersionUID = 1L;

        Unavailable(String message) {
            super(message);
        }
    }

    private final String url;           // without the password, which is in props
    private final Properties props;
    private Connection conn;

    /**
     * dsn: a JDBC URL ({@code jdbc:postgresql://...}) or a libpq URL
     * ({@code postgresql:///mydb?host=/var/run/postgresql&user=me}, see {@link #jdbcUrl});
     * options: e.g. {@code -c lock_timeout=1000}, or null.
     */
    public Session(String dsn, String applicationName, String options) {
        this(dsn, applicationName, options, null);
    }

    /** As above, with more driver properties (e.g. socketTimeout, connectTimeout), or null. */
    public Session(String dsn, String applicationName, String options, Properties extra) {
        String jdbc = jdbcUrl(dsn);
        this.props = new Properties();
        // the password goes to the driver as a property, never in the URL: pgjdbc logs the
        // URL (Driver, FINE) and DriverManager's "No suitable driver found for" quotes it
        Matcher pw = URL_PASSWORD_PARAM.matcher(jdbc);
        if (pw.find()) {
            props.setProperty("password", decode(pw.group(2)));
            jdbc = jdbc.substring(0, pw.start()) + (pw.group(3).isEmpty() ? "" : pw.group(1))
                + jdbc.substring(pw.end());
        }
        this.url = jdbc;
        props.setProperty("ApplicationName", applicationName);
        if (options != null) {
            props.setProperty("options", options);
        }
        if (extra != null) {
            props.putAll(extra);
        }
    }

    /**
     * The JDBC URL of a libpq connection URL ({@code postgresql://[user@][host][:port]/db?param=...}):
     * a host (or {@code host=} parameter) that starts with "/" is a Unix socket directory,
     * connected to through {@link UnixSocketFactory}; no host at all is Debian's
     * {@code /var/run/postgresql}, as for libpq.  Other parameters pass through
     * ({@code user}, {@code password}, {@code sslmode}, ...).  A JDBC URL is returned as it is.
     */
    public static String jdbcUrl(String dsn) {
        if (dsn.startsWith("jdbc:")) {
            return dsn;
        }
        if (!dsn.startsWith("postgresql://") && !dsn.startsWith("postgres://")) {
            throw new IllegalArgumentException("not a JDBC URL nor a postgresql:// URL: " + redactPassword(dsn));
        }
        try {
            return libpqToJdbc(new URI(dsn));
        } catch (URISyntaxException | IllegalArgumentException e) {    // their messages quote the URL
            throw new IllegalArgumentException("not a valid postgresql:// URL: " + redactPassword(dsn)
                + " (" + (e instanceof URISyntaxException ? ((URISyntaxException) e).getReason()
                          : redactPassword(String.valueOf(e.getMessage()))) + ")");
        }
    }

    /** jdbcUrl of a postgresql:// URL. */
    private static String libpqToJdbc(URI uri) {
        Map<String, String> q = new LinkedHashMap<>();
        if (uri.getRawQuery() != null) {
            for (String kv : uri.getRawQuery().split("&")) {
                int eq = kv.indexOf('=');
                if (eq > 0) {
                    q.put(decode(kv.substring(0, eq)), decode(kv.substring(eq + 1)));
                }
            }
        }
        // the authority by hand: java.net.URI parses "user@" with no host as no user at all
        String authority = uri.getRawAuthority() == null ? "" : uri.getRawAuthority();
        int at = authority.lastIndexOf('@');
        if (at >= 0) {
            String user = authority.substring(0, at);
            int colon = user.indexOf(':');
            if (colon >= 0) {
                q.putIfAbsent("password", decode(user.substring(colon + 1)));
                user = user.substring(0, colon);
            }
            q.putIfAbsent("user", decode(user));
            authority = authority.substring(at + 1);
        }
        int colon = authority.lastIndexOf(':');
        String host = q.remove("host");
        if (host == null) {
            host = colon >= 0 ? authority.substring(0, colon) : authority;
            host = host.isEmpty() ? "/var/run/postgresql" : decode(host);
        }
        String port = q.remove("port");
        if (port == null) {
            port = colon >= 0 ? authority.substring(colon + 1) : "5432";
        }
        String db = uri.getPath() == null || uri.getPath().length() <= 1 ? q.remove("dbname") : uri.getPath().substring(1);
        q.remove("dbname");
        if (db == null) {
            db = q.getOrDefault("user", "postgres");
        }
        if (host.startsWith("/")) {
            q.put("socketFactory", UnixSocketFactory.class.getName());
            q.put("socketFactoryArg", host);
            q.putIfAbsent("sslmode", "disable");
            host = "localhost";
        }
        StringBuilder sb = new StringBuilder("jdbc:postgresql://").append(host).append(':').append(port)
            .append('/').append(encode(db));
        char sep = '?';
        for (Map.Entry<String, String> e : q.entrySet()) {
            sb.append(sep).append(encode(e.getKey())).append('=').append(encode(e.getValue()));
            sep = '&';
        }
        return sb.toString();
    }

    /** A JDBC URL's password parameter: the separator before it, its encoded value. */
    private static final Pattern URL_PASSWORD_PARAM = Pattern.compile("([?&])password=([^&]*)(&|$)");
    private static final Pattern USERINFO_PASSWORD = Pattern.compile("(://[^:/?#@\\s]*:)[^@\\n]*@");
    private static final Pattern PARAM_PASSWORD = Pattern.compile("(?i)(password\\s*=\\s*)('(\\\\.|[^'])*'|[^\\s&]*)");

    /**
     * s (a URL, or a message quoting one) with every password replaced by xxxxx: the
     * user:password@ of a URL, a password= parameter of a URL or of key=value settings.
     */
    static String redactPassword(String s) {
        s = USERINFO_PASSWORD.matcher(s).replaceAll("$1xxxxx@");
        return PARAM_PASSWORD.matcher(s).replaceAll("$1xxxxx");
    }

    private static String decode(String s) {
        return URLDecoder.decode(s, StandardCharsets.UTF_8);
    }

    private static String encode(String s) {
        return URLEncoder.encode(s, StandardCharsets.UTF_8);
    }

    /** The SQLSTATE of an error (null when the driver gave none). */
    static String sqlstate(SQLException e) {
        return e.getSQLState();
    }

    /** The primary message of an error: the server's own, without the driver's "ERROR: " and detail. */
    static String primaryMessage(SQLException e) {
        if (e instanceof PSQLException) {
            ServerErrorMessage m = ((PSQLException) e).getServerErrorMessage();
            if (m != null && m.getMessage() != null) {
                return m.getMessage();
            }
        }
        return e.getMessage();
    }

    /** The kind of an error, by docs/client-rules.md. */
    static Rules.Kind kind(SQLException e) {
        return Rules.classify(sqlstate(e), primaryMessage(e));
    }

    /** The connection, made when there is none. */
    synchronized Connection connect() throws SQLException {
        if (conn == null || conn.isClosed()) {
            conn = DriverManager.getConnection(url, props);
            conn.setAutoCommit(true);
        }
        return conn;
    }

    /** The URL the driver connects to (for the tests: it holds no password). */
    String url() {
        return url;
    }

    /** The password given to the driver as a property (null: none). */
    String password() {
        return props.getProperty("password");
    }

    /** The connection as it is (null when there is none). */
    synchronized Connection current() {
        return conn;
    }

    @Override
    public synchronized void close() {
        if (conn != null) {
            try {
                conn.close();
            } catch (SQLException e) {
                LOG.log(Level.FINE, "closing a connection", e);
            }
            conn = null;
        }
    }

    /**
     * The rows of one statement ({@code ?} parameters: String, Long, Integer, Boolean, or an
     * Object[] sent as a text array, a Long[] as a bigint array).  Throws Ambiguous (only when not repeatSafe),
     * Unavailable, or the driver's SQLException for anything the rules say to raise (and
     * for a connection the server refused for such a reason, e.g. authentication, after
     * the retries).  No repeat starts after untilNanos (System.nanoTime()), unless it is 0.
     */
    public List<Object[]> call(String sql, Object[] params, boolean repeatSafe, long untilNanos)
        throws SQLException, CallFailed {
        String last = "not sent";
        SQLException refused = null;
        for (int attempt = 0; attempt < Rules.TRIES; attempt++) {
            if (attempt > 0) {
                try {
                    Thread.sleep(Rules.backoffMillis(attempt));
                } catch (InterruptedException ie) {
                    Thread.currentThread().interrupt();
                    break;
                }
                if (untilNanos != 0 && System.nanoTime() >= untilNanos) {
                    break;
                }
            }
            Connection c;
            try {
                c = connect();
            } catch (SQLException e) {
                close();
                last = describe(e);
                // nothing was sent: every refusal is tried again; a fatal one (authentication,
                // no such database) is raised once the tries are spent
                Rules.Kind kind = kind(e);
                refused = kind == Rules.Kind.FATAL || kind == Rules.Kind.RAISE ? e : null;
                LOG.warning("cannot connect (try " + (attempt + 1) + " of " + Rules.TRIES + "): " + last);
                continue;
            }
            refused = null;
            try (PreparedStatement ps = c.prepareStatement(sql)) {
                for (int i = 0; i < params.length; i++) {
                    Object p = params[i];
                    if (p instanceof Long[]) {
                        ps.setArray(i + 1, c.createArrayOf("bigint", (Object[]) p));
                    } else if (p instanceof Object[]) {
                        ps.setArray(i + 1, c.createArrayOf("text", (Object[]) p));
                    } else {
                        ps.setObject(i + 1, p);
                    }
                }
                c.clearWarnings();
                List<Object[]> rows = new ArrayList<>();
                if (ps.execute()) {             // else a statement without a result (GRANT, ...)
                    try (ResultSet rs = ps.getResultSet()) {
                        int n = rs.getMetaData().getColumnCount();
                        while (rs.next()) {
                            Object[] row = new Object[n];
                            for (int i = 0; i < n; i++) {
                                row[i] = rs.getObject(i + 1);
                            }
                            rows.add(row);
                        }
                    }
                }
                // the notices of the call: on the statement (pgjdbc's), or on the connection
                String warning = ambiguousWarning(ps.getWarnings());
                if (warning == null) {
                    warning = ambiguousWarning(c.getWarnings());
                }
                if (warning == null) {
                    return rows;
                }
                // committed locally, perhaps only here: ambiguous, not success
                last = "WARNING " + warning;
                if (!repeatSafe) {
                    throw new Ambiguous(warning);
                }
                LOG.warning(name(sql) + " answered with a warning (ambiguous, try " + (attempt + 1) + " of "
                    + Rules.TRIES + "), retrying: " + warning);
            } catch (SQLException e) {
                last = describe(e);
                Rules.Kind kind = kind(e);
                if (kind == Rules.Kind.RAISE || kind == Rules.Kind.DROP || kind == Rules.Kind.FATAL) {
                    throw e;
                }
                if (kind != Rules.Kind.REPEAT) {
                    close();
                }
                if (kind == Rules.Kind.AMBIGUOUS && !repeatSafe) {
                    throw new Ambiguous(last);
                }
                LOG.info(name(sql) + " failed (" + kind.label() + ", try " + (attempt + 1) + " of " + Rules.TRIES
                    + "): " + last);
            }
        }
        if (refused != null) {
            throw refused;
        }
        throw new Unavailable(name(sql) + ": " + last);
    }

    /**
     * The primary message of a notice in a JDBC warning chain (a statement's or a
     * connection's {@code getWarnings()}) that makes its call ambiguous by
     * docs/client-rules.md (the WARNING of a cancelled wait for synchronous replication),
     * or null.  call() checks it after every call; a caller that runs its own transaction
     * checks {@code connection.getWarnings()} after its {@code commit()} (or the
     * statement's, after an {@code execute("COMMIT")}): such a commit is an unknown outcome.
     */
    public static String ambiguousWarning(SQLWarning w) {
        for (; w != null; w = w.getNextWarning()) {
            String severity = null;
            String message = w.getMessage();
            if (w instanceof PSQLWarning) {
                ServerErrorMessage m = ((PSQLWarning) w).getServerErrorMessage();
                if (m != null) {
                    severity = m.getSeverity();
                    message = m.getMessage();
                }
            }
            if (Rules.ambiguousNotice(severity, message)) {
                return message;
            }
        }
        return null;
    }

    /** The first column of the only row. */
    public Object one(String sql, Object[] params, boolean repeatSafe, long untilNanos)
        throws SQLException, CallFailed {
        return call(sql, params, repeatSafe, untilNanos).get(0)[0];
    }

    /** "SQLSTATE message" of an error, on one line. */
    static String describe(SQLException e) {
        String state = sqlstate(e);
        return (state == null ? "no SQLSTATE" : state) + " " + primaryMessage(e).split("\n")[0];
    }

    /** The function a statement calls, for messages. */
    private static String name(String sql) {
        int from = sql.indexOf("lease.");
        int paren = sql.indexOf('(', Math.max(from, 0));
        return from >= 0 && paren > from ? sql.substring(from, paren) : sql.split("\\(")[0];
    }
}
