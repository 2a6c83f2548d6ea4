#!/usr/bin/env python3
"""The statement catalogues: every statement the C prepares, expanded and named.

Each product's C (src/leases/, src/bindings/, src/common/ with src/module.c)
keeps its SQL in LeaseStatement initializers (src/common/spi_util.h), their
text often pasted together from the macros of src/leases/lease_sql.h and the
like.  This script runs the C preprocessor over every .c file of a product
(the same headers and include path as the build), so every macro is expanded
exactly as the compiler sees it, reads each initializer's .name and .sql,
and writes the statements, laid out one clause a line, into
test/expected/statements_<product>.sql:

    -- take_lease (src/leases/leases.c)
    WITH o0 AS (
      SELECT ...

A change to a statement's SQL then shows as a diff of that file, which a
reviewer reads as SQL.  Without --write it compares what the C holds now
with the committed catalogues and fails on any difference (the sql-lint
suite runs it so), and on a statement without a name, two statements of one
product with the same name, or a .sql that is not text the preprocessor
resolves to literals.

Usage: statements.py [--write]   (PG_CONFIG or PG_BINDIR names pg_config;
CC the compiler, default cc).  Prints "N passed, N failed": one check per
product.
"""
import difflib
import os
import re
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PRODUCTS = {
    "leases": ["src/leases"],
    "bindings": ["src/bindings"],
    "common": ["src/common", "src/module.c"],
}

STRING = r'"(?:[^"\\\n]|\\.)*"'
FIELD = re.compile(r'[{,]\s*\.(name|sql)\s*=\s*(\(*\s*(?:' + STRING + r'\s*)+\)*|[^,}]*)')
LITERAL = re.compile(STRING)
ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "'": "'"}


def pg_config():
    if os.environ.get("PG_CONFIG"):
        return os.environ["PG_CONFIG"]
    if os.environ.get("PG_BINDIR"):
        return os.path.join(os.environ["PG_BINDIR"], "pg_config")
    return "pg_config"


def c_string(literals):
    """The text of adjacent C string literals, concatenated."""
    out = []
    for lit in LITERAL.findall(literals):
        out.append(re.sub(r'\\(.)', lambda m: ESCAPES.get(m.group(1), m.group(1)), lit[1:-1]))
    return "".join(out)


def preprocess(path, include_server):
    cc = os.environ.get("CC", "cc")
    cmd = [cc, "-E", "-P", "-I", os.path.join(ROOT, "src"), "-I", include_server, path]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


# Words before which a new line starts (not after the words in NO_BREAK_AFTER).
BREAK_BEFORE = {"SELECT", "FROM", "WHERE", "AND", "GROUP", "ORDER", "HAVING", "LIMIT", "UNION",
                "RETURNING", "SET", "VALUES", "INSERT", "UPDATE", "DELETE", "ON", "FOR", "WHEN",
                "ELSE", "LEFT", "JOIN", "WITH", "OFFSET", "OVERRIDING"}
NO_BREAK_AFTER = {"DISTINCT", "KEY", "DO", "NO", "FOR", "(", "BY", "OPERATOR", "ALL", "LEFT",
                  "INSERT", "DELETE", "SKIP", "WITH", "UNION", "EXCLUDE"}
TOKEN = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|\$\d+|\w+|\s+|[<>=!~+*/%^|&#@-]+|::|.", re.S)


def layout(sql):
    """One clause a line, indented two spaces per open parenthesis."""
    tokens = [t for t in TOKEN.findall(sql) if not t.isspace()]
    lines, line, depth, start_depth, prev = [], [], 0, 0, None

    def flush():
        if line:
            lines.append("  " * start_depth + join(line))

    for i, tok in enumerate(tokens):
        word = tok.upper() if re.fullmatch(r"\w+", tok) else tok
        cte = (prev == "," and depth == 0 and i + 2 < len(tokens)
               and tokens[i + 1].upper() == "AS" and tokens[i + 2] == "(")
        if line and ((tok in BREAK_BEFORE and prev not in NO_BREAK_AFTER) or cte):
            flush()
            line, start_depth = [], depth
        line.append(tok)
        depth += (tok == "(") - (tok == ")")
        prev = word
    flush()
    return "\n".join(lines)


def join(tokens):
    """Tokens with single spaces, none inside parentheses' edges or before commas."""
    out = ""
    for tok in tokens:
        if out and not (out.endswith("(") or out.endswith(".") or out.endswith("[")
                        or tok in (",", ")", ".", "::", "[", "]")
                        or out.endswith("::") or (tok == "(" and re.search(r"\w$", out)
                                                  and not re.search(r"\b(AS|IN|ANY|ALL|AND|OR|NOT|EXISTS|ON|FROM|WHERE|THEN|ELSE|WHEN|SELECT|VALUES|JOIN|LATERAL|OVER|FILTER|BY|USING)$", out, re.I))):
            out += " "
        out += tok
    return out


def statements(product, include_server):
    """[(name, file, sql)] of a product, in file order; raises on a bad initializer."""
    found, errors = [], []
    paths = []
    for entry in PRODUCTS[product]:
        full = os.path.join(ROOT, entry)
        if os.path.isdir(full):
            paths += sorted(os.path.relpath(os.path.join(d, f), ROOT)
                            for d, _, files in os.walk(full) for f in files if f.endswith(".c"))
        else:
            paths.append(entry)
    for rel in paths:
        text = preprocess(os.path.join(ROOT, rel), include_server)
        pending = {}
        for m in FIELD.finditer(text):
            field, value = m.group(1), m.group(2)
            if not LITERAL.search(value):
                errors.append(f"{rel}: .{field} = {value.strip()} is not a string literal")
                continue
            if field in pending:
                errors.append(f"{rel}: a .{field} without its {'sql' if field == 'name' else 'name'}"
                              f" ({c_string(pending[field])[:60]!r})")
            pending[field] = value
            if "name" in pending and "sql" in pending:
                found.append((c_string(pending["name"]), rel, c_string(pending["sql"])))
                pending = {}
        if pending:
            errors.append(f"{rel}: an initializer with only .{next(iter(pending))}")
    seen = {}
    for name, rel, _ in found:
        if name in seen:
            errors.append(f"{rel}: statement name {name!r} also in {seen[name]}")
        seen[name] = rel
    return found, errors


def catalogue(product, found):
    head = (f"-- The statements the {product} C prepares ({', '.join(PRODUCTS[product])}), every\n"
            "-- macro expanded, one clause a line.  Generated by test/lint/statements.py\n"
            "-- --write; the sql-lint suite fails when the C and this file differ.\n")
    body = [f"\n-- {name} ({rel})\n{layout(sql)};\n" for name, rel, sql in found]
    return head + "".join(body)


def main():
    write = "--write" in sys.argv[1:]
    include_server = subprocess.run([pg_config(), "--includedir-server"], check=True,
                                    capture_output=True, text=True).stdout.strip()
    passed = failed = 0
    for product in PRODUCTS:
        found, errors = statements(product, include_server)
        path = os.path.join(ROOT, "test", "expected", f"statements_{product}.sql")
        text = catalogue(product, found) if found or os.path.exists(path) else ""
        for e in errors:
            print(f"statements: {e}")
        if write and not errors and text:
            with open(path, "w") as f:
                f.write(text)
            print(f"statements: wrote {os.path.relpath(path, ROOT)} ({len(found)} statements)")
        committed = open(path).read() if os.path.exists(path) else ""
        if errors or committed != text:
            if committed != text:
                print(f"statements: {os.path.relpath(path, ROOT)} is not what the C prepares"
                      " (run test/lint/statements.py --write and review the diff):")
                sys.stdout.writelines(difflib.unified_diff(
                    committed.splitlines(True), text.splitlines(True),
                    "committed", "the C now", n=2))
            failed += 1
        else:
            print(f"statements: {product}: {len(found)} statements as committed")
            passed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
