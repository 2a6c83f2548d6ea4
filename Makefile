# pg_lease — PGXS build.
#
#   make            build the server module (src/*.c -> pg_lease.so)
#   make install    install the module and the extension scripts
#   make installcheck   run pg_regress + isolation suites against $PGHOST/$PGPORT
#   make test       everything, from scratch: dependencies, build, install,
#                   a throwaway cluster, every suite, a "N passed, N failed" line
#   make demo       the main job: a consumer fleet and a chat platform on a throwaway cluster
#   make bench      benchmarks side by side, written to BENCHMARKS.md
#   make sanitize   pg_regress + isolation against a UBSan build of the module,
#                   the server under valgrind memcheck; fails on any report
#   make lint       cppcheck and clang-tidy (.clang-tidy) over src/
#   make scale      the API through a PL/Proxy router over pg_auto_failover partitions, under failover
#   make router-sql regenerate the router extension script from pg_lease's catalog
#   make torture    the long torture and crash-recovery run, its own throwaway
#                   cluster (test/torture/run.sh --long; `make test` runs a short one)
#   make explore    every interleaving of 3 clients x 4 calls of the channel-binding
#                   protocol and 3 workers x 3 calls over the whole alphabet of the
#                   lease protocol, against the real extension, its own throwaway
#                   cluster (test/explorer/run.sh --long; `make test` runs smaller
#                   sizes); counterexamples are printed as the shortest sequence of calls
#   make deb        the Debian packages postgresql-15-pg-lease and
#                   postgresql-15-pg-lease-router (debian/: pg_buildext,
#                   dh --with pgxs_loop), built from HEAD under /tmp into build/deb/;
#                   fails unless lintian is clean (docs/packaging.md)
#   make dist       the PGXN archive build/pg_lease-<version>.zip: git archive of
#                   HEAD, META.json checked against the PGXN Meta Spec

# pg_lease_router (pg_lease_router.control) is the second extension: the
# same lease.* API as PL/Proxy functions on a router in front of pg_lease
# partitions (docs/scale-out.md).  It has no C; its install script is
# generated from pg_lease's catalog (make router-sql) and committed.
EXTENSION = pg_lease pg_lease_router
MODULE_big = pg_lease
# src/pg_lease.c is the module entry; src/leases/ is the shard-lease product,
# src/bindings/ the channel-binding product, src/common/ what both use.
SRCS = $(sort $(wildcard src/*.c src/*/*.c))
OBJS = $(SRCS:.c=.o)

# The install script of the current version is built from the SQL parts,
# grouped like the C (one source for every object; see CONTRIBUTING.md).
# The released full scripts (pg_lease--0.1.0.sql, pg_lease--0.2.0.sql) and
# every upgrade script pg_lease--<from>--<to>.sql live at the top level and
# are never edited once released.
EXTVERSION := $(shell sed -nE "s/^default_version *= *'([^']+)'.*/\1/p" pg_lease.control)
SQL_PARTS = src/common/schema.sql src/leases/access.sql src/leases/leases.sql \
	src/bindings/bindings.sql src/leases/monitoring.sql src/common/finish.sql
DATA_built = pg_lease--$(EXTVERSION).sql
DATA = $(filter-out $(DATA_built),$(sort $(wildcard pg_lease--*.sql))) \
	$(sort $(wildcard pg_lease_router--*.sql))

# The user documentation, installed into $(docdir)/extension/pg_lease/ (a
# directory of its own: the page names are generic), with the monitoring
# files an operator copies from there: the postgres_exporter queries file and
# the Prometheus alert rules (docs/monitoring.md).  PGXS installs every file
# into that one directory, flat.
DOCS = README.md $(sort $(wildcard docs/*.md)) \
	$(sort $(wildcard docs/monitoring/*.yml docs/monitoring/*.yaml))

# pg_regress: sql/*.sql with expected/*.out; isolation: test/specs/*.spec
# with test/expected/*.out.  Every file found is a test.
REGRESS = $(sort $(basename $(notdir $(wildcard sql/*.sql))))
REGRESS_OPTS = --load-extension=pg_lease
ISOLATION = $(sort $(basename $(notdir $(wildcard test/specs/*.spec))))
ISOLATION_OPTS = --inputdir=test --load-extension=pg_lease

PG_CPPFLAGS = -I$(srcdir)/src
# PostgreSQL 15 headers trip -Wunused-parameter (bufpage.h inline functions), so
# that one warning is off.  WERROR=1 (what make test, CI and the packaging
# tests pass) turns every other warning into an error; a user's plain
# `make && make install` on another compiler only warns.
WERROR ?=
WERROR_FLAG = $(if $(filter 1 yes,$(WERROR)),-Werror)
PG_CFLAGS = -Wall -Wextra $(WERROR_FLAG) -Wno-unused-parameter

# Client programs (libpq, not part of the server module): the demo fleet
# (also the make scale fleet, with --router) and the torture driver.
DEMO = test/demo/pg_lease_demo
TORTURE = test/torture/pg_lease_torture
LIBPQ_CFLAGS := $(shell pkg-config --cflags libpq 2>/dev/null || echo -I/usr/include/postgresql)
LIBPQ_LIBS := $(shell pkg-config --libs libpq 2>/dev/null || echo -lpq)
CLIENT_CFLAGS = -O2 -g -Wall -Wextra $(WERROR_FLAG) -std=gnu11 $(LIBPQ_CFLAGS)

EXTRA_CLEAN = output_iso $(DEMO) $(TORTURE) docs-coverage.log docs-examples.log

# Debian ships one pg_config per major version; prefer 15's when it is there.
ifneq ($(wildcard /usr/lib/postgresql/15/bin/pg_config),)
PG_CONFIG ?= /usr/lib/postgresql/15/bin/pg_config
else
PG_CONFIG ?= pg_config
endif
PGXS := $(shell $(PG_CONFIG) --pgxs 2>/dev/null)
# pgxs.mk comes with Debian's postgresql-client-15, the server headers with
# postgresql-server-dev-15: a build needs both.
PG_SERVER_HEADERS := $(wildcard $(shell $(PG_CONFIG) --includedir-server 2>/dev/null)/postgres.h)
# Oldest supported major version (MarkGUCPrefixReserved, the PG 15 SPI and
# GUC interfaces); src/pg_lease.h refuses older headers too.
PG_LEASE_MIN_MAJOR = 15
PG_MAJOR_BUILT := $(shell $(PG_CONFIG) --version 2>/dev/null | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
ifneq ($(and $(PGXS),$(PG_SERVER_HEADERS)),)
ifeq ($(shell [ "$(PG_MAJOR_BUILT)" -ge $(PG_LEASE_MIN_MAJOR) ] 2>/dev/null && echo ok),)
$(error pg_lease needs PostgreSQL $(PG_LEASE_MIN_MAJOR) or later; $(PG_CONFIG) is PostgreSQL $(PG_MAJOR_BUILT) (set PG_CONFIG to a newer pg_config))
endif
include $(PGXS)
docmoduledir = extension/pg_lease
# PGXS tracks no header dependencies: rebuild every object when any header
# changes (a struct such as LeaseStatement changing size otherwise leaves
# objects compiled against the old layout).
$(OBJS): $(wildcard src/*.h src/*/*.h)
else
all install installcheck:
	@echo "pg_lease: PostgreSQL server headers not found ($(PG_CONFIG) --includedir-server has no postgres.h); run 'make test' (installs them) or apt-get install postgresql-server-dev-$(or $(PG_MAJOR_BUILT),15)" >&2
	@exit 1
endif

.PHONY: test demo deps clients bench sanitize lint lint-deps torture explore deb dist router-sql scale scale-client
clients: $(DEMO) $(TORTURE)
scale-client: $(DEMO)

$(DATA_built): $(SQL_PARTS) pg_lease.control
	{ echo '/* pg_lease--$(EXTVERSION).sql: a fresh install of $(EXTVERSION), generated from $(SQL_PARTS) by the Makefile.  Do not edit. */'; \
	  echo; printf '%s\n' '\echo Use "CREATE EXTENSION pg_lease" to load this file. \quit'; \
	  for part in $(SQL_PARTS); do echo; cat $$part; done; } >$@

$(DEMO): test/demo/pg_lease_demo.c
	$(CC) $(CLIENT_CFLAGS) -o $@ $< $(LIBPQ_LIBS) -lpthread

deps:
	bash test/lib/deps.sh

# make router-sql: regenerate pg_lease_router--$(EXTVERSION).sql from the
# catalog of a throwaway database with this pg_lease installed (after any
# change to pg_lease's functions or views; the router test fails until then).
router-sql:
	bash test/router/router_test.sh --generate

# make scale: the fleet through a router over two pg_auto_failover
# partitions during a switchover, a SIGKILL and a rejoin; a report
# (test/scale/run.sh; make test runs a short one).
scale:
	bash test/scale/run.sh $(ARGS)

test:
	bash test/run.sh

# make bench [ARGS=--quick]: writes BENCHMARKS.md (quick: test/bench/results-quick.md)
bench:
	bash test/bench/run.sh $(ARGS)

# make demo ARGS='--legacy-checkpoints --workers 6 --seed 42'
demo:
	bash test/demo.sh $(ARGS)

sanitize:
	bash test/sanitize.sh

# make lint: both analysers over src/, against the server headers, at this
# configuration; any finding fails the target.  cppcheck is told the
# compiler and platform (-D...) so it checks the one configuration the
# module is built for; system headers are not parsed
# (missingIncludeSystem).  clang-tidy reads .clang-tidy (checks, why some
# are off, warnings as errors).
LINT_INCLUDES = -I$(srcdir)/src -I$(shell $(PG_CONFIG) --includedir-server) -D_GNU_SOURCE
CPPCHECK_FLAGS = --quiet --error-exitcode=1 --inline-suppr --std=c11 \
	--enable=warning,style,performance,portability \
	--suppress=missingIncludeSystem --library=posix \
	-D__GNUC__=12 -D__x86_64__ -D__linux__
lint-deps:
	bash test/lib/deps.sh build lint

lint: lint-deps
	cppcheck $(CPPCHECK_FLAGS) $(LINT_INCLUDES) src/
	@# clang-tidy counts the warnings it filtered out of PostgreSQL's headers
	@# on stderr ("N warnings generated."); only its findings are shown.
	clang-tidy --quiet $(SRCS) -- $(LINT_INCLUDES) -std=gnu11 \
		>clang-tidy.log 2>&1; status=$$?; \
		grep -v '^[0-9]* warnings\{0,1\} generated\.$$' clang-tidy.log; rm -f clang-tidy.log; exit $$status
	@echo "pg_lease: lint clean (cppcheck $$(cppcheck --version | cut -d' ' -f2), $$(clang-tidy --version | grep -o 'version [0-9.]*'))"

$(TORTURE): $(TORTURE).c
	$(CC) $(CLIENT_CFLAGS) -o $@ $< $(LIBPQ_LIBS) -lpthread

# make torture ARGS='--clients 16 --seconds 600 --seed 42'
torture:
	bash test/torture/run.sh --long $(ARGS)

# make explore: the long explorer run (test/explorer/run.sh --long)
explore:
	bash test/explorer/run.sh --long

# make deb: test/packaging/build_deb.sh (DEB_OUTDIR, DEB_BUILD_CHECK=1)
deb:
	bash test/packaging/build_deb.sh

# make dist: test/packaging/make_dist.sh (DIST_OUTDIR)
dist:
	bash test/packaging/make_dist.sh
