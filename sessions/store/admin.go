package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/query"
)

// DB implements every role of the query port that the admin API and the
// command line read through.
var (
	_ query.Conversations = (*DB)(nil)
	_ query.Exports       = (*DB)(nil)
	_ query.UsageReports  = (*DB)(nil)
	_ query.Purges        = (*DB)(nil)
	_ query.Resets        = (*DB)(nil)
	_ query.Pinger        = (*DB)(nil)
)

// ListFilter is query.ListFilter, the filter of ListConversations and
// CountConversations, under the name the store's callers know it by.
type ListFilter = query.ListFilter

// listWhere applies f's conditions (not its page) to q.
func listWhere(q *gorm.DB, f query.ListFilter) *gorm.DB {
	if f.SessionKey != "" {
		q = q.Where("session_key = ?", f.SessionKey)
	}
	if f.KeyContains != "" {
		// The user's text is matched literally: % and _ are no wildcards.
		esc := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(f.KeyContains)
		q = q.Where(`session_key LIKE ? ESCAPE '\'`, "%"+esc+"%")
	}
	if f.Channel != "" {
		q = q.Where("channel = ?", f.Channel)
	}
	if f.UserID != "" {
		q = q.Where("user_id = ?", f.UserID)
	}
	if f.Status != "" {
		q = q.Where("status = ?", f.Status)
	}
	return q
}

// ListConversations returns conversations, most recently active first
// (query.Conversations).
func (s *DB) ListConversations(ctx context.Context, f query.ListFilter) ([]ledger.Conversation, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	q := listWhere(s.read.WithContext(maintenance(ctx)), f).Order("last_activity_at DESC, id").Limit(f.Limit)
	if f.Offset > 0 {
		q = q.Offset(f.Offset)
	}
	var out []ledger.Conversation
	if err := q.Find(&out).Error; err != nil {
		return nil, fmt.Errorf("list conversations: %w", err)
	}
	return out, nil
}

// CountConversations counts the conversations the filter selects, ignoring
// its Limit and Offset.
func (s *DB) CountConversations(ctx context.Context, f query.ListFilter) (int64, error) {
	var n int64
	if err := listWhere(s.read.WithContext(maintenance(ctx)).Model(&ledger.Conversation{}), f).Count(&n).Error; err != nil {
		return 0, fmt.Errorf("count conversations: %w", err)
	}
	return n, nil
}

// ResetKey archives the session key's active conversation (reason manual)
// from outside a running gateway, such as the CLI. A gateway that has the
// conversation in memory notices on its next append and starts a new one.
func (s *DB) ResetKey(ctx context.Context, key string, at time.Time) (*ledger.Conversation, error) {
	conv, err := s.ActiveConversation(ctx, key)
	if err != nil || conv == nil {
		return nil, err
	}
	if _, err := s.Archive(ctx, conv.ID, ledger.ReasonManual, at, -1); err != nil {
		return nil, err
	}
	return conv, nil
}

// PurgeConversation deletes one archived conversation and its messages,
// as the retention purge would. An active conversation is never deleted
// (reset it first): it reports false, as for an unknown id.
func (s *DB) PurgeConversation(ctx context.Context, id string) (bool, error) {
	var deleted int64
	err := s.commit.do(ctx, func(tx *gorm.DB) error {
		tx = tx.WithContext(maintenance(tx.Statement.Context))
		res := tx.Where("id = ? AND status = ?", id, ledger.StatusArchived).Delete(&ledger.Conversation{})
		if res.Error != nil || res.RowsAffected == 0 {
			deleted = 0
			return res.Error
		}
		deleted = res.RowsAffected
		if err := tx.Where("conversation_id = ?", id).Delete(&ledger.Extraction{}).Error; err != nil {
			return err
		}
		if err := tx.Where("conversation_id = ?", id).Delete(&ledger.ToolMedia{}).Error; err != nil {
			return err
		}
		if err := tx.Where("conversation_id = ?", id).Delete(&ledger.ToolCall{}).Error; err != nil {
			return err
		}
		return tx.Where("conversation_id = ?", id).Delete(&ledger.Message{}).Error
	})
	if err != nil {
		return false, fmt.Errorf("purge conversation %s: %w", id, err)
	}
	return deleted > 0, nil
}
