#!/usr/bin/python3
"""JUnit's XML reports as "STATUS DESCRIPTION" lines, one a test, for test/clients/run.sh
to count as TAP (STATUS 0 passed, 1 failed).  Skipped tests print nothing (the skipping
test says why on its own); no test at all is one failure.

    junit_tap.py DIR      (the console launcher's --reports-dir)
"""
import glob
import sys
import xml.etree.ElementTree as ET

cases = 0
for path in sorted(glob.glob(sys.argv[1] + "/TEST-*.xml")):
    for tc in ET.parse(path).iter("testcase"):
        if tc.find("skipped") is not None:
            continue
        cases += 1
        bad = tc.find("failure")
        if bad is None:
            bad = tc.find("error")
        out = tc.findtext("system-out") or ""
        shown = [l[len("display-name: "):] for l in out.splitlines() if l.startswith("display-name: ")]
        name = "%s %s" % (tc.get("classname").rsplit(".", 1)[-1], shown[0] if shown else tc.get("name"))
        why = "" if bad is None else " -- " + " ".join((bad.get("message") or bad.get("type") or "").split())[:200]
        print(0 if bad is None else 1, name + why)
if not cases:
    print(1, "JUnit ran no test")
