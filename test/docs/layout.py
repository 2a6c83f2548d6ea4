#!/usr/bin/python3
"""The guide's layout against the tree (test/docs/coverage.sh).

CONTRIBUTING.md's layout table is the rows starting with "| `" under the
heading "## Layout"; a row's first column names paths.  Each folder directly
under test/ has a README.md of its own.  Checked, one line each:
  - every tracked top-level entry is in the layout table: a first-column
    path is the entry or lies under it;
  - every folder of src/ (directly under it) is a first-column path of its
    own: the table describes src/ by folder, not by file;
  - every folder directly under test/ is in the layout table (under a
    first-column path) and has a README.md;
  - a suite folder's README names every tracked file of that folder, its
    subfolders' included: backquoted, by its path relative to the folder,
    by its bare name, or by a backquoted pattern with * that matches either;
  - test/README.md names every tracked file directly under test/;
  - every suite of `test/run.sh --list` is named, backquoted, in a README
    of a folder under test/;
  - every path the layout table names exists: each first-column path and
    each backquoted path with a slash anywhere in the table (a * or <...>
    is a pattern and is skipped).
Prints "ok: WHAT" or "not ok: WHAT" per check.  --self-test checks that a
missing row, a missing path, a missing README, a file a README does not name
and an undocumented suite are each caught.
"""
import fnmatch
import os
import re
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..'))
CODE_SPAN = re.compile(r'(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)', re.S)
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


def names(readme, rel):
    """Whether the README text names the file rel (relative to its folder)."""
    # Markdown code spans: a run of backquotes closed by a run of the same length.
    quoted = [m.group(2) for m in CODE_SPAN.finditer(readme)]
    base = os.path.basename(rel)
    for q in quoted:
        q = q.strip()
        if q in (rel, base) or q.endswith('/' + rel):
            return True
        if '*' in q and (fnmatch.fnmatch(rel, q) or fnmatch.fnmatch(base, q)
                         or fnmatch.fnmatch(rel, q.split('/', 2)[-1])):
            return True
    return False


def check(rows, tracked, readmes, suites):
    """(ok, what) per check; readmes maps a test/ folder to its README's text
    (None when it has none), with 'test' for test/README.md."""
    results = []
    firsts = [p for paths, _ in rows for p in paths]
    if not rows:
        return [(False, 'CONTRIBUTING.md has no layout table under "## Layout"')]

    def under(entry):
        return any(p.rstrip('/') == entry or p.startswith(entry + '/') for p in firsts)

    for entry in sorted({t.split('/')[0] for t in tracked}):
        results.append((under(entry), 'top-level entry %s is in the layout table' % entry))
    for folder in sorted({t.split('/')[1] for t in tracked if t.startswith('src/') and t.count('/') >= 2}):
        results.append(('src/%s/' % folder in firsts, 'src/%s/ has a row of its own in the layout table' % folder))
    folders = sorted({t.split('/')[1] for t in tracked if t.startswith('test/') and t.count('/') >= 2})
    for folder in folders:
        results.append((under('test/' + folder) or 'test/' in firsts,
                        'test folder test/%s/ is in the layout table' % folder))
        readme = readmes.get(folder)
        results.append((readme is not None, 'test/%s/ has a README.md' % folder))
        if readme is None:
            continue
        for f in sorted(t for t in tracked if t.startswith('test/%s/' % folder)):
            rel = f[len('test/%s/' % folder):]
            if rel == 'README.md':
                continue
            results.append((names(readme, rel), 'test/%s/README.md names %s' % (folder, rel)))
    top = readmes.get('test') or ''
    for f in sorted(t for t in tracked if t.startswith('test/') and t.count('/') == 1 and t != 'test/README.md'):
        results.append((names(top, f[len('test/'):]), 'test/README.md names %s' % f))
    suite_text = '\n'.join(v for k, v in readmes.items() if k != 'test' and v)
    for s in suites:
        results.append(('`%s`' % s in suite_text, 'suite %s is described in a README under test/' % s))
    named = set(firsts)
    for _, row in rows:
        named.update(p for p in re.findall(r'`([^`]+)`', row) if '/' in p and PATH.match(p))
    for path in sorted(named):
        if '*' in path or '<' in path:
            continue
        results.append((exists(path, tracked), 'the layout table names %s, which exists' % path))
    return results


def self_test(tracked, readmes, suites):
    rows = [(['src/'], '| `src/` | x |'), (['no/such/path'], '| `no/such/path` | x |')]
    folders = sorted({t.split('/')[1] for t in tracked if t.startswith('test/') and t.count('/') >= 2})
    fake = dict(readmes)
    fake[folders[0]] = None                      # a folder without its README
    fake[folders[1]] = '# nothing named here'    # a README naming none of its files
    bad = [what for ok, what in check(rows, tracked, fake, suites + ['no-such-suite']) if not ok]
    want = ['no/such/path', 'top-level entry', 'src/', 'test/%s/ has a README' % folders[0],
            'test/%s/README.md names' % folders[1], 'suite no-such-suite']
    missing = [w for w in want if not any(w in b for b in bad)]
    return not missing, missing


def main(argv):
    tracked = set(subprocess.run(['git', '-C', ROOT, 'ls-files'], capture_output=True, text=True,
                                 check=True).stdout.split('\n')) - {''}
    # A README written but not yet added counts (so the suite can run before a commit).
    readmes = {}
    for folder in {t.split('/')[1] for t in tracked if t.startswith('test/') and t.count('/') >= 2}:
        path = os.path.join(ROOT, 'test', folder, 'README.md')
        readmes[folder] = open(path).read() if os.path.exists(path) else None
    readmes['test'] = open(os.path.join(ROOT, 'test', 'README.md')).read()
    suites = subprocess.run(['bash', os.path.join(ROOT, 'test', 'run.sh'), '--list'], capture_output=True,
                            text=True, check=True).stdout.split()
    if argv[1:] == ['--self-test']:
        good, missing = self_test(tracked, readmes, suites)
        print('%s: the layout check catches a missing row, a missing path, a missing README, '
              'an unnamed file and an undocumented suite%s'
              % ('ok' if good else 'not ok', '' if good else ' (missed: %s)' % ', '.join(missing)))
        return 0 if good else 1
    text = open(os.path.join(ROOT, 'CONTRIBUTING.md')).read()
    results = check(layout_rows(text), tracked, readmes, suites)
    for good, what in results:
        print('%s: %s' % ('ok' if good else 'not ok', what))
    return 0 if all(good for good, _ in results) else 1


if __name__ == '__main__':
    sys.exit(main(sys.argv))
