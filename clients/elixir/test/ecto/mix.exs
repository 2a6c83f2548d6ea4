defmodule PgLeaseEctoTest.MixProject do
  # The Elixir client's tests over Postgrex and Ecto (test/clients/elixir.sh):
  # Postgrex, db_connection, decimal, telemetry, ecto and ecto_sql from their
  # vendored sources in $PG_LEASE_ELIXIR_VENDOR (upstream releases that compile
  # offline), the client from ../..; `mix run ../app_state_test.exs` runs the tests.
  use Mix.Project

  def project, do: [app: :pg_lease_ecto_test, version: "0.5.0", elixir: "~> 1.14", deps: deps()]

  def application, do: [extra_applications: [:logger]]

  defp deps do
    vendor = System.fetch_env!("PG_LEASE_ELIXIR_VENDOR")
    vendored = for name <- ~w(postgrex db_connection decimal telemetry ecto ecto_sql),
                   do: {String.to_atom(name), path: Path.join(vendor, name), override: true}
    [{:pg_lease, path: "../.."} | vendored]
  end
end
