defmodule PgLease.Testing do
  @moduledoc false
  # Hooks for pg_lease's own tests (test/clients), not part of the API: they
  # apply to every PgLease.Worker started afterwards in this node.

  @doc false
  # Every worker appends what the server acknowledged to it (takes and renewals
  # with their send times and epochs, processor starts, checkpoints, releases,
  # closes, shutdowns) to DIR/OWNER.journal, one JSON line per event: what
  # test/clients/check.py reads.
  def journal_to(dir), do: :persistent_term.put({PgLease.Worker, :journal_dir}, dir)

  @doc false
  # Fast-failover mode without rule 6's deadline (docs/client-rules.md): the
  # negative control, which must let a worker process after its leases were taken.
  def ignore_rule_6, do: :persistent_term.put({PgLease.Worker, :ignore_rule_6}, true)
end
