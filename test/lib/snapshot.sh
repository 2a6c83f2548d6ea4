# shellcheck shell=bash
# The pg_lease files that `make install` writes into a PostgreSQL
# installation (the one a pg_config names; both extensions, pg_lease and
# pg_lease_router): list them, save them, put them back.  The packaging tests install other builds of pg_lease over them (the
# Debian package, the PGXN archive) and leave the installation as they found
# it.  Needs root or sudo, like make install.

SNAPSHOT_SUDO=()
[ "$(id -u)" -eq 0 ] || SNAPSHOT_SUDO=(sudo)

# Prints the paths make install writes (directories and globs, relative to /).
snapshot_globs() {
    local lib share
    lib=$("$1" --pkglibdir) || return 1
    share=$("$1" --sharedir) || return 1
    lib=${lib#/}
    share=${share#/}
    printf '%s\n' "$lib/pg_lease.so" "$lib/bitcode/pg_lease" "$lib/bitcode/pg_lease.index.bc" \
        "$share/extension/pg_lease.control" "$share/extension/pg_lease--*.sql" \
        "$share/extension/pg_lease_router.control" "$share/extension/pg_lease_router--*.sql"
}

# snapshot_files PG_CONFIG: the pg_lease files there now, one path (relative
# to /) a line.
snapshot_files() {
    local globs g
    globs=$(snapshot_globs "$1") || return 1
    # A glob that matches nothing (no router files yet) is no error.
    (cd / && for g in $globs; do
        # shellcheck disable=SC2086 # the globs are meant to expand
        if [ -e "$g" ]; then find $g -type f; fi
    done) | sort
}

# snapshot_manifest PG_CONFIG: their sha256 sums, to compare before and after.
snapshot_manifest() {
    snapshot_files "$1" | (cd / && xargs -r sha256sum)
}

# snapshot_save PG_CONFIG TARFILE: saves them (possibly none) into TARFILE.
snapshot_save() {
    snapshot_files "$1" | tar -C / -cpf "$2" -T -
}

# snapshot_clear PG_CONFIG: removes them.
snapshot_clear() {
    local globs
    globs=$(snapshot_globs "$1") || return 1
    # shellcheck disable=SC2086
    (cd / && "${SNAPSHOT_SUDO[@]}" rm -rf $globs)
}

# snapshot_restore PG_CONFIG TARFILE: puts back exactly what TARFILE holds.
snapshot_restore() {
    snapshot_clear "$1" && "${SNAPSHOT_SUDO[@]}" tar -C / -xpf "$2"
}
