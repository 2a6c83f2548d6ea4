#!/usr/bin/python3
"""A complete pg_lease worker: it processes a synthetic stream by appending each record to a log.

    example_worker.py DSN APP STREAM OWNER DIR [LEASE_SECONDS]

Record n of a shard (sequence number n = 1, 2, ...) is "processed" by appending
{"shard", "seq": "n", "sub": k} to DIR/OWNER.records.  Shard "<name>-end<N>" holds
records 1..N and then ends; every other shard never ends.  On a stream named
"kpl-...", every even record is a KPL aggregate of 5 user records (sub-sequences
0..4), and each batch is checkpointed in two phases.  Checkpoints are text: never
parsed into a machine integer (Kinesis sequence numbers have up to 128 bits).
SIGTERM stops the worker gracefully: it finishes its batch and releases its leases.
Bad credentials (or no such database): the cause is logged, the exit status is 1.
"""
import json
import logging
import os
import signal
import sys
import time

from pg_lease import SHARD_END, Checkpoint, Fatal, RecordProcessor, Worker

BATCH = 5          # user records per batch; each batch is checkpointed
AGGREGATE = 5      # user records in an aggregated record


class AppendToLog(RecordProcessor):
    def __init__(self, path, owner, kpl):
        self.log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.owner = owner
        self.kpl = kpl          # the stream's even records are aggregates
        self.position = {}      # shard -> (sequence, sub-sequence) of the last user record processed

    def initialize(self, shard_id, checkpoint):
        # the last record acknowledged (its sub-sequence too), or TRIM_HORIZON at the start
        sequence = 0 if checkpoint == "TRIM_HORIZON" else int(checkpoint)    # a Python int has no limit
        self.position[shard_id] = (sequence, checkpoint.sub_sequence)

    def process(self, shard_id):
        sequence, sub = self.position[shard_id]
        end = int(shard_id.rsplit("-end", 1)[1]) if "-end" in shard_id else None
        batch = []
        while len(batch) < BATCH:
            aggregated = self.kpl and sequence > 0 and sequence % 2 == 0
            sequence, sub = (sequence, sub + 1) if aggregated and sub + 1 < AGGREGATE else (sequence + 1, 0)
            if end is not None and sequence > end:
                break
            batch.append((sequence, sub))
        if not batch:
            return SHARD_END                # the worker closes the shard
        last = Checkpoint(str(batch[-1][0]), batch[-1][1])
        if self.kpl:
            self.prepare_checkpoint(shard_id, last)    # phase one: the intent, before acting on it
        for sequence, sub in batch:
            record = {"w": self.owner, "shard": shard_id, "seq": str(sequence), "sub": sub, "t": time.time()}
            os.write(self.log, (json.dumps(record) + "\n").encode())
        time.sleep(0.01)                    # the work a real processor would do
        self.position[shard_id] = batch[-1]
        return last                         # phase two: the worker checkpoints it, fenced

    def shutdown(self, shard_id, reason):
        # lease lost, handed off, shard ended or worker stopped: forget the shard
        self.position.pop(shard_id, None)


def main():
    dsn, app, stream, owner, out = sys.argv[1:6]
    lease_seconds = float(sys.argv[6]) if len(sys.argv) > 6 else 10.0
    logging.basicConfig(level=os.environ.get("PG_LEASE_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    processor = AppendToLog(os.path.join(out, owner + ".records"), owner, stream.startswith("kpl-"))
    worker = Worker(dsn, app, stream, owner, processor, lease_duration=lease_seconds, max_steal=2)
    signal.signal(signal.SIGTERM, lambda *_: worker.stop())
    signal.signal(signal.SIGINT, lambda *_: worker.stop())
    try:
        worker.run()
    except Fatal:           # refused credentials or database: the log says why
        sys.exit(1)


if __name__ == "__main__":
    main()
