defmodule PgLease.Session do
  @moduledoc """
  pg_lease calls through the one function the application supplies, each its
  own transaction, repeated per docs/client-rules.md.

  The function takes `(sql, params)` and returns `{:ok, rows}` (rows: lists
  of column values, text or nil: every statement here casts its columns to
  text, so every driver hands back the same rows), `{:ok, rows, notices}`
  (notices: maps with `:severity`, `:code` and `:message`, the server's
  NOTICE and WARNING messages of that statement) or `{:error, %{code:
  sqlstate_or_nil, message: primary_message}}`.  `params` are strings,
  integers, nil, or lists of strings (a `text[]`: Postgrex takes them as
  they are, `PgLease.Pgsql` sends an array literal); the SQL casts them
  (`$4::bigint`), an interval from text (`$4::text::interval`), so that a
  driver that types parameters by the SQL (Postgrex) accepts them.

  Options of `new/2`: `reset:` drops the connection, for a wiring that keeps
  its own (a pool such as Ecto's or Postgrex's reconnects by itself);
  `checkout:` runs a function with a query function pinned to one
  connection, `checkout.(fn query -> ... end)`, which the worker's
  transactional mode needs (BEGIN, the batch, COMMIT on that connection).

  Wiring (`make test` runs all three; Postgrex and Ecto when their sources
  are there, see docs/clients/elixir.md):

      # erlang-p1-pgsql, Debian's driver (PgLease.Pgsql)
      session = PgLease.Pgsql.session(conn)
      # Postgrex: a pool started with Postgrex.start_link/1
      session = PgLease.Session.postgrex(MyApp.Pg)
      # an Ecto repo: Ecto.Adapters.SQL.query/4
      session = PgLease.Session.ecto(MyApp.Repo)
  """
  require Logger
  alias PgLease.Rules

  defstruct [:query, reset: nil, checkout: nil]

  defmodule Unavailable do
    @moduledoc "The call did not go through after its retries; nothing is known to have happened."
    defexception [:message]
  end

  defmodule Ambiguous do
    @moduledoc "The connection was lost after the call was sent: it may or may not have committed."
    defexception [:message]
  end

  defmodule Error do
    @moduledoc """
    An error the rules say to raise (a bug, a privilege), to drop (`kind: :drop`), or a
    refused connection after the rules' tries (`kind: :fatal`: bad credentials, no such
    database, a driver that cannot connect at all).
    """
    defexception [:code, :message, kind: :raise]
  end

  @doc "A session over a query function; options `reset:` and `checkout:`."
  def new(query, opts \\ []),
    do: %__MODULE__{query: query, reset: Keyword.get(opts, :reset), checkout: Keyword.get(opts, :checkout)}

  @doc """
  A session over a Postgrex connection or pool (`Postgrex.start_link/1`):
  each call is `Postgrex.query/4`, a transaction runs on one connection of
  the pool (`DBConnection.run/3`).  `opts` go to every query (`timeout:`).
  """
  def postgrex(conn, opts \\ []) do
    new(&postgrex_result(Postgrex.query(conn, &1, &2, opts)),
      checkout: fn fun ->
        DBConnection.run(conn, fn pinned -> fun.(&postgrex_result(Postgrex.query(pinned, &1, &2, opts))) end, opts)
      end)
  end

  @doc """
  A session over an Ecto repo (ecto_sql with the Postgres adapter): each call
  is `Ecto.Adapters.SQL.query/4`, a transaction runs on one connection
  (`repo.checkout/2`).  `opts` go to every query (`timeout:`, `log:`).
  """
  def ecto(repo, opts \\ []) do
    query = &postgrex_result(Ecto.Adapters.SQL.query(repo, &1, &2, opts))
    new(query, checkout: fn fun -> repo.checkout(fn -> fun.(query) end, opts) end)
  end

  @doc """
  A Postgrex/Ecto query result as the session wants it: rows as they are
  (every column is text), the notices of the statement, errors as `%{code:, message:}`.
  """
  def postgrex_result({:ok, %{rows: rows} = result}), do: {:ok, rows || [], notices(Map.get(result, :messages))}
  def postgrex_result({:error, %{postgres: %{pg_code: code, message: message}}}) when is_binary(code),
    do: {:error, %{code: code, message: message}}
  def postgrex_result({:error, %{postgres: %{code: code, message: message}}}),
    do: {:error, %{code: postgrex_code(code), message: message}}
  def postgrex_result({:error, error}), do: {:error, %{code: nil, message: Exception.message(error)}}

  defp notices(nil), do: []
  defp notices(messages), do: Enum.map(messages, &Map.take(&1, [:severity, :code, :message]))

  # Postgrex names SQLSTATEs by atom (:serialization_failure); the rules want the code.
  defp postgrex_code(code) when is_atom(code) do
    mod = Module.concat([Postgrex, ErrorCode])
    if Code.ensure_loaded?(mod), do: apply(mod, :name_to_code, [code]), else: Atom.to_string(code)
  end

  defp postgrex_code(code), do: code

  @doc """
  The rows of one statement.  Raises `Ambiguous` (only when not
  `repeat_safe`), `Unavailable`, or `Error` for anything the rules say to
  raise.  No repeat starts after `until` (a `System.monotonic_time(:millisecond)`).
  An answer that came with the WARNING of a cancelled wait for synchronous
  replication is ambiguous too (it committed locally, perhaps only there).
  """
  def call(session, sql, params \\ [], opts \\ []) do
    repeat_safe = Keyword.get(opts, :repeat_safe, true)
    until = Keyword.get(opts, :until)
    attempt(session, sql, params, repeat_safe, until, 0, "not sent")
  end

  @doc "The first column of the only row."
  def one(session, sql, params \\ [], opts \\ []) do
    [[value | _]] = call(session, sql, params, opts)
    value
  end

  @doc """
  Runs `fun.(query)` with a query function pinned to one connection (the
  session's `checkout:`), for a transaction.  The query function answers as
  the session's does.
  """
  def checkout(%{checkout: nil}, _fun), do: raise(ArgumentError, "this session has no checkout: (transactions)")
  def checkout(%{checkout: checkout}, fun), do: checkout.(fun)

  @doc """
  The primary message of a notice among `notices` that makes its statement
  ambiguous (docs/client-rules.md: a cancelled wait for synchronous
  replication), or nil.
  """
  def ambiguous_notice(notices) do
    Enum.find_value(notices, fn n -> if Rules.ambiguous_notice?(n[:severity], n[:message]), do: n[:message] end)
  end

  defp attempt(session, sql, params, repeat_safe, until, tries, last) do
    if tries >= Rules.tries(), do: raise(Unavailable, message: "#{name(sql)}: #{last}")
    if tries > 0, do: Process.sleep(Rules.backoff(tries))

    if tries > 0 and until != nil and System.monotonic_time(:millisecond) >= until do
      raise Unavailable, message: "#{name(sql)}: #{last}"
    end

    case session.query.(sql, params) do
      {:ok, rows} ->
        rows

      {:ok, rows, notices} ->
        case ambiguous_notice(notices) do
          nil ->
            rows

          warning ->
            if not repeat_safe, do: raise(Ambiguous, message: "WARNING #{warning}")
            Logger.warning("pg_lease: #{name(sql)} answered with a warning (ambiguous), retrying: #{warning}")
            attempt(session, sql, params, repeat_safe, until, tries + 1, "WARNING #{warning}")
        end

      {:error, %{code: code, message: message} = error} ->
        last = "#{code || "no SQLSTATE"} #{message}"
        kind = if Map.get(error, :client), do: :fatal, else: Rules.classify(code, message)

        case kind do
          kind when kind in [:raise, :drop, :fatal] ->
            # a connection that was refused (bad credentials, no such database) is
            # retried like any other before it is reported, loudly
            if Map.get(error, :connecting) && kind in [:raise, :fatal] && tries + 1 < Rules.tries() do
              Logger.warning("pg_lease: could not connect (try #{tries + 1} of #{Rules.tries()}): #{last}")
              attempt(session, sql, params, repeat_safe, until, tries + 1, last)
            else
              raise Error, code: code, message: message, kind: if(Map.get(error, :connecting), do: :fatal, else: kind)
            end

          :repeat ->
            attempt(session, sql, params, repeat_safe, until, tries + 1, last)

          kind ->
            reset(session)

            if kind == :ambiguous and not repeat_safe and not Map.get(error, :connecting, false) do
              raise Ambiguous, message: last
            end

            Logger.warning("pg_lease: #{name(sql)} failed (#{kind}, try #{tries + 1} of #{Rules.tries()}), retrying: #{last}")
            attempt(session, sql, params, repeat_safe, until, tries + 1, last)
        end
    end
  end

  @doc false
  def reset(%{reset: nil}), do: :ok
  def reset(%{reset: reset}), do: reset.()

  defp name(sql), do: sql |> String.split("(") |> hd()
end
