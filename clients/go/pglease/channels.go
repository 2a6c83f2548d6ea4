package pglease

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The channel-rotation helper: rotate_channel, start the replacement,
// confirm it (which ends the previous conversation), restore on failure.  It
// follows docs/channel-bindings.md (the rotation protocol) and
// docs/client-rules.md (rotate_channel is not safe to repeat after an
// ambiguous commit; confirm_rotation and restore_rotated_channel are); the
// same helper as the Python and Node clients'.

const (
	sqlFind    = "SELECT lease.find_channel_conversation($1, $2, $3, $4, $5)"
	sqlRotate  = "SELECT outcome, conversation_id, previous_conversation_id, detail FROM lease.rotate_channel($1, $2, $3, $4, $5, $6::bigint)"
	sqlRestore = "SELECT lease.restore_rotated_channel($1::bigint, $2::bigint)"
	sqlConfirm = "SELECT lease.confirm_rotation($1::bigint, $2::bigint)"
)

// ChannelScope names a channel: the tenant (UserID), the agent, the
// optional vault and environment (nil: none), and the channel.
type ChannelScope struct {
	UserID, AgentID        string
	VaultID, EnvironmentID *string
	ChannelID              string
}

func (s ChannelScope) args(extra ...interface{}) []interface{} {
	return append([]interface{}{s.UserID, s.AgentID, s.VaultID, s.EnvironmentID, s.ChannelID}, extra...)
}

// RotationResult is what RotateChannel did.  Outcome is one of: rotated (the
// replacement started and was confirmed: the previous conversation has ended
// and its sandbox slot is free), ended (the replacement started but had been
// ended, e.g. restored by someone else, before it could be confirmed),
// restored / superseded / failed (it did not start; what
// restore_rotated_channel answered), refused, busy, binding_changed (still so
// after the retries), unbound (no conversation holds the channel), ambiguous
// (the connection broke during the rotation and the channel is now bound to
// ConversationID: maybe ours, maybe a competitor's; see
// docs/client-rules.md).  Conversation ids are 0 when there is none.
type RotationResult struct {
	Outcome                string
	ConversationID         int64
	PreviousConversationID int64
	Detail                 string
}

// StartReplacement starts the worker of a replacement conversation; it
// returns true when it started, false or an error when it could not.
type StartReplacement func(ctx context.Context, conversationID int64) (bool, error)

// RotateOptions are RotateChannel's optional settings.
type RotateOptions struct {
	RotateFrom int64 // the conversation to rotate from; 0: the one bound now
	Tries      int   // rotate_channel calls at most; default 5
}

func int64Of(v interface{}) int64 {
	n, _ := v.(int64)
	return n
}

func (s *Session) boundConversation(ctx context.Context, scope ChannelScope) (int64, error) {
	v, err := s.One(ctx, sqlFind, scope.args()...)
	return int64Of(v), err
}

// RotateChannel rotates the channel to a fresh conversation and starts it
// with start; it confirms a replacement that started and restores one that
// did not.
func RotateChannel(ctx context.Context, s *Session, scope ChannelScope, start StartReplacement,
	opts RotateOptions) (RotationResult, error) {
	tries := opts.Tries
	if tries <= 0 {
		tries = 5
	}
	from := opts.RotateFrom
	var err error
	if from == 0 {
		if from, err = s.boundConversation(ctx, scope); err != nil {
			return RotationResult{}, err
		}
	}
	outcome, detail := "binding_changed", ""
	for attempt := 0; attempt < tries; attempt++ {
		if from == 0 {
			return RotationResult{Outcome: "unbound"}, nil
		}
		rows, err := s.CallOnce(ctx, sqlRotate, scope.args(from)...)
		var amb *AmbiguousError
		if errors.As(err, &amb) {
			bound, err := s.boundConversation(ctx, scope)
			if err != nil {
				return RotationResult{}, err
			}
			if bound == from {
				continue // nothing happened: rotate again
			}
			return RotationResult{"ambiguous", bound, from, amb.Error()}, nil
		}
		if err != nil {
			return RotationResult{}, err
		}
		row := rows[0]
		outcome = row[0].(string)
		newID, previous := int64Of(row[1]), int64Of(row[2])
		detail, _ = row[3].(string)
		switch outcome {
		case "rotated":
			started, startErr := start(ctx, newID)
			if started && startErr == nil {
				// The replacement runs: ending the previous conversation now
				// frees its slot.  Safe to repeat; its first turn would do the same.
				confirmed, err := s.One(ctx, sqlConfirm, previous, newID)
				if err != nil {
					return RotationResult{}, err
				}
				if confirmed == "ended" {
					return RotationResult{"ended", newID, previous, "the replacement was ended before it was confirmed"}, nil
				}
				return RotationResult{"rotated", newID, previous, detail}, nil
			}
			restored, err := s.One(ctx, sqlRestore, previous, newID)
			if err != nil {
				return RotationResult{}, err
			}
			why := "the replacement did not start"
			if startErr != nil {
				why = startErr.Error()
			}
			return RotationResult{fmt.Sprint(restored), newID, previous, why}, nil
		case "refused":
			return RotationResult{outcome, 0, from, detail}, nil
		case "binding_changed":
			if from, err = s.boundConversation(ctx, scope); err != nil {
				return RotationResult{}, err
			}
		}
		time.Sleep(time.Duration(attempt+1) * 20 * time.Millisecond) // busy: the previous conversation is admitting a turn
	}
	return RotationResult{outcome, 0, from, detail}, nil
}
