defmodule PgLease.Journal do
  @moduledoc false
  # Appends what the server acknowledged, one JSON line per event (O_APPEND:
  # survives a SIGKILL), in the format of the Python and Node clients'
  # journals (test/clients/check.py reads them all).  Off unless a test turns
  # it on (PgLease.Testing).  `json/1` is a small encoder (no JSON library
  # ships with Elixir 1.14).

  defstruct [:file, :owner]

  def open(nil, owner), do: %__MODULE__{file: nil, owner: owner}
  def open(path, owner), do: %__MODULE__{file: File.open!(path, [:append, :binary, :raw]), owner: owner}

  def write(%__MODULE__{file: nil}, _event, _fields), do: :ok

  def write(%__MODULE__{file: file, owner: owner}, event, fields) do
    fields = fields |> Map.new() |> Map.merge(%{ev: event, w: owner, t: now()})
    :ok = :file.write(file, [json(fields), ?\n])
  end

  @doc "Wall-clock seconds, as a float."
  def now, do: System.os_time(:microsecond) / 1_000_000

  @doc "The wall-clock time (seconds) of a `System.monotonic_time(:microsecond)` value."
  def wall(mono), do: now() - (System.monotonic_time(:microsecond) - mono) / 1_000_000

  @doc "JSON text of maps, lists, strings, numbers, booleans and nil."
  def json(nil), do: "null"
  def json(true), do: "true"
  def json(false), do: "false"
  def json(n) when is_integer(n), do: Integer.to_string(n)
  def json(n) when is_float(n), do: :erlang.float_to_binary(n, [:short])
  def json(a) when is_atom(a), do: json(Atom.to_string(a))
  def json(s) when is_binary(s), do: [?", escape(s), ?"]
  def json(l) when is_list(l), do: [?[, Enum.intersperse(Enum.map(l, &json/1), ?,), ?]]

  def json(m) when is_map(m) do
    pairs = Enum.map(m, fn {k, v} -> [json(to_string(k)), ?:, json(v)] end)
    [?{, Enum.intersperse(pairs, ?,), ?}]
  end

  defp escape(s) do
    for <<c::utf8 <- s>>, into: "" do
      case c do
        ?" -> "\\\""
        ?\\ -> "\\\\"
        ?\n -> "\\n"
        c when c < 0x20 -> "\\u" <> String.pad_leading(Integer.to_string(c, 16), 4, "0")
        c -> <<c::utf8>>
      end
    end
  end
end
