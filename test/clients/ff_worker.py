#!/usr/bin/python3
"""A fast-failover worker for the clients suite (docs/client-rules.md, rule 6).

    ff_worker.py DSN APP STREAM OWNER DIR LEASE_SECONDS RENEW_EVERY [nocontract]

The example worker's processor (clients/python/example_worker.py) under
Worker(..., fast_failover=True, renew_every=RENEW_EVERY).  "nocontract"
disables rule 6's deadline: the negative control.  SIGUSR1 makes the worker
lose the database as a half-open connection would: from then on its
renewals hang, its balancing rounds go nowhere and its checkpoints fail,
while processing goes on as long as its deadlines allow.  SIGTERM stops it gracefully.
"""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../clients/python"))
from example_worker import AppendToLog  # noqa: E402
from pg_lease import Worker, _testing  # noqa: E402


def main():
    dsn, app, stream, owner, out, lease_seconds, renew_every = sys.argv[1:8]
    contract = "nocontract" not in sys.argv[8:]
    worker = Worker(dsn, app, stream, owner, AppendToLog(os.path.join(out, owner + ".records"), owner, False),
                    lease_duration=float(lease_seconds), max_steal=2,
                    fast_failover=True, renew_every=float(renew_every))
    _testing.journal(worker, os.path.join(out, owner + ".journal"))
    if not contract:
        _testing.ignore_rule_6(worker)

    def cut_off(*_):
        _testing.event(worker, "cut_off")
        worker._renew_once = lambda: time.sleep(3600)
        worker._balance = lambda: None
        # and its other calls (checkpoints) fail: nothing tells it the lease moved on
        worker.db.dsn = "host=/nonexistent dbname=none connect_timeout=1"
        worker.db.close()
    signal.signal(signal.SIGUSR1, cut_off)
    signal.signal(signal.SIGTERM, lambda *_: worker.stop())
    worker.run()


if __name__ == "__main__":
    main()
