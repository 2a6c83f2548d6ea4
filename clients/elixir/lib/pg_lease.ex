defmodule PgLease do
  @moduledoc """
  The Elixir client of pg_lease: a driver-agnostic session (`PgLease.Session`:
  every call goes through one function the application supplies), the
  worker (`PgLease.Worker`, a GenServer, with `PgLease.RecordProcessor`), the
  channel-rotation helper (`PgLease.Channels`), and a kcl_ex AppState adapter
  (`PgLease.KclEx.AppState`).  docs/clients/elixir.md shows them in use.
  """

  @doc """
  A PostgreSQL array literal of a list of strings (nil: NULL), or of a list
  of such lists (2-D): a parameter value for `$n::text[]`, never SQL text.
  """
  def array(list) when is_list(list), do: "{" <> Enum.map_join(list, ",", &element/1) <> "}"

  defp element(nil), do: "NULL"
  defp element(list) when is_list(list), do: array(list)
  defp element(value), do: ~s(") <> String.replace(to_string(value), ~r/(["\\])/, ~S"\\\1") <> ~s(")
end
