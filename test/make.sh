#!/usr/bin/env bash
# The one orchestration script behind the Makefile's entry points: `make VERB
# ARGS='...'` runs `bash test/make.sh VERB ...`.  The Makefile itself only
# builds, installs and runs installcheck (PGXS).
#
#   test        test/run.sh: dependencies, build, install, a throwaway
#               cluster, every suite (PG_LEASE_SUITES), "N passed, N failed"
#   check       the fast loop: test/run.sh with pg_regress, isolation and
#               pgTAP only, then the suites it skipped
#   demo        test/demo.sh: the fleet on a throwaway cluster, then a report
#   bench       test/bench/run.sh [--quick]: BENCHMARKS.md
#   sanitize    test/sanitize.sh: pg_regress + isolation, UBSan and valgrind
#   lint        cppcheck and clang-tidy (.clang-tidy) over src/
#   scale       test/scale/run.sh: the fleet through the router, failovers
#   soak        test/scale/soak.sh: the fleet for MINUTES (10) minutes while
#               a nemesis hits the coordinator, a checker per fault
#   torture     test/torture/run.sh --long
#   explore     test/explorer/run.sh --long
#   router-sql  test/router/router_test.sh --generate: sql/pg_lease_router--<version>.sql
#   deb         test/packaging/build_deb.sh (DEB_OUTDIR, DEB_BUILD_CHECK=1)
#   dist        test/packaging/make_dist.sh (DIST_OUTDIR)
#   deps        test/lib/deps.sh: install what the tests need
# Further arguments go to the script named.
set -uo pipefail
cd "$(dirname "$0")/.."

# make lint: both analysers over src/, against the server headers, at this
# configuration; any finding fails.  cppcheck is told the compiler and
# platform (-D...) so it checks the one configuration the module is built
# for; system headers are not parsed (missingIncludeSystem).  clang-tidy
# reads .clang-tidy (checks, why some are off, warnings as errors).
lint() {
    local pg_config=${PG_CONFIG:-} includes status
    if [ -z "$pg_config" ]; then
        pg_config=pg_config
        [ -x /usr/lib/postgresql/15/bin/pg_config ] && pg_config=/usr/lib/postgresql/15/bin/pg_config
    fi
    bash test/lib/deps.sh build lint || return 1
    includes=(-Isrc "-I$("$pg_config" --includedir-server)" -D_GNU_SOURCE)
    cppcheck --quiet --error-exitcode=1 --inline-suppr --std=c11 \
        --enable=warning,style,performance,portability \
        --suppress=missingIncludeSystem --library=posix \
        -D__GNUC__=12 -D__x86_64__ -D__linux__ "${includes[@]}" src/ || return 1
    # clang-tidy counts the warnings it filtered out of PostgreSQL's headers
    # on stderr ("N warnings generated."); only its findings are shown.
    clang-tidy --quiet src/*.c src/*/*.c -- "${includes[@]}" -std=gnu11 >clang-tidy.log 2>&1
    status=$?
    grep -v '^[0-9]* warnings\{0,1\} generated\.$' clang-tidy.log
    rm -f clang-tidy.log
    [ "$status" -eq 0 ] || return "$status"
    echo "pg_lease: lint clean (cppcheck $(cppcheck --version | cut -d' ' -f2), $(clang-tidy --version | grep -o 'version [0-9.]*'))"
}

# make check: the suites a change to the C or the SQL needs first, in a few
# minutes, then which of make test's suites it left out.
check() {
    local status all skipped=()
    PG_LEASE_SUITES="regress isolation pgtap" bash test/run.sh "$@"
    status=$?
    all=$(bash test/run.sh --list)
    for s in $all; do
        case " regress isolation pgtap " in *" $s "*) ;; *) skipped+=("$s") ;; esac
    done
    echo "pg_lease: make check ran regress, isolation and pgtap; skipped ${skipped[*]} (make test runs them all)"
    return "$status"
}

verb=${1:-}
shift
case $verb in
    test) exec bash test/run.sh "$@" ;;
    check) check "$@" ;;
    demo) exec bash test/demo.sh "$@" ;;
    bench) exec bash test/bench/run.sh "$@" ;;
    sanitize) exec bash test/sanitize.sh "$@" ;;
    lint) lint ;;
    scale) exec bash test/scale/run.sh "$@" ;;
    soak) exec bash test/scale/soak.sh "$@" ;;
    torture) exec bash test/torture/run.sh --long "$@" ;;
    explore) exec bash test/explorer/run.sh --long "$@" ;;
    router-sql) exec bash test/router/router_test.sh --generate "$@" ;;
    deb) exec bash test/packaging/build_deb.sh "$@" ;;
    dist) exec bash test/packaging/make_dist.sh "$@" ;;
    deps) exec bash test/lib/deps.sh "$@" ;;
    *)
        echo "usage: test/make.sh {test|check|demo|bench|sanitize|lint|scale|soak|torture|explore|router-sql|deb|dist|deps} [args...]" >&2
        exit 2 ;;
esac
