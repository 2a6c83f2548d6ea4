defmodule PgLease.Channels do
  @moduledoc """
  The channel-rotation helper: `rotate_channel`, start the replacement,
  confirm it (which ends the previous conversation), restore on failure.
  Follows docs/channel-bindings.md and docs/client-rules.md (`rotate_channel`
  is not safe to repeat after an ambiguous commit; `confirm_rotation` and
  `restore_rotated_channel` are).  The same outcomes as the Python helper:
  `rotated`, `ended`, `restored` / `superseded` / `failed`, `refused`,
  `busy`, `binding_changed`, `unbound`, `ambiguous`.
  """
  alias PgLease.Session

  @find "SELECT lease.find_channel_conversation($1, $2, $3, $4, $5)::text"
  @rotate "SELECT outcome, conversation_id::text, previous_conversation_id::text, detail " <>
            "FROM lease.rotate_channel($1, $2, $3, $4, $5, $6::bigint)"
  @restore "SELECT lease.restore_rotated_channel($1::bigint, $2::bigint)::text"
  @confirm "SELECT lease.confirm_rotation($1::bigint, $2::bigint)::text"

  @doc """
  Rotates the channel `scope` (`[user_id, agent_id, vault_id, environment_id,
  channel_id]`) to a fresh conversation; `start_replacement.(conversation_id)`
  starts its worker and returns true, or returns false / raises when it could
  not.  Returns `%{outcome:, conversation_id:, previous_conversation_id:, detail:}`.
  """
  def rotate_channel(session, scope, start_replacement, opts \\ []) do
    rotate_from = Keyword.get_lazy(opts, :rotate_from, fn -> find(session, scope) end)
    attempt(session, scope, start_replacement, rotate_from, Keyword.get(opts, :tries, 5), 0, {"binding_changed", nil})
  end

  defp result(outcome, id, previous, detail),
    do: %{outcome: outcome, conversation_id: id, previous_conversation_id: previous, detail: detail}

  defp attempt(_session, _scope, _start, rotate_from, tries, attempt, {outcome, detail}) when attempt >= tries,
    do: result(outcome, nil, rotate_from, detail)

  defp attempt(_session, _scope, _start, nil, _tries, _attempt, _last), do: result("unbound", nil, nil, nil)

  defp attempt(session, scope, start, rotate_from, tries, attempt, _last) do
    case rotate(session, scope, rotate_from) do
      {:ambiguous, message} ->
        case find(session, scope) do
          ^rotate_from -> attempt(session, scope, start, rotate_from, tries, attempt + 1, {"binding_changed", nil})
          bound -> result("ambiguous", bound, rotate_from, message)
        end

      ["rotated", new_id, previous, detail] ->
        {new_id, previous} = {id(new_id), id(previous)}
        {started, error} =
          try do
            {start.(new_id) == true, nil}
          rescue
            e -> {false, Exception.message(e)}   # the user's callback: any failure means "did not start"
          end

        if started do
          # the replacement runs: ending the previous conversation frees its slot (safe to repeat)
          case Session.one(session, @confirm, [previous, new_id]) do
            "ended" -> result("ended", new_id, previous, "the replacement was ended before it was confirmed")
            _ -> result("rotated", new_id, previous, detail)
          end
        else
          restored = Session.one(session, @restore, [previous, new_id])
          result(restored, new_id, previous, error || "the replacement did not start")
        end

      ["refused", _, _, detail] ->
        result("refused", nil, rotate_from, detail)

      ["binding_changed", _, _, detail] ->
        Process.sleep(20 * (attempt + 1))
        rotate_from = find(session, scope)
        attempt(session, scope, start, rotate_from, tries, attempt + 1, {"binding_changed", detail})

      [outcome, _, _, detail] ->
        Process.sleep(20 * (attempt + 1))   # busy: the previous conversation is admitting a turn
        attempt(session, scope, start, rotate_from, tries, attempt + 1, {outcome, detail})
    end
  end

  # conversation ids: integers (the SQL returns them as text, so every driver sees the same)
  defp id(nil), do: nil
  defp id(text), do: String.to_integer(text)
  defp find(session, scope), do: id(Session.one(session, @find, scope))

  defp rotate(session, scope, rotate_from) do
    [row] = Session.call(session, @rotate, scope ++ [rotate_from], repeat_safe: false)
    row
  rescue
    e in Session.Ambiguous -> {:ambiguous, Exception.message(e)}
  end
end
