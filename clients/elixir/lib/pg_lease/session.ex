defmodule PgLease.Session do
  @moduledoc """
  pg_lease calls through the one function the application supplies, each its
  own transaction, repeated per docs/client-rules.md.

  The function takes `(sql, params)` and returns `{:ok, rows}` (rows: lists
  of column values, text or nil: every statement here casts its columns to
  text, so every driver hands back the same rows) or `{:error, %{code:
  sqlstate_or_nil, message: primary_message}}`.  `params` are strings,
  integers, nil, or lists of strings (a `text[]`: Postgrex takes them as
  they are, `PgLease.Pgsql` sends an array literal); the SQL casts them
  (`$4::bigint`), an interval from text (`$4::text::interval`), so that a
  driver that types parameters by the SQL (Postgrex) accepts them.  The optional `reset`
  function drops the connection, for a wiring that keeps its own (a pool
  such as Ecto's or Postgrex's reconnects by itself).

  Wiring:

      # tested here: erlang-p1-pgsql (PgLease.Pgsql)
      {:ok, conn} = PgLease.Pgsql.start_link(host: "127.0.0.1", port: 5432, user: "worker", database: "app")
      session = PgLease.Pgsql.session(conn)
      # not tested here (Postgrex and Ecto are not installable on these machines):
      session = PgLease.Session.new(&PgLease.Session.postgrex_result(Postgrex.query(MyPg, &1, &2)))
      session = PgLease.Session.new(&PgLease.Session.postgrex_result(Ecto.Adapters.SQL.query(MyApp.Repo, &1, &2)))
  """
  require Logger
  alias PgLease.Rules

  defstruct [:query, reset: nil]

  defmodule Unavailable do
    @moduledoc "The call did not go through after its retries; nothing is known to have happened."
    defexception [:message]
  end

  defmodule Ambiguous do
    @moduledoc "The connection was lost after the call was sent: it may or may not have committed."
    defexception [:message]
  end

  defmodule Error do
    @moduledoc "An error the rules say to raise (a bug, a privilege, bad credentials), or to drop (`kind: :drop`)."
    defexception [:code, :message, kind: :raise]
  end

  @doc "A session over a query function and an optional reset function."
  def new(query, opts \\ []), do: %__MODULE__{query: query, reset: Keyword.get(opts, :reset)}

  @doc """
  A Postgrex/Ecto query result as the session wants it: rows as they are
  (every column is text), errors as `%{code:, message:}`.
  """
  def postgrex_result({:ok, %{rows: rows}}), do: {:ok, rows || []}
  def postgrex_result({:error, %{postgres: %{pg_code: code, message: message}}}) when is_binary(code),
    do: {:error, %{code: code, message: message}}
  def postgrex_result({:error, %{postgres: %{code: code, message: message}}}),
    do: {:error, %{code: postgrex_code(code), message: message}}
  def postgrex_result({:error, error}), do: {:error, %{code: nil, message: Exception.message(error)}}

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

  defp attempt(session, sql, params, repeat_safe, until, tries, last) do
    if tries >= Rules.tries(), do: raise(Unavailable, message: "#{name(sql)}: #{last}")
    if tries > 0, do: Process.sleep(Rules.backoff(tries))

    if tries > 0 and until != nil and System.monotonic_time(:millisecond) >= until do
      raise Unavailable, message: "#{name(sql)}: #{last}"
    end

    case session.query.(sql, params) do
      {:ok, rows} ->
        rows

      {:error, %{code: code, message: message} = error} ->
        last = "#{code || "no SQLSTATE"} #{message}"

        case Rules.classify(code, message) do
          kind when kind in [:raise, :drop, :fatal] ->
            # a connection that was refused (bad credentials, no such database) is
            # retried like any other before it is reported, loudly
            if Map.get(error, :connecting) && kind in [:raise, :fatal] && tries + 1 < Rules.tries() do
              Logger.warning("pg_lease: could not connect: #{last}")
              attempt(session, sql, params, repeat_safe, until, tries + 1, last)
            else
              raise Error, code: code, message: message, kind: kind
            end

          :repeat ->
            attempt(session, sql, params, repeat_safe, until, tries + 1, last)

          kind ->
            reset(session)

            if kind == :ambiguous and not repeat_safe and not Map.get(error, :connecting, false) do
              raise Ambiguous, message: last
            end

            attempt(session, sql, params, repeat_safe, until, tries + 1, last)
        end
    end
  end

  defp reset(%{reset: nil}), do: :ok
  defp reset(%{reset: reset}), do: reset.()

  defp name(sql), do: sql |> String.split("(") |> hd()
end
