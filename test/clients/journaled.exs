# Loaded before an Elixir worker script (the clients suite):
#
#     PG_LEASE_JOURNAL_DIR=DIR elixir -pa EBIN -r test/clients/journaled.exs SCRIPT ARGS...
#
# every PgLease.Worker the script starts appends what the server acknowledged
# to DIR/OWNER.journal (PgLease.Testing), which test/clients/check.py reads;
# PG_LEASE_IGNORE_RULE_6=1 makes them ignore rule 6's deadline (the negative
# control of fast failover).  The example worker itself knows nothing of journals.
PgLease.Testing.journal_to(System.fetch_env!("PG_LEASE_JOURNAL_DIR"))
if System.get_env("PG_LEASE_IGNORE_RULE_6") == "1", do: PgLease.Testing.ignore_rule_6()
