#!/usr/bin/python3
"""Cancels every backend of a database that waits for synchronous replication
(test/clients/syncrep.sh), as a failover manager does when it gives up on its
standby: each one's client then gets PostgreSQL's WARNING "canceling wait for
synchronous replication due to user request" with an answer that committed
locally.

    syncrep_cancel.py DSN COUNT_FILE

Polls every 20 ms until SIGTERM; then writes how many waits it cancelled to
COUNT_FILE.
"""
import signal
import sys
import time

import psycopg2

dsn, count_file = sys.argv[1:3]
conn = psycopg2.connect(dsn, application_name="syncrep-cancel")
conn.autocommit = True
cur = conn.cursor()
cancelled = 0
running = True


def stop(*_):
    global running
    running = False


signal.signal(signal.SIGTERM, stop)
while running:
    cur.execute("SELECT count(*) FILTER (WHERE pg_cancel_backend(pid)) FROM pg_stat_activity"
                " WHERE wait_event = 'SyncRep' AND datname = current_database()")
    cancelled += cur.fetchone()[0]
    time.sleep(0.02)
with open(count_file, "w") as f:
    f.write("%d\n" % cancelled)
