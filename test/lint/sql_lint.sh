#!/usr/bin/env bash
# Suite sql-lint (test/run.sh): test/lint/sql_qualified.py proves it can
# fail (--self-test: a snippet breaking each rule must be flagged), then
# checks the install sources; test/lint/shared_literals.sh checks the
# literals they share with the C; test/lint/statements.py checks that the
# statement catalogues (test/expected/statements_*.sql) hold what the C
# prepares.  Prints "N passed, N failed": the self-test counts one, each
# file one, each literal check one, each product's catalogue one.
cd "$(dirname "$0")/../.." || exit 1
self=$(python3 test/lint/sql_qualified.py --self-test)
echo "$self" | grep -vE '^[0-9]+ passed, [0-9]+ failed$'
lint=$(python3 test/lint/sql_qualified.py)
echo "$lint" | grep -vE '^[0-9]+ passed, [0-9]+ failed$'
shared=$(bash test/lint/shared_literals.sh)
echo "$shared" | grep -vE '^[0-9]+ passed, [0-9]+ failed$'
catalogues=$(python3 test/lint/statements.py)
echo "$catalogues" | grep -vE '^[0-9]+ passed, [0-9]+ failed$'
read -r p1 _ f1 _ < <(echo "$self" | grep -E '^[0-9]+ passed, [0-9]+ failed$' || echo "0 passed, 1 failed")
read -r p2 _ f2 _ < <(echo "$lint" | grep -E '^[0-9]+ passed, [0-9]+ failed$' || echo "0 passed, 1 failed")
read -r p3 _ f3 _ < <(echo "$shared" | grep -E '^[0-9]+ passed, [0-9]+ failed$' || echo "0 passed, 1 failed")
read -r p4 _ f4 _ < <(echo "$catalogues" | grep -E '^[0-9]+ passed, [0-9]+ failed$' || echo "0 passed, 1 failed")
echo "$((p1 + p2 + p3 + p4)) passed, $((f1 + f2 + f3 + f4)) failed"
[ $((f1 + f2 + f3 + f4)) -eq 0 ]
