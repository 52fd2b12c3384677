package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// The retention queries: the rows the purges read and delete.

// StateRows returns up to limit channel_states rows whose name starts with
// prefix and sorts after after, in name order.
func (s *DB) StateRows(ctx context.Context, prefix, after string, limit int) ([]ledger.ChannelState, error) {
	var rows []ledger.ChannelState
	err := s.read.WithContext(ctx).Where("name > ? AND name LIKE ? ESCAPE '\\'", after, escapeLike(prefix)+"%").
		Order("name").Limit(limit).Find(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("read states %s: %w", prefix, err)
	}
	return rows, nil
}

// DeleteStates deletes channel_states rows by name.
func (s *DB) DeleteStates(ctx context.Context, names []string) (int64, error) {
	if len(names) == 0 {
		return 0, nil
	}
	var n int64
	err := s.commit.do(ctx, func(tx *gorm.DB) error {
		res := tx.Where("name IN ?", names).Delete(&ledger.ChannelState{})
		n = res.RowsAffected
		return res.Error
	})
	if err != nil {
		return 0, fmt.Errorf("delete states: %w", err)
	}
	return n, nil
}

// KeysWithConversations returns which of keys have any conversation,
// active or archived.
func (s *DB) KeysWithConversations(ctx context.Context, keys []string) (map[string]bool, error) {
	out := map[string]bool{}
	if len(keys) == 0 {
		return out, nil
	}
	var found []string
	if err := s.read.WithContext(ctx).Model(&ledger.Conversation{}).Distinct("session_key").
		Where("session_key IN ?", keys).Pluck("session_key", &found).Error; err != nil {
		return nil, fmt.Errorf("read session keys: %w", err)
	}
	for _, k := range found {
		out[k] = true
	}
	return out, nil
}

// IdleActive returns up to limit active conversations of channel whose
// session key starts with keyPrefix and that saw no message since cutoff.
func (s *DB) IdleActive(ctx context.Context, channel, keyPrefix string, cutoff time.Time, limit int) ([]ledger.Conversation, error) {
	var convs []ledger.Conversation
	err := s.read.WithContext(ctx).Select("id", "session_key").
		// The sweep index's range first (its minute is never later than
		// the time; see sweepIndex), in UTC as the sweeps pass it.
		Where("channel = ? AND status = ? AND activity_minute <= ? AND last_activity_at < ? AND session_key LIKE ? ESCAPE '\\'",
			channel, ledger.StatusActive, cutoff.UTC(), cutoff.UTC(), escapeLike(keyPrefix)+"%").
		Limit(limit).Find(&convs).Error
	if err != nil {
		return nil, fmt.Errorf("read idle conversations: %w", err)
	}
	return convs, nil
}

// DeleteIdle deletes a conversation and its messages, if it still saw no
// message since cutoff. It reports whether it did.
func (s *DB) DeleteIdle(ctx context.Context, convID string, cutoff time.Time) (bool, error) {
	deleted := false
	err := s.commit.do(ctx, func(tx *gorm.DB) error {
		tx = tx.WithContext(maintenance(tx.Statement.Context))
		res := tx.Where("id = ? AND last_activity_at < ?", convID, cutoff).Delete(&ledger.Conversation{})
		if res.Error != nil || res.RowsAffected == 0 {
			return res.Error
		}
		deleted = true
		if err := tx.Where("conversation_id = ?", convID).Delete(&ledger.ToolMedia{}).Error; err != nil {
			return err
		}
		if err := tx.Where("conversation_id = ?", convID).Delete(&ledger.ToolCall{}).Error; err != nil {
			return err
		}
		return tx.Where("conversation_id = ?", convID).Delete(&ledger.Message{}).Error
	})
	if err != nil {
		return false, fmt.Errorf("delete conversation %s: %w", convID, err)
	}
	return deleted, nil
}

func escapeLike(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}
