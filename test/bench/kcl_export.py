#!/usr/bin/env python3
"""A synthetic export of a KCL 2.x DynamoDB lease table, for make bench.

kcl_export.py N writes N items as JSON Lines (an export to S3 in
DYNAMODB_JSON format, {"Item": {...}} per line) to stdout: groups of three
shards, a split parent that has ended (SHARD_END, childShardIds naming
both children) and its two open children (parentShardId naming it), each
with a 56-digit checkpoint, an owner, counters and hash keys, as KCL
writes them.  Deterministic: the same N gives the same text.
"""
import json
import sys


def item(i, **attrs):
    lease = {
        "leaseKey": {"S": "shardId-%012d" % i},
        "leaseCounter": {"N": str(100 + i % 997)},
        "ownerSwitchesSinceCheckpoint": {"N": str(i % 3)},
        "checkpointSubSequenceNumber": {"N": "0"},
        "startingHashKey": {"S": str(i * 1000)},
        "endingHashKey": {"S": str(i * 1000 + 999)},
    }
    lease.update(attrs)
    return {"Item": lease}


def main():
    n = int(sys.argv[1])
    out = sys.stdout
    for i in range(n):
        group, role = divmod(i, 3)
        parent = 3 * group
        if role == 0:
            children = [c for c in (parent + 1, parent + 2) if c < n]
            attrs = {"checkpoint": {"S": "SHARD_END"}, "leaseOwner": {"S": "worker-%d" % (group % 50)}}
            if children:
                attrs["childShardIds"] = {"SS": ["shardId-%012d" % c for c in children]}
        else:
            attrs = {"checkpoint": {"S": "4959033827149025660855969254%028d" % i},
                     "leaseOwner": {"S": "worker-%d" % (i % 50)},
                     "parentShardId": {"SS": ["shardId-%012d" % parent]}}
        out.write(json.dumps(item(i, **attrs), separators=(",", ":")))
        out.write("\n")


if __name__ == "__main__":
    main()
