defmodule PgLease.RecordProcessor do
  @moduledoc """
  What the application supplies, in kcl_ex's style: one module (with its own
  state) serves every shard the worker holds.
  """

  @doc "The worker now processes `shard_id` from `checkpoint` (the last acknowledged one)."
  @callback initialize(shard_id :: String.t(), checkpoint :: String.t(), state :: term) :: term

  @doc """
  Process the next batch of `shard_id`; return its checkpoint (the worker
  writes it, fenced), nil (nothing to do now), or `:shard_end` (the shard has
  no more records: the worker closes it).
  """
  @callback process_records(shard_id :: String.t(), state :: term) ::
              {String.t() | nil | :shard_end, term}

  @doc "The worker stopped processing `shard_id`: `reason` is \"lease lost\", \"handed off\", \"shard ended\" or \"worker stopped\"."
  @callback shutdown(shard_id :: String.t(), reason :: String.t(), state :: term) :: term
end

defmodule PgLease.Worker do
  @moduledoc """
  The worker loop, a GenServer: take, renew, process, fenced checkpoints,
  graceful handoff; the same semantics as the Python and Node workers
  (docs/client-rules.md).  A renewer process with its own connection renews
  every `lease_duration / 3` and tells the worker what the server
  acknowledged; the worker stops processing a shard at its local deadline
  (the send time of the last acknowledged take or renewal + lease duration −
  margin), writes every checkpoint fenced with the shard's `lease_epoch`, and
  hands a shard over (checkpoint, release) when a renewal says `handoff_to`.

      children = [
        {PgLease.Worker,
         session: fn name -> PgLease.Pgsql.session(...) end, app: "billing", stream: "orders",
         owner: "worker-1", processor: {MyProcessor, init_arg}, lease_duration: 10_000}
      ]

  Options: `:session` (a function of a connection name returning a
  `PgLease.Session`; called twice, for the processing and the renewing
  connection), `:app`, `:stream`, `:owner`, `:processor` (`{module, state}`),
  `:lease_duration` (ms, default 10 000), `:margin` (ms, default a fifth of
  it), `:balance_every` (ms, default a third of it), `:max_steal` (default
  1), `:journal` (a path), `:shard_list` (a function returning `{shard_ids,
  parent_ids}` for `lease.sync_shards`, called every `:sync_every` ms,
  default 60 000), `:name`.

  `stop/1` stops it gracefully: the current batch finishes, every processed
  batch is checkpointed, every lease released.  An error the rules say to
  raise (a missing privilege, bad credentials after the retries) stops the
  worker with that error, logged: a supervisor sees it crash.
  """
  use GenServer
  require Logger
  alias PgLease.{Journal, Session}
  alias PgLease.Session.{Ambiguous, Unavailable}

  @lease_lost "lease lost"
  @handed_off "handed off"
  @shard_ended "shard ended"
  @worker_stopped "worker stopped"

  @take "SELECT shard_id, action, lease_epoch::text FROM lease.take_leases($1, $2, $3, $4::text::interval, NULL, $5::integer)"
  @mine "SELECT shard_id, lease_epoch::text, checkpoint, handoff_from FROM lease.my_leases($1, $2, $3)"
  @checkpoint "SELECT lease.update_checkpoint($1, $2, $3, $4, $5, 0, $6::bigint)::text"
  @release "SELECT lease.release_lease($1, $2, $3, $4)::text"
  @close "SELECT lease.close_shard($1, $2, $3, $4)::text"
  @sync "SELECT shard_id, action FROM lease.sync_shards($1, $2, $3::text[], $4::text[])"

  def child_spec(opts) do
    %{id: {__MODULE__, Keyword.fetch!(opts, :owner)}, start: {__MODULE__, :start_link, [opts]},
      shutdown: :infinity}
  end

  def start_link(opts), do: GenServer.start_link(__MODULE__, opts, Keyword.take(opts, [:name]))

  @doc "Stops the worker gracefully (finish the batch, checkpoint, release every lease)."
  def stop(worker), do: GenServer.call(worker, :stop, :infinity)

  # -- state ----------------------------------------------------------------

  @impl true
  def init(opts) do
    Process.flag(:trap_exit, true)
    duration = Keyword.get(opts, :lease_duration, 10_000)
    {module, pstate} = Keyword.fetch!(opts, :processor)
    owner = Keyword.fetch!(opts, :owner)
    key = [Keyword.fetch!(opts, :app), Keyword.fetch!(opts, :stream)]

    state = %{
      key: key, owner: owner, module: module, pstate: pstate,
      duration: duration * 1000, margin: Keyword.get(opts, :margin, div(duration, 5)) * 1000,
      balance_every: Keyword.get(opts, :balance_every, div(duration, 3)) * 1000,
      max_steal: Keyword.get(opts, :max_steal, 1), interval: "#{duration} milliseconds",
      journal: Journal.open(Keyword.get(opts, :journal), owner),
      db: Keyword.fetch!(opts, :session).(owner),
      shard_list: Keyword.get(opts, :shard_list), sync_every: Keyword.get(opts, :sync_every, 60_000) * 1000,
      held: %{}, forgotten: %{}, running: %{}, unacked: %{},
      queue: [], busy: false, next_balance: now(), next_sync: now()
    }

    renewer = PgLease.Worker.Renewer.start_link(self(), Keyword.fetch!(opts, :session).(owner <> " renewer"),
                                                key ++ [owner, state.interval], div(duration, 3))
    journal(state, "started", lease_duration: duration / 1000, margin: state.margin / 1_000_000)
    Logger.info("pg_lease: worker #{owner} started on #{Enum.join(key, "/")}")
    send(self(), :work)
    {:ok, Map.put(state, :renewer, renewer)}
  end

  defp now, do: System.monotonic_time(:microsecond)
  defp journal(state, event, fields), do: Journal.write(state.journal, event, fields)

  # -- the renewer's reports ------------------------------------------------

  @impl true
  def handle_info({:renewed, sent, rows}, state) do
    {held, acked, seen} =
      Enum.reduce(rows, {state.held, %{}, MapSet.new()}, fn [shard, handoff_to, epoch], {held, acked, seen} ->
        epoch = String.to_integer(epoch)
        lease = held[shard]
        seen = MapSet.put(seen, shard)

        if (state.forgotten[shard] != nil and state.forgotten[shard] > sent) or (lease != nil and lease.learned > sent) do
          {held, acked, seen}     # this answer predates what we know now
        else
          lease =
            if lease == nil or lease.epoch != epoch,
              do: %{epoch: epoch, sent: sent, learned: now(), handoff_to: nil, lost: false},
              else: lease

          {Map.put(held, shard, %{lease | sent: sent, handoff_to: handoff_to}), Map.put(acked, shard, epoch), seen}
        end
      end)

    held =
      Map.new(held, fn {shard, lease} ->
        if MapSet.member?(seen, shard) or lease.learned >= sent, do: {shard, lease}, else: {shard, %{lease | lost: true}}
      end)

    journal(state, "renewed", sent: Journal.wall(sent), leases: acked)
    {:noreply, %{state | held: held}}
  end

  def handle_info({:renew_failed, message}, state) do
    journal(state, "renew_failed", error: message)
    Logger.warning("pg_lease: worker #{state.owner}: renewal failed: #{message}")
    {:noreply, state}
  end

  def handle_info({:EXIT, pid, reason}, %{renewer: pid} = state) do
    # an error the rules say to raise stopped the renewer: stop the worker with it, loudly
    journal(state, "renewer_failed", error: inspect(reason))
    Logger.error("pg_lease: worker #{state.owner}: the renewer failed: #{inspect(reason)}")
    {:stop, reason, shutdown(%{state | renewer: nil})}
  end

  def handle_info({:EXIT, _pid, _reason}, state), do: {:noreply, state}

  # -- the processing loop: one shard per message, so renewals interleave --

  def handle_info(:work, %{queue: []} = state) do
    state = state |> maybe_sync() |> maybe_balance()
    continue_work(state)
  rescue
    e in Session.Error -> fail(state, e, __STACKTRACE__)
  end

  def handle_info(:work, %{queue: [shard | rest]} = state) do
    state = %{state | queue: rest}

    state =
      case state.held[shard] do
        nil -> state
        lease ->
          try do
            work(state, shard, lease)
          rescue
            e in [Unavailable, Ambiguous] ->
              journal(state, "call_failed", shard: shard, error: Exception.message(e))
              Logger.warning("pg_lease: worker #{state.owner}: shard #{shard}: #{Exception.message(e)}")
              state
          end
      end

    send(self(), :work)
    {:noreply, state}
  rescue
    e in Session.Error -> fail(state, e, __STACKTRACE__)
  end

  defp continue_work(state) do
    delay = if state.busy, do: 0, else: 20
    Process.send_after(self(), :work, delay)
    {:noreply, %{state | queue: state.held |> Map.keys() |> Enum.sort(), busy: false}}
  end

  # an error the rules say to raise (a privilege, bad credentials after the
  # retries, a bug): said once, loudly, and the worker stops with it
  defp fail(state, error, stacktrace) do
    Logger.error("pg_lease: worker #{state.owner} stops: #{Exception.message(error)} (SQLSTATE #{error.code})")
    journal(state, "failed", error: Exception.message(error), code: error.code)
    {:stop, {error, stacktrace}, state}
  end

  @impl true
  def handle_call(:stop, _from, state), do: {:stop, :normal, :ok, shutdown(state)}

  @impl true
  def terminate(_reason, _state), do: :ok

  # -- taking and syncing -----------------------------------------------------

  defp maybe_balance(state) do
    if now() < state.next_balance do
      state
    else
      sent = now()
      state = %{state | next_balance: sent + state.balance_every}

      try do
        rows = Session.call(state.db, @take, state.key ++ [state.owner, state.interval, state.max_steal])
        learned = now()

        Enum.reduce(rows, state, fn
          [shard, "taken", epoch], state ->
            epoch = String.to_integer(epoch)
            journal(state, "taken", shard: shard, epoch: epoch, sent: Journal.wall(sent))
            lease = %{epoch: epoch, sent: sent, learned: learned, handoff_to: nil, lost: false}
            %{state | held: Map.put(state.held, shard, lease)}

          _row, state ->
            state
        end)
      rescue
        e in [Unavailable, Ambiguous] ->
          journal(state, "take_failed", error: Exception.message(e))
          Logger.warning("pg_lease: worker #{state.owner}: take_leases failed: #{Exception.message(e)}")
          state
      end
    end
  end

  defp maybe_sync(%{shard_list: nil} = state), do: state

  defp maybe_sync(state) do
    if now() < state.next_sync do
      state
    else
      state = %{state | next_sync: now() + state.sync_every}
      {shards, parents} = state.shard_list.()

      try do
        rows = Session.call(state.db, @sync, state.key ++ [shards, parents])
        for [shard, action] <- rows, do: Logger.info("pg_lease: sync_shards: #{shard} #{action}")
        journal(state, "synced", shards: length(shards), changes: Enum.map(rows, &Enum.join(&1, " ")))
      rescue
        e in [Unavailable, Ambiguous] -> journal(state, "sync_failed", error: Exception.message(e))
      end

      state
    end
  end

  # -- one step for one shard -------------------------------------------------

  defp drop(state, shard, reason, why, keep_lease \\ false) do
    state =
      if Map.has_key?(state.running, shard) do
        %{state | running: Map.delete(state.running, shard),
                  pstate: state.module.shutdown(shard, reason, state.pstate)}
      else
        state
      end

    state = %{state | unacked: Map.delete(state.unacked, shard)}

    state =
      if keep_lease,
        do: state,
        else: %{state | held: Map.delete(state.held, shard), forgotten: Map.put(state.forgotten, shard, now())}

    journal(state, "shutdown", shard: shard, reason: reason, why: why)
    Logger.info("pg_lease: worker #{state.owner}: shard #{shard}: #{reason} (#{why})")
    state
  end

  # starts the processor from the checkpoint; nil when my_leases disagrees
  defp start(state, shard, epoch) do
    row =
      Enum.find(Session.call(state.db, @mine, state.key ++ [state.owner]), fn [s, e, _c, from] ->
        s == shard and from == nil and String.to_integer(e) == epoch
      end)

    case row do
      [_, _, checkpoint, _] when checkpoint != "SHARD_END" ->
        journal(state, "initialized", shard: shard, epoch: epoch, checkpoint: checkpoint)
        %{state | pstate: state.module.initialize(shard, checkpoint, state.pstate),
                  running: Map.put(state.running, shard, epoch)}

      _ ->
        nil
    end
  end

  defp work(state, shard, lease) do
    deadline = lease.sent + state.duration - state.margin

    cond do
      Map.has_key?(state.running, shard) and state.running[shard] != lease.epoch ->
        # it changed hands meanwhile (e.g. expired and taken again): restart from the checkpoint
        drop(state, shard, @lease_lost, "epoch changed", true)

      lease.lost ->
        drop(state, shard, @lease_lost, "not renewed")

      now() >= deadline ->
        drop(state, shard, @lease_lost, "local deadline")

      not Map.has_key?(state.running, shard) ->
        case start(state, shard, lease.epoch) do
          nil -> drop(state, shard, @lease_lost, "not in my_leases")
          state -> state
        end

      lease.handoff_to != nil ->
        # hand it over once every processed batch is checkpointed
        case checkpoint_unacked(state, shard, lease, deadline) do
          {false, state} ->
            state

          {true, state} ->
            ok = Session.one(state.db, @release, state.key ++ [shard, state.owner]) == "true"
            journal(state, "released", shard: shard, ok: ok, to: lease.handoff_to)
            drop(state, shard, @handed_off, "handoff to " <> lease.handoff_to)
        end

      true ->
        process(state, shard, lease, deadline)
    end
  end

  defp process(state, shard, lease, deadline) do
    {checkpoint, pstate} = state.module.process_records(shard, state.pstate)
    state = %{state | pstate: pstate}

    case checkpoint do
      nil ->
        state

      :shard_end ->
        closed = Session.one(state.db, @close, state.key ++ [shard, state.owner]) == "true"
        journal(state, "closed", shard: shard, ok: closed)
        drop(%{state | busy: true}, shard, if(closed, do: @shard_ended, else: @lease_lost), "closed")

      checkpoint ->
        {_, state} = checkpoint(%{state | busy: true}, shard, lease, checkpoint, deadline)
        state
    end
  end

  defp checkpoint_unacked(state, shard, lease, deadline) do
    case state.unacked[shard] do
      nil -> {true, state}
      checkpoint -> checkpoint(state, shard, lease, checkpoint, deadline)
    end
  end

  # writes a fenced checkpoint, repeating no later than the local deadline; {acknowledged?, state}
  defp checkpoint(state, shard, lease, checkpoint, deadline) do
    params = state.key ++ [shard, state.owner, checkpoint, lease.epoch]
    until = System.convert_time_unit(deadline, :microsecond, :millisecond)

    try do
      Session.one(state.db, @checkpoint, params, until: until) == "true"
    rescue
      e in [Unavailable, Ambiguous] ->
        # it may have committed, but it is not acknowledged: the next one covers it
        journal(state, "checkpoint_failed", shard: shard, epoch: lease.epoch, checkpoint: checkpoint,
                error: Exception.message(e))
        {false, %{state | unacked: Map.put(state.unacked, shard, checkpoint)}}
    else
      ok ->
        state = %{state | unacked: Map.delete(state.unacked, shard)}
        journal(state, "checkpoint", shard: shard, epoch: lease.epoch, checkpoint: checkpoint, ok: ok)
        {ok, if(ok, do: state, else: drop(state, shard, @lease_lost, "checkpoint refused"))}
    end
  end

  # -- the graceful stop --------------------------------------------------------

  defp shutdown(state) do
    if state.renewer, do: PgLease.Worker.Renewer.stop(state.renewer)
    held = state.held |> Map.keys() |> Enum.sort()
    journal(state, "stopping", held: held)

    Enum.reduce(held, state, fn shard, state ->
      lease = state.held[shard]
      deadline = lease.sent + state.duration - state.margin

      state =
        if Map.has_key?(state.unacked, shard) and Map.has_key?(state.running, shard) and now() < deadline do
          elem(checkpoint(state, shard, lease, state.unacked[shard], deadline), 1)   # before the release
        else
          state
        end

      state =
        if Map.has_key?(state.running, shard) do
          %{state | running: Map.delete(state.running, shard),
                    pstate: state.module.shutdown(shard, @worker_stopped, state.pstate)}
        else
          state
        end

      try do
        ok = Session.one(state.db, @release, state.key ++ [shard, state.owner]) == "true"
        journal(state, "released", shard: shard, ok: ok)
      rescue
        # stopping anyway (perhaps because of this error): the lease expires by itself
        e in [Unavailable, Ambiguous, Session.Error] ->
          journal(state, "call_failed", shard: shard, error: Exception.message(e))
      end

      state
    end)
    |> Map.put(:renewer, nil)
  end
end

defmodule PgLease.Worker.Renewer do
  @moduledoc """
  The renewal timer: `renew_leases` every third of the lease duration on its
  own connection (never blocked by processing), each answer sent to the
  worker with the time the call was sent.  An error the rules say to raise
  stops it (and, linked, the worker).
  """
  use GenServer
  alias PgLease.Session

  @renew "SELECT shard_id, handoff_to, lease_epoch::text FROM lease.renew_leases($1, $2, $3, $4::text::interval)"

  def start_link(worker, session, params, every) do
    {:ok, pid} = GenServer.start_link(__MODULE__, {worker, session, params, every})
    pid
  end

  def stop(pid), do: GenServer.stop(pid, :normal, :infinity)

  @impl true
  def init({worker, session, params, every}) do
    Process.send_after(self(), :renew, every)
    {:ok, %{worker: worker, session: session, params: params, every: every}}
  end

  @impl true
  def handle_info(:renew, state) do
    Process.send_after(self(), :renew, state.every)
    sent = System.monotonic_time(:microsecond)

    try do
      send(state.worker, {:renewed, sent, Session.call(state.session, @renew, state.params)})
    rescue
      e in [Session.Unavailable, Session.Ambiguous] -> send(state.worker, {:renew_failed, Exception.message(e)})
    end

    {:noreply, state}
  end
end
