#!/usr/bin/python3
"""CONTRIBUTING.md's layout table against the tree (test/docs/coverage.sh).

The table is the rows starting with "| `" under the heading "## Layout".  A
row's first column names paths (`src/leases/`, `test/run.sh`); a row whose
first column names a folder (ending in /) names that folder's files by their
bare names (`taker.c`) anywhere in the row.  Checked, one line each:
  - every tracked top-level entry is named: a first-column path is the entry
    or lies under it;
  - every tracked file under src/ is named: as a first-column path, or by its
    name in the row of its folder;
  - every tracked folder directly under test/ is named: a first-column path
    lies under it;
  - every path the table names exists: each first-column path, each
    backquoted path with a slash anywhere in the table (a * or <...> is a
    pattern and is skipped), and each bare file name in a folder row (in one
    of that row's folders; a name with capitals, such as pg_lease--A--B.sql,
    is a pattern).  A file the build writes (sql/pg_lease--<version>.sql)
    exists once `make` ran, which test/run.sh does first.
Prints "ok: WHAT" or "not ok: WHAT" per check.  --self-test checks that a
table missing a row and naming a missing path is caught.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..'))
FILE_NAME = re.compile(r'^[a-z0-9_.-]+\.[a-z0-9]+$')
PATH = re.compile(r'^[A-Za-z0-9_.][A-Za-z0-9_./-]*$')


def layout_rows(text):
    """The layout table's rows: (first-column paths, the whole row)."""
    rows, inside = [], False
    for line in text.splitlines():
        if line.startswith('## '):
            inside = line.strip() == '## Layout'
        elif inside and line.startswith('| `'):
            first = line.split(' | ')[0]
            rows.append((re.findall(r'`([^`]+)`', first), line))
    return rows


def exists(path, tracked):
    """A tracked file, a folder holding one, or a file on disk (built)."""
    path = path.rstrip('/')
    return (path in tracked or any(t.startswith(path + '/') for t in tracked)
            or os.path.exists(os.path.join(ROOT, path)))


def check(rows, tracked):
    """(ok, what) per check."""
    results = []
    firsts = [p for paths, _ in rows for p in paths]
    if not rows:
        return [(False, 'CONTRIBUTING.md has no layout table under "## Layout"')]

    def under(entry):
        return any(p.rstrip('/') == entry or p.startswith(entry + '/') for p in firsts)

    for entry in sorted({t.split('/')[0] for t in tracked}):
        results.append((under(entry), 'top-level entry %s is in the layout table' % entry))
    for f in sorted(t for t in tracked if t.startswith('src/')):
        folder, name = os.path.dirname(f) + '/', os.path.basename(f)
        named = f in firsts or any(folder in paths and '`%s`' % name in row for paths, row in rows)
        results.append((named, 'source file %s is in the layout table' % f))
    for folder in sorted({t.split('/')[1] for t in tracked if t.startswith('test/') and t.count('/') >= 2}):
        results.append((under('test/' + folder), 'test folder test/%s/ is in the layout table' % folder))
    named = set(firsts)
    for _, row in rows:
        named.update(p for p in re.findall(r'`([^`]+)`', row) if '/' in p and PATH.match(p))
    for path in sorted(named):
        if '*' in path or '<' in path:
            continue
        results.append((exists(path, tracked), 'the layout table names %s, which exists' % path))
    for paths, row in rows:
        folders = [p for p in paths if p.endswith('/')]
        if not folders:
            continue
        for name in sorted(set(re.findall(r'`([^`/]+)`', row))):
            if not FILE_NAME.match(name) or name in paths:
                continue
            found = any(exists(f + name, tracked) for f in folders)
            results.append((found, 'the layout table names %s in %s, which exists' % (name, ' or '.join(folders))))
    return results


def self_test(tracked):
    rows = [(['src/'], '| `src/` | `pg_lease.c` |'), (['no/such/path'], '| `no/such/path` | x |')]
    bad = [what for ok, what in check(rows, tracked) if not ok]
    want = ['no/such/path', 'test folder']
    missing = [w for w in want if not any(w in b for b in bad)]
    return not missing, missing


def main(argv):
    tracked = set(subprocess.run(['git', '-C', ROOT, 'ls-files'], capture_output=True, text=True,
                                 check=True).stdout.split('\n')) - {''}
    if argv[1:] == ['--self-test']:
        good, missing = self_test(tracked)
        print('%s: the layout check catches a missing row and a missing path%s'
              % ('ok' if good else 'not ok', '' if good else ' (missed: %s)' % ', '.join(missing)))
        return 0 if good else 1
    text = open(os.path.join(ROOT, 'CONTRIBUTING.md')).read()
    results = check(layout_rows(text), tracked)
    for good, what in results:
        print('%s: %s' % ('ok' if good else 'not ok', what))
    return 0 if all(good for good, _ in results) else 1


if __name__ == '__main__':
    sys.exit(main(sys.argv))
