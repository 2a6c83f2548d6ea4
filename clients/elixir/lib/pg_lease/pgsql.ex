defmodule PgLease.Pgsql do
  @moduledoc """
  The wiring tested here: one connection of erlang-p1-pgsql (`:pgsql`, TCP
  only), owned by this process, opened on first use and again after it was
  lost.  Each call is one extended-protocol statement (the unnamed prepared
  statement, then execute: `:pgsql.pquery/3` does not return on an error in
  this driver's version), parameters sent as text, every result column text.
  The driver cannot take a ParameterStatus message in the middle of a
  statement, so nothing here changes a reported setting (`application_name`
  included).

      {:ok, conn} = PgLease.Pgsql.start_link(host: "127.0.0.1", port: 5432,
                                             user: "worker", password: "...", database: "app")
      session = PgLease.Pgsql.session(conn)
  """
  use GenServer

  @call_timeout 60_000

  def start_link(opts), do: GenServer.start_link(__MODULE__, opts)

  @doc "A PgLease.Session over this connection (query and reset)."
  def session(conn) do
    PgLease.Session.new(&query(conn, &1, &2), reset: fn -> GenServer.call(conn, :reset, @call_timeout) end)
  end

  @doc "The query function: `(sql, params) -> {:ok, rows} | {:error, %{code:, message:}}`."
  def query(conn, sql, params) do
    GenServer.call(conn, {:query, sql, params}, @call_timeout)
  catch
    :exit, reason -> {:error, %{code: nil, message: "the connection process failed: #{inspect(reason)}"}}
  end

  def stop(conn), do: GenServer.stop(conn)

  @impl true
  def init(opts) do
    Process.flag(:trap_exit, true)
    {:ok, %{opts: opts, db: nil}}
  end

  @impl true
  def handle_call(:reset, _from, state), do: {:reply, :ok, disconnect(state)}

  def handle_call({:query, sql, params}, _from, state) do
    case connect(state) do
      {:ok, state} ->
        reply = run(state.db, sql, params)
        state = if match?({:error, %{code: nil}}, reply), do: disconnect(state), else: state
        {:reply, reply, state}

      {:error, error} ->
        {:reply, {:error, Map.put(error, :connecting, true)}, state}
    end
  end

  # the driver sends its owner notices and the socket's fate: a closed socket ends the connection
  @impl true
  def handle_info({:EXIT, pid, _reason}, %{db: pid} = state), do: {:noreply, %{state | db: nil}}
  def handle_info(_message, state), do: {:noreply, state}

  @impl true
  def terminate(_reason, state), do: disconnect(state)

  defp connect(%{db: db} = state) when db != nil, do: {:ok, state}

  defp connect(%{opts: opts} = state) do
    options =
      [
        host: Keyword.get(opts, :host, "127.0.0.1"),
        port: Keyword.get(opts, :port, 5432),
        user: Keyword.fetch!(opts, :user),
        password: Keyword.get(opts, :password, ""),
        database: Keyword.fetch!(opts, :database),
        connect_timeout: Keyword.get(opts, :connect_timeout, 5000)
      ]
      |> Enum.map(fn {k, v} when is_binary(v) -> {k, String.to_charlist(v)}; kv -> kv end)

    case :pgsql.connect(options) do
      {:ok, db} ->
        Process.link(db)
        nodelay(db)
        {:ok, %{state | db: db}}

      {:error, reason} ->
        {:error, connect_error(reason)}
    end
  catch
    kind, reason -> {:error, %{code: nil, message: "could not connect: #{inspect({kind, reason})}"}}
  end

  # {init, {error, econnrefused}}: no SQLSTATE; {error_response, Fields}: the server's refusal
  defp connect_error({:error_response, fields}), do: error(fields)
  defp connect_error({:init, {:error_response, fields}}), do: error(fields)
  defp connect_error(reason), do: %{code: nil, message: "could not connect: #{inspect(reason)}"}

  defp run(db, sql, params) do
    params = Enum.map(params, &param/1)

    with {:ok, _status, _param_types, _result_types} <- :pgsql.prepare(db, [], String.to_charlist(sql)),
         {:ok, {_command, rows}} <- :pgsql.execute(db, [], params) do
      {:ok, Enum.map(rows, fn row -> Enum.map(row, &value/1) end)}
    else
      {:error, fields} when is_list(fields) -> {:error, error(fields)}
      other -> {:error, %{code: nil, message: inspect(other)}}
    end
  catch
    :exit, reason -> {:error, %{code: nil, message: "the connection was lost: #{inspect(reason)}"}}
  end

  # text format: a charlist of the UTF-8 bytes (a binary would be sent in
  # binary format); a list is a text[] (an array literal), as Postgrex takes one
  defp param(nil), do: :null
  defp param(list) when is_list(list), do: param(PgLease.array(list))
  defp param(value) when is_binary(value), do: :binary.bin_to_list(value)
  defp param(value) when is_integer(value) or is_float(value) or is_atom(value), do: param(to_string(value))

  defp value({_type, :null}), do: nil
  defp value({_type, value}) when is_binary(value), do: value
  defp value({_type, value}) when is_list(value), do: :unicode.characters_to_binary(:erlang.list_to_binary(value))
  defp value({_type, value}), do: to_string(value)

  defp error(fields) do
    text = fn key ->
      case List.keyfind(fields, key, 0) do
        {_, v} when is_list(v) -> :unicode.characters_to_binary(:erlang.list_to_binary(v))
        {_, v} -> to_string(v)
        nil -> nil
      end
    end

    %{code: text.(:code), message: text.(:message), detail: text.(:detail)}
  end

  # The driver leaves Nagle's algorithm on: a statement's second write (Close,
  # Sync after Execute) then waits for the server's delayed ACK, ~40 ms a
  # call.  Its socket is the 8th field of its state record (p1_pgsql 1.1.x);
  # if that ever changes, calls are only slower.
  defp nodelay(db) do
    {:gen_tcp, socket} = elem(:sys.get_state(db), 7)
    :inet.setopts(socket, nodelay: true)
  catch
    _, _ -> :ok
  end

  defp disconnect(%{db: nil} = state), do: state

  defp disconnect(%{db: db} = state) do
    Process.unlink(db)
    Process.exit(db, :kill)
    %{state | db: nil}
  end
end
