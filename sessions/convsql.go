package sessions

// The SQL of conversations and their messages: reading the active
// conversation and its recent window, appending a turn's messages (the
// only write of a turn, appendsql.go builds it), archiving, and the
// channels' small state records.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

func notFound(err error) bool { return errors.Is(err, gorm.ErrRecordNotFound) }

// ActiveConversation returns the key's active conversation, or nil.
func (s *DB) ActiveConversation(ctx context.Context, key string) (*Conversation, error) {
	var c Conversation
	// status as a literal, so that the partial unique index applies.
	err := s.read.WithContext(ctx).Where("session_key = ? AND status = 'active'", key).Take(&c).Error
	if notFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load active conversation of %s: %w", key, err)
	}
	return &c, nil
}

// Conversation returns a conversation by id, or nil.
func (s *DB) Conversation(ctx context.Context, id string) (*Conversation, error) {
	var c Conversation
	err := s.read.WithContext(ctx).Where("id = ?", id).Take(&c).Error
	if notFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load conversation %s: %w", id, err)
	}
	return &c, nil
}

// CreateConversation inserts c. It fails with ErrStale when the key already
// has an active conversation.
func (s *DB) CreateConversation(ctx context.Context, c *Conversation) error {
	err := s.commit.create(ctx, c)
	if errors.Is(err, gorm.ErrDuplicatedKey) {
		return ErrStale
	}
	if err != nil {
		return fmt.Errorf("create conversation for %s: %w", c.SessionKey, err)
	}
	return nil
}

// RecentMessages returns the newest limit messages, oldest first.
func (s *DB) RecentMessages(ctx context.Context, convID string, limit int) ([]Message, error) {
	var msgs []Message
	err := s.read.WithContext(ctx).Where("conversation_id = ?", convID).
		Order("seq DESC").Limit(limit).Find(&msgs).Error
	if err != nil {
		return nil, fmt.Errorf("load messages of %s: %w", convID, err)
	}
	for i, j := 0, len(msgs)-1; i < j; i, j = i+1, j-1 {
		msgs[i], msgs[j] = msgs[j], msgs[i]
	}
	return msgs, nil
}

// MessagesAfter returns messages with seq > afterSeq, oldest first, at most
// limit (0: no limit).
func (s *DB) MessagesAfter(ctx context.Context, convID string, afterSeq int64, limit int) ([]Message, error) {
	var msgs []Message
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
func (s *DB) MessageByClientID(ctx context.Context, convID, clientID string) (*Message, error) {
	var m Message
	err := s.read.WithContext(ctx).Where("conversation_id = ? AND client_msg_id = ?", convID, clientID).Take(&m).Error
	if notFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look up client message %s: %w", clientID, err)
	}
	return &m, nil
}

// FinalReply returns the reply the user saw to their message userSeq, or nil.
func (s *DB) FinalReply(ctx context.Context, convID string, userSeq int64) (*Message, error) {
	var m Message
	err := s.read.WithContext(ctx).
		// A reply follows its message: the primary key's range after the
		// message's seq holds it.
		// A partial reply a shutdown cut is not final (the turn runs
		// again), nor one cut for a newer message (one turn answers both).
		Where("conversation_id = ? AND seq > ? AND reply_to = ? AND role = 'assistant' AND (tool_calls IS NULL OR tool_calls = '') AND NOT (status = 'interrupted' AND error IN ?)",
			convID, userSeq, userSeq, []string{InterruptedByShutdown, InterruptedByMessage}).
		Order("seq DESC").Take(&m).Error
	if notFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load reply to %d in %s: %w", userSeq, convID, err)
	}
	return &m, nil
}

// Append stores messages and advances the conversation, in one group commit.
func (s *DB) Append(ctx context.Context, a Append) error {
	err := s.commit.append(ctx, &a)
	switch {
	case errors.Is(err, ErrStale):
		return ErrStale
	case errors.Is(err, ErrLostClaim):
		return ErrLostClaim
	case errors.Is(err, gorm.ErrDuplicatedKey):
		for _, m := range a.Messages {
			if m.ClientMsgID != nil {
				return ErrDuplicate
			}
		}
		return ErrStale // a seq someone else took
	case err != nil:
		return fmt.Errorf("append to conversation %s: %w", a.Conv.ID, err)
	}
	n := int64(len(a.Messages))
	a.Conv.LastSeq += n
	a.Conv.LastActivityAt = a.At
	a.Conv.TotalTokens += a.Tokens
	a.Conv.Cost += a.Cost
	if a.Model != "" {
		a.Conv.Model = a.Model
	}
	return nil
}

// Archive archives one active conversation, if its last seq is still
// expectSeq (the state its caller judged; -1 archives whatever it holds).
// It reports false when the conversation was not active or had moved on:
// another replica used it meanwhile, or a sweep got there first.
func (s *DB) Archive(ctx context.Context, convID, reason string, at time.Time, expectSeq int64) (bool, error) {
	var archived bool
	err := s.commit.do(ctx, func(tx *gorm.DB) error {
		q := tx.Model(&Conversation{}).Where("id = ? AND status = ?", convID, StatusActive)
		if expectSeq >= 0 {
			q = q.Where("last_seq = ?", expectSeq)
		}
		res := q.Updates(map[string]any{"status": StatusArchived, "archived_at": at, "reset_reason": reason})
		archived = res.RowsAffected == 1
		return res.Error
	})
	if err != nil {
		return false, fmt.Errorf("archive conversation %s: %w", convID, err)
	}
	return archived, nil
}

// GetState reads a channel state value ("" when unset).
func (s *DB) GetState(ctx context.Context, key string) (string, error) {
	var st ChannelState
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
		}).Create(&ChannelState{Key: key, Value: value, UpdatedAt: time.Now().UTC()}).Error
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
}
