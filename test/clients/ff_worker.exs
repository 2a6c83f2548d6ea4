# A fast-failover Elixir worker for the clients suite (docs/client-rules.md, rule 6).
#
#     PG_LEASE_JOURNAL_DIR=DIR elixir -pa EBIN -r test/clients/journaled.exs \
#         test/clients/ff_worker.exs URL APP STREAM OWNER DIR LEASE_SECONDS RENEW_EVERY
#
# Appends each record to DIR/OWNER.records as the example worker does, under
# PgLease.Worker's renew_every (PG_LEASE_IGNORE_RULE_6=1: the negative
# control).  SIGTERM stops it gracefully.
defmodule FfAppend do
  @behaviour PgLease.RecordProcessor

  def initialize(shard, %{sequence: cp}, state),
    do: put_in(state.position[shard], if(cp == "TRIM_HORIZON", do: 0, else: String.to_integer(cp)))

  def process_records(shard, state) do
    first = state.position[shard] + 1
    for seq <- first..(first + 4) do
      IO.binwrite(state.log, ~s({"w":"#{state.owner}","shard":"#{shard}","seq":"#{seq}","sub":0,"t":#{System.os_time(:microsecond) / 1_000_000}}\n))
    end
    Process.sleep(10)
    {Integer.to_string(first + 4), put_in(state.position[shard], first + 4)}
  end

  def shutdown(shard, _reason, state), do: update_in(state.position, &Map.delete(&1, shard))
end

[url, app, stream, owner, out, lease, renew] = System.argv()
Process.flag(:trap_exit, true)
ms = fn text -> round(elem(Float.parse(text), 0) * 1000) end
{:ok, worker} = PgLease.Worker.start_link(session: PgLease.Pgsql.connector(url), app: app, stream: stream, owner: owner,
  processor: {FfAppend, %{log: File.open!(Path.join(out, owner <> ".records"), [:append, :binary]), owner: owner, position: %{}}},
  lease_duration: ms.(lease), renew_every: ms.(renew), max_steal: 2)
System.trap_signal(:sigterm, fn -> PgLease.Worker.stop(worker) end)
receive do
  {:EXIT, ^worker, :normal} -> System.stop(0)
  {:EXIT, ^worker, _} -> System.stop(1)
end
