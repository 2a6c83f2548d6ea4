"""Hooks for pg_lease's own tests (test/clients), not part of the API.

    from pg_lease import _testing
    _testing.journal(worker, path)        # what the server acknowledged, as JSON lines
    _testing.ignore_rule_6(worker)        # the negative control of fast failover
"""
from .worker import _Journal


def journal(worker, path):
    """Appends what the server acknowledged to worker (takes and renewals with their send
    times and epochs, processor starts, checkpoints, releases, closes, shutdowns) to
    path, one JSON line per event: what test/clients/check.py reads.  Before run()."""
    worker._journal = _Journal(path, worker.owner)


def ignore_rule_6(worker):
    """Fast-failover mode without rule 6's deadline (docs/client-rules.md): the negative
    control, which must let the worker process after its leases were taken."""
    worker._contract = False


def event(worker, name, **fields):
    """One more line in worker's journal (a test's own event, such as a fault it injects)."""
    worker._journal(name, **fields)
