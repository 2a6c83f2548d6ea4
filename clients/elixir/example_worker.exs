# A complete pg_lease worker: it processes a synthetic stream by appending each record to a log.
#
#     elixir -pa EBIN example_worker.exs URL APP STREAM OWNER DIR [LEASE_SECONDS]
#
# URL is postgresql://user[:password]@host:port/database (TCP: erlang-p1-pgsql).
# Record n of a shard (sequence number n = 1, 2, ...) is "processed" by appending
# {"shard", "seq": "n", "sub": k} to DIR/OWNER.records.  Shard "<name>-end<N>" holds
# records 1..N and then ends; every other shard never ends.  On a stream named
# "kpl-...", every even record is a KPL aggregate of 5 user records (sub-sequences
# 0..4), and each batch is checkpointed in two phases.  Checkpoints are text
# (Elixir integers have no limit, as Kinesis' 128-bit sequence numbers need).
# SIGTERM stops the worker gracefully: it finishes its batch and releases its leases.
# Bad credentials (or no such database): the cause is logged, the exit status is 1.
defmodule AppendToLog do
  @behaviour PgLease.RecordProcessor
  @batch 5          # user records per batch; each batch is checkpointed
  @aggregate 5      # user records in an aggregated record

  def new(path, owner, kpl), do: %{log: File.open!(path, [:append, :binary]), owner: owner, kpl: kpl, position: %{}}

  @impl true
  def initialize(shard_id, checkpoint, state) do
    # the last record acknowledged (its sub-sequence too), or TRIM_HORIZON at the start
    sequence = if checkpoint.sequence == "TRIM_HORIZON", do: 0, else: String.to_integer(checkpoint.sequence)
    put_in(state.position[shard_id], {sequence, checkpoint.sub_sequence})
  end

  @impl true
  def process_records(shard_id, state) do
    finish = case String.split(shard_id, "-end") do
      [_, n] -> String.to_integer(n)
      _ -> nil
    end
    batch =
      Stream.iterate(state.position[shard_id], fn {sequence, sub} ->
        aggregated = state.kpl and sequence > 0 and rem(sequence, 2) == 0
        if aggregated and sub + 1 < @aggregate, do: {sequence, sub + 1}, else: {sequence + 1, 0}
      end)
      |> Stream.drop(1) |> Stream.take_while(fn {sequence, _} -> finish == nil or sequence <= finish end)
      |> Enum.take(@batch)

    if batch == [] do
      {:shard_end, state}               # the worker closes the shard
    else
      {sequence, sub} = List.last(batch)
      last = {Integer.to_string(sequence), sub}
      if state.kpl, do: PgLease.Worker.prepare_checkpoint(shard_id, last)   # phase one: the intent
      for {sequence, sub} <- batch do
        IO.binwrite(state.log, ~s({"w":"#{state.owner}","shard":"#{shard_id}","seq":"#{sequence}",) <>
                               ~s("sub":#{sub},"t":#{System.os_time(:microsecond) / 1_000_000}}\n))
      end
      Process.sleep(10)                 # the work a real processor would do
      {last, put_in(state.position[shard_id], List.last(batch))}   # phase two: checkpointed, fenced
    end
  end

  @impl true
  def shutdown(shard_id, _reason, state) do
    # lease lost, handed off, shard ended or worker stopped: forget the shard
    update_in(state.position, &Map.delete(&1, shard_id))
  end
end

[url, app, stream, owner, out | lease] = System.argv()
Process.flag(:trap_exit, true)
{:ok, worker} = PgLease.Worker.start_link(session: PgLease.Pgsql.connector(url), app: app, stream: stream,
  owner: owner, processor: {AppendToLog, AppendToLog.new(Path.join(out, owner <> ".records"), owner,
  String.starts_with?(stream, "kpl-"))}, max_steal: 2,
  lease_duration: round(elem(Float.parse(Enum.at(lease, 0, "10")), 0) * 1000))
System.trap_signal(:sigterm, fn -> PgLease.Worker.stop(worker) end)
receive do
  {:EXIT, ^worker, :normal} -> System.stop(0)
  {:EXIT, ^worker, _reason} -> System.stop(1)   # the worker logged why
end
