#!/usr/bin/python3
"""A complete pg_lease worker: it processes a synthetic stream by appending each record to a log.

    example_worker.py DSN APP STREAM OWNER DIR [LEASE_SECONDS]

Shard "<name>-end<N>" holds records 1..N and then ends; every other shard never
ends.  Record i of a shard is "processed" by appending {"shard", "seq": i} to
DIR/OWNER.records; the worker's journal (what the server acknowledged to it:
takes, renewals with their epochs, checkpoints) goes to DIR/OWNER.journal.
SIGTERM stops the worker gracefully: it finishes its batch and releases its leases.
Bad credentials (or no such database): the cause is logged, the exit status is 1.
"""
import json
import logging
import os
import signal
import sys
import time

from pg_lease import SHARD_END, Fatal, RecordProcessor, Worker

BATCH = 5          # records per batch; each batch is checkpointed


class AppendToLog(RecordProcessor):
    def __init__(self, path, owner):
        self.log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.owner = owner
        self.position = {}      # shard -> last record processed

    def initialize(self, shard_id, checkpoint):
        # the checkpoint is the last record acknowledged, or TRIM_HORIZON at the start
        self.position[shard_id] = 0 if checkpoint == "TRIM_HORIZON" else int(checkpoint)

    def process(self, shard_id):
        first = self.position[shard_id] + 1
        last = first + BATCH - 1
        if "-end" in shard_id:
            end = int(shard_id.rsplit("-end", 1)[1])
            if first > end:
                return SHARD_END            # the worker closes the shard
            last = min(last, end)
        for seq in range(first, last + 1):
            record = {"w": self.owner, "shard": shard_id, "seq": seq, "t": time.time()}
            os.write(self.log, (json.dumps(record) + "\n").encode())
        time.sleep(0.01)                    # the work a real processor would do
        self.position[shard_id] = last
        return str(last)                    # the worker checkpoints it, fenced

    def shutdown(self, shard_id, reason):
        # lease lost, handed off, shard ended or worker stopped: forget the shard
        self.position.pop(shard_id, None)


def main():
    dsn, app, stream, owner, out = sys.argv[1:6]
    lease_seconds = float(sys.argv[6]) if len(sys.argv) > 6 else 10.0
    logging.basicConfig(level=os.environ.get("PG_LEASE_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    worker = Worker(dsn, app, stream, owner,
                    AppendToLog(os.path.join(out, owner + ".records"), owner),
                    lease_duration=lease_seconds, max_steal=2,
                    journal=os.path.join(out, owner + ".journal"))
    signal.signal(signal.SIGTERM, lambda *_: worker.stop())
    signal.signal(signal.SIGINT, lambda *_: worker.stop())
    try:
        worker.run()
    except Fatal:           # refused credentials or database: the log says why
        sys.exit(1)


if __name__ == "__main__":
    main()
