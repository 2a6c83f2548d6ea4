"""What to do when a call fails: docs/client-rules.md, as code.

Both clients implement the same table (clients/node/rules.js); a test
checks that each names the same SQLSTATEs as the page.
"""

# Rolled back, nothing happened: repeat the same call after a short backoff.
REPEAT = frozenset({"40001", "40P01", "55P03", "57014"})
# No usable connection, nothing happened: reconnect, then repeat.
RECONNECT = frozenset({"53300", "57P03", "25006"})
# The connection is gone and the call may or may not have committed
# (so is any error without a SQLSTATE, and every class 08 error).
AMBIGUOUS = frozenset({"57P01", "57P02"})

TRIES = 5


def classify(sqlstate):
    """'repeat', 'reconnect', 'ambiguous' or 'raise' for an error's SQLSTATE (None: no SQLSTATE)."""
    if sqlstate is None or sqlstate.startswith("08") or sqlstate in AMBIGUOUS:
        return "ambiguous"
    if sqlstate in REPEAT:
        return "repeat"
    if sqlstate in RECONNECT:
        return "reconnect"
    return "raise"


def backoff(attempt):
    """Seconds to wait before try number attempt + 1 (random, growing)."""
    import random
    return min(1.0, 0.02 * (2 ** attempt)) * (0.5 + random.random())
