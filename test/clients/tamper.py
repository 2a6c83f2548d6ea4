#!/usr/bin/python3
"""Makes a fleet history the checker must reject (test/clients/run.sh): a record
processed again by a live worker, a refused checkpoint, and a processing span
of one shard overlapping another owner's; or (--heartbeat WORKER) one in
which WORKER, a worker that renews by heartbeat, never did: every renewal
of its journal a renew_leases list (the heartbeat path's negative control).

    tamper.py DIR                     (a copy of a fleet's output directory)
    tamper.py --heartbeat WORKER DIR
"""
import json
import sys

if sys.argv[1] == "--heartbeat":
    path = "%s/%s.journal" % (sys.argv[3], sys.argv[2])
    with open(path) as f:
        events = [json.loads(line) for line in f]
    with open(path, "w") as f:
        for e in events:
            if e.get("ev") == "renewed" and e.get("via") == "heartbeat":
                e["via"] = "list"
            f.write(json.dumps(e) + "\n")
    sys.exit(0)
d = sys.argv[1]


def read(name):
    with open("%s/%s" % (d, name)) as f:
        return [json.loads(line) for line in f]


def append(name, *lines):
    with open("%s/%s" % (d, name), "a") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")


py2 = read("py-2.records")
node2 = read("node-2.records")
first = py2[0]
# the same record again, later, by the same live worker
append("py-2.records", dict(first, t=py2[-1]["t"] + 0.001))
# a refused checkpoint
append("node-2.journal", {"ev": "checkpoint", "w": "node-2", "shard": node2[0]["shard"], "epoch": 1,
                          "checkpoint": str(node2[0]["seq"]), "ok": False, "t": node2[0]["t"]})
# node-2 processing, in the middle of py-2's span, a shard py-2 held then
mid = py2[len(py2) // 2]
start = next(e for e in reversed(read("py-2.journal"))
             if e["ev"] == "initialized" and e["shard"] == mid["shard"] and e["t"] <= mid["t"])
append("node-2.journal", dict(start, w="node-2", t=mid["t"] - 0.002))
append("node-2.records", {"w": "node-2", "shard": mid["shard"], "seq": 10 ** 9, "t": mid["t"] - 0.001})
