#!/usr/bin/env bash
# `make sanitize`: the pg_regress and isolation suites against a build of
# pg_lease.so with UndefinedBehaviorSanitizer, in a server running under
# valgrind memcheck; fails when either reports anything (test/README.md, "`make
# sanitize`" says why this combination and not AddressSanitizer).
#
#   1. builds pg_lease.so in a scratch copy of the sources with
#      -fsanitize=undefined (libubsan linked into the module: unlike ASan it
#      needs no preload) and installs it in place of the normal build;
#   2. test/run.sh starts its throwaway cluster with the postmaster under
#      valgrind (CLUSTER_SERVER_WRAPPER, test/lib/cluster.sh) and runs the
#      suites;
#   3. every valgrind log (one per server process) and every UBSan log must
#      be free of reports;
#   4. the normal build is installed again.
# Closes with "N passed, N failed" like make test, the sanitizer check
# counted as one more test.
set -uo pipefail
cd "$(dirname "$0")/.."
PG_BINDIR=${PG_BINDIR:-/usr/lib/postgresql/15/bin}
PG_CONFIG="$PG_BINDIR/pg_config"
SUDO=()
[ "$(id -u)" -eq 0 ] || SUDO=(sudo)
started=$(date +%s)

bash test/lib/deps.sh build test sanitize || exit 1

# The server runs as `postgres` and writes its logs here; the checkout need
# not be readable by it, so the suppression file is copied here too.
SAN=$(mktemp -d /tmp/pg_lease_sanitize.XXXXXX)
chmod 777 "$SAN"
cp test/valgrind.supp "$SAN/"
trap 'rm -rf "$SAN"' EXIT

# 1. The UBSan build, in a scratch copy so the tree's own objects stay as
# they are.
mkdir "$SAN/build"
# the working tree's files that git tracks or would (not build output)
git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$SAN/build/" || exit 1
UBSAN_CFLAGS="-fsanitize=undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g"
make -s -C "$SAN/build" PG_CONFIG="$PG_CONFIG" \
    PG_CFLAGS="-Wall -Wextra -Werror -Wno-unused-parameter $UBSAN_CFLAGS" \
    SHLIB_LINK="-fsanitize=undefined" || exit 1
"${SUDO[@]}" make -s -C "$SAN/build" PG_CONFIG="$PG_CONFIG" install >/dev/null || exit 1
reinstall() {
    make -s PG_CONFIG="$PG_CONFIG" WERROR=1 >/dev/null && "${SUDO[@]}" make -s PG_CONFIG="$PG_CONFIG" install >/dev/null
}
trap 'reinstall; rm -rf "$SAN"' EXIT

# 2. The suites, the server under valgrind.  UBSan stops a backend at its
# first report (-fno-sanitize-recover) after writing it to ubsan.<pid>.
# valgrind: memcheck without leak checking (a backend frees its memory
# contexts wholesale at exit), one log per process, errors never capped.
export CLUSTER_SERVER_WRAPPER="env UBSAN_OPTIONS=print_stacktrace=1:log_path=$SAN/ubsan
    valgrind --tool=memcheck --leak-check=no --error-limit=no --num-callers=30
    --trace-children=no --suppressions=$SAN/valgrind.supp --log-file=$SAN/valgrind.%p.log"
KEEP_CLUSTER_LOG="$SAN/server.log" PG_LEASE_NO_INSTALL=1 \
    PG_LEASE_SUITES=${PG_LEASE_SANITIZE_SUITES:-regress isolation} \
    bash test/run.sh 2>&1 | tee "$SAN/run.log"
summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$SAN/run.log" | tail -n 1)
passed=$(echo "${summary:-0 passed, 1 failed}" | cut -d' ' -f1)
failed=$(echo "${summary:-0 passed, 1 failed}" | cut -d' ' -f3)

# 3. Reports.  A valgrind error starts with "==PID== " and a description;
# the closing "ERROR SUMMARY" of each process counts them.
reports=0
logs=$(ls "$SAN"/valgrind.*.log 2>/dev/null | wc -l)
for f in "$SAN"/valgrind.*.log; do
    [ -f "$f" ] || continue
    if grep -qE 'ERROR SUMMARY: [1-9]|^==[0-9]+== (Invalid |Conditional jump|Use of uninitialised|Syscall param|Source and destination overlap|Mismatched free|.*definitely lost)' "$f"; then
        echo "== valgrind report in $(basename "$f"):"
        cat "$f"
        reports=$((reports + 1))
    fi
done
for f in "$SAN"/ubsan.*; do
    [ -f "$f" ] || continue
    echo "== UBSan report $(basename "$f"):"
    cat "$f"
    reports=$((reports + 1))
done
# A backend UBSan stopped exits with code 1; the postmaster logs that.
if grep -E 'runtime error:|server process \(PID [0-9]+\) (exited with exit code|was terminated by signal)' "$SAN/server.log"; then
    reports=$((reports + 1))
fi
if [ "$logs" -eq 0 ]; then
    echo "== no valgrind logs: the server did not run under valgrind"
    reports=$((reports + 1))
fi
echo "== sanitizers: $logs server processes checked, $reports with reports ($(( $(date +%s) - started )) s)"
if [ "$reports" -eq 0 ]; then
    passed=$((passed + 1))
else
    failed=$((failed + 1))
fi
echo "${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
