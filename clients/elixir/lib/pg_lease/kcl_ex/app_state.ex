defmodule PgLease.KclEx.Adapter do
  @moduledoc """
  kcl_ex's `KinesisClient.Stream.AppState.Adapter` behaviour, restated here
  so that `PgLease.KclEx.AppState` compiles without kcl_ex (it cannot be
  fetched on these machines).  The callbacks and return values are kcl_ex's.
  """
  @type shard_lease :: %{shard_id: String.t(), app_name: String.t(), stream_name: String.t(),
                         checkpoint: String.t() | nil, lease_owner: String.t() | nil,
                         lease_count: integer, completed: boolean}

  @callback initialize(app_name :: String.t(), opts :: keyword) :: :ok | {:error, any}
  @callback get_lease(app_name :: String.t(), stream_name :: String.t(), shard_id :: String.t(), opts :: keyword) ::
              shard_lease | :not_found | {:error, any}
  @callback get_leases_by_worker(app_name :: String.t(), stream_name :: String.t(), lease_owner :: String.t(),
                                 opts :: keyword) :: list(shard_lease)
  @callback create_lease(app_name :: String.t(), stream_name :: String.t(), shard_id :: String.t(),
                         lease_owner :: String.t(), opts :: keyword) :: :ok | :already_exists | {:error, any}
  @callback update_checkpoint(app_name :: String.t(), stream_name :: String.t(), shard_id :: String.t(),
                              lease_owner :: String.t(), checkpoint :: String.t(), opts :: keyword) :: :ok | {:error, any}
  @callback renew_lease(app_name :: String.t(), stream_name :: String.t(), shard_lease :: shard_lease, opts :: keyword) ::
              {:ok, new_lease_count :: integer} | {:error, :lease_renew_failed} | {:error, any}
  @callback take_lease(app_name :: String.t(), stream_name :: String.t(), shard_id :: String.t(),
                       new_owner :: String.t(), lease_count :: integer, opts :: keyword) ::
              {:ok, new_lease_count :: integer} | {:error, :lease_take_failed} | {:error, any}
  @callback close_shard(app_name :: String.t(), stream_name :: String.t(), shard_id :: String.t(),
                        lease_owner :: String.t(), opts :: keyword) :: :ok | {:error, any}
  @callback all_incomplete_leases(app_name :: String.t(), stream_name :: String.t(), opts :: keyword) :: list(shard_lease)
  @callback total_incomplete_lease_counts_by_worker(app_name :: String.t(), stream_name :: String.t(), opts :: keyword) ::
              list({worker :: String.t(), count :: integer})
  @callback lease_owner_with_most_leases(app_name :: String.t(), stream_name :: String.t(), opts :: keyword) ::
              list(shard_lease)
end

defmodule PgLease.KclEx.AppState do
  @moduledoc """
  A kcl_ex AppState adapter backed by pg_lease: its callbacks take kcl_ex's
  `app_state_opts`, `[adapter: PgLease.KclEx.AppState, repo: MyApp.Repo]`
  (the application's Ecto repo, called through `Ecto.Adapters.SQL.query/4`),
  or `query:` (a `PgLease.Session`, a function `(sql, params) -> {:ok, rows}
  | {:error, %{code:, message:}}`, or `{module, function}` of one), and
  `lease_duration:` (an interval text such as "30 seconds", default pg_lease's
  `lease.default_lease_duration`).  docs/clients/elixir.md says how kcl_ex
  is pointed at it.

  Every callback is one pg_lease call, one statement, autocommit.  The
  difference from kcl_ex's Ecto adapter that matters: `update_checkpoint` is
  guarded on ownership only (`lease.update_checkpoint`), never on
  `lease_count`, so a renewal that lands between a batch and its checkpoint
  no longer makes the checkpoint fail.  `take_lease` and `renew_lease` keep
  kcl_ex's `lease_count` optimistic lock.  The leases come back as maps with
  kcl_ex's `ShardLease` fields (a `KinesisClient.Stream.AppState.ShardLease`
  struct when kcl_ex is loaded); `completed` is `checkpoint == "SHARD_END"`.
  """
  @behaviour PgLease.KclEx.Adapter
  alias PgLease.Session

  @lease "SELECT shard_id, app_name, stream_name, checkpoint, lease_owner, lease_count::text, " <>
           "(checkpoint = 'SHARD_END')::text FROM lease.lease_status WHERE app_name = $1 AND stream_name = $2"

  @impl true
  def initialize(app_name, opts) do
    case call(opts, "SELECT count(*)::text FROM lease.lease_status WHERE app_name = $1", [app_name]) do
      {:ok, _} -> :ok
      error -> error
    end
  end

  @impl true
  def get_lease(app_name, stream_name, shard_id, opts) do
    case leases(opts, " AND shard_id = $3", [app_name, stream_name, shard_id]) do
      [lease] -> lease
      [] -> :not_found
      {:error, _} = error -> error
    end
  end

  @impl true
  def get_leases_by_worker(app_name, stream_name, lease_owner, opts),
    do: list(leases(opts, " AND lease_owner = $3 ORDER BY shard_id", [app_name, stream_name, lease_owner]))

  @impl true
  def create_lease(app_name, stream_name, shard_id, lease_owner, opts) do
    # created and taken by lease_owner in one statement (lease_count 1, as kcl_ex's)
    sql = "SELECT c::text, CASE WHEN c THEN lease.take_lease($1, $2, $3, $4, NULL, $5::text::interval)::text END " <>
            "FROM lease.create_lease($1, $2, $3) AS c"

    case call(opts, sql, [app_name, stream_name, shard_id, lease_owner, opts[:lease_duration]]) do
      {:ok, [["true", _]]} -> :ok
      {:ok, [["false", _]]} -> :already_exists
      error -> error
    end
  end

  @impl true
  def update_checkpoint(app_name, stream_name, shard_id, lease_owner, checkpoint, opts) do
    sql = "SELECT lease.update_checkpoint($1, $2, $3, $4, $5)::text"

    done(call(opts, sql, [app_name, stream_name, shard_id, lease_owner, checkpoint]), :update_checkpoint_failed)
  end

  @impl true
  def renew_lease(app_name, stream_name, %{shard_id: shard_id, lease_owner: owner, lease_count: count}, opts) do
    sql = "SELECT lease.renew_lease($1, $2, $3, $4, $5::bigint, $6::text::interval)::text"

    new_count(call(opts, sql, [app_name, stream_name, shard_id, owner, count, opts[:lease_duration]]), :lease_renew_failed)
  end

  @impl true
  def take_lease(app_name, stream_name, shard_id, new_owner, lease_count, opts) do
    sql = "SELECT lease.take_lease($1, $2, $3, $4, $5::bigint, $6::text::interval)::text"

    new_count(call(opts, sql, [app_name, stream_name, shard_id, new_owner, lease_count, opts[:lease_duration]]),
              :lease_take_failed)
  end

  @impl true
  def close_shard(app_name, stream_name, shard_id, lease_owner, opts) do
    done(call(opts, "SELECT lease.close_shard($1, $2, $3, $4)::text", [app_name, stream_name, shard_id, lease_owner]),
         :close_shard_failed)
  end

  @impl true
  def all_incomplete_leases(app_name, stream_name, opts),
    do: list(leases(opts, " AND state <> 'ended' ORDER BY shard_id", [app_name, stream_name]))

  @impl true
  def total_incomplete_lease_counts_by_worker(app_name, stream_name, opts) do
    sql = "SELECT lease_owner, count(*)::text FROM lease.lease_status " <>
            "WHERE app_name = $1 AND stream_name = $2 AND state <> 'ended' GROUP BY lease_owner ORDER BY lease_owner"

    case call(opts, sql, [app_name, stream_name]) do
      {:ok, rows} -> Enum.map(rows, fn [owner, n] -> {owner, String.to_integer(n)} end)
      _error -> []
    end
  end

  @doc """
  The incomplete leases of the owner holding the most of them, `[]` when no
  lease is owned: what kcl_ex's Ecto adapter returns and its lease process
  reads (its behaviour's spec says `String.t() | nil`, its code uses the list).
  """
  @impl true
  def lease_owner_with_most_leases(app_name, stream_name, opts) do
    sql = "SELECT lease_owner FROM lease.lease_status WHERE app_name = $1 AND stream_name = $2 " <>
            "AND state <> 'ended' AND lease_owner IS NOT NULL GROUP BY lease_owner ORDER BY count(*) DESC, lease_owner LIMIT 1"

    case call(opts, sql, [app_name, stream_name]) do
      {:ok, [[owner]]} ->
        list(leases(opts, " AND lease_owner = $3 AND state <> 'ended' ORDER BY shard_id", [app_name, stream_name, owner]))

      _ ->
        []
    end
  end

  # a boolean answer: true is :ok, false kcl_ex's {:error, failure}
  defp done({:ok, [["true"]]}, _failure), do: :ok
  defp done({:ok, [["false"]]}, failure), do: {:error, failure}
  defp done(error, _failure), do: error

  # a new lease_count, or NULL: kcl_ex's {:error, failure}
  defp new_count({:ok, [[nil]]}, failure), do: {:error, failure}
  defp new_count({:ok, [[count]]}, _failure), do: {:ok, String.to_integer(count)}
  defp new_count(error, _failure), do: error

  defp leases(opts, where, params) do
    case call(opts, @lease <> where, params) do
      {:ok, rows} -> Enum.map(rows, &shard_lease/1)
      error -> error
    end
  end

  defp list({:error, _}), do: []
  defp list(leases), do: leases

  @shard_lease Module.concat([KinesisClient, Stream, AppState, ShardLease])

  defp shard_lease([shard_id, app_name, stream_name, checkpoint, owner, count, completed]) do
    fields = %{shard_id: shard_id, app_name: app_name, stream_name: stream_name, checkpoint: checkpoint,
               lease_owner: owner, lease_count: String.to_integer(count), completed: completed == "true"}

    if Code.ensure_loaded?(@shard_lease), do: struct(@shard_lease, fields), else: fields
  end

  # every callback: one statement through the application's query function,
  # repeated per docs/client-rules.md; kcl_ex's {:error, reason} when it fails
  defp call(opts, sql, params) do
    {:ok, Session.call(session(opts), sql, params)}
  rescue
    e in [Session.Unavailable, Session.Ambiguous, Session.Error] -> {:error, e}
  end

  defp session(opts) do
    case {opts[:query], opts[:repo]} do
      {%Session{} = session, _} -> session
      {fun, _} when is_function(fun, 2) -> Session.new(fun)
      {{mod, fun}, _} -> Session.new(&apply(mod, fun, [&1, &2]))
      {nil, repo} when repo != nil -> Session.ecto(repo)
    end
  end
end
