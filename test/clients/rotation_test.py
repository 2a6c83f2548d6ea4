#!/usr/bin/python3
"""The Python channel-rotation helper against the cluster (test/clients/run.sh).

    rotation_test.py APP_DSN ADMIN_DSN

A replacement that starts is kept and confirmed: the previous conversation
has ended and freed its sandbox slot.  One whose start fails (the callback
raises, or returns False) is restored: the previous conversation holds the
channel again and the replacement is failed.  At a tenant limit of 2 the
helper rotates 100 times without a refusal.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../clients/python"))
from pg_lease import Session, rotate_channel  # noqa: E402

app, admin = Session(sys.argv[1]), Session(sys.argv[2])
scope = ("clients-py-tenant", "bot", None, None, "C1")
outcome, first, _ = app.call("SELECT * FROM lease.start_conversation(%s, %s, %s, %s, %s)", scope)[0]
assert outcome == "started", outcome

started = []
r = rotate_channel(app, *scope, start_replacement=lambda cid: started.append(cid) or True)
assert r.outcome == "rotated" and r.previous_conversation_id == first, r
assert started == [r.conversation_id], started
second = r.conversation_id
assert app.one("SELECT lease.find_channel_conversation(%s, %s, %s, %s, %s)", scope) == second
# confirmed: the replacement runs, the previous conversation and its sandbox ended
STATUS = ("SELECT c.status || '/' || s.status FROM lease.conversations c"
          "  JOIN lease.sandboxes s ON s.id = c.sandbox_id WHERE c.id = %s")
assert admin.one(STATUS, (second,)) == "running/pending", admin.one(STATUS, (second,))
assert admin.one(STATUS, (first,)) == "terminated/terminated", admin.one(STATUS, (first,))


def fail_to_start(cid):
    raise RuntimeError("sandbox for %d did not come up" % cid)


for failing in (fail_to_start, lambda cid: False):
    r = rotate_channel(app, *scope, start_replacement=failing)
    assert r.outcome == "restored" and r.previous_conversation_id == second, r
    assert app.one("SELECT lease.find_channel_conversation(%s, %s, %s, %s, %s)", scope) == second
    status = admin.one("SELECT status FROM lease.conversations WHERE id = %s", (r.conversation_id,))
    assert status == "failed", status

r = rotate_channel(app, "clients-py-tenant", "bot", None, None, "no-such-channel", lambda cid: True)
assert r.outcome == "unbound", r

# !rotate forever at a small limit: each confirmed rotation frees the slot of
# the conversation it replaced, so none is refused
admin.one("SELECT lease.set_tenant_limit(%s, 2)", (scope[0],))
outcomes = [rotate_channel(app, *scope, start_replacement=lambda cid: True).outcome for _ in range(100)]
assert outcomes == ["rotated"] * 100, sorted(set(outcomes))
live = app.call("SELECT status FROM lease.list_conversations(%s, %s, %s, %s)", scope[:4])
assert [row[0] for row in live] == ["running"], live
print("python rotation helper: rotated and confirmed, restored twice, unbound, 100 rotations at limit 2")
