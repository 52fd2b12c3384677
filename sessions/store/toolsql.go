package store

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// The tool calls of the ledger (ledger.ToolCall): every transition is one
// conditional statement, so that of two runners only one moves a call,
// and a start checks the turn's claim in the same statement.

// claimHeld is the condition, on the tool_calls row, that its turn's
// claim is (owner, attempt): the lead's row carries it.
const claimHeld = `EXISTS (SELECT 1 FROM messages AS u WHERE u.conversation_id = tool_calls.conversation_id
	AND u.seq = ? AND u.role = 'user' AND u.turn_owner = ? AND u.turn_attempt = ?)`

// OpenToolCalls records the calls of one assistant message, each once: a
// call recorded already (by an earlier run of the turn) is left as it is.
// It returns the calls' rows, in the order given.
func (s *DB) OpenToolCalls(ctx context.Context, calls []ledger.ToolCall) ([]ledger.ToolCall, error) {
	var conv string
	var msgSeq int64
	if len(calls) > 0 {
		conv, msgSeq = calls[0].ConversationID, calls[0].MessageSeq
	}
	return observe(ctx, s, ledger.Call{Op: "OpenToolCalls", Conv: conv}, func() ([]ledger.ToolCall, error) {
		if len(calls) == 0 {
			return nil, nil
		}
		rows := make([]ledger.ToolCall, len(calls))
		copy(rows, calls)
		for i := range rows {
			rows[i].ID = 0
			if rows[i].State == "" {
				rows[i].State = ledger.ToolNew
			}
		}
		err := s.commit.do(ctx, func(tx *gorm.DB) error {
			return tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&rows).Error
		})
		if err != nil {
			return nil, fmt.Errorf("record tool calls of %s/%d: %w", conv, msgSeq, err)
		}
		stored, err := s.toolCallsOf(ctx, conv, msgSeq)
		if err != nil {
			return nil, err
		}
		byID := map[string]ledger.ToolCall{}
		for _, c := range stored {
			byID[c.CallID] = c
		}
		out := make([]ledger.ToolCall, 0, len(calls))
		for _, c := range calls {
			got, ok := byID[storableText(c.CallID)] // (stored as storable, like all text)
			if !ok {
				return nil, fmt.Errorf("record tool calls of %s/%d: call %s not found after insert", conv, msgSeq, c.CallID)
			}
			out = append(out, got)
		}
		return out, nil
	})
}

// ToolCalls returns the calls of the assistant message msgSeq, by id.
func (s *DB) ToolCalls(ctx context.Context, convID string, msgSeq int64) ([]ledger.ToolCall, error) {
	return observe(ctx, s, ledger.Call{Op: "ToolCalls", Conv: convID}, func() ([]ledger.ToolCall, error) {
		return s.toolCallsOf(ctx, convID, msgSeq)
	})
}

func (s *DB) toolCallsOf(ctx context.Context, convID string, msgSeq int64) ([]ledger.ToolCall, error) {
	var out []ledger.ToolCall
	if err := s.read.WithContext(ctx).Where("conversation_id = ? AND message_seq = ?", convID, msgSeq).Order("id").Find(&out).Error; err != nil {
		return nil, fmt.Errorf("load tool calls of %s/%d: %w", convID, msgSeq, err)
	}
	return out, nil
}

// ConversationToolCalls returns every call of a conversation, oldest
// first (for admin, export and `gateway sessions show`).
func (s *DB) ConversationToolCalls(ctx context.Context, convID string) ([]ledger.ToolCall, error) {
	var out []ledger.ToolCall
	if err := s.read.WithContext(ctx).Where("conversation_id = ?", convID).Order("id").Find(&out).Error; err != nil {
		return nil, fmt.Errorf("load tool calls of %s: %w", convID, err)
	}
	return out, nil
}

// AskingToolCalls returns the calls of a session key waiting for a
// decision, oldest first.
func (s *DB) AskingToolCalls(ctx context.Context, key string) ([]ledger.ToolCall, error) {
	return observe(ctx, s, ledger.Call{Op: "AskingToolCalls"}, func() ([]ledger.ToolCall, error) {
		var out []ledger.ToolCall
		if err := s.read.WithContext(ctx).Where("session_key = ? AND state = 'asking'", key).Order("id").Find(&out).Error; err != nil {
			return nil, fmt.Errorf("load asking tool calls of %s: %w", key, err)
		}
		return out, nil
	})
}

// ToolCall returns the call with that id, or nil.
func (s *DB) ToolCall(ctx context.Context, id int64) (*ledger.ToolCall, error) {
	return observe(ctx, s, ledger.Call{Op: "ToolCall"}, func() (*ledger.ToolCall, error) {
		return takeByID[ledger.ToolCall](ctx, s, "tool call", id)
	})
}

// AskTool puts a new call (or one asked before: a run of the turn asks
// again) up for the user's decision until expires, under the turn's
// claim. A call asked before keeps the deadline of its first ask: an ask
// has one for its whole life. It fails with ErrLostClaim when the claim
// is gone or the call moved on.
func (s *DB) AskTool(ctx context.Context, id int64, claim ledger.TurnClaim, expires time.Time) error {
	return observe0(ctx, s, ledger.Call{Op: "AskTool", Conv: claim.ConversationID}, func() error {
		return s.toolMove(ctx, "ask", id, `UPDATE tool_calls SET state = 'asking', expires_at = COALESCE(expires_at, ?), owner = ?, attempt = ?
			WHERE id = ? AND state IN ('new', 'asking') AND `+claimHeld,
			expires, claim.Owner, claim.Attempt, id, claim.Lead, claim.Owner, claim.Attempt)
	})
}

// SetToolAskRef keeps the channel's reference to the ask it sent.
func (s *DB) SetToolAskRef(ctx context.Context, id int64, ref string) error {
	return observe0(ctx, s, ledger.Call{Op: "SetToolAskRef"}, func() error {
		return s.commit.do(ctx, func(tx *gorm.DB) error {
			return tx.Exec(`UPDATE tool_calls SET ask_ref = ? WHERE id = ?`, ref, id).Error
		})
	})
}

// DecideTool moves an asking call to allowed, or to denied with the
// result the model gets; false when it was not asking (decided already,
// or expired). A user's decision (by anyone but ledger.ToolExpiredBy)
// lands only before the ask's expiry, also when no turn is waiting to
// settle it; the expiry itself (by ledger.ToolExpiredBy) only after.
func (s *DB) DecideTool(ctx context.Context, id int64, allow bool, by, deniedResult string, at time.Time) (bool, error) {
	return observe(ctx, s, ledger.Call{Op: "DecideTool"}, func() (bool, error) {
		var n int64
		in := "expires_at IS NULL OR expires_at > ?"
		if by == ledger.ToolExpiredBy {
			in = "expires_at IS NULL OR expires_at <= ?"
		}
		err := s.commit.do(ctx, func(tx *gorm.DB) error {
			var res *gorm.DB
			if allow {
				res = tx.Exec(`UPDATE tool_calls SET state = 'allowed', decided_by = ? WHERE id = ? AND state = 'asking' AND (`+in+`)`, by, id, at)
			} else {
				res = tx.Exec(`UPDATE tool_calls SET state = 'denied', decided_by = ?, result = ?, is_error = ?, ended_at = ?
					WHERE id = ? AND state = 'asking' AND (`+in+`)`, by, deniedResult, true, at, id, at)
			}
			n = res.RowsAffected
			return res.Error
		})
		if err != nil {
			return false, fmt.Errorf("decide tool call %d: %w", id, err)
		}
		return n == 1, nil
	})
}

// StartTool starts a call under the turn's claim with a token of its own:
// a call not started yet (new, or allowed), or — again — one started
// under token again (an idempotent tool's call that was never answered;
// "" when it is not to start again). It fails with ErrLostClaim when the
// claim is gone or the call was not in such a state.
func (s *DB) StartTool(ctx context.Context, id int64, claim ledger.TurnClaim, token, again string, at time.Time) error {
	return observe0(ctx, s, ledger.Call{Op: "StartTool", Conv: claim.ConversationID}, func() error {
		return s.toolMove(ctx, "start", id, `UPDATE tool_calls SET state = 'started', token = ?, runs = runs + 1, owner = ?, attempt = ?,
			started_at = ?, ended_at = NULL
			WHERE id = ? AND (state IN ('new', 'allowed') OR (state = 'started' AND token = ? AND token <> '')) AND `+claimHeld,
			token, claim.Owner, claim.Attempt, at, id, again, claim.Lead, claim.Owner, claim.Attempt)
	})
}

// EndTool stores a call's outcome: from e.From, and for a started call
// only by its token's holder. It needs no claim: a result is kept whoever
// holds the turn. It fails with ErrLostClaim when the call was not in
// that state (another runner settled it).
func (s *DB) EndTool(ctx context.Context, e ledger.ToolEnd) error {
	return observe0(ctx, s, ledger.Call{Op: "EndTool"}, func() error {
		if len(e.Media) == 0 {
			return s.toolMove(ctx, "end", e.ID, `UPDATE tool_calls SET state = ?, result = ?, is_error = ?, ended_at = ?
			WHERE id = ? AND state = ? AND token = ?`, e.State, e.Result, e.IsError, e.At, e.ID, e.From, e.Token)
		}
		// The media land with the outcome or not at all, each once.
		var n int64
		err := s.commit.do(ctx, func(tx *gorm.DB) error {
			res := tx.Exec(`UPDATE tool_calls SET state = ?, result = ?, is_error = ?, ended_at = ?
			WHERE id = ? AND state = ? AND token = ?`, e.State, e.Result, e.IsError, e.At, e.ID, e.From, e.Token)
			if n = res.RowsAffected; res.Error != nil || n == 0 {
				return res.Error
			}
			return insertToolMedia(tx, e.Media)
		})
		if err != nil {
			return fmt.Errorf("end tool call %d: %w", e.ID, err)
		}
		if n == 0 {
			return fmt.Errorf("end tool call %d: %w", e.ID, ledger.ErrLostClaim)
		}
		return nil
	})
}

// moveRows runs a conditional move in the group commit and returns the
// rows it changed: 0 means the row was not in the state the move expects.
func (s *DB) moveRows(ctx context.Context, query string, args ...any) (int64, error) {
	var n int64
	err := s.commit.do(ctx, func(tx *gorm.DB) error {
		res := tx.Exec(query, args...)
		n = res.RowsAffected
		return res.Error
	})
	return n, err
}

// takeByID returns the row of T with that id, or nil; what names it in
// the error.
func takeByID[T any](ctx context.Context, s *DB, what string, id int64) (*T, error) {
	var row T
	err := s.read.WithContext(ctx).Where("id = ?", id).Take(&row).Error
	if notFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load %s %d: %w", what, id, err)
	}
	return &row, nil
}

func (s *DB) toolMove(ctx context.Context, what string, id int64, query string, args ...any) error {
	n, err := s.moveRows(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("%s tool call %d: %w", what, id, err)
	}
	if n == 0 {
		return fmt.Errorf("%s tool call %d: %w", what, id, ledger.ErrLostClaim)
	}
	return nil
}
