#!/usr/bin/python3
"""A transactional-mode worker for the clients suite (docs/exactly-once.md).

    tx_worker.py DSN APP STREAM OWNER DIR [LEASE_SECONDS]

Every record of a shard becomes one row (shard, seq, worker) of table
public.tx_out, written in the batch's transaction with its checkpoint; the
table has no unique constraint, so a record written twice shows as two rows.
SIGTERM stops the worker gracefully.
"""
import os
import signal
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../clients/python"))
from pg_lease import RecordProcessor, Worker, _testing  # noqa: E402

BATCH = 5
# TX_WORKER_SYNCHRONOUS=1: every batch commits with synchronous_commit on (test/clients/syncrep.sh)
SYNCHRONOUS = os.environ.get("TX_WORKER_SYNCHRONOUS") == "1"


class WriteRows(RecordProcessor):
    def __init__(self, owner):
        self.owner = owner
        self.position = {}

    def initialize(self, shard_id, checkpoint):
        self.position[shard_id] = 0 if checkpoint == "TRIM_HORIZON" else int(checkpoint)

    def process(self, shard_id, cursor=None):
        if SYNCHRONOUS:
            cursor.execute("SET LOCAL synchronous_commit = on")    # this batch's COMMIT waits for a standby
        first = self.position[shard_id] + 1
        last = first + BATCH - 1
        cursor.execute("INSERT INTO public.tx_out SELECT %s, s, %s FROM generate_series(%s, %s) AS s",
                       (shard_id, self.owner, first, last))
        self.position[shard_id] = last
        return str(last)

    def shutdown(self, shard_id, reason):
        self.position.pop(shard_id, None)


def main():
    dsn, app, stream, owner, out = sys.argv[1:6]
    lease_seconds = float(sys.argv[6]) if len(sys.argv) > 6 else 10.0
    worker = Worker(dsn, app, stream, owner, WriteRows(owner), lease_duration=lease_seconds,
                    max_steal=2, transactional=True)
    _testing.journal(worker, os.path.join(out, owner + ".journal"))
    signal.signal(signal.SIGTERM, lambda *_: worker.stop())
    worker.run()


if __name__ == "__main__":
    main()
