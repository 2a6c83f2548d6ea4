# shellcheck shell=bash
# Sourced by test/clients/run.sh (suite clients): the Elixir client built and
# tested over each driver wiring it documents.
#   1. built with Debian's elixir (mix, no dependencies, no warnings);
#   2. its ExUnit tests (clients/elixir/test/app_state_test.exs: the kcl_ex
#      AppState adapter, the session, rotate_channel, the worker: loud failure,
#      shard discovery, sub-sequences, the release after an unexpected
#      exception, transactional mode) over erlang-p1-pgsql, reached over
#      127.0.0.1 through test/clients/tcp_relay.py (its driver speaks TCP only);
#   3. the same over Postgrex, and over Ecto (the AppState adapter against an
#      Ecto.Repo configured as a kcl_ex application configures it), from the
#      vendored sources of Postgrex, db_connection, decimal, telemetry, ecto
#      and ecto_sql: $PG_LEASE_ELIXIR_VENDOR, else
#      $(git rev-parse --show-toplevel)/../shared/vendor/elixir, else
#      /work/shared/vendor/elixir.  Without them it says so (a "# SKIP"
#      comment, no TAP line: not run is neither passed nor failed).
# Uses PY, OUT, DB, PGHOST, PGPORT and ok of run.sh; sets relay, EX_PORT,
# EX_EBIN and EX_DSN for what follows (the fleet's Elixir workers).
$PY test/clients/tcp_relay.py "$PGHOST/.s.PGSQL.$PGPORT" >"$OUT/relay.port" &
relay=$!
for _ in $(seq 1 50); do [ -s "$OUT/relay.port" ] && break; sleep 0.1; done
EX_PORT=$(cat "$OUT/relay.port")
EX_EBIN=$OUT/mix/build/lib/pg_lease/ebin
EX_DSN="postgresql://clients_worker@127.0.0.1:$EX_PORT/$DB"
(cd clients/elixir && MIX_HOME="$OUT/mix/home" HEX_HOME="$OUT/mix/hex" HEX_OFFLINE=1 MIX_BUILD_PATH="$OUT/mix/build" \
    mix compile --warnings-as-errors) >"$OUT/mix.log" 2>&1
ok_show $? "the Elixir client builds offline with Debian's elixir (mix, no dependencies), without warnings" "$OUT/mix.log"

# Runs the ExUnit file over wiring $1, at least $2 tests (those the wiring
# runs), with command $3..., one TAP line per test.
ex_unit() {
    local wiring=$1 min=$2 tap="$OUT/exunit-$1.tap" log="$OUT/exunit-$1.log" status verdict rest
    shift 2
    : >"$tap"
    PG_LEASE_EX_WIRING=$wiring PG_LEASE_EX_PORT=$EX_PORT PG_LEASE_EX_DB=$DB PG_LEASE_EX_TAP=$tap \
        PG_LEASE_EX_SOCKET=$PGHOST PG_LEASE_EX_PGPORT=$PGPORT "$@" >"$log" 2>&1
    status=$?
    while read -r verdict rest; do
        [ "$verdict" = ok ] && ok 0 "ExUnit $rest" || ok 1 "ExUnit ${rest#ok }"
    done <"$tap"
    grep -E '^[0-9]+ tests?, [0-9]+ failures?' "$log" | sed "s/^/# ExUnit ($wiring): /"
    [ "$status" -eq 0 ] && [ "$(grep -c "^ok " "$tap")" -ge "$min" ]
    ok_show $? "the Elixir client's ExUnit run over $wiring passed, every test reported" "$log" 60
}
ex_unit pgsql 15 sh -c "cd clients/elixir && exec elixir -pa '$EX_EBIN' test/app_state_test.exs"

# Postgrex and Ecto, from the vendored sources when they are there.
EX_VENDOR=${PG_LEASE_ELIXIR_VENDOR:-}
if [ -z "$EX_VENDOR" ]; then
    for d in "$(git rev-parse --show-toplevel 2>/dev/null)/../shared/vendor/elixir" /work/shared/vendor/elixir; do
        [ -d "$d/postgrex" ] && [ -d "$d/ecto_sql" ] && { EX_VENDOR=$(realpath "$d"); break; }
    done
fi
if [ -n "$EX_VENDOR" ] && [ -d "$EX_VENDOR/postgrex" ]; then
    echo "# the Postgrex and Ecto wirings, from $EX_VENDOR"
    # its build and MIX_HOME in the run's directory: nothing is written to the checkout
    ex_mix() { (cd clients/elixir/test/ecto && PG_LEASE_ELIXIR_VENDOR=$EX_VENDOR MIX_HOME="$OUT/mix/home" \
                    HEX_HOME="$OUT/mix/hex" HEX_OFFLINE=1 MIX_BUILD_PATH="$OUT/mix/ecto" "$@"); }
    t_ex=$SECONDS
    ex_mix mix compile >"$OUT/mix-ecto.log" 2>&1
    ok_show $? "Postgrex, db_connection, decimal, telemetry, ecto and ecto_sql compile offline from $EX_VENDOR, with the client ($((SECONDS - t_ex)) s)" \
        "$OUT/mix-ecto.log"
    for wiring in postgrex ecto; do
        ex_unit "$wiring" 14 ex_mix mix run --no-compile ../app_state_test.exs    # the loud stop is p1_pgsql's
    done
else
    echo "# SKIP the Postgrex and Ecto wirings: no vendored sources (PG_LEASE_ELIXIR_VENDOR, ../shared/vendor/elixir, /work/shared/vendor/elixir)"
fi
