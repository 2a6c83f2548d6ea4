#!/usr/bin/env python3
"""Fails when an install source of pg_lease leaves a function, operator or
collation unqualified where a planted object could be picked instead.

Checked: the SQL parts of the install script (Makefile, SQL_PARTS) and the
upgrade script of the version in progress.  Comments and string literals are
skipped; dollar-quoted bodies ($$ ... $$, $tag$ ... $tag$) are read too.

Why: an extension script runs with search_path = lease (pg_catalog
implicitly first), so a function, operator or collation named without a
schema binds, once and for good, to the best match found there
(docs/security.md, "Installing into a schema you own").  The install refuses
a schema it does not control (src/common/schema.sql), and on top of that the
names are written out in full.  The rules:

1. A call `name(` must be `schema.name(`, anywhere, function bodies and DO
   blocks included.  Not calls: SQL constructs and keywords followed by a
   parenthesis (CHECK, IN, ANY, ALL, EXISTS, ARRAY, VALUES, COALESCE,
   NULLIF, GREATEST, LEAST, CAST, ROW, FILTER, OVER, KEY, UNIQUE, CONFLICT,
   TABLE, USING, WITH, ...), type modifiers (varchar(n), numeric(p, s), ...),
   a name after AS (an alias with its column list), and a qualified name
   followed by a column list (CREATE TABLE lease.t (...), INSERT INTO
   lease.t (...), CREATE INDEX ... ON lease.t (...)): these are qualified
   anyway.  EXTRACT, POSITION, SUBSTRING, TRIM and OVERLAY are grammar that
   PostgreSQL itself binds to pg_catalog.
2. `COLLATE name` must be `COLLATE schema.name` outside function bodies.
3. Operators must be written OPERATOR(schema.op) in the expressions a table
   runs on every write, as the extension's owner: CHECK constraints, DEFAULT
   expressions, index expressions and predicates (CREATE INDEX), and in DO
   blocks.  A bare `IN (` list there must be `OPERATOR(pg_catalog.=) ANY
   (ARRAY[...])`.  IS [NOT] DISTINCT FROM, which cannot name its operator, is
   allowed.  Views, trigger WHEN clauses and policies are bound while the
   guard has proven that only pg_catalog and the extension's own objects can
   be found, and pg_catalog comes first.
4. Every CREATE FUNCTION with a body in the sources (LANGUAGE sql or
   plpgsql) must say SET search_path = pg_catalog, pg_temp: its body is
   resolved at run time with that path, so rule 2 and 3 do not apply inside
   it; rule 1 still does.

Usage: sql_qualified.py [FILE...]   (default: the SQL parts and the upgrade
script named by the Makefile and pg_lease.control)
       sql_qualified.py --self-test (a snippet breaking each rule must be
                                     flagged, a clean one must not)
Prints one line per finding and "N passed, N failed" (one per file).
"""
import os
import re
import sys

KEYWORDS_BEFORE_PAREN = {
    'check', 'in', 'any', 'all', 'some', 'exists', 'array', 'values', 'coalesce',
    'nullif', 'greatest', 'least', 'cast', 'row', 'filter', 'over', 'key', 'unique',
    'conflict', 'table', 'using', 'with', 'as', 'on', 'and', 'or', 'not', 'when',
    'then', 'else', 'select', 'from', 'join', 'where', 'returning', 'into', 'by',
    'include', 'exclude', 'partition', 'lateral', 'return', 'returns', 'if',
    'elsif', 'while', 'case', 'is', 'distinct', 'set', 'window', 'grouping',
    'extract', 'position', 'substring', 'trim', 'overlay', 'between', 'like',
    'ilike', 'of', 'for', 'perform', 'raise', 'null', 'except', 'union',
    'intersect', 'limit', 'offset', 'having', 'group', 'order', 'do', 'execute',
    'constraint', 'primary', 'foreign', 'references', 'default', 'operator',
    'variadic', 'nulls', 'tablesample',
}
TYPE_MODIFIERS = {
    'varchar', 'character', 'char', 'numeric', 'decimal', 'bit', 'varbit',
    'timestamp', 'timestamptz', 'time', 'timetz', 'interval', 'float',
}
RAISE_OPTIONS = {'errcode', 'message', 'detail', 'hint', 'column', 'constraint',
                 'datatype', 'table', 'schema'}
OPERATOR_CHARS = set('+-*/<>=~!@#%^&|`?')


def tokenize(text, line=1):
    """Yields (kind, value, line): ident, qident, op, punct, number, body
    (the text of a dollar-quoted string and its first line)."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '\n':
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif text.startswith('--', i):
            j = text.find('\n', i)
            i = n if j < 0 else j
        elif text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            line += text.count('\n', i, j)
            i = j
        elif c == "'" or (c in 'eE' and text.startswith("'", i + 1)):
            j = i + (2 if c != "'" else 1)
            while j < n:
                if text[j] == '\\' and c in 'eE':
                    j += 2
                    continue
                if text[j] == "'":
                    if text.startswith("''", j):
                        j += 2
                        continue
                    break
                j += 1
            line += text.count('\n', i, j)
            yield ('string', text[i:j + 1], line)
            i = j + 1
        elif c == '"':
            j = text.find('"', i + 1)
            while j >= 0 and text.startswith('""', j):
                j = text.find('"', j + 2)
            j = n if j < 0 else j
            yield ('qident', text[i + 1:j], line)
            i = j + 1
        elif c == '$' and re.match(r'\$([A-Za-z_][A-Za-z_0-9]*)?\$', text[i:]):
            tag = re.match(r'\$([A-Za-z_][A-Za-z_0-9]*)?\$', text[i:]).group(0)
            j = text.find(tag, i + len(tag))
            j = n if j < 0 else j
            yield ('body', text[i + len(tag):j], line)
            line += text.count('\n', i, j)
            i = j + len(tag)
        elif c.isalpha() or c == '_':
            m = re.match(r'[A-Za-z_][A-Za-z_0-9$]*', text[i:])
            yield ('ident', m.group(0).lower(), line)
            i += len(m.group(0))
        elif c.isdigit():
            m = re.match(r'[0-9][0-9.eE]*', text[i:])
            yield ('number', m.group(0), line)
            i += len(m.group(0))
        elif c == ':' and text[i + 1:i + 2] in (':', '='):
            yield ('punct', text[i:i + 2], line)
            i += 2
        elif c in OPERATOR_CHARS:
            j = i
            while j < n and text[j] in OPERATOR_CHARS and not text.startswith('--', j) \
                    and not text.startswith('/*', j):
                j += 1
            yield ('op', text[i:j], line)
            i = j
        else:
            yield ('punct', c, line)
            i += 1


def statements(tokens):
    """Splits tokens into statements at top-level semicolons."""
    stmt = []
    for t in tokens:
        if t[0] == 'punct' and t[1] == ';':
            if stmt:
                yield stmt
            stmt = []
        else:
            stmt.append(t)
    if stmt:
        yield stmt


def check_calls(toks, where, findings):
    """Rule 1 over a token list; recurses into dollar-quoted bodies."""
    for k, t in enumerate(toks):
        kind, value, line = t
        if kind == 'body':
            check_calls(list(tokenize(value, line)), where, findings)
            continue
        if kind not in ('ident', 'qident'):
            continue
        if k + 1 >= len(toks) or toks[k + 1][:2] != ('punct', '('):
            continue
        prev = toks[k - 1] if k > 0 else ('', '', 0)
        if prev[:2] == ('punct', '.'):
            continue
        if kind == 'ident' and (value in KEYWORDS_BEFORE_PAREN or value in TYPE_MODIFIERS):
            continue
        if prev[0] == 'ident' and prev[1] == 'as':
            continue
        findings.append('%s:%d: function %s() is not schema-qualified' % (where, line, value))


def paren_span(toks, start):
    """Index just past the parenthesis that opens at toks[start]."""
    depth = 0
    for k in range(start, len(toks)):
        if toks[k][:2] == ('punct', '('):
            depth += 1
        elif toks[k][:2] == ('punct', ')'):
            depth -= 1
            if depth == 0:
                return k + 1
    return len(toks)


def check_operators(toks, a, b, what, where, findings):
    """Rule 3 over toks[a:b]."""
    for k in range(a, b):
        kind, value, line = toks[k]
        qualified = k > 0 and toks[k - 1][:2] == ('punct', '.')
        if value == '=' and k > 0 and toks[k - 1][0] == 'ident' and toks[k - 1][1] in RAISE_OPTIONS:
            continue  # RAISE ... USING option = value
        if kind == 'op' and value != '*' and not qualified:
            if value == '-' and k + 1 < b and toks[k + 1][0] == 'number' and \
                    (toks[k - 1][0] in ('op', 'punct') and toks[k - 1][1] != ')'):
                continue  # a negative literal
            findings.append('%s:%d: operator %s in %s is not OPERATOR(schema.%s)'
                            % (where, line, value, what, value))
        if kind == 'op' and value == '*' and not qualified and not (
                k > 0 and toks[k - 1][:2] in (('punct', '('), ('punct', '.'))):
            findings.append('%s:%d: operator * in %s is not OPERATOR(schema.*)'
                            % (where, line, what))
        if (kind, value) == ('ident', 'in') and k + 1 < b and toks[k + 1][:2] == ('punct', '('):
            findings.append('%s:%d: IN (...) in %s: write OPERATOR(pg_catalog.=) ANY (ARRAY[...])'
                            % (where, line, what))


def check_statement(stmt, where, findings):
    words = [t[1] for t in stmt if t[0] == 'ident'][:4]
    head = ' '.join(words)
    check_calls(stmt, where, findings)
    is_do = head.startswith('do')
    is_function = re.match(r'create (or replace )?function', head) is not None
    for k, (kind, value, line) in enumerate(stmt):
        # Rule 2: COLLATE outside bodies.
        if (kind, value) == ('ident', 'collate') and k + 1 < len(stmt):
            if not (k + 2 < len(stmt) and stmt[k + 2][:2] == ('punct', '.')):
                findings.append('%s:%d: COLLATE %s is not schema-qualified' % (where, line, stmt[k + 1][1]))
        # Rule 3: CHECK (...) and DEFAULT expressions of tables.
        if (kind, value) == ('ident', 'check') and k + 1 < len(stmt) and stmt[k + 1][:2] == ('punct', '('):
            check_operators(stmt, k + 1, paren_span(stmt, k + 1), 'a CHECK constraint', where, findings)
        if (kind, value) == ('ident', 'default') and not is_function:
            e = k + 1
            depth = 0
            while e < len(stmt):
                t = stmt[e]
                if t[:2] == ('punct', '('):
                    depth += 1
                elif t[:2] == ('punct', ')'):
                    if depth == 0:
                        break
                    depth -= 1
                elif depth == 0 and (t[:2] == ('punct', ',') or (t[0] == 'ident' and t[1] in (
                        'not', 'null', 'check', 'constraint', 'primary', 'references', 'unique',
                        'generated'))):
                    break
                e += 1
            check_operators(stmt, k + 1, e, 'a DEFAULT expression', where, findings)
    if re.match(r'create (unique )?index', head):
        on = next((k for k, t in enumerate(stmt) if t[:2] == ('ident', 'on')), None)
        if on is not None:
            lp = next((k for k in range(on, len(stmt)) if stmt[k][:2] == ('punct', '(')), len(stmt))
            check_operators(stmt, lp, len(stmt), 'an index definition', where, findings)
    if is_do:
        for kind, value, line in stmt:
            if kind == 'body':
                body = list(tokenize(value, line))
                check_operators(body, 0, len(body), 'a DO block', where, findings)
                for k, t in enumerate(body):
                    if t[:2] == ('ident', 'collate') and not (k + 2 < len(body) and body[k + 2][:2] == ('punct', '.')):
                        findings.append('%s:%d: COLLATE is not schema-qualified' % (where, t[2]))
    # Rule 4.
    if is_function and any(t[0] == 'body' for t in stmt):
        text = ' '.join(t[1] for t in stmt if t[0] != 'body')
        if not re.search(r'\bset search_path = pg_catalog , pg_temp\b', text):
            findings.append('%s:%d: function with a body lacks SET search_path = pg_catalog, pg_temp'
                            % (where, stmt[0][2]))


def lint_text(text, where):
    findings = []
    for stmt in statements(tokenize(text)):
        check_statement(stmt, where, findings)
    return findings


def default_files(root):
    make = open(os.path.join(root, 'Makefile')).read()
    parts = re.search(r'^SQL_PARTS\s*=\s*((?:.*\\\n)*.*)$', make, re.M).group(1)
    files = parts.replace('\\\n', ' ').split()
    control = open(os.path.join(root, 'pg_lease.control')).read()
    version = re.search(r"default_version\s*=\s*'([^']+)'", control).group(1)
    upgrades = sorted(os.path.join('sql', f) for f in os.listdir(os.path.join(root, 'sql'))
                      if re.fullmatch(r'pg_lease--[0-9.]+--%s\.sql' % re.escape(version), f))
    return files + upgrades


BAD = """
CREATE TABLE lease.t (a int CHECK (num_nulls(a) = 0), b text DEFAULT now(),
    c int CHECK (c IN (1, 2)));
CREATE INDEX t_idx ON lease.t (b COLLATE "C") WHERE a > 0;
CREATE FUNCTION lease.f() RETURNS int LANGUAGE sql AS $$ SELECT count(*) FROM lease.t $$;
DO $d$ BEGIN PERFORM 1 WHERE 1 = 1; END $d$;
"""
BAD_EXPECTED = [
    'function num_nulls()', 'operator = in a CHECK', 'function now()', 'IN (...)',
    'COLLATE C', 'operator > in an index', 'function count()', 'lacks SET search_path',
    'operator = in a DO block',
]
GOOD = """
-- count(*) in a comment, and 'now()' in a string
CREATE TABLE lease.t (a int CHECK (pg_catalog.num_nulls(a) OPERATOR(pg_catalog.=) 0),
    b text DEFAULT pg_catalog.now(), c int CHECK (c OPERATOR(pg_catalog.=) ANY (ARRAY[1, 2])),
    PRIMARY KEY (a), d varchar(10) NOT NULL DEFAULT '' CHECK (d IS DISTINCT FROM 'x'));
CREATE INDEX t_idx ON lease.t (b COLLATE pg_catalog."C") WHERE a OPERATOR(pg_catalog.>) 0;
CREATE FUNCTION lease.f() RETURNS TABLE (n bigint) LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$ SELECT pg_catalog.count(*) FROM lease.t AS x(a) WHERE a > 0 AND EXISTS (SELECT 1) $$;
INSERT INTO lease.t (a) VALUES (1) ON CONFLICT (a) DO NOTHING;
"""


def self_test():
    bad = lint_text(BAD, 'bad')
    good = lint_text(GOOD, 'good')
    failed = 0
    for want in BAD_EXPECTED:
        if not any(want in f for f in bad):
            print('self-test: not flagged: %s' % want)
            failed += 1
    for f in good:
        print('self-test: flagged a clean snippet: %s' % f)
        failed += 1
    print('sql-lint self-test: %s' % ('ok' if not failed else 'FAILED'))
    return failed == 0


def main(argv):
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..'))
    passed = failed = 0
    if argv[1:2] == ['--self-test']:
        ok = self_test()
        print('%d passed, %d failed' % (int(ok), int(not ok)))
        return 0 if ok else 1
    files = argv[1:] or default_files(root)
    for f in files:
        path = f if os.path.isabs(f) or os.path.exists(f) else os.path.join(root, f)
        findings = lint_text(open(path).read(), f)
        for line in findings:
            print(line)
        if findings:
            failed += 1
        else:
            passed += 1
            print('sql-lint: %s ok' % f)
    print('%d passed, %d failed' % (passed, failed))
    return 0 if failed == 0 else 1


if __name__ == '__main__':
    sys.exit(main(sys.argv))
