# A complete pg_lease worker: it processes a synthetic stream by appending each record to a log.
#
#     elixir -pa EBIN example_worker.exs URL APP STREAM OWNER DIR [LEASE_SECONDS]
#
# URL is postgresql://user[:password]@host:port/database (TCP: erlang-p1-pgsql).
# Shard "<name>-end<N>" holds records 1..N and then ends; every other shard never
# ends.  Record i of a shard is "processed" by appending {"shard", "seq": i} to
# DIR/OWNER.records; the worker's journal (what the server acknowledged to it:
# takes, renewals with their epochs, checkpoints) goes to DIR/OWNER.journal.
# SIGTERM stops the worker gracefully: it finishes its batch and releases its leases.
defmodule AppendToLog do
  @behaviour PgLease.RecordProcessor
  @batch 5          # records per batch; each batch is checkpointed

  def new(path, owner), do: %{log: File.open!(path, [:append, :binary]), owner: owner, position: %{}}

  @impl true
  def initialize(shard_id, checkpoint, state) do
    # the checkpoint is the last record acknowledged, or TRIM_HORIZON at the start
    at = if checkpoint == "TRIM_HORIZON", do: 0, else: String.to_integer(checkpoint)
    put_in(state.position[shard_id], at)
  end

  @impl true
  def process_records(shard_id, state) do
    first = state.position[shard_id] + 1
    last = first + @batch - 1
    finish = case String.split(shard_id, "-end") do
      [_, n] -> String.to_integer(n)
      _ -> nil
    end

    if finish != nil and first > finish do
      {:shard_end, state}               # the worker closes the shard
    else
      last = if finish, do: min(last, finish), else: last
      for seq <- first..last do
        record = %{w: state.owner, shard: shard_id, seq: seq, t: PgLease.Journal.now()}
        IO.binwrite(state.log, [PgLease.Journal.json(record), ?\n])
      end
      Process.sleep(10)                 # the work a real processor would do
      {Integer.to_string(last), put_in(state.position[shard_id], last)}   # checkpointed, fenced
    end
  end

  @impl true
  def shutdown(shard_id, _reason, state) do
    # lease lost, handed off, shard ended or worker stopped: forget the shard
    update_in(state.position, &Map.delete(&1, shard_id))
  end
end

[url, app, stream, owner, out | lease] = System.argv()
uri = URI.parse(url)
[user | password] = String.split(uri.userinfo, ":", parts: 2)
connect = fn _name ->
  {:ok, conn} = PgLease.Pgsql.start_link(host: uri.host, port: uri.port, user: user,
    password: Enum.join(password), database: String.trim_leading(uri.path, "/"))
  PgLease.Pgsql.session(conn)
end
{:ok, worker} = PgLease.Worker.start_link(session: connect, app: app, stream: stream, owner: owner,
  processor: {AppendToLog, AppendToLog.new(Path.join(out, owner <> ".records"), owner)},
  lease_duration: round(elem(Float.parse(Enum.at(lease, 0, "10")), 0) * 1000), max_steal: 2,
  journal: Path.join(out, owner <> ".journal"))
System.trap_signal(:sigterm, fn -> PgLease.Worker.stop(worker); System.halt(0) end)
Process.sleep(:infinity)
