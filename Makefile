# pg_lease — PGXS build.
#
#   make                build the server module (src/*.c -> pg_lease.so) and
#                       sql/pg_lease--<version>.sql
#   make install        install the module and the extension scripts
#   make installcheck   pg_regress (test/sql) and isolation (test/specs)
#                       against $PGHOST/$PGPORT
#
# Entry points, each one verb of test/make.sh (which says what it runs;
# ARGS='...' passes arguments on): test (everything, from scratch:
# dependencies, build, install, a throwaway cluster, every suite, a "N passed,
# N failed" line), check (the fast loop: build, pg_regress, isolation and
# pgTAP on a throwaway cluster), demo, bench, sanitize, lint, scale, soak
# (MINUTES=N), torture, explore, router-sql, deb, dist, deps.  test/README.md
# and the suites' READMEs describe each.

# pg_lease_router (pg_lease_router.control) is the second extension: the
# same lease.* API as PL/Proxy functions on a router in front of pg_lease
# partitions (docs/scale-out.md).  It has no C; its install script is
# generated from pg_lease's catalog (make router-sql) and committed in sql/.
EXTENSION = pg_lease pg_lease_router
MODULE_big = pg_lease
# src/module.c is the module entry (src/pg_lease.h the header every file includes); src/leases/ is the shard-lease product,
# src/bindings/ the channel-binding product, src/common/ what both use.
SRCS = $(sort $(wildcard src/*.c src/*/*.c src/*/*/*.c))
OBJS = $(SRCS:.c=.o)

# Install scripts live in sql/, the way PGXS projects keep them: the one
# frozen full script of the oldest supported release (pg_lease--0.1.0.sql)
# and every upgrade script pg_lease--<from>--<to>.sql, never edited once
# released (test/upgrade/released.sha256).  CREATE EXTENSION ... VERSION of
# an older release runs 0.1.0 and the upgrade chain (PostgreSQL finds the
# path).  The current version's full script is built from the SQL parts,
# grouped like the C (one source for every object; see CONTRIBUTING.md, "Layout").
# The router's script is generated (make router-sql) and committed in sql/;
# the router test fails when it is not current.
EXTVERSION := $(shell sed -nE "s/^default_version *= *'([^']+)'.*/\1/p" pg_lease.control)
SQL_PARTS = src/common/schema.sql src/leases/access.sql src/leases/leases.sql \
	src/bindings/bindings.sql src/leases/monitoring.sql src/bindings/monitoring.sql \
	src/leases/placement.sql src/common/finish.sql
DATA_built = sql/pg_lease--$(EXTVERSION).sql
DATA = $(filter-out $(DATA_built),$(sort $(wildcard sql/pg_lease--*.sql))) \
	$(sort $(wildcard sql/pg_lease_router--*.sql))

# The user documentation, installed into $(docdir)/extension/pg_lease/ (a
# directory of its own: the page names are generic), with the monitoring
# files an operator copies from there: the postgres_exporter queries file and
# the Prometheus alert rules (docs/monitoring.md).  PGXS installs every file
# into that one directory, flat.
DOCS = README.md $(sort $(wildcard docs/*.md)) \
	$(sort $(wildcard docs/monitoring/*.yml docs/monitoring/*.yaml))

# pg_regress: test/sql/*.sql with test/expected/*.out; isolation:
# test/specs/*.spec with test/expected/*.out (pgvector's layout: both read
# from --inputdir=test).  Every file found is a test.
REGRESS = $(sort $(basename $(notdir $(wildcard test/sql/*.sql))))
REGRESS_OPTS = --inputdir=test --load-extension=pg_lease
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

EXTRA_CLEAN = output_iso $(DEMO) $(TORTURE) docs-coverage.log docs-examples.log explore.log planted.log sql-lint.log

# Debian ships one pg_config per major version; prefer 15's when it is there.
ifneq ($(wildcard /usr/lib/postgresql/15/bin/pg_config),)
PG_CONFIG ?= /usr/lib/postgresql/15/bin/pg_config
else
PG_CONFIG ?= pg_config
endif
PGXS := $(shell $(PG_CONFIG) --pgxs 2>/dev/null)
# `make check` is pg_lease's fast loop (test/make.sh check), not PGXS's
# (which refuses it for an extension): when it is the goal, PGXS is not
# read, and the loop's own make calls build and install as usual.
ifeq ($(MAKECMDGOALS),check)
PGXS :=
.PHONY: check
check:
	bash test/make.sh check $(ARGS)
endif
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
$(OBJS): $(wildcard src/*.h src/*/*.h src/*/*/*.h)
else
all install installcheck:
	@echo "pg_lease: PostgreSQL server headers not found ($(PG_CONFIG) --includedir-server has no postgres.h); run 'make test' (installs them) or apt-get install postgresql-server-dev-$(or $(PG_MAJOR_BUILT),15)" >&2
	@exit 1
endif

ENTRY_POINTS = test demo bench sanitize lint scale soak torture explore router-sql deb dist deps
.PHONY: $(ENTRY_POINTS) clients scale-client
$(ENTRY_POINTS):
	bash test/make.sh $@ $(ARGS)

# make soak MINUTES=N: the fleet under the coordinator nemesis for N minutes.
soak: export MINUTES ?= 10

$(DATA_built): $(SQL_PARTS) pg_lease.control
	{ echo '/* pg_lease--$(EXTVERSION).sql: a fresh install of $(EXTVERSION), generated from $(SQL_PARTS) by the Makefile.  Do not edit. */'; \
	  echo; printf '%s\n' '\echo Use "CREATE EXTENSION pg_lease" to load this file. \quit'; \
	  for part in $(SQL_PARTS); do echo; cat $$part; done; } >$@

# The client programs (test/run.sh, the demo, scale and torture build them).
clients: $(DEMO) $(TORTURE)
scale-client: $(DEMO)
$(DEMO) $(TORTURE): %: %.c
	$(CC) $(CLIENT_CFLAGS) -o $@ $< $(LIBPQ_LIBS) -lpthread
