defmodule PgLease.MixProject do
  use Mix.Project

  # No dependencies: the application supplies the query function (its own
  # Postgrex or Ecto repo), or uses PgLease.Pgsql over Debian's erlang-p1-pgsql.
  # (:pgsql is optional: only PgLease.Pgsql calls it)
  def project, do: [app: :pg_lease, version: "0.5.0", elixir: "~> 1.14", deps: [], xref: [exclude: [:pgsql]]]

  def application, do: [extra_applications: [:logger]]
end
