defmodule PgLease.Rules do
  @moduledoc """
  What to do when a call fails: docs/client-rules.md, as code.

  The table is clients/rules.json's: test/clients/rules_table.py checks that
  these sets, patterns and tries are exactly the ones there, and the clients
  suite that `classify/2` answers every case of test/clients/rules_cases.json
  as the page says.
  """

  # Rolled back, nothing happened: repeat the same call after a short backoff.
  @repeat ~w(40001 40P01 55P03 57014 40L01)
  # No usable connection, nothing happened: reconnect, then repeat.
  @reconnect ~w(53300 57P03 25006)
  # The connection is gone and the call may or may not have committed (so is
  # any error without a SQLSTATE, and every class 08 error).
  @ambiguous ~w(57P01 57P02)
  # Through the router: PL/Proxy's own XX000 whose message names a lost
  # partition connection (or a timeout on it) is ambiguous too; any other
  # XX000 is raised.
  @plproxy_connection_lost ~S"^PL/Proxy function [^ ]+ (\[[^ ]+\] )?(PQconnectStart|PQconnectPoll|PQsendQuery|PQflush|PQconsumeInput|connect timeout|query timeout)"
  # Transactional mode: hold_lease's 55000 (the lease is not held at the
  # worker's epoch; its transaction is aborted): drop the shard.  Any other
  # 55000 is raised.
  @lease_not_held ~S"(^|REMOTE ERROR: )lease .+ is not held by "
  # The server refused these credentials or this database, at connect: a
  # configuration error no retry fixes; tried like any failed connection,
  # then the worker stops, loudly.  A driver that gives no SQLSTATE at
  # connect is matched by its message (only when there is none).
  @fatal ~w(28P01 28000 3D000)
  @connect_refused ~S'(password authentication failed|Peer authentication failed|Ident authentication failed|no pg_hba\.conf entry|role "[^"]+" does not exist|database "[^"]+" does not exist)'

  # A call, or the COMMIT of a transaction, that comes back with this WARNING
  # committed locally but may not have been replicated (a waiting backend's
  # synchronous replication wait was cancelled, by an operator or a failover
  # manager): ambiguous, not success.
  @sync_rep_cancelled ~S"canceling (the )?wait for synchronous replication"

  @doc "How many times a call is tried before it counts as a lost connection."
  def tries, do: 5

  @doc """
  `:repeat`, `:reconnect`, `:ambiguous`, `:drop`, `:fatal` or `:raise` for an error's
  SQLSTATE (nil: no SQLSTATE) and primary message.
  """
  def classify(sqlstate, message \\ nil) do
    cond do
      sqlstate in @fatal -> :fatal
      sqlstate == nil and matches?(@connect_refused, message) -> :fatal
      not (is_binary(sqlstate) and sqlstate =~ ~r/^[0-9A-Z]{5}$/) -> :ambiguous
      String.starts_with?(sqlstate, "08") or sqlstate in @ambiguous -> :ambiguous
      sqlstate == "XX000" and matches?(@plproxy_connection_lost, message) -> :ambiguous
      sqlstate == "55000" and matches?(@lease_not_held, message) -> :drop
      sqlstate in @repeat -> :repeat
      sqlstate in @reconnect -> :reconnect
      true -> :raise
    end
  end

  @doc """
  True when a notice (its severity and primary message) makes the call that
  raised it ambiguous: the cancelled wait for synchronous replication.
  """
  def ambiguous_notice?(severity, message), do: severity == "WARNING" and matches?(@sync_rep_cancelled, message)

  defp matches?(pattern, message) when is_binary(message), do: Regex.match?(Regex.compile!(pattern), message)
  defp matches?(_pattern, _message), do: false

  @doc "Milliseconds to wait before try number attempt + 1 (random, growing)."
  def backoff(attempt), do: round(min(1000, 20 * :math.pow(2, attempt)) * (0.5 + :rand.uniform()))
end
