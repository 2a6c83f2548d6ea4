defmodule PgLease.Pgsql do
  @moduledoc """
  One connection of erlang-p1-pgsql (`:pgsql`, Debian's driver, TCP only),
  owned by this process, opened on first use and again after it was lost.
  Each call is one extended-protocol statement (the unnamed prepared
  statement, then execute: `:pgsql.pquery/3` does not return on an error in
  this driver's version), parameters sent as text, every result column text.

      {:ok, conn} = PgLease.Pgsql.start_link(host: "127.0.0.1", port: 5432,
                                             user: "worker", password: "...", database: "app")
      session = PgLease.Pgsql.session(conn)

  Password authentication (`scram-sha-256`, Debian's default for TCP)
  needs the `stringprep` application of erlang-p1-stringprep running (its
  NIF prepares the password): `start_link/1` starts it.  The driver
  prepares the password with XMPP's resourceprep profile, not SASLprep:
  the same for ASCII passwords.

  Options: `host`, `port`, `user`, `password`, `database`, `connect_timeout`
  (ms, default 5 000), `call_timeout` (ms, default 60 000: a statement that
  has no answer by then has its connection dropped, an ambiguous call),
  `statement_timeout` and `lock_timeout` (ms), `settings` (more settings,
  `[synchronous_commit: "on"]`), all set on the connection each time it
  opens, `application_name` (sent in the startup packet: the driver has
  no option for it and cannot take a ParameterStatus message in the middle
  of a statement, so nothing here changes a reported setting later).  The
  password never appears in an error, a log record or a crash report of
  this process.

  The driver reads no notice's text: a NOTICE or WARNING that comes during a
  statement stops its connection process.  That statement is then
  ambiguous (its connection is dropped, no SQLSTATE), which is what the
  client rules ask of the WARNING of a cancelled wait for synchronous
  replication; it is why no statement here raises a notice of its own.
  """
  use GenServer

  @doc """
  Starts the connection process (linked).  It connects on the first call.
  """
  def start_link(opts) do
    # SCRAM: p1_pgsql prepares the password through p1_stringprep's NIF, which is loaded
    # when the stringprep application starts ({:nif_not_loaded, ...} otherwise)
    _ = Application.ensure_all_started(:stringprep)
    _ = :logger.add_primary_filter(:pg_lease_pgsql_driver, {&__MODULE__.driver_crash/2, []})
    GenServer.start_link(__MODULE__, opts)
  end

  @doc false
  # A logger filter: a p1_pgsql connection process that stops on a lost connection or a
  # notice writes a crash report of its whole state (its type cache: pages); the
  # session reports the call itself (ambiguous), so the report is dropped.
  def driver_crash(%{msg: {:report, %{label: {:gen_server, :terminate}, state: state}}}, _extra)
      when is_tuple(state) and tuple_size(state) == 10 and elem(state, 0) == :state and
             elem(state, 3) in [:tcp, :ssl],
      do: :stop

  def driver_crash(_event, _extra), do: :ignore

  @doc """
  A `PgLease.Session` over this connection: the query function, its reset,
  and a checkout on this one connection (for transactions).
  """
  def session(conn) do
    timeout = GenServer.call(conn, :call_timeout)
    query = &query(conn, &1, &2, timeout)
    PgLease.Session.new(query, reset: fn -> GenServer.call(conn, :reset, timeout + 5000) end,
                        checkout: fn fun -> fun.(query) end)
  end

  @doc """
  The worker's `session:` option for a URL `postgresql://user[:password]@host[:port]/database`
  (a password may also come from `PGPASSWORD`): a new connection per session
  the worker asks for, with the timeouts and settings it asks for.
  """
  def connector(url, opts \\ []) do
    uri = URI.parse(url)
    {user, password} =
      case String.split(uri.userinfo || "", ":", parts: 2) do
        [user, password] -> {URI.decode_www_form(user), URI.decode_www_form(password)}
        [user] -> {URI.decode_www_form(user), System.get_env("PGPASSWORD", "")}
      end

    base = [host: uri.host || "127.0.0.1", port: uri.port || 5432, user: user, password: password,
            database: String.trim_leading(uri.path || "", "/")] ++ opts

    fn name, settings ->
      {:ok, conn} = start_link(Keyword.merge(base, [application_name: name] ++ settings))
      session(conn)
    end
  end

  @doc "The query function: `(sql, params) -> {:ok, rows, notices} | {:error, %{code:, message:}}`."
  def query(conn, sql, params, timeout \\ 60_000) do
    GenServer.call(conn, {:query, sql, params}, timeout + 5000)
  catch
    :exit, reason -> {:error, %{code: nil, message: "the connection process failed: #{inspect(elem_reason(reason))}"}}
  end

  defp elem_reason({reason, {GenServer, :call, _}}), do: reason
  defp elem_reason(reason), do: reason

  def stop(conn), do: GenServer.stop(conn)

  @impl true
  def init(opts) do
    Process.flag(:trap_exit, true)
    {:ok, %{opts: opts, db: nil, call_timeout: Keyword.get(opts, :call_timeout, 60_000)}}
  end

  # the password, for the crash reports OTP writes of this process
  @impl true
  def format_status(_reason, [_pdict, state]), do: [data: [{'State', redact(state)}]]

  defp redact(%{opts: opts} = state), do: %{state | opts: Keyword.replace(opts, :password, "*****")}

  @impl true
  def handle_call(:call_timeout, _from, state), do: {:reply, state.call_timeout, state}
  def handle_call(:reset, _from, state), do: {:reply, :ok, disconnect(state)}

  def handle_call({:query, sql, params}, _from, state) do
    case connect(state) do
      {:ok, state} ->
        reply = run(state, sql, params)
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
        database: startup_database(opts),
        connect_timeout: Keyword.get(opts, :connect_timeout, 5000)
      ]
      |> Enum.map(fn {k, v} when is_binary(v) -> {k, String.to_charlist(v)}; kv -> kv end)

    case :pgsql.connect(options) do
      {:ok, db} ->
        Process.link(db)
        nodelay(db)
        settings(%{state | db: db})

      {:error, reason} ->
        {:error, connect_error(reason, opts)}
    end
  catch
    kind, reason -> {:error, connect_error({kind, reason}, opts)}
  end

  # the driver writes the database as one name/value pair of the startup packet: the
  # application_name follows it as one more pair
  defp startup_database(opts) do
    database = Keyword.fetch!(opts, :database)

    case Keyword.get(opts, :application_name) do
      nil -> database
      name -> database <> <<0>> <> "application_name" <> <<0>> <> String.replace(name, <<0>>, "")
    end
  end

  # statement_timeout, lock_timeout and the other settings, set once the connection is
  # open (none of them a reported setting: no ParameterStatus comes back)
  defp settings(%{opts: opts} = state) do
    sets =
      (for key <- [:statement_timeout, :lock_timeout], opts[key] != nil, do: [Atom.to_string(key), trunc(opts[key])]) ++
        for {key, value} <- Keyword.get(opts, :settings, []), do: [to_string(key), to_string(value)]

    Enum.reduce_while(sets, {:ok, state}, fn params, {:ok, state} ->
      case run(state, "SELECT pg_catalog.set_config($1, $2, false)", params) do
        {:ok, _, _} -> {:cont, {:ok, state}}
        {:error, error} -> {:halt, {:error, error}}
      end
    end)
  end

  # {error_response, Fields}: the server's refusal; the driver itself failing (a missing
  # NIF, an authentication method it lacks): a fault of the client that no retry mends;
  # anything else ({init, {error, econnrefused}}, a socket closed during the handshake):
  # no SQLSTATE, the server may come back
  defp connect_error({:error_response, fields}, _opts), do: error(fields)
  defp connect_error({:authentication, fields}, _opts) when is_list(fields), do: error(fields)
  defp connect_error({:init, {:error_response, fields}}, _opts), do: error(fields)

  defp connect_error(reason, opts) do
    message = scrub("could not connect: #{inspect(reason)}", opts)
    if client_fault?(reason), do: %{code: nil, message: message, client: true}, else: %{code: nil, message: message}
  end

  defp client_fault?({tag, _}) when tag in [:nif_not_loaded, :undef, :nyi, :unknown_setup], do: true
  defp client_fault?(tuple) when is_tuple(tuple), do: tuple |> Tuple.to_list() |> Enum.any?(&client_fault?/1)
  defp client_fault?(text) when is_binary(text), do: text =~ "SASL"
  defp client_fault?(list) when is_list(list), do: List.ascii_printable?(list) and to_string(list) =~ "SASL"
  defp client_fault?(_), do: false

  # no text made of a driver's error term carries the password
  defp scrub(text, opts) do
    case Keyword.get(opts, :password, "") do
      "" -> text
      password -> String.replace(text, [password, inspect(password), inspect(String.to_charlist(password))], "*****")
    end
  end

  defp run(%{db: db} = state, sql, params) do
    params = Enum.map(params, &param/1)
    drain_notices()
    {:ok, killer} = :timer.kill_after(state.call_timeout, db)

    reply =
      with {:ok, _status, _param_types, _result_types} <- :pgsql.prepare(db, [], String.to_charlist(sql)),
           {:ok, {_command, rows}} <- :pgsql.execute(db, [], params) do
        {:ok, rows(rows), drain_notices()}
      else
        {:error, fields} when is_list(fields) -> {:error, error(fields)}
        # a notice: the driver cannot read it and stops (it may be a cancelled sync-rep wait)
        {:error, {:notice_response, _}} -> {:error, %{code: nil, message: "a notice came (p1_pgsql reads none): ambiguous"}}
        other -> {:error, %{code: nil, message: scrub(inspect(other), state.opts)}}
      end

    :timer.cancel(killer)
    reply
  catch
    :exit, {{:notice_response, _}, _} ->
      {:error, %{code: nil, message: "a notice came (p1_pgsql reads none): ambiguous"}}

    :exit, reason ->
      {:error, %{code: nil, message: "the connection was lost: #{scrub(inspect(elem_reason(reason)), state.opts)}"}}
  end

  # a statement's rows; a command without rows (BEGIN, INSERT) answers {:nyi, Tag}: none
  defp rows([row | _] = rows) when is_list(row), do: Enum.map(rows, fn row -> Enum.map(row, &value/1) end)
  defp rows(_tag), do: []

  # the notices the driver sent this process during the statement (before its answer;
  # only at connect, in this driver, and without their text)
  defp drain_notices(acc \\ []) do
    receive do
      {:pgsql_notice, fields} -> drain_notices([error(fields) | acc])
    after
      0 -> Enum.reverse(acc)
    end
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

    %{code: text.(:code), message: text.(:message), detail: text.(:detail), severity: text.(:severity)}
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
