"""One autocommit connection that follows docs/client-rules.md."""
import logging
import os
import socket
import threading
import time

import psycopg2

from . import rules

# The clients' one logger: connection and authentication failures at ERROR,
# retries at WARNING, lease changes at INFO (worker.py).  The application
# configures it (logging.basicConfig, or a handler on "pg_lease").
log = logging.getLogger("pg_lease")


class Ambiguous(Exception):
    """The connection was lost after the call was sent: it may or may not have committed."""


class Unavailable(Exception):
    """The call did not go through after its retries; nothing is known to have happened."""


class Fatal(Exception):
    """The server refused the credentials or the database after the rules' tries
    (docs/client-rules.md: authentication): a configuration error, the worker stops."""


class _Notices:
    """psycopg2's conn.notices for one connection: the notices of the statement in progress
    (psycopg2 appends each one, "SEVERITY:  message\nDETAIL: ...")."""

    def __init__(self):
        self.texts = []

    def append(self, text):
        self.texts.append(text)

    def clear(self):
        self.texts = []

    def ambiguous(self):
        """The primary message of a notice that makes the statement ambiguous
        (docs/client-rules.md: a cancelled wait for synchronous replication), or None."""
        for text in self.texts:
            severity, _, rest = text.partition(":")
            message = rest.strip().split("\n")[0]
            if rules.ambiguous_notice(severity.strip(), message):
                return message
        return None


class _Watchdog:
    """Severs the connection of a call that outlasts its timeout: the socket is shut down, so
    the blocked call fails at once (a lost connection: ambiguous) instead of waiting forever
    on a peer that never answers (a proxy that lost its server but keeps the client's side
    open acknowledges what is sent, so no TCP timeout fires)."""

    def __init__(self, timeout):
        self.timeout = timeout
        self.cond = threading.Condition()
        self.watched = None       # (connection, deadline) of the call in progress
        threading.Thread(target=self._run, daemon=True).start()

    def watch(self, conn):
        with self.cond:
            self.watched = (conn, time.monotonic() + self.timeout)
            self.cond.notify()

    def done(self):
        with self.cond:
            self.watched = None

    def _run(self):
        with self.cond:
            while True:
                if self.watched is None:
                    self.cond.wait()
                    continue
                conn, deadline = self.watched
                if time.monotonic() < deadline:
                    self.cond.wait(deadline - time.monotonic())
                    continue
                self.watched = None
                try:
                    with socket.socket(fileno=os.dup(conn.fileno())) as sock:
                        sock.shutdown(socket.SHUT_RDWR)
                except (OSError, psycopg2.Error):
                    pass          # closed meanwhile


class Session:
    """Runs pg_lease calls, each its own transaction, retrying per the rules."""

    def __init__(self, dsn, application_name="pg_lease", options=None, params=None, call_timeout=None):
        self.dsn = dsn
        self.application_name = application_name
        self.options = options    # e.g. "-c lock_timeout=1000" (the renewer in transactional mode)
        self.params = params or {}    # more libpq parameters (the renewer's timeouts in fast-failover mode)
        self.conn = None
        self.notices = _Notices()     # of the connection's statement in progress
        # seconds a call may wait for its answer before its connection is severed (fast-failover mode)
        self.watchdog = _Watchdog(call_timeout) if call_timeout else None

    def connect(self):
        if self.conn is None or self.conn.closed:
            extra = dict(self.params)
            if self.options:
                extra["options"] = self.options
            self.conn = psycopg2.connect(self.dsn, application_name=self.application_name, **extra)
            self.conn.autocommit = True
            self.conn.notices = self.notices
        return self.conn

    def close(self):
        if self.conn is not None:
            try:
                self.conn.close()
            except psycopg2.Error:
                pass
            self.conn = None

    def call(self, sql, params=(), repeat_safe=True, until=None):
        """Rows of one statement.  Raises Ambiguous (only when not repeat_safe),
        Unavailable, or the driver's error for anything the rules say to raise.
        No repeat starts after until (a time.monotonic() value), if given.
        An answer that came with the WARNING of a cancelled wait for synchronous
        replication is ambiguous too (it committed locally, perhaps only there)."""
        last = "not sent"
        refused = 0
        name = sql.split("(")[0]
        for attempt in range(rules.TRIES):
            if attempt:
                time.sleep(rules.backoff(attempt))
                if until is not None and time.monotonic() >= until:
                    break
            try:
                conn = self.connect()
            except psycopg2.OperationalError as e:
                last = " ".join(str(e).split())
                if rules.classify(e.pgcode, last) == "fatal":
                    refused += 1
                log.warning("%s: cannot connect (try %d of %d): %s", self.application_name,
                            attempt + 1, rules.TRIES, last)
                continue                  # could not connect: nothing was sent
            if self.watchdog is not None:
                self.watchdog.watch(conn)
            try:
                with conn.cursor() as cur:
                    self.notices.clear()
                    cur.execute(sql, params)
                    rows = cur.fetchall()
                warning = self.notices.ambiguous()
                if warning is None:
                    return rows
                last = "WARNING " + warning
                if not repeat_safe:
                    raise Ambiguous(warning)
                log.warning("%s: %s answered with a warning (ambiguous, try %d of %d), retrying: %s",
                            self.application_name, name, attempt + 1, rules.TRIES, warning)
            except psycopg2.Error as e:
                last = "%s %s" % (e.pgcode or "no SQLSTATE", str(e).strip().split("\n")[0])
                kind = rules.classify(e.pgcode, e.diag.message_primary)
                if conn.closed and kind != "reconnect":
                    kind = "ambiguous"    # the driver lost the connection
                if kind in ("raise", "drop", "fatal"):
                    raise
                if kind != "repeat":
                    self.close()
                if kind == "ambiguous" and not repeat_safe:
                    raise Ambiguous(str(e).strip()) from e
                log.warning("%s: %s failed (%s, try %d of %d), retrying: %s", self.application_name,
                            name, kind, attempt + 1, rules.TRIES, last)
            finally:
                if self.watchdog is not None:
                    self.watchdog.done()
        if refused and refused == rules.TRIES:
            log.error("%s: the server refused the connection %d times, stopping: %s",
                      self.application_name, refused, last)
            raise Fatal(last)
        log.error("%s: %s did not go through after %d tries: %s", self.application_name, name,
                  rules.TRIES, last)
        raise Unavailable("%s: %s" % (name, last))

    def one(self, sql, params=(), repeat_safe=True, until=None):
        """The first column of the only row."""
        return self.call(sql, params, repeat_safe, until)[0][0]
