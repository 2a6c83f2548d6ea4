# shellcheck shell=bash
# What `make deb`, `make dist` and the suites that install old releases
# share: the version being released, the released versions, and the warning
# about changes that the archive of HEAD leaves out.

# Prints the upstream version: pg_lease.control's default_version, the one
# place it is written down for the build.
pg_lease_version() {
    local v
    v=$(sed -n "s/^[[:space:]]*default_version[[:space:]]*=[[:space:]]*'\([^']*\)'.*/\1/p" pg_lease.control)
    if [ -z "$v" ]; then
        echo "pg_lease: no default_version in pg_lease.control" >&2
        return 1
    fi
    echo "$v"
}

# Prints every released version older than the default one, oldest first:
# each <from> of an upgrade script sql/pg_lease--<from>--<to>.sql and each
# frozen full script sql/pg_lease--<version>.sql (0.1.0).  Each installs
# with CREATE EXTENSION pg_lease VERSION '<version>' (the full script, then
# the upgrade chain).
pg_lease_releases() {
    local default f v
    default=$(pg_lease_version) || return 1
    for f in sql/pg_lease--*.sql; do
        v=${f#sql/pg_lease--}; v=${v%.sql}; v=${v%%--*}
        [ "$v" = "$default" ] || echo "$v"
    done | sort -uV
}

# Warns (on stderr) when the work tree has changes HEAD does not: the
# archive is built from HEAD, so they are not in it.
release_warn_uncommitted() {
    local what=$1 changes
    changes=$(git status --porcelain)
    if [ -n "$changes" ]; then
        echo "pg_lease: warning: $what archives HEAD ($(git rev-parse --short HEAD));" \
            "these uncommitted changes are not in it:" >&2
        sed 's/^/    /' <<<"$changes" >&2
    fi
}
