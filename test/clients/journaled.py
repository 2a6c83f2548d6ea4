#!/usr/bin/python3
"""Runs a Python worker script with every Worker it makes journaled (the clients suite).

    journaled.py DIR SCRIPT ARGS...

SCRIPT (clients/python/example_worker.py, or a test worker) runs as __main__
with ARGS; every pg_lease Worker it runs appends what the server acknowledged
to DIR/OWNER.journal (pg_lease._testing.journal), which test/clients/check.py
reads.  The example worker itself knows nothing of journals.
"""
import os
import runpy
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
directory, script = sys.argv[1], sys.argv[2]
sys.path[:0] = [os.path.dirname(os.path.abspath(script)), os.path.join(HERE, "../../clients/python")]
from pg_lease import Worker, _testing  # noqa: E402

run = Worker.run


def journaled_run(worker):
    _testing.journal(worker, os.path.join(directory, worker.owner + ".journal"))
    return run(worker)


Worker.run = journaled_run
sys.argv = [script] + sys.argv[3:]
runpy.run_path(script, run_name="__main__")
