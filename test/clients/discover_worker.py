#!/usr/bin/python3
"""A worker with a shard-list callback (test/clients/packages.sh), run from the installed package.

    discover_worker.py DSN APP STREAM OWNER SHARDS_JSON JOURNAL

The lister reads SHARDS_JSON at every call (the test rewrites it to reshard):
a list of shard ids or [shard_id, [parents...]] pairs.  The processor has
nothing to process.  SIGTERM stops it.
"""
import json
import logging
import signal
import sys

import pg_lease
from pg_lease import _testing

dsn, app, stream, owner, shards, journal = sys.argv[1:7]
logging.basicConfig(level="INFO", format="%(levelname)s %(name)s: %(message)s")
print("pg_lease from", pg_lease.__file__, file=sys.stderr)
worker = pg_lease.Worker(dsn, app, stream, owner, pg_lease.RecordProcessor(), lease_duration=3,
                         shard_lister=lambda: json.load(open(shards)), sync_every=0.3)
_testing.journal(worker, journal)
signal.signal(signal.SIGTERM, lambda *_: worker.stop())
worker.run()
