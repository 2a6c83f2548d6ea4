# The Elixir client against the real extension (test/clients/run.sh runs it):
# every kcl_ex AppState callback of PgLease.KclEx.AppState with kcl_ex's
# return values, the channel-rotation helper, the worker's loud failure and
# its shard-list callback.  Connects over TCP (p1_pgsql) to
# 127.0.0.1:$PG_LEASE_EX_PORT, database $PG_LEASE_EX_DB.  Besides ExUnit's
# own report, one line per test in $PG_LEASE_EX_TAP, "ok NAME" or "not ok
# NAME", which run.sh turns into its TAP lines.
defmodule PgLeaseTest.Tap do
  use GenServer
  def init(_opts), do: {:ok, nil}

  def handle_cast({:test_finished, %ExUnit.Test{module: module, name: name, state: state}}, acc) do
    verdict = if state == nil, do: "ok", else: "not ok"
    File.write!(System.fetch_env!("PG_LEASE_EX_TAP"), "#{verdict} #{inspect(module)}: #{name}\n", [:append])
    {:noreply, acc}
  end

  def handle_cast(_event, acc), do: {:noreply, acc}
end

ExUnit.start(formatters: [ExUnit.CLIFormatter, PgLeaseTest.Tap])

defmodule PgLeaseTest.Db do
  def session(user) do
    {:ok, conn} = PgLease.Pgsql.start_link(host: "127.0.0.1", port: String.to_integer(System.fetch_env!("PG_LEASE_EX_PORT")),
                                           user: user, database: System.fetch_env!("PG_LEASE_EX_DB"))
    PgLease.Pgsql.session(conn)
  end
end

defmodule PgLease.KclEx.AppStateTest do
  use ExUnit.Case
  alias PgLease.KclEx.AppState

  setup_all do
    {:ok, opts: [query: PgLeaseTest.Db.session("clients_kcl")], admin: PgLeaseTest.Db.session("postgres")}
  end

  defp stream, do: "kcl-#{System.os_time()}-#{System.unique_integer([:positive])}"

  test "initialize: the app is reachable, nothing created", %{opts: opts} do
    assert AppState.initialize("kcl", opts) == :ok
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

  test "checkpoint after a renewal (the seed race) succeeds; a non-owner's is refused", %{opts: opts} do
    s = stream()
    :ok = AppState.create_lease("kcl", s, "shard-0", "w1", opts)
    lease = AppState.get_lease("kcl", s, "shard-0", opts)
    # the lease process renews between the batch and its checkpoint: kcl_ex's
    # Ecto adapter then fails the checkpoint (its UPDATE matches the count read before)
    assert {:ok, 2} = AppState.renew_lease("kcl", s, lease, opts)
    assert AppState.update_checkpoint("kcl", s, "shard-0", "w1", "4959-1", opts) == :ok
    assert AppState.update_checkpoint("kcl", s, "shard-0", "w2", "4959-2", opts) == {:error, :update_checkpoint_failed}
    assert %{checkpoint: "4959-1", lease_count: 2} = AppState.get_lease("kcl", s, "shard-0", opts)
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

  test "the p1_pgsql wiring: text round trips, lists become text[] (1-D and 2-D), errors carry the SQLSTATE" do
    db = PgLeaseTest.Db.session("clients_worker")
    odd = ~S(a "quoted", back\slash, {braces} é)
    assert Session.call(db, "SELECT $1::text, $2::bigint::text, $3::text", [odd, 42, nil]) == [[odd, "42", nil]]
    assert Session.call(db, "SELECT ($1::text[])[2], cardinality($1::text[])::text, (($1::text[])[3] IS NULL)::text", [["x", odd, nil]]) ==
             [[odd, "3", "true"]]
    assert Session.one(db, "SELECT ($1::text[])[2][1]", [[["a", nil], ["b", "c"]]]) == "b"
    assert_raise Session.Error, ~r/division by zero/, fn -> Session.call(db, "SELECT (1 / 0)::text") end
  end
end

defmodule PgLease.ChannelsTest do
  use ExUnit.Case
  alias PgLease.{Channels, Session}

  test "rotate_channel: a started replacement is confirmed, a failed one restored, unbound, 20 rotations at limit 2" do
    app = PgLeaseTest.Db.session("clients_app")
    admin = PgLeaseTest.Db.session("postgres")
    tenant = "clients-ex-#{System.os_time()}"
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

  defmodule Idle do
    @behaviour PgLease.RecordProcessor
    def initialize(_shard, _checkpoint, state), do: state
    def process_records(_shard, state), do: {nil, state}
    def shutdown(_shard, _reason, state), do: state
  end

  defp opts(user, extra) do
    [session: fn _ -> PgLeaseTest.Db.session(user) end, app: "clients", stream: "ex-worker", owner: "ex-t",
     processor: {Idle, nil}, lease_duration: 3000] ++ extra
  end

  test "a role that cannot log in stops the worker loudly, after the rules' retries" do
    Process.flag(:trap_exit, true)
    log =
      ExUnit.CaptureLog.capture_log(fn ->
        {:ok, pid} = PgLease.Worker.start_link(opts("no_such_role", []))
        assert_receive {:EXIT, ^pid, {%PgLease.Session.Error{code: "28000"}, _}}, 10_000
      end)
    assert log =~ ~s|worker ex-t stops: role "no_such_role" does not exist (SQLSTATE 28000)|
    assert length(String.split(log, "could not connect")) == PgLease.Rules.tries()   # retried, then raised
  end

  test "the shard-list callback creates the listed shards through lease.sync_shards" do
    admin = PgLeaseTest.Db.session("postgres")
    {:ok, pid} = PgLease.Worker.start_link(opts("clients_worker", shard_list: fn -> {["y0", "y1"], [nil, "y0"]} end))
    Process.sleep(500)
    :ok = PgLease.Worker.stop(pid)
    rows = PgLease.Session.call(admin, "SELECT shard_id, parent_shard_ids::text FROM lease.shard_leases WHERE stream_name = 'ex-worker' ORDER BY 1")
    assert rows == [["y0", "{}"], ["y1", "{y0}"]]
  end
end
