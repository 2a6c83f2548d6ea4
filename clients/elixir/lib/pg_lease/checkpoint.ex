defmodule PgLease.Checkpoint do
  @moduledoc """
  Where a shard's processing has got to, as the worker gives it to
  `c:PgLease.RecordProcessor.initialize/3`: the `sequence` number (or the
  sentinel `TRIM_HORIZON`, `LATEST`, `AT_TIMESTAMP`) as text, never parsed
  (a Kinesis sequence number has up to 128 bits: `String.to_integer/1`
  reads it exactly, a float or a fixed-size integer would not), the
  `sub_sequence` of a KPL-aggregated record (KCL's ExtendedSequenceNumber,
  0 for a plain record), and the `pending` checkpoint a previous owner
  prepared and did not complete (KCL's pendingCheckpointSequenceNumber), or
  nil.  `to_string/1` gives the sequence.
  """
  defstruct [:sequence, sub_sequence: 0, pending: nil]

  @type t :: %__MODULE__{sequence: String.t(), sub_sequence: non_neg_integer, pending: String.t() | nil}

  @doc """
  `{sequence, sub_sequence}` of what a processor returned: a string
  (sub-sequence 0), `{sequence, sub_sequence}`, or a `PgLease.Checkpoint`.
  """
  def position(%__MODULE__{sequence: sequence, sub_sequence: sub}), do: {sequence, sub}
  def position({sequence, sub}) when is_binary(sequence) and is_integer(sub) and sub >= 0, do: {sequence, sub}
  def position(sequence) when is_binary(sequence), do: {sequence, 0}

  defimpl String.Chars do
    def to_string(%{sequence: sequence}), do: sequence
  end
end
