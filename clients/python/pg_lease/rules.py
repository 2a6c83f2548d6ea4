"""What to do when a call fails: docs/client-rules.md, as code.

The table is clients/rules.json's: test/clients/rules_table.py checks that
these sets, patterns and tries are exactly the ones there, and the clients
suite that classify() answers every case of test/clients/rules_cases.json as
the page says.
"""
import random
import re

# Rolled back, nothing happened: repeat the same call after a short backoff.
REPEAT = frozenset({"40001", "40P01", "55P03", "57014", "40L01"})
# No usable connection, nothing happened: reconnect, then repeat.
RECONNECT = frozenset({"53300", "57P03", "25006"})
# The connection is gone and the call may or may not have committed
# (so is any error without a SQLSTATE, and every class 08 error).
AMBIGUOUS = frozenset({"57P01", "57P02"})
# Through the router: PL/Proxy's own XX000 whose message names a lost
# partition connection (or a timeout on it) is ambiguous too; any other
# XX000 is raised.
PLPROXY_CONNECTION_LOST = re.compile(
    r"^PL/Proxy function [^ ]+ (\[[^ ]+\] )?(PQconnectStart|PQconnectPoll|PQsendQuery|PQflush|PQconsumeInput|connect timeout|query timeout)")

# Transactional mode: hold_lease's 55000 (the lease is not held at the
# worker's epoch; its transaction is aborted): drop the shard.  Any other
# 55000 is raised.
LEASE_NOT_HELD = re.compile(r"(^|REMOTE ERROR: )lease .+ is not held by ")

# The server refused the credentials or the database (at connect): a
# configuration error no retry fixes.  After the rules' tries the worker
# stops, with the cause logged.  psycopg2 gives no SQLSTATE for an error at
# connect, so the message is matched too (only when there is no SQLSTATE).
FATAL = frozenset({"28P01", "28000", "3D000"})
CONNECT_REFUSED = re.compile(
    r'(password authentication failed|Peer authentication failed|Ident authentication failed|no pg_hba\.conf entry|role "[^"]+" does not exist|database "[^"]+" does not exist)')

# A call, or the COMMIT of a transaction, that comes back with this WARNING
# committed locally but may not have been replicated (a waiting backend's
# synchronous replication wait was cancelled, by an operator or a failover
# manager): ambiguous, not success.
SYNC_REP_CANCELLED = re.compile(r"canceling (the )?wait for synchronous replication")

TRIES = 5


def classify(sqlstate, message=None):
    """'repeat', 'reconnect', 'ambiguous', 'drop', 'fatal' or 'raise' for an error's
    SQLSTATE (None: no SQLSTATE) and primary message."""
    if sqlstate in FATAL or (sqlstate is None and message and CONNECT_REFUSED.search(message)):
        return "fatal"
    if sqlstate is None or sqlstate.startswith("08") or sqlstate in AMBIGUOUS:
        return "ambiguous"
    if sqlstate == "XX000" and message and PLPROXY_CONNECTION_LOST.match(message):
        return "ambiguous"
    if sqlstate == "55000" and message and LEASE_NOT_HELD.search(message):
        return "drop"
    if sqlstate in REPEAT:
        return "repeat"
    if sqlstate in RECONNECT:
        return "reconnect"
    return "raise"


def ambiguous_notice(severity, message):
    """True when a notice (its severity and primary message) makes the call that
    raised it ambiguous: the cancelled wait for synchronous replication."""
    return severity == "WARNING" and bool(message) and SYNC_REP_CANCELLED.search(message) is not None


def backoff(attempt):
    """Seconds to wait before try number attempt + 1 (random, growing)."""
    return min(1.0, 0.02 * (2 ** attempt)) * (0.5 + random.random())
