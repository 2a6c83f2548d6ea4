# A transactional-mode Elixir worker for the clients suite (docs/exactly-once.md):
# the twin of tx_worker.py.
#
#     PG_LEASE_JOURNAL_DIR=DIR elixir -pa EBIN -r test/clients/journaled.exs \
#         test/clients/tx_worker.exs URL APP STREAM OWNER [LEASE_SECONDS]
#
# Every record of a shard becomes one row (shard, seq, worker) of table
# public.tx_out, written in the batch's transaction with its checkpoint.
defmodule WriteRows do
  @behaviour PgLease.RecordProcessor
  @batch 5

  def initialize(shard, %{sequence: cp}, state),
    do: put_in(state.position[shard], if(cp == "TRIM_HORIZON", do: 0, else: String.to_integer(cp)))

  def process_records(shard, tx, state) do
    # TX_WORKER_SYNCHRONOUS=1: this batch's COMMIT waits for a standby (test/clients/syncrep.sh)
    if System.get_env("TX_WORKER_SYNCHRONOUS") == "1", do: tx.("SELECT set_config('synchronous_commit', 'on', true)", [])
    first = state.position[shard] + 1
    last = first + @batch - 1
    tx.("INSERT INTO public.tx_out SELECT $1, s, $2 FROM generate_series($3::int, $4::int) AS s",
        [shard, state.owner, first, last])
    {Integer.to_string(last), put_in(state.position[shard], last)}
  end

  def shutdown(shard, _reason, state), do: update_in(state.position, &Map.delete(&1, shard))
end

[url, app, stream, owner | lease] = System.argv()
Process.flag(:trap_exit, true)
{:ok, worker} = PgLease.Worker.start_link(session: PgLease.Pgsql.connector(url), app: app, stream: stream, owner: owner,
  processor: {WriteRows, %{owner: owner, position: %{}}}, transactional: true, max_steal: 2,
  lease_duration: round(elem(Float.parse(Enum.at(lease, 0, "10")), 0) * 1000))
System.trap_signal(:sigterm, fn -> PgLease.Worker.stop(worker) end)
receive do
  {:EXIT, ^worker, :normal} -> System.stop(0)
  {:EXIT, ^worker, _} -> System.stop(1)
end
