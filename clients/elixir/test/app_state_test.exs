# The Elixir client against the real extension (test/clients/elixir.sh runs it):
# every kcl_ex AppState callback of PgLease.KclEx.AppState with kcl_ex's
# return values, the channel-rotation helper, the worker (its loud failure,
# its shard-list callback, transactional mode, the release after an
# unexpected exception), over one driver wiring, $PG_LEASE_EX_WIRING:
#   pgsql    - erlang-p1-pgsql (PgLease.Pgsql), over TCP to 127.0.0.1:$PG_LEASE_EX_PORT;
#   postgrex - Postgrex pools (PgLease.Session.postgrex/2), over the Unix socket
#              directory $PG_LEASE_EX_SOCKET;
#   ecto     - the AppState adapter against an Ecto.Repo configured as a kcl_ex
#              application configures its repo (config :kcl_app, KclApp.Repo, ...;
#              app_state_opts: [adapter: PgLease.KclEx.AppState, repo: KclApp.Repo]),
#              and a worker through PgLease.Session.ecto/2; the rest as postgrex.
# Database $PG_LEASE_EX_DB.  Besides ExUnit's own report, one line per test in
# $PG_LEASE_EX_TAP, "ok NAME" or "not ok NAME", which the suite turns into TAP.
defmodule PgLeaseTest.Tap do
  use GenServer
  def init(_opts), do: {:ok, nil}

  def handle_cast({:test_finished, %ExUnit.Test{state: {excluded, _}}}, acc) when excluded in [:excluded, :skipped],
    do: {:noreply, acc}

  def handle_cast({:test_finished, %ExUnit.Test{module: module, name: name, state: state}}, acc) do
    verdict = if state == nil, do: "ok", else: "not ok"
    wiring = System.fetch_env!("PG_LEASE_EX_WIRING")
    File.write!(System.fetch_env!("PG_LEASE_EX_TAP"), "#{verdict} #{wiring}: #{inspect(module)}: #{name}\n", [:append])
    {:noreply, acc}
  end

  def handle_cast(_event, acc), do: {:noreply, acc}
end

# the loud stop on refused credentials is the p1_pgsql wiring's (a pool retries by itself)
ExUnit.start(formatters: [ExUnit.CLIFormatter, PgLeaseTest.Tap],
             exclude: if(System.fetch_env!("PG_LEASE_EX_WIRING") == "pgsql", do: [], else: [:pgsql_only]))

if System.fetch_env!("PG_LEASE_EX_WIRING") == "ecto" do
  # kcl_ex's own configuration of the application's repo (its README: app_state_opts' repo)
  for {repo, user} <- [{KclApp.Repo, "clients_kcl"}, {KclApp.WorkerRepo, "clients_worker"}] do
    Application.put_env(:kcl_app, repo,
      username: user, database: System.fetch_env!("PG_LEASE_EX_DB"),
      socket_dir: System.fetch_env!("PG_LEASE_EX_SOCKET"), port: String.to_integer(System.fetch_env!("PG_LEASE_EX_PGPORT")),
      pool_size: 2)
  end

  defmodule KclApp.Repo do
    use Ecto.Repo, otp_app: :kcl_app, adapter: Ecto.Adapters.Postgres
  end

  # the worker's own role, as a repo too (PgLease.Session.ecto/2)
  defmodule KclApp.WorkerRepo do
    use Ecto.Repo, otp_app: :kcl_app, adapter: Ecto.Adapters.Postgres
  end

  # as an application's supervision tree would: not linked to this script's process,
  # which ends before ExUnit runs the tests
  {:ok, repos} = Supervisor.start_link([KclApp.Repo, KclApp.WorkerRepo], strategy: :one_for_one)
  Process.unlink(repos)
end

defmodule PgLeaseTest.Db do
  def wiring, do: System.fetch_env!("PG_LEASE_EX_WIRING")

  # a session as `user` over this run's wiring
  def session(user, settings \\ []) do
    case wiring() do
      "pgsql" ->
        {:ok, conn} = PgLease.Pgsql.start_link([host: "127.0.0.1", port: String.to_integer(System.fetch_env!("PG_LEASE_EX_PORT")),
                                                user: user, database: System.fetch_env!("PG_LEASE_EX_DB")] ++ settings)
        PgLease.Pgsql.session(conn)

      _ ->
        {:ok, pool} = Postgrex.start_link(username: user, database: System.fetch_env!("PG_LEASE_EX_DB"),
                                          socket_dir: System.fetch_env!("PG_LEASE_EX_SOCKET"),
                                          port: String.to_integer(System.fetch_env!("PG_LEASE_EX_PGPORT")),
                                          pool_size: 2)
        PgLease.Session.postgrex(pool)
    end
  end

  # the worker's session: option for user over this run's wiring
  def connector(user) do
    case wiring() do
      "ecto" when user == "clients_worker" -> fn _name -> PgLease.Session.ecto(KclApp.WorkerRepo) end
      _ -> fn _name, settings -> session(user, Keyword.take(settings, [:statement_timeout, :lock_timeout])) end
    end
  end

  # the kcl_ex adapter's app_state_opts
  def kcl_opts do
    case wiring() do
      "ecto" -> [adapter: PgLease.KclEx.AppState, repo: KclApp.Repo, lease_duration: "30 seconds"]
      _ -> [query: session("clients_kcl")]
    end
  end
end

defmodule PgLease.KclEx.AppStateTest do
  use ExUnit.Case
  alias PgLease.KclEx.AppState

  setup_all do
    {:ok, opts: PgLeaseTest.Db.kcl_opts()}
  end

  defp stream, do: "kcl-#{System.os_time()}-#{System.unique_integer([:positive])}"

  test "initialize: the app is reachable, nothing created (kcl_ex adds stream_name to its options)", %{opts: opts} do
    assert AppState.initialize("kcl", opts ++ [stream_name: stream()]) == :ok
  end

  test "create twice: :ok, then :already_exists; the creator owns it at lease_count 1", %{opts: opts} do
    s = stream()
    assert AppState.create_lease("kcl", s, "shard-0", "w1", opts) == :ok
    assert AppState.create_lease("kcl", s, "shard-0", "w2", opts) == :already_exists
    assert %{shard_id: "shard-0", app_name: "kcl", stream_name: ^s, lease_owner: "w1", lease_count: 1,
             checkpoint: "TRIM_HORIZON", completed: false} = AppState.get_lease("kcl", s, "shard-0", opts)
    assert AppState.get_lease("kcl", s, "shard-9", opts) == :not_found
  end

  test "take with a stale count fails; with the current count it takes; the owner cannot take its own", %{opts: opts} do
    s = stream()
    :ok = AppState.create_lease("kcl", s, "shard-0", "w1", opts)
    assert AppState.take_lease("kcl", s, "shard-0", "w2", 0, opts) == {:error, :lease_take_failed}
    assert AppState.take_lease("kcl", s, "shard-0", "w2", 1, opts) == {:ok, 2}
    assert AppState.take_lease("kcl", s, "shard-0", "w2", 2, opts) == {:error, :lease_take_failed}
    assert %{lease_owner: "w2", lease_count: 2} = AppState.get_lease("kcl", s, "shard-0", opts)
  end

  test "renew by a non-owner, or with a stale count, fails; by the owner it bumps the count", %{opts: opts} do
    s = stream()
    :ok = AppState.create_lease("kcl", s, "shard-0", "w1", opts)
    lease = AppState.get_lease("kcl", s, "shard-0", opts)
    assert AppState.renew_lease("kcl", s, %{lease | lease_owner: "w2"}, opts) == {:error, :lease_renew_failed}
    assert AppState.renew_lease("kcl", s, lease, opts) == {:ok, 2}
    assert AppState.renew_lease("kcl", s, lease, opts) == {:error, :lease_renew_failed}
    assert %{lease_owner: "w1", lease_count: 2} = AppState.get_lease("kcl", s, "shard-0", opts)
  end

  test "checkpoint after a renewal (the seed race) succeeds; a non-owner's is refused; 56-digit checkpoints kept", %{opts: opts} do
    s = stream()
    :ok = AppState.create_lease("kcl", s, "shard-0", "w1", opts)
    lease = AppState.get_lease("kcl", s, "shard-0", opts)
    # the lease process renews between the batch and its checkpoint: kcl_ex's
    # Ecto adapter then fails the checkpoint (its UPDATE matches the count read before)
    assert {:ok, 2} = AppState.renew_lease("kcl", s, lease, opts)
    big = "49590338271490256608559692538361571095921575989136588898"
    assert AppState.update_checkpoint("kcl", s, "shard-0", "w1", big, opts) == :ok
    assert AppState.update_checkpoint("kcl", s, "shard-0", "w2", "4959-2", opts) == {:error, :update_checkpoint_failed}
    assert %{checkpoint: ^big, lease_count: 2} = AppState.get_lease("kcl", s, "shard-0", opts)
  end

  test "close by the owner ends the shard; a non-owner's close fails; incomplete leases exclude it", %{opts: opts} do
    s = stream()
    for i <- 0..2, do: :ok = AppState.create_lease("kcl", s, "shard-#{i}", "w1", opts)
    assert AppState.close_shard("kcl", s, "shard-1", "w2", opts) == {:error, :close_shard_failed}
    assert AppState.close_shard("kcl", s, "shard-1", "w1", opts) == :ok
    assert %{completed: true, checkpoint: "SHARD_END"} = AppState.get_lease("kcl", s, "shard-1", opts)
    assert AppState.update_checkpoint("kcl", s, "shard-1", "w1", "1", opts) == {:error, :update_checkpoint_failed}
    assert Enum.map(AppState.all_incomplete_leases("kcl", s, opts), & &1.shard_id) == ["shard-0", "shard-2"]
  end

  test "counts by worker, the owner with the most leases, leases by worker", %{opts: opts} do
    s = stream()
    for {shard, owner} <- [{"a0", "w1"}, {"a1", "w1"}, {"a2", "w1"}, {"b0", "w2"}, {"c0", "w3"}],
        do: :ok = AppState.create_lease("kcl", s, shard, owner, opts)
    :ok = AppState.close_shard("kcl", s, "c0", "w3", opts)
    assert AppState.total_incomplete_lease_counts_by_worker("kcl", s, opts) == [{"w1", 3}, {"w2", 1}]
    assert Enum.map(AppState.lease_owner_with_most_leases("kcl", s, opts), & &1.shard_id) == ["a0", "a1", "a2"]
    assert Enum.map(AppState.get_leases_by_worker("kcl", s, "w2", opts), & &1.shard_id) == ["b0"]
    assert AppState.lease_owner_with_most_leases("kcl", "empty-stream", opts) == []
  end

  test "bad input and missing privileges come back as {:error, _} with the SQLSTATE", %{opts: opts} do
    assert {:error, %PgLease.Session.Error{code: "22023"}} = AppState.create_lease("kcl", " ", "s", "w1", opts)
    assert {:error, %PgLease.Session.Error{code: "42501"}} = AppState.create_lease("other-app", "s", "s", "w1", opts)
  end
end

defmodule PgLease.SessionTest do
  use ExUnit.Case
  alias PgLease.Session

  test "the wiring: text round trips, lists become text[] (1-D and 2-D), errors carry the SQLSTATE, notices come back" do
    db = PgLeaseTest.Db.session("clients_worker")
    odd = ~S(a "quoted", back\slash, {braces} é)
    assert Session.call(db, "SELECT $1::text, $2::bigint::text, $3::text", [odd, 42, nil]) == [[odd, "42", nil]]
    assert Session.call(db, "SELECT ($1::text[])[2], cardinality($1::text[])::text, (($1::text[])[3] IS NULL)::text", [["x", odd, nil]]) ==
             [[odd, "3", "true"]]
    assert Session.one(db, "SELECT ($1::text[])[2][1]", [[["a", nil], ["b", "c"]]]) == "b"
    assert_raise Session.Error, ~r/division by zero/, fn -> Session.call(db, "SELECT (1 / 0)::text") end
    # the WARNING of a cancelled sync-rep wait makes a call ambiguous; another notice does
    # not (p1_pgsql reads no notice: every one drops its connection, ambiguous too)
    warn = "DO $$BEGIN RAISE WARNING 'canceling wait for synchronous replication due to user request'; END$$"
    assert_raise Session.Ambiguous, fn -> Session.call(db, warn, [], repeat_safe: false) end
    notice = "DO $$BEGIN RAISE NOTICE 'canceling wait for synchronous replication'; END$$"
    if PgLeaseTest.Db.wiring() == "pgsql",
      do: assert_raise(Session.Ambiguous, fn -> Session.call(db, notice, [], repeat_safe: false) end),
      else: assert(Session.call(db, notice) == [])
  end
end

defmodule PgLease.ChannelsTest do
  use ExUnit.Case
  alias PgLease.{Channels, Session}

  test "rotate_channel: a started replacement is confirmed, a failed one restored, unbound, 20 rotations at limit 2" do
    app = PgLeaseTest.Db.session("clients_app")
    admin = PgLeaseTest.Db.session("postgres")
    tenant = "clients-ex-#{PgLeaseTest.Db.wiring()}-#{System.os_time()}"
    scope = [tenant, "bot", nil, nil, "C1"]
    [["started", first]] = Session.call(app, "SELECT outcome, conversation_id::text FROM lease.start_conversation($1, $2, $3, $4, $5)", scope)
    first = String.to_integer(first)
    r = Channels.rotate_channel(app, scope, fn _id -> true end)
    assert %{outcome: "rotated", previous_conversation_id: ^first} = r
    second = r.conversation_id
    status = "SELECT c.status || '/' || s.status FROM lease.conversations c JOIN lease.sandboxes s ON s.id = c.sandbox_id WHERE c.id = $1::bigint"
    assert Session.one(admin, status, [second]) == "running/pending"
    assert Session.one(admin, status, [first]) == "terminated/terminated"
    for failing <- [fn _ -> raise "sandbox did not come up" end, fn _ -> false end] do
      assert %{outcome: "restored", previous_conversation_id: ^second} = Channels.rotate_channel(app, scope, failing)
    end
    assert Session.one(app, "SELECT lease.find_channel_conversation($1, $2, $3, $4, $5)::text", scope) == "#{second}"
    assert %{outcome: "unbound"} = Channels.rotate_channel(app, List.replace_at(scope, 4, "no-such-channel"), fn _ -> true end)
    Session.one(admin, "SELECT lease.set_tenant_limit($1, 2)::text", [tenant])
    assert Enum.map(1..20, fn _ -> Channels.rotate_channel(app, scope, fn _ -> true end).outcome end) == List.duplicate("rotated", 20)
  end
end

defmodule PgLease.WorkerTest do
  use ExUnit.Case
  alias PgLease.Session

  defmodule Idle do
    @behaviour PgLease.RecordProcessor
    def initialize(_shard, _checkpoint, state), do: state
    def process_records(_shard, state), do: {nil, state}
    def shutdown(_shard, _reason, state), do: state
  end

  # writes one row per record in the batch's transaction; raises on the batch whose
  # first record is state.boom (an unexpected exception of the processor's own)
  defmodule Rows do
    @behaviour PgLease.RecordProcessor
    def initialize(shard, checkpoint, state) do
      at = if checkpoint.sequence == "TRIM_HORIZON", do: 0, else: String.to_integer(checkpoint.sequence)
      send(state.test, {:initialized, shard, checkpoint})
      put_in(state.position[shard], at)
    end

    def process_records(shard, state) do
      first = state.position[shard] + 1
      if first == state.boom, do: raise("the processor failed on #{shard}")
      {{Integer.to_string(first + 2), 1}, put_in(state.position[shard], first + 2)}
    end

    def process_records(shard, tx, state) do
      first = state.position[shard] + 1
      tx.("INSERT INTO public.ex_tx_out SELECT $1, s FROM generate_series($2::int, $3::int) AS s", [shard, first, first + 2])
      {Integer.to_string(first + 2), put_in(state.position[shard], first + 2)}
    end

    def shutdown(shard, reason, state) do
      send(state.test, {:shutdown, shard, reason})
      state
    end
  end

  defp stream(name), do: "ex-#{name}-#{PgLeaseTest.Db.wiring()}-#{System.unique_integer([:positive])}"

  defp opts(user, stream, extra) do
    Keyword.merge([session: PgLeaseTest.Db.connector(user), app: "clients", stream: stream, owner: "ex-t",
                   processor: {Idle, nil}, lease_duration: 3000], extra)
  end

  defp admin, do: PgLeaseTest.Db.session("postgres")

  defp leases(stream, n) do
    Session.call(admin(), "SELECT lease.create_lease('clients', $1, 's' || i)::text FROM generate_series(1, $2::int) AS i", [stream, n])
  end

  @tag :pgsql_only
  test "a role that cannot log in stops the worker loudly, after the rules' retries" do
    Process.flag(:trap_exit, true)
    log =
      ExUnit.CaptureLog.capture_log(fn ->
        {:ok, pid} = PgLease.Worker.start_link(opts("no_such_role", "ex-worker", []))
        assert_receive {:EXIT, ^pid, {%PgLease.Session.Error{code: "28000", kind: :fatal}, _}}, 10_000
      end)
    assert log =~ ~s|ex-t: stopping the worker: role "no_such_role" does not exist (SQLSTATE 28000)|
    assert length(String.split(log, "could not connect")) == PgLease.Rules.tries()   # retried, then raised
  end

  test "the shard-list callback creates the listed shards through lease.sync_shards" do
    s = stream("sync")
    {:ok, pid} = PgLease.Worker.start_link(opts("clients_worker", s, shard_list: fn -> {["y0", "y1"], [nil, "y0"]} end))
    Process.sleep(500)
    :ok = PgLease.Worker.stop(pid)
    rows = Session.call(admin(), "SELECT shard_id, parent_shard_ids::text FROM lease.shard_leases WHERE stream_name = $1 ORDER BY 1", [s])
    assert rows == [["y0", "{}"], ["y1", "{y0}"]]
  end

  test "sub-sequences: the checkpoint {sequence, sub} is written and given back to the next processor" do
    s = stream("sub")
    leases(s, 1)
    state = %{test: self(), position: %{}, boom: nil}
    {:ok, pid} = PgLease.Worker.start_link(opts("clients_worker", s, processor: {Rows, state}))
    assert_receive {:initialized, "s1", %PgLease.Checkpoint{sequence: "TRIM_HORIZON", sub_sequence: 0}}, 5000
    Process.sleep(300)
    :ok = PgLease.Worker.stop(pid)
    [[checkpoint, sub]] = Session.call(admin(), "SELECT checkpoint, checkpoint_sub_sequence::text FROM lease.shard_leases WHERE stream_name = $1", [s])
    assert sub == "1" and String.to_integer(checkpoint) > 3
    {:ok, pid} = PgLease.Worker.start_link(opts("clients_worker", s, processor: {Rows, state}))
    assert_receive {:initialized, "s1", %PgLease.Checkpoint{sequence: ^checkpoint, sub_sequence: 1}}, 5000
    :ok = PgLease.Worker.stop(pid)
  end

  test "an unexpected exception of the processor stops the worker and releases what it holds at once" do
    s = stream("boom")
    leases(s, 3)
    Process.flag(:trap_exit, true)
    {:ok, pid} = PgLease.Worker.start_link(opts("clients_worker", s, processor: {Rows, %{test: self(), position: %{}, boom: 10}}))
    assert_receive {:EXIT, ^pid, {%RuntimeError{message: "the processor failed on " <> _}, _}}, 10_000
    for _ <- 1..3, do: assert_received({:shutdown, _, "worker stopped"})
    rows = Session.call(admin(), "SELECT count(*) FILTER (WHERE lease_owner IS NULL)::text, count(*)::text, " <>
                                 "count(*) FILTER (WHERE checkpoint <> 'TRIM_HORIZON')::text FROM lease.shard_leases WHERE stream_name = $1", [s])
    assert rows == [["3", "3", "3"]]     # released (not left to expire), the batches before it checkpointed
  end

  test "transactional mode: each batch's rows and its checkpoint commit together, exactly once" do
    s = stream("tx")
    leases(s, 2)
    # (no IF NOT EXISTS: its notice would drop a p1_pgsql connection)
    Session.call(admin(), "DO $$BEGIN IF to_regclass('public.ex_tx_out') IS NULL THEN " <>
                          "CREATE TABLE public.ex_tx_out (shard_id text, seq int); END IF; END$$")
    Session.call(admin(), "GRANT INSERT ON public.ex_tx_out TO clients_worker")
    {:ok, pid} = PgLease.Worker.start_link(opts("clients_worker", s, processor: {Rows, %{test: self(), position: %{}, boom: nil}},
                                                transactional: true))
    Process.sleep(1500)
    :ok = PgLease.Worker.stop(pid)
    verdict = Session.call(admin(), """
    SELECT count(*)::text, (SELECT sum(checkpoint::int) FROM lease.shard_leases WHERE stream_name = $1)::text,
           count(DISTINCT (o.shard_id, o.seq))::text
      FROM public.ex_tx_out o WHERE o.shard_id IN (SELECT shard_id FROM lease.shard_leases WHERE stream_name = $1)
       AND o.seq <= (SELECT checkpoint::int FROM lease.shard_leases l WHERE l.stream_name = $1 AND l.shard_id = o.shard_id)
    """, [s])
    [[rows, total, distinct]] = verdict
    assert rows == total and rows == distinct and String.to_integer(rows) > 0
    Session.call(admin(), "DELETE FROM public.ex_tx_out")
  end
end
