#!/usr/bin/python3
"""The clients' retry tables against clients/rules.json (test/clients/run.sh).

    rules_table.py

Prints one line per check, "ok WHAT" or "not ok WHAT" (with "#" lines saying
why), for run.sh to number as TAP:
  - the table implies the cases: a classifier that knows nothing but
    clients/rules.json answers every case of test/clients/rules_cases.json
    and test/clients/notice_cases.json as they say;
  - docs/client-rules.md names every SQLSTATE and shows every pattern of
    rules.json;
  - each of the five clients' tables (Python, Node, Elixir, Java, Go) names
    exactly the SQLSTATEs of each of rules.json's sets on the line defining
    that set, carries each of its patterns as a literal in the language's
    own escaping, and tries a call as many times.
"""
import json
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../..")
rules = json.load(open(os.path.join(ROOT, "clients/rules.json")))

# what each client calls the table's sets and patterns (None: no name required, the literal must be there)
RULES = ["repeat", "reconnect", "ambiguous", "fatal", "plproxy_connection_lost", "lease_not_held",
         "connect_refused", "sync_rep_cancelled"]
UPPER = {rule: rule.upper() for rule in RULES}            # Python, Node and Java: REPEAT, ...
CLIENTS = {
    "clients/python/pg_lease/rules.py": UPPER,
    "clients/node/rules.js": UPPER,
    "clients/elixir/lib/pg_lease/rules.ex": {rule: "@" + rule for rule in RULES},
    "clients/java/src/main/java/org/pglease/Rules.java": dict(UPPER, sync_rep_cancelled=None),
    "clients/go/pglease/rules.go": {
        "repeat": "repeatCodes", "reconnect": "reconnectCodes", "ambiguous": "ambiguousCodes",
        "fatal": "fatalCodes", "plproxy_connection_lost": "plproxyConnectionLost",
        "lease_not_held": "leaseNotHeld", "connect_refused": "connectRefused", "sync_rep_cancelled": None},
}

SQLSTATE = re.compile(r"^[0-9A-Z]{5}$")
CODE_TOKEN = re.compile(r"\b(?=[0-9A-Z]*[0-9])[0-9A-Z]{5}\b")


def classify(code, message):
    """The table's answer for an error: its SQLSTATE (None: none) and primary message."""
    p = rules["patterns"]
    s = rules["sqlstates"]
    if code in s["fatal"] or (code is None and message and re.search(p["connect_refused"]["match"], message)):
        return "fatal"
    if code is None or not SQLSTATE.match(code) or code.startswith(rules["ambiguous_class"]) or code in s["ambiguous"]:
        return "ambiguous"
    for name in ("plproxy_connection_lost", "lease_not_held"):
        if code == p[name]["sqlstate"] and message and re.search(p[name]["match"], message):
            return p[name]["kind"]
    for kind in ("repeat", "reconnect"):
        if code in s[kind]:
            return kind
    return "raise"


def notice(severity, message):
    for rule in rules["notices"].values():
        if severity == rule["severity"] and message and re.search(rule["match"], message):
            return rule["kind"]
    return "ignore"


failures = 0


def report(ok, what, why=()):
    global failures
    for line in why:
        print("# " + line)
    print(("ok " if ok else "not ok ") + what)
    failures += 0 if ok else 1


cases = json.load(open(os.path.join(ROOT, "test/clients/rules_cases.json")))
bad = ["%s -> %s, the table says %s" % (c, c[2], classify(c[0], c[1])) for c in cases if classify(c[0], c[1]) != c[2]]
ncases = json.load(open(os.path.join(ROOT, "test/clients/notice_cases.json")))
bad += ["%s -> %s, the table says %s" % (c, c[3], notice(c[0], c[2])) for c in ncases if notice(c[0], c[2]) != c[3]]
report(not bad and len(cases) >= 20, "clients/rules.json implies every case of rules_cases.json (%d) and notice_cases.json (%d)"
       % (len(cases), len(ncases)), bad[:5])


def literals(pattern, path):
    """The ways the language of path writes pattern in a literal."""
    if path.endswith(".java"):
        doubled = pattern.replace("\\", "\\\\")
        return [doubled, doubled.replace('"', '\\"')]          # a text block, a string literal
    return [pattern]                      # raw strings: r"", String.raw``, ~S"", Go's backquotes


patterns = dict((k, v["match"]) for k, v in rules["patterns"].items())
patterns.update((k, v["match"]) for k, v in rules["notices"].items())
for path, names in CLIENTS.items():
    text = open(os.path.join(ROOT, path)).read()
    lines = text.splitlines()
    why = []
    for rule, codes in rules["sqlstates"].items():
        name = names[rule]
        defs = [l for l in lines if re.search(r"(^|\s)%s\s*(=|~w)" % re.escape(name), l)]
        found = sorted(set(CODE_TOKEN.findall(defs[0]))) if len(defs) == 1 else None
        if found != sorted(codes):
            why.append("%s: %s names %s, clients/rules.json %s" % (path, name, found, sorted(codes)))
    for rule, pattern in patterns.items():
        name = names[rule]
        if name is not None and not re.search(r"(^|\s)%s\b" % re.escape(name), text):
            why.append("%s: no %s (the %s pattern)" % (path, name, rule))
        if not any(lit in text for lit in literals(pattern, path)):
            why.append("%s: the %s pattern is not %s" % (path, rule, pattern))
    tries = re.findall(r"(?i)\btries\b[^0-9\n]{1,12}(\d+)", text)
    if str(rules["tries"]) not in tries:
        why.append("%s: tries %s, clients/rules.json %d" % (path, tries, rules["tries"]))
    report(not why, "%s follows clients/rules.json (its sets, patterns and tries)" % path, why)
page = open(os.path.join(ROOT, "docs/client-rules.md")).read()
codes = sorted(set(c for v in rules["sqlstates"].values() for c in v) |
               set(v["sqlstate"] for v in rules["patterns"].values() if v["sqlstate"]))
why = ["docs/client-rules.md does not name %s" % c for c in codes if "`%s`" % c not in page]
why += ["docs/client-rules.md does not show the %s pattern %s" % (k, v) for k, v in patterns.items() if v not in page]
report(not why, "docs/client-rules.md names the SQLSTATEs and shows the patterns of clients/rules.json", why)
sys.exit(1 if failures else 0)
