defmodule PgLease.MixProject do
  use Mix.Project

  # No dependencies: the application supplies the query function (its own
  # Postgrex or Ecto repo: PgLease.Session.postgrex/2, ecto/2), or uses
  # PgLease.Pgsql over Debian's erlang-p1-pgsql.  Each driver is optional:
  # only the function that wires it calls it.
  def project do
    [app: :pg_lease, version: "0.5.0", elixir: "~> 1.14", deps: [],
     xref: [exclude: [:pgsql, Postgrex, DBConnection, Ecto.Adapters.SQL]]]
  end

  def application, do: [extra_applications: [:logger]]
end
