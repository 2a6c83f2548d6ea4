# pg_lease — PGXS build.
#
#   make            build the server module (src/*.c -> pg_lease.so)
#   make install    install the module and the extension scripts
#   make installcheck   run pg_regress + isolation suites against $PGHOST/$PGPORT
#   make test       everything, from scratch: dependencies, build, install,
#                   a throwaway cluster, every suite, a "N passed, N failed" line
#   make demo       the main job: a lease lifecycle against a throwaway cluster
#   make torture    the long torture and crash-recovery run, its own throwaway
#                   cluster (test/torture/run.sh --long; `make test` runs a short one)

EXTENSION = pg_lease
MODULE_big = pg_lease
OBJS = $(patsubst %.c,%.o,$(sort $(wildcard src/*.c)))

# Install scripts live at the top level: pg_lease--<version>.sql is a release,
# pg_lease--<from>--<to>.sql an upgrade.  A released script is never edited.
DATA = $(sort $(wildcard pg_lease--*.sql))

# pg_regress: sql/*.sql with expected/*.out; isolation: test/specs/*.spec
# with test/expected/*.out.  Every file found is a test.
REGRESS = $(sort $(basename $(notdir $(wildcard sql/*.sql))))
REGRESS_OPTS = --load-extension=pg_lease
ISOLATION = $(sort $(basename $(notdir $(wildcard test/specs/*.spec))))
ISOLATION_OPTS = --inputdir=test --load-extension=pg_lease

PG_CPPFLAGS = -I$(srcdir)/src
# PostgreSQL 15 headers trip -Wunused-parameter (bufpage.h inline functions), so
# that one warning is off; everything else -Wall -Wextra raises is an error.
PG_CFLAGS = -Wall -Wextra -Werror -Wno-unused-parameter

# Client programs (libpq, not part of the server module): the demo fleet and
# the torture driver.
DEMO = test/demo/pg_lease_demo
TORTURE = test/torture/pg_lease_torture
LIBPQ_CFLAGS := $(shell pkg-config --cflags libpq 2>/dev/null || echo -I/usr/include/postgresql)
LIBPQ_LIBS := $(shell pkg-config --libs libpq 2>/dev/null || echo -lpq)
CLIENT_CFLAGS = -O2 -g -Wall -Wextra -Werror -std=gnu11 $(LIBPQ_CFLAGS)

EXTRA_CLEAN = test/results test/output_iso $(DEMO) $(TORTURE)

# Debian ships one pg_config per major version; prefer 15's when it is there.
ifneq ($(wildcard /usr/lib/postgresql/15/bin/pg_config),)
PG_CONFIG ?= /usr/lib/postgresql/15/bin/pg_config
else
PG_CONFIG ?= pg_config
endif
PGXS := $(shell $(PG_CONFIG) --pgxs 2>/dev/null)
ifneq ($(PGXS),)
include $(PGXS)
else
all install installcheck:
	@echo "pg_lease: PostgreSQL server headers not found; run 'make test' (installs them) or install postgresql-server-dev-15" >&2
	@exit 1
endif

.PHONY: test demo deps clients bench
clients: $(DEMO) $(TORTURE)

$(DEMO): test/demo/pg_lease_demo.c
	$(CC) $(CLIENT_CFLAGS) -o $@ $< $(LIBPQ_LIBS) -lpthread

deps:
	bash test/lib/deps.sh

test:
	bash test/run.sh

# make bench [ARGS=--quick]: writes BENCHMARKS.md (quick: test/bench/results-quick.md)
bench:
	bash test/bench/run.sh $(ARGS)

# make demo ARGS='--legacy-checkpoints --workers 6 --seed 42'
demo:
	bash test/demo.sh $(ARGS)

$(TORTURE): $(TORTURE).c
	$(CC) $(CLIENT_CFLAGS) -o $@ $< $(LIBPQ_LIBS) -lpthread

# make torture ARGS='--clients 16 --seconds 600 --seed 42'
.PHONY: torture
torture:
	bash test/torture/run.sh --long $(ARGS)
