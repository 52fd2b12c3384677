package store

// The SQL of conversations and their messages: reading the active
// conversation and its recent window, appending a turn's messages (the
// only write of a turn, appendAll builds it), archiving, and the
// channels' small state records.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/chatgate/chatgate/sessions/ledger"
)

func notFound(err error) bool { return errors.Is(err, gorm.ErrRecordNotFound) }

// ActiveConversation returns the key's active conversation, or nil.
func (s *DB) ActiveConversation(ctx context.Context, key string) (*ledger.Conversation, error) {
	return observe(ctx, s, ledger.Call{Op: "ActiveConversation", Conv: ""}, func() (*ledger.Conversation, error) {
		var c ledger.Conversation
		// status as a literal, so that the partial unique index applies.
		err := s.read.WithContext(ctx).Where("session_key = ? AND status = 'active'", key).Take(&c).Error
		if notFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("load active conversation of %s: %w", key, err)
		}
		return &c, nil
	})
}

// Conversation returns a conversation by id, or nil.
func (s *DB) Conversation(ctx context.Context, id string) (*ledger.Conversation, error) {
	return observe(ctx, s, ledger.Call{Op: "Conversation", Conv: id}, func() (*ledger.Conversation, error) {
		var c ledger.Conversation
		err := s.read.WithContext(ctx).Where("id = ?", id).Take(&c).Error
		if notFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("load conversation %s: %w", id, err)
		}
		return &c, nil
	})
}

// CreateConversation inserts c. It fails with ErrStale when the key already
// has an active conversation.
func (s *DB) CreateConversation(ctx context.Context, c *ledger.Conversation) error {
	return observe0(ctx, s, ledger.Call{Op: "CreateConversation", Conv: ""}, func() error {
		err := s.commit.create(ctx, c)
		if errors.Is(err, gorm.ErrDuplicatedKey) {
			return ledger.ErrStale
		}
		if err != nil {
			return fmt.Errorf("create conversation for %s: %w", c.SessionKey, err)
		}
		return nil
	})
}

// RecentMessages returns the newest limit messages, oldest first.
func (s *DB) RecentMessages(ctx context.Context, convID string, limit int) ([]ledger.Message, error) {
	return observe(ctx, s, ledger.Call{Op: "RecentMessages", Conv: convID}, func() ([]ledger.Message, error) {
		var msgs []ledger.Message
		err := s.read.WithContext(ctx).Where("conversation_id = ?", convID).
			Order("seq DESC").Limit(limit).Find(&msgs).Error
		if err != nil {
			return nil, fmt.Errorf("load messages of %s: %w", convID, err)
		}
		for i, j := 0, len(msgs)-1; i < j; i, j = i+1, j-1 {
			msgs[i], msgs[j] = msgs[j], msgs[i]
		}
		return msgs, nil
	})
}

// MessagesAfter returns messages with seq > afterSeq, oldest first, at most
// limit (0: no limit).
func (s *DB) MessagesAfter(ctx context.Context, convID string, afterSeq int64, limit int) ([]ledger.Message, error) {
	var msgs []ledger.Message
	q := s.read.WithContext(ctx).Where("conversation_id = ? AND seq > ?", convID, afterSeq).Order("seq")
	if limit > 0 {
		q = q.Limit(limit)
	}
	if err := q.Find(&msgs).Error; err != nil {
		return nil, fmt.Errorf("load messages of %s: %w", convID, err)
	}
	return msgs, nil
}

// MessageByClientID returns the user message with that client id, or nil.
func (s *DB) MessageByClientID(ctx context.Context, convID, clientID string) (*ledger.Message, error) {
	return observe(ctx, s, ledger.Call{Op: "MessageByClientID", Conv: convID}, func() (*ledger.Message, error) {
		var m ledger.Message
		err := s.read.WithContext(ctx).Where("conversation_id = ? AND client_msg_id = ?", convID, clientID).Take(&m).Error
		if notFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("look up client message %s: %w", clientID, err)
		}
		return &m, nil
	})
}

// FinalReply returns the reply the user saw to their message userSeq, or nil.
func (s *DB) FinalReply(ctx context.Context, convID string, userSeq int64) (*ledger.Message, error) {
	return observe(ctx, s, ledger.Call{Op: "FinalReply", Conv: convID}, func() (*ledger.Message, error) {
		return s.finalReply(ctx, convID, userSeq)
	})
}

// finalReplyCond is the settle rule on the messages table itself.
var finalReplyCond = ledger.FinalReplySQL("messages")

func (s *DB) finalReply(ctx context.Context, convID string, userSeq int64) (*ledger.Message, error) {
	var m ledger.Message
	err := s.read.WithContext(ctx).
		// A reply follows its message: the primary key's range after the
		// message's seq holds it.
		// The settle rule's SQL (ledger.FinalReplySQL).
		Where("conversation_id = ? AND seq > ? AND reply_to = ? AND "+finalReplyCond, convID, userSeq, userSeq).
		Order("seq DESC").Take(&m).Error
	if notFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load reply to %d in %s: %w", userSeq, convID, err)
	}
	return &m, nil
}

// Append stores messages and advances the conversation, in one group
// commit. The caller's copy of the conversation advances only when the
// call succeeds, as its hooks tell it.
func (s *DB) Append(ctx context.Context, a ledger.Append) error {
	conv := ""
	if a.Conv != nil {
		conv = a.Conv.ID
	}
	err := observe0(ctx, s, ledger.Call{Op: "Append", Conv: conv, Append: &a}, func() error { return s.appendRows(ctx, &a) })
	if err != nil {
		return err
	}
	n := int64(len(a.Messages))
	a.Conv.LastSeq += n
	if !a.KeepActivity {
		a.Conv.LastActivityAt = a.At
	}
	a.Conv.TotalTokens += a.Tokens
	a.Conv.Cost += a.Cost
	if a.Model != "" {
		a.Conv.Model = a.Model
	}
	return nil
}

func (s *DB) appendRows(ctx context.Context, a *ledger.Append) error {
	err := s.commit.append(ctx, a)
	switch {
	case errors.Is(err, ledger.ErrStale):
		return ledger.ErrStale
	case errors.Is(err, ledger.ErrLostClaim):
		return ledger.ErrLostClaim
	case errors.Is(err, gorm.ErrDuplicatedKey):
		for _, m := range a.Messages {
			if m.ClientMsgID != nil {
				return ledger.ErrDuplicate
			}
		}
		return ledger.ErrStale // a seq someone else took
	case err != nil:
		return fmt.Errorf("append to conversation %s: %w", a.Conv.ID, err)
	}
	return nil
}

// Archive archives one active conversation, if its last seq is still
// expectSeq (the state its caller judged; -1 archives whatever it holds).
// It reports false when the conversation was not active or had moved on:
// another replica used it meanwhile, or a sweep got there first.
func (s *DB) Archive(ctx context.Context, convID, reason string, at time.Time, expectSeq int64) (bool, error) {
	return observe(ctx, s, ledger.Call{Op: "Archive", Conv: convID}, func() (bool, error) {
		var archived bool
		err := s.commit.do(ctx, func(tx *gorm.DB) error {
			q := tx.Model(&ledger.Conversation{}).Where("id = ? AND status = ?", convID, ledger.StatusActive)
			if expectSeq >= 0 {
				q = q.Where("last_seq = ?", expectSeq)
			}
			res := q.Updates(map[string]any{"status": ledger.StatusArchived, "archived_at": at, "reset_reason": reason})
			archived = res.RowsAffected == 1
			if res.Error != nil || !archived {
				return res.Error
			}
			return s.recordExtraction(tx, convID, at)
		})
		if err != nil {
			return false, fmt.Errorf("archive conversation %s: %w", convID, err)
		}
		return archived, nil
	})
}

// GetState reads a channel state value ("" when unset).
func (s *DB) GetState(ctx context.Context, key string) (string, error) {
	var st ledger.ChannelState
	err := s.read.WithContext(ctx).Where("name = ?", key).Take(&st).Error
	if notFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read state %s: %w", key, err)
	}
	return st.Value, nil
}

// SetState writes a channel state value durably.
func (s *DB) SetState(ctx context.Context, key, value string) error {
	err := s.commit.do(ctx, func(tx *gorm.DB) error {
		return tx.Clauses(clause.OnConflict{
			Columns:   []clause.Column{{Name: "name"}},
			DoUpdates: clause.AssignmentColumns([]string{"value", "updated_at"}),
		}).Create(&ledger.ChannelState{Key: key, Value: value, UpdatedAt: time.Now().UTC()}).Error
	})
	if err != nil {
		return fmt.Errorf("write state %s: %w", key, err)
	}
	return nil
}

// EditPending replaces the text of user message seq when its turn has not
// started: one conditional update on its state, so that it and a claim
// (ClaimBatch, which reads the text it sends) never interleave — either
// the claim reads the new text, or the update finds the turn started and
// changes nothing. On PostgreSQL it first locks the conversation's row,
// as a claim does, so that a claim between its read and its update waits
// for the edit or makes it miss.
func (s *DB) EditPending(ctx context.Context, convID string, seq int64, text string) (bool, error) {
	return observe(ctx, s, ledger.Call{Op: "EditPending", Conv: convID}, func() (bool, error) {
		var edited bool
		err := s.commit.do(ctx, func(tx *gorm.DB) error {
			edited = false
			if s.driver == DriverPostgres {
				var one int
				if err := tx.Raw("SELECT 1 FROM conversations WHERE id = ? FOR UPDATE", convID).Row().Scan(&one); err != nil {
					return err
				}
			}
			res := tx.Exec(`UPDATE messages SET content = ? WHERE conversation_id = ? AND seq = ? AND role = 'user'
			AND turn_state = 'pending' AND turn_attempt = 0`, text, convID, seq)
			if res.Error != nil {
				return res.Error
			}
			edited = res.RowsAffected == 1
			return nil
		})
		if err != nil {
			return false, fmt.Errorf("edit message %d of %s: %w", seq, convID, err)
		}
		return edited, nil
	})
}

// MessageCount counts the lines of a conversation a user sees: their
// messages and the assistant's answers (not its tool calls, the tools'
// results or summaries).
func (s *DB) MessageCount(ctx context.Context, convID string) (int64, error) {
	var n int64
	err := s.read.WithContext(ctx).Model(&ledger.Message{}).
		Where("conversation_id = ? AND (role = 'user' OR (role = 'assistant' AND (tool_calls IS NULL OR tool_calls = '')))", convID).
		Count(&n).Error
	if err != nil {
		return 0, fmt.Errorf("count the messages of %s: %w", convID, err)
	}
	return n, nil
}
