defmodule PgLease.RecordProcessor do
  @moduledoc """
  What the application supplies, in kcl_ex's style: one module (with its own
  state) serves every shard the worker holds.
  """

  @doc """
  The worker now processes `shard_id` from `checkpoint`, the last
  acknowledged one: a `PgLease.Checkpoint` (its `sequence`, its
  `sub_sequence`, and the `pending` checkpoint a previous owner prepared).
  """
  @callback initialize(shard_id :: String.t(), checkpoint :: PgLease.Checkpoint.t(), state :: term) :: term

  @doc """
  Process the next batch of `shard_id`; return its checkpoint (the worker
  writes it, fenced): a sequence number as text, `{sequence, sub_sequence}`
  for a KPL-aggregated record, or a `PgLease.Checkpoint`; nil (nothing to do
  now), or `:shard_end` (the shard has no more records: the worker closes it).
  """
  @callback process_records(shard_id :: String.t(), state :: term) ::
              {String.t() | {String.t(), non_neg_integer} | PgLease.Checkpoint.t() | nil | :shard_end, term}

  @doc """
  Transactional mode (`transactional: true`): the same, inside the batch's
  transaction; `tx.(sql, params)` runs a statement in it and returns its rows
  (it raises `PgLease.Session.Error` on an error, which rolls the batch back).
  """
  @callback process_records(shard_id :: String.t(), tx :: (String.t(), list -> list), state :: term) ::
              {String.t() | {String.t(), non_neg_integer} | PgLease.Checkpoint.t() | nil | :shard_end, term}

  @doc "The worker stopped processing `shard_id`: `reason` is \"lease lost\", \"handed off\", \"shard ended\" or \"worker stopped\"."
  @callback shutdown(shard_id :: String.t(), reason :: String.t(), state :: term) :: term

  @optional_callbacks process_records: 2, process_records: 3
end

defmodule PgLease.Worker do
  @moduledoc """
  The worker loop, a GenServer: take, renew, process, fenced checkpoints,
  graceful handoff; the same semantics as the Python and Node workers
  (docs/client-rules.md).  A renewer process with its own connection renews
  every `lease_duration / 3` and tells the worker what the server
  acknowledged: a `lease.heartbeat` (one row written, whatever the worker
  holds), and `lease.renew_leases` for the list of its leases only when the
  heartbeat says the list moved (rule 5).  The worker stops processing a
  shard at its local deadline (the send time of the last acknowledged take
  or renewal + lease duration − margin), writes every checkpoint fenced with
  the shard's `lease_epoch`, and hands a shard over (checkpoint, release)
  when a renewal says `handoff_to`.

      children = [
        {PgLease.Worker,
         session: PgLease.Pgsql.connector("postgresql://worker:secret@db:5432/app"),
         app: "billing", stream: "orders", owner: "worker-1",
         processor: {MyProcessor, init_arg}, lease_duration: 10_000}
      ]

  Options: `:session` (a function returning a `PgLease.Session`, of a
  connection name, or of a name and the settings the worker wants on that
  connection: `statement_timeout`, `lock_timeout`, `call_timeout`,
  `connect_timeout`, in ms; called twice, for the processing and the
  renewing connection), `:app`, `:stream`, `:owner`, `:processor`
  (`{module, state}`), `:lease_duration` (ms, default 10 000), `:margin`
  (ms, default a fifth of it), `:balance_every` (ms, default a third of
  it), `:max_steal` (default 1), `:renew_every` (ms: the fast-failover mode
  of rule 6), `:transactional` (exactly-once: each batch one transaction
  with `hold_lease` and its checkpoint), `:shard_list` (a function returning
  `{shard_ids, parent_ids}` for `lease.sync_shards`, called every
  `:sync_every` ms, default 60 000), `:name`.

  `stop/1` stops it gracefully: the current batch finishes, every processed
  batch is checkpointed, every lease released.  An unexpected exception (the
  processor's, or an error the rules say to raise: a missing privilege)
  stops it the same way at once (the processors shut down with "worker
  stopped", what was processed checkpointed while its deadline allows, every
  lease released; one whose release fails goes by its local deadline and
  expiry), logged, and the worker exits with that error: a supervisor sees
  it crash.  Refused credentials (after the rules' retries) stop it with
  nothing released: it cannot reach the database.
  """
  use GenServer
  require Logger
  alias PgLease.{Checkpoint, Journal, Session}
  alias PgLease.Session.{Ambiguous, Unavailable}

  @lease_lost "lease lost"
  @handed_off "handed off"
  @shard_ended "shard ended"
  @worker_stopped "worker stopped"
  @batch {__MODULE__, :batch}

  @take "SELECT shard_id, action, lease_epoch::text FROM lease.take_leases($1, $2, $3, $4::text::interval, NULL, " <>
          "$5::integer, renew_every => $6::text::interval)"
  @mine "SELECT shard_id, lease_epoch::text, checkpoint, handoff_from, checkpoint_sub_sequence::text, " <>
          "pending_checkpoint FROM lease.my_leases($1, $2, $3)"
  @checkpoint "SELECT lease.update_checkpoint($1, $2, $3, $4, $5, $6::bigint, $7::bigint)::text"
  @prepare "SELECT lease.prepare_checkpoint($1, $2, $3, $4, $5)::text"
  @release "SELECT lease.release_lease($1, $2, $3, $4)::text"
  @close "SELECT lease.close_shard($1, $2, $3, $4)::text"
  @hold "SELECT lease.hold_lease($1, $2, $3, $4, $5::bigint)"
  @sync "SELECT shard_id, action FROM lease.sync_shards($1, $2, $3::text[], $4::text[])"

  def child_spec(opts) do
    %{id: {__MODULE__, Keyword.fetch!(opts, :owner)}, start: {__MODULE__, :start_link, [opts]},
      shutdown: :infinity}
  end

  def start_link(opts), do: GenServer.start_link(__MODULE__, opts, Keyword.take(opts, [:name]))

  @doc "Stops the worker gracefully (finish the batch, checkpoint, release every lease)."
  def stop(worker), do: GenServer.call(worker, :stop, :infinity)

  @doc """
  Records `checkpoint` (its sequence number) as the shard's pending
  checkpoint, the first phase of a two-phase checkpoint (KCL's
  prepareCheckpoint), before the batch acts on the world; the checkpoint
  the batch returns completes it.  Only inside `process_records` of that
  shard (in transactional mode, inside the batch's transaction).  True when
  recorded, false when the shard is no longer this worker's.
  """
  def prepare_checkpoint(shard_id, checkpoint) do
    case Process.get(@batch) do
      %{shard: ^shard_id} = batch ->
        {sequence, _} = Checkpoint.position(checkpoint)

        if System.monotonic_time(:microsecond) < batch.deadline do
          ok = batch.call.(@prepare, batch.key ++ [shard_id, batch.owner, sequence]) == [["true"]]
          Journal.write(batch.journal, "prepared", shard: shard_id, epoch: batch.epoch, pending: sequence, ok: ok)
          ok
        else
          Journal.write(batch.journal, "prepare_skipped", shard: shard_id, pending: sequence)
          false
        end

      _ ->
        raise ArgumentError, "prepare_checkpoint(#{inspect(shard_id)}): only inside process_records of that shard"
    end
  end

  # -- state ----------------------------------------------------------------

  @impl true
  def init(opts) do
    Process.flag(:trap_exit, true)
    duration = Keyword.get(opts, :lease_duration, 10_000)
    renew_every = Keyword.get(opts, :renew_every)
    {module, pstate} = Keyword.fetch!(opts, :processor)
    owner = Keyword.fetch!(opts, :owner)
    key = [Keyword.fetch!(opts, :app), Keyword.fetch!(opts, :stream)]
    transactional = Keyword.get(opts, :transactional, false)
    margin = Keyword.get(opts, :margin, if(renew_every, do: min(div(duration, 5), div(renew_every, 2)), else: div(duration, 5)))
    every = if renew_every, do: "#{renew_every} milliseconds"
    journal_dir = :persistent_term.get({__MODULE__, :journal_dir}, nil)
    session = Keyword.fetch!(opts, :session)

    # fast failover: a call that hangs has its connection dropped (a fifth of the lease
    # duration here, twice renew_every on the renewer, whose statements time out at
    # renew_every); transactional: a renewal waits at most a tenth of the lease duration
    # behind a batch holding one of its leases (55P03: repeated)
    db_settings = if renew_every, do: [call_timeout: div(duration, 5), connect_timeout: div(duration, 5)], else: []
    renew_settings =
      if(transactional, do: [lock_timeout: div(duration, 10)], else: []) ++
        if(renew_every, do: [statement_timeout: renew_every, call_timeout: 2 * renew_every,
                             connect_timeout: max(renew_every, 1000)], else: [])

    state = %{
      key: key, owner: owner, module: module, pstate: pstate,
      duration: duration * 1000, margin: margin * 1000,
      balance_every: Keyword.get(opts, :balance_every, renew_every || div(duration, 3)) * 1000,
      renew_every: renew_every && renew_every * 1000, every: every, contact_sent: nil,
      contract: not :persistent_term.get({__MODULE__, :ignore_rule_6}, false),
      max_steal: Keyword.get(opts, :max_steal, 1), interval: "#{duration} milliseconds",
      transactional: transactional,
      journal: Journal.open(journal_dir && Path.join(journal_dir, owner <> ".journal"), owner),
      db: open_session(session, owner, db_settings),
      shard_list: Keyword.get(opts, :shard_list), sync_every: Keyword.get(opts, :sync_every, 60_000) * 1000,
      unlisted: MapSet.new(),
      held: %{}, forgotten: %{}, running: %{}, unacked: %{}, committed: %{}, done: [],
      queue: [], busy: false, next_balance: now(), next_sync: now(), stopped: false, renewer: nil
    }

    journal(state, "started", lease_duration: duration / 1000, margin: state.margin / 1_000_000)

    renewer =
      PgLease.Worker.Renewer.start_link(self(), open_session(session, owner <> " renewer", renew_settings),
                                        key ++ [owner, state.interval, every], renew_every || div(duration, 3))

    send(self(), :work)
    {:ok, %{state | renewer: renewer}}
  end

  # a crash report shows what the worker held, not the processor's own state
  @impl true
  def format_status(_reason, [_pdict, state]) do
    [data: [{'State', Map.take(state, [:key, :owner, :held, :running, :unacked, :transactional, :renew_every])}]]
  end

  defp open_session(fun, name, settings) when is_function(fun, 2), do: fun.(name, settings)
  defp open_session(fun, name, _settings) when is_function(fun, 1), do: fun.(name)

  defp now, do: System.monotonic_time(:microsecond)
  defp journal(state, event, fields), do: Journal.write(state.journal, event, fields)

  # -- the renewer's reports ------------------------------------------------

  @impl true
  def handle_info({:contact, sent}, state), do: {:noreply, contact(state, sent)}

  def handle_info({:renewed, sent, rows, via}, state) do
    {held, acked, seen} =
      Enum.reduce(rows, {state.held, %{}, MapSet.new()}, fn [shard, handoff_to, epoch], {held, acked, seen} ->
        epoch = if is_integer(epoch), do: epoch, else: String.to_integer(epoch)
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

    journal(state, "renewed", sent: Journal.wall(sent), leases: acked, via: via)
    {:noreply, contact(%{state | held: held}, sent)}
  end

  def handle_info({:renew_failed, message}, state) do
    journal(state, "renew_failed", error: message)   # not acknowledged: no deadline moves
    Logger.warning("pg_lease: #{state.owner}: renewal failed: #{message}")
    {:noreply, state}
  end

  def handle_info({:EXIT, pid, reason}, %{renewer: pid} = state) do
    # an error the rules say to raise stopped the renewer: stop the worker with it, loudly
    journal(state, "renewer_failed", error: inspect(reason))
    Logger.error("pg_lease: #{state.owner}: renewals stopped, stopping the worker: #{inspect(reason)}")
    release = not match?({%Session.Error{kind: :fatal}, _}, reason)
    {:stop, reason, shutdown(%{state | renewer: nil}, release)}
  end

  def handle_info({:EXIT, _pid, _reason}, state), do: {:noreply, state}

  # -- the processing loop: one shard per message, so renewals interleave --

  def handle_info(:work, %{queue: []} = state) do
    state = state |> write_checkpoints() |> maybe_sync() |> maybe_balance()
    delay = if state.busy, do: 0, else: 20
    Process.send_after(self(), :work, delay)
    {:noreply, %{state | queue: state.held |> Map.keys() |> Enum.sort(), busy: false}}
  rescue
    e -> fail(state, e, __STACKTRACE__)
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
              Logger.warning("pg_lease: #{state.owner}: #{shard}: #{Exception.message(e)}")
              state
          end
      end

    send(self(), :work)
    {:noreply, state}
  rescue
    e -> fail(state, e, __STACKTRACE__)
  end

  # an unexpected exception (the processor's; an error the rules say to raise: a
  # privilege, bad credentials after the retries, a bug): said once, loudly; what is
  # held is released (but after a refused connection), and the worker stops with it
  defp fail(state, error, stacktrace) do
    code = if is_struct(error, Session.Error), do: " (SQLSTATE #{error.code})", else: ""
    Logger.error("pg_lease: #{state.owner}: stopping the worker: #{Exception.message(error)}#{code}")
    journal(state, "worker_failed", error: Exception.message(error), code: Map.get(error, :code))
    release = not match?(%Session.Error{kind: :fatal}, error)
    {:stop, {error, stacktrace}, shutdown(state, release)}
  end

  @impl true
  def handle_call(:stop, _from, state), do: {:stop, :normal, :ok, shutdown(state, true)}

  # any other way out (an exception outside the loop's own): release what is held
  @impl true
  def terminate(_reason, %{stopped: false} = state), do: shutdown(state, true) && :ok
  def terminate(_reason, _state), do: :ok

  defp contact(state, sent), do: %{state | contact_sent: max(state.contact_sent || sent, sent)}

  # -- taking and syncing -----------------------------------------------------

  defp maybe_balance(state) do
    if now() < state.next_balance do
      state
    else
      sent = now()
      state = %{state | next_balance: sent + state.balance_every}

      try do
        rows = Session.call(state.db, @take, state.key ++ [state.owner, state.interval, state.max_steal, state.every])
        learned = now()
        state = contact(state, sent)    # the round recorded the session too

        Enum.reduce(rows, state, fn
          [shard, "taken", epoch], state ->
            epoch = String.to_integer(epoch)
            # the renewer lists again before it trusts a heartbeat (rule 5)
            send(state.renewer, {:stale, learned})
            journal(state, "taken", shard: shard, epoch: epoch, sent: Journal.wall(sent))
            Logger.info("pg_lease: #{state.owner}: took #{shard} (epoch #{epoch})")
            lease = %{epoch: epoch, sent: sent, learned: learned, handoff_to: nil, lost: false}
            %{state | held: Map.put(state.held, shard, lease)}

          _row, state ->
            state
        end)
      rescue
        e in [Unavailable, Ambiguous] ->
          journal(state, "take_failed", error: Exception.message(e))
          Logger.warning("pg_lease: #{state.owner}: take_leases failed: #{Exception.message(e)}")
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

      try do
        {shards, parents} = state.shard_list.()
        rows = Session.call(state.db, @sync, state.key ++ [shards, parents])
        created = for [shard, "created"] <- rows, do: shard
        unlisted = MapSet.new(for [shard, "unlisted"] <- rows, do: shard)
        for shard <- Enum.sort(created), do: Logger.info("pg_lease: #{state.owner}: created the lease of #{shard} (shard discovery)")

        for shard <- unlisted |> MapSet.difference(state.unlisted) |> Enum.sort() do
          Logger.info("pg_lease: #{state.owner}: #{shard} is no longer listed (its lease is not ended: a worker ends it at its end)")
        end

        journal(state, "synced", created: Enum.sort(created), unlisted: Enum.sort(unlisted))
        %{state | unlisted: unlisted}
      rescue
        e in [Unavailable, Ambiguous] ->
          journal(state, "sync_failed", error: Exception.message(e))
          state

        e in Session.Error ->
          reraise e, __STACKTRACE__

        e ->
          # the user's lister: log it, try again next time
          Logger.error("pg_lease: #{state.owner}: the shard lister failed: #{Exception.message(e)}")
          state
      end
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
    Logger.info("pg_lease: #{state.owner}: stopped processing #{shard}: #{reason} (#{why})")
    state
  end

  defp checkpoint_of([_, _, checkpoint, _, sub, pending]),
    do: %Checkpoint{sequence: checkpoint, sub_sequence: String.to_integer(sub || "0"), pending: pending}

  # starts the processor from the checkpoint; nil when my_leases disagrees
  defp start(state, shard, epoch) do
    row =
      Enum.find(Session.call(state.db, @mine, state.key ++ [state.owner]), fn [s, e, _c, from | _] ->
        s == shard and from == nil and String.to_integer(e) == epoch
      end)

    case row do
      [_, _, checkpoint, _, _, _] when checkpoint != "SHARD_END" ->
        cp = checkpoint_of(row)
        journal(state, "initialized", shard: shard, epoch: epoch, checkpoint: checkpoint, sub: cp.sub_sequence,
                pending: cp.pending)
        %{state | pstate: state.module.initialize(shard, cp, state.pstate),
                  running: Map.put(state.running, shard, epoch),
                  committed: Map.put(state.committed, shard, checkpoint)}

      _ ->
        nil
    end
  end

  # the local deadline (rule 3); in fast-failover mode also rule 6's: the last
  # acknowledged renewal or round was sent less than renew_every + margin ago
  defp deadline(state, lease) do
    deadline = lease.sent + state.duration - state.margin

    if state.renew_every && state.contract,
      do: min(deadline, (state.contact_sent || lease.sent) + state.renew_every + state.margin),
      else: deadline
  end

  defp stale?(state, lease), do: lease.lost or now() >= deadline(state, lease)

  defp work(state, shard, lease) do
    cond do
      Map.has_key?(state.running, shard) and state.running[shard] != lease.epoch ->
        # it changed hands meanwhile (e.g. expired and taken again): restart from the checkpoint
        drop(state, shard, @lease_lost, "epoch changed", true)

      lease.lost ->
        drop(state, shard, @lease_lost, "not renewed")

      now() >= deadline(state, lease) ->
        drop(state, shard, @lease_lost, "local deadline")

      not Map.has_key?(state.running, shard) ->
        case start(state, shard, lease.epoch) do
          nil -> drop(state, shard, @lease_lost, "not in my_leases")
          state -> state
        end

      lease.handoff_to != nil ->
        # hand it over once every processed batch is checkpointed
        case checkpoint_unacked(state, shard, lease) do
          {false, state} ->
            state

          {true, state} ->
            ok = Session.one(state.db, @release, state.key ++ [shard, state.owner]) == "true"
            journal(state, "released", shard: shard, ok: ok, to: lease.handoff_to)
            drop(state, shard, @handed_off, "handoff to " <> lease.handoff_to)
        end

      stale?(state, lease) ->
        # the deadline passed since the check above (a pause): no batch starts
        drop(state, shard, @lease_lost, "local deadline")

      state.transactional ->
        transaction(state, shard, lease)

      true ->
        process(state, shard, lease)
    end
  end

  # the processor's batch, with the context prepare_checkpoint/2 reads
  defp batch(state, shard, lease, call, args) do
    Process.put(@batch, %{shard: shard, call: call, key: state.key, owner: state.owner, epoch: lease.epoch,
                          deadline: deadline(state, lease), journal: state.journal})

    try do
      apply(state.module, :process_records, [shard | args] ++ [state.pstate])
    after
      Process.delete(@batch)
    end
  end

  defp process(state, shard, lease) do
    call = fn sql, params -> Session.call(state.db, sql, params, until: div(deadline(state, lease), 1000)) end
    {checkpoint, pstate} = batch(state, shard, lease, call, [])
    state = %{state | pstate: pstate}

    case checkpoint do
      nil ->
        state

      :shard_end ->
        closed = Session.one(state.db, @close, state.key ++ [shard, state.owner]) == "true"
        journal(state, "closed", shard: shard, ok: closed)
        drop(%{state | busy: true}, shard, if(closed, do: @shard_ended, else: @lease_lost), "closed")

      checkpoint ->
        # written with the tick's others (write_checkpoints/1)
        %{state | busy: true, done: [{shard, lease.epoch, Checkpoint.position(checkpoint)} | state.done]}
    end
  end

  # the checkpoints of a tick's batches, each fenced: one call each for now
  # (lease.update_checkpoints will take them together)
  defp write_checkpoints(%{done: []} = state), do: state

  defp write_checkpoints(state) do
    Enum.reduce(Enum.reverse(state.done), %{state | done: []}, fn {shard, epoch, position}, state ->
      case state.held[shard] do
        %{epoch: ^epoch} = lease ->
          try do
            elem(checkpoint(state, shard, lease, position), 1)
          rescue
            e in [Unavailable, Ambiguous] ->
              journal(state, "call_failed", shard: shard, error: Exception.message(e))
              state
          end

        _ ->
          state     # dropped meanwhile: the next owner processes the batch again
      end
    end)
  end

  defp checkpoint_unacked(state, shard, lease) do
    case state.unacked[shard] do
      nil -> {true, state}
      position -> checkpoint(state, shard, lease, position)
    end
  end

  # writes a fenced checkpoint, repeating no later than the local deadline; {acknowledged?,
  # state}.  None is sent past the deadline (a pause since the batch began): the batch stays
  # unacknowledged, and the next step drops the shard unless a fresh renewal says it is held.
  defp checkpoint(state, shard, lease, {sequence, sub} = position) do
    if stale?(state, lease) do
      journal(state, "checkpoint_skipped", shard: shard, epoch: lease.epoch, checkpoint: sequence, sub: sub)
      {false, %{state | unacked: Map.put(state.unacked, shard, position)}}
    else
      params = state.key ++ [shard, state.owner, sequence, sub, lease.epoch]
      sent = now()

      try do
        Session.one(state.db, @checkpoint, params, until: div(deadline(state, lease), 1000)) == "true"
      rescue
        e in [Unavailable, Ambiguous] ->
          # it may have committed, but it is not acknowledged: the next one covers it
          journal(state, "checkpoint_failed", shard: shard, epoch: lease.epoch, checkpoint: sequence, sub: sub,
                  error: Exception.message(e), sent: Journal.wall(sent))
          {false, %{state | unacked: Map.put(state.unacked, shard, position)}}
      else
        ok ->
          state = %{state | unacked: Map.delete(state.unacked, shard)}
          journal(state, "checkpoint", shard: shard, epoch: lease.epoch, checkpoint: sequence, sub: sub, ok: ok,
                  sent: Journal.wall(sent))
          {ok, if(ok, do: state, else: drop(state, shard, @lease_lost, "checkpoint refused"))}
      end
    end
  end

  # -- transactional mode ---------------------------------------------------------

  defmodule TxError do
    @moduledoc false
    defexception [:error, :stage, :tried]
    def message(%{error: error}), do: "#{error[:code] || "no SQLSTATE"} #{error[:message]}"
  end

  # one statement of the batch's transaction: its rows, or TxError
  defp tx(query, sql, params, stage \\ :batch, tried \\ nil) do
    case query.(sql, params) do
      {:ok, rows} -> {rows, []}
      {:ok, rows, notices} -> {rows, notices}
      {:error, error} -> raise TxError, error: error, stage: stage, tried: tried
    end
  end

  # one batch as one transaction: output, hold_lease, fenced checkpoint (or close), commit
  defp transaction(state, shard, lease) do
    key = state.key ++ [shard, state.owner]
    Session.checkout(state.db, fn query -> transaction(state, shard, lease, key, query) end)
  end

  defp transaction(state, shard, lease, key, query) do
    run = fn sql, params ->
      case query.(sql, params) do
        {:ok, rows} -> rows
        {:ok, rows, _} -> rows
        {:error, e} -> raise Session.Error, code: e[:code], message: e[:message]
      end
    end

    tx(query, "BEGIN", [])
    {tried, pstate} = batch(state, shard, lease, run, [run])
    state = %{state | pstate: pstate}

    if tried == nil do
      tx(query, "ROLLBACK", [])
      state
    else
      {sequence, sub} = if tried == :shard_end, do: {"SHARD_END", 0}, else: Checkpoint.position(tried)
      {[[held_at]], _} = tx(query, @hold, key ++ [lease.epoch])

      cond do
        held_at != state.committed[shard] ->
          # a commit acknowledged to us is not there (lost in a crash with
          # synchronous_commit off, or a failover): go on from the server's
          tx(query, "ROLLBACK", [])
          journal(state, "tx_diverged", shard: shard, epoch: lease.epoch, expected: state.committed[shard],
                  checkpoint: held_at)
          %{state | pstate: state.module.initialize(shard, %Checkpoint{sequence: held_at}, state.pstate),
                    committed: Map.put(state.committed, shard, held_at)}

        elem(tx(query, if(tried == :shard_end, do: @close, else: @checkpoint),
                if(tried == :shard_end, do: key, else: key ++ [sequence, sub, lease.epoch])), 0) != [["true"]] ->
          tx(query, "ROLLBACK", [])
          journal(state, "checkpoint", shard: shard, epoch: lease.epoch, checkpoint: sequence, sub: sub, ok: false)
          drop(state, shard, @lease_lost, "checkpoint refused")

        true ->
          {_, notices} = tx(query, "COMMIT", [], :commit, sequence)

          if warning = Session.ambiguous_notice(notices) do
            # committed here, perhaps only here
            raise TxError, error: %{code: nil, message: "WARNING " <> warning, notice: true}, stage: :commit,
                           tried: sequence
          end

          state = %{state | committed: Map.put(state.committed, shard, sequence), busy: true}
          journal(state, "checkpoint", shard: shard, epoch: lease.epoch, checkpoint: sequence, sub: sub, ok: true, tx: true)
          if tried == :shard_end, do: drop(state, shard, @shard_ended, "closed"), else: state
      end
    end
  rescue
    e in [TxError, Session.Error] ->
      error = if is_struct(e, TxError), do: e.error, else: %{code: e.code, message: e.message}
      committing = is_struct(e, TxError) and e.stage == :commit
      kind = if error[:notice] == true or error[:code] == nil, do: :ambiguous, else: PgLease.Rules.classify(error[:code], error[:message])
      # roll back what the server still holds open (a lost connection rolled it back itself)
      if not committing and kind != :ambiguous, do: query.("ROLLBACK", [])

      case kind do
        :drop ->
          journal(state, "checkpoint", shard: shard, epoch: lease.epoch, ok: false, error: error[:message])
          drop(state, shard, @lease_lost, "not held")

        :raise ->
          reraise Session.Error, [code: error[:code], message: error[:message]], __STACKTRACE__

        kind ->
          Session.reset(state.db)
          journal(state, "tx_failed", shard: shard, epoch: lease.epoch, unknown: committing and kind == :ambiguous,
                  error: "#{error[:code] || "no SQLSTATE"} #{error[:message]}")
          resolve(state, shard, lease, if(committing, do: e.tried))
      end

    e ->
      # the processor's own exception (or a bug): nothing of the batch commits
      query.("ROLLBACK", [])
      reraise e, __STACKTRACE__
  end

  # after a batch transaction failed: restart the processor from the checkpoint my_leases
  # holds (tried: the checkpoint of a COMMIT whose outcome is unknown; equal means it committed)
  defp resolve(state, shard, lease, tried) do
    Session.call(state.db, @mine, state.key ++ [state.owner])
  rescue
    e in [Unavailable, Ambiguous] ->
      # the processor is shut down; start/3 reads the checkpoint again
      journal(state, "call_failed", shard: shard, error: Exception.message(e))
      drop(state, shard, @lease_lost, "unresolved", true)
  else
    rows -> resolved(state, shard, lease, tried, rows)
  end

  defp resolved(state, shard, lease, tried, rows) do
    case Enum.find(rows, fn [s, e | _] -> s == shard and String.to_integer(e) == lease.epoch end) do
      nil ->
        drop(state, shard, @lease_lost, "not in my_leases")

      [_, _, "SHARD_END" | _] ->
        journal(state, "tx_resolved", shard: shard, epoch: lease.epoch, checkpoint: "SHARD_END", committed: tried == "SHARD_END")
        drop(state, shard, @shard_ended, "closed")

      [_, _, checkpoint | _] = row ->
        journal(state, "tx_resolved", shard: shard, epoch: lease.epoch, checkpoint: checkpoint,
                committed: tried != nil and checkpoint == tried)
        %{state | pstate: state.module.initialize(shard, checkpoint_of(row), state.pstate),
                  committed: Map.put(state.committed, shard, checkpoint)}
    end
  end

  # -- the stop -------------------------------------------------------------------

  # after stop/1 (or an unexpected exception): shut every processor down and release
  # every lease (unless not release: the database refused the connection)
  defp shutdown(state, release) do
    if state.renewer, do: PgLease.Worker.Renewer.stop(state.renewer)
    state = write_checkpoints(%{state | renewer: nil})
    held = state.held |> Map.keys() |> Enum.sort()
    journal(state, "stopping", held: held)

    Enum.reduce(held, state, fn shard, state ->
      try do
        lease = state.held[shard]

        state =
          if release and Map.has_key?(state.unacked, shard) and Map.has_key?(state.running, shard) and
               not stale?(state, lease) do
            elem(checkpoint(state, shard, lease, state.unacked[shard]), 1)   # before the release
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

        if release do
          ok = Session.one(state.db, @release, state.key ++ [shard, state.owner]) == "true"
          journal(state, "released", shard: shard, ok: ok)
          Logger.info("pg_lease: #{state.owner}: released #{shard}")
        end

        state
      rescue
        # stopping anyway: this lease goes by its deadline and expiry
        e ->
          journal(state, "call_failed", shard: shard, error: Exception.message(e))
          Logger.warning("pg_lease: #{state.owner}: could not release #{shard} (it expires by itself): #{Exception.message(e)}")
          state
      end
    end)
    |> Map.put(:stopped, true)
  end
end

defmodule PgLease.Worker.Renewer do
  @moduledoc """
  The renewal timer, on its own connection (never blocked by processing):
  every tick a `lease.heartbeat`; while its `leases_version` is the one
  remembered with the last `lease.renew_leases` list, no handoff is pending
  and it counts as many leases, every lease on that list is renewed at the
  epoch listed (docs/client-rules.md rule 5); otherwise `renew_leases` lists
  them again.  Each answer goes to the worker with the time the call was
  sent.  An error the rules say to raise stops it (and, linked, the worker).
  """
  use GenServer
  alias PgLease.Session

  @heartbeat "SELECT leases::text, leases_version::text, handoffs_pending::text " <>
               "FROM lease.heartbeat($1, $2, $3, $4::text::interval, $5::text::interval)"
  @renew "SELECT shard_id, handoff_to, lease_epoch::text FROM lease.renew_leases($1, $2, $3, $4::text::interval, $5::text::interval)"

  def start_link(worker, session, params, every) do
    {:ok, pid} = GenServer.start_link(__MODULE__, {worker, session, params, every})
    pid
  end

  def stop(pid) do
    GenServer.stop(pid, :normal, :infinity)
  catch
    :exit, _ -> :ok       # it stopped already (it is linked: its error is the worker's)
  end

  @impl true
  def init({worker, session, params, every}) do
    Process.send_after(self(), :renew, every)
    {:ok, %{worker: worker, session: session, params: params, every: every,
            listed: nil, listed_version: nil, listed_stale_since: nil}}
  end

  @impl true
  def handle_info(:renew, state) do
    Process.send_after(self(), :renew, state.every)
    sent = System.monotonic_time(:microsecond)

    try do
      [[count, version, pending]] = Session.call(state.session, @heartbeat, state.params)
      send(state.worker, {:contact, sent})    # it recorded the session too

      if state.listed != nil and version != nil and version == state.listed_version and pending == "0" and
           String.to_integer(count) == map_size(state.listed) do
        rows = for {shard, epoch} <- state.listed, do: [shard, nil, epoch]
        send(state.worker, {:renewed, sent, rows, "heartbeat"})
        {:noreply, state}
      else
        {:noreply, list(%{state | listed: nil}, version)}
      end
    rescue
      e in [Session.Unavailable, Session.Ambiguous] ->
        send(state.worker, {:renew_failed, Exception.message(e)})
        {:noreply, state}
    end
  end

  # a take answered: the list is stale until one sent after it succeeds
  def handle_info({:stale, learned}, state),
    do: {:noreply, %{state | listed: nil, listed_stale_since: max(state.listed_stale_since || learned, learned)}}

  # renew_leases: the truth about what the worker holds (rule 5), remembered with the
  # leases_version of the heartbeat sent before it
  defp list(state, version) do
    sent = System.monotonic_time(:microsecond)
    rows = Session.call(state.session, @renew, state.params)
    send(state.worker, {:renewed, sent, rows, "list"})

    if state.listed_stale_since == nil or state.listed_stale_since < sent do
      %{state | listed: Map.new(rows, fn [shard, _, epoch] -> {shard, String.to_integer(epoch)} end),
                listed_version: version}
    else
      state
    end
  rescue
    e in [Session.Unavailable, Session.Ambiguous] ->
      send(state.worker, {:renew_failed, Exception.message(e)})
      state
  end
end
