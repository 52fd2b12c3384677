package sessions

import (
	"context"
	"fmt"
	"time"
)

// ListFilter selects conversations for ListConversations.
type ListFilter struct {
	SessionKey string // exact key, or "" for all
	Status     string // active | archived | "" for both
	Limit      int    // 0: 100
}

// ListConversations returns conversations, most recently active first.
func (s *DB) ListConversations(ctx context.Context, f ListFilter) ([]Conversation, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	q := s.read.WithContext(ctx).Order("last_activity_at DESC, id").Limit(f.Limit)
	if f.SessionKey != "" {
		q = q.Where("session_key = ?", f.SessionKey)
	}
	if f.Status != "" {
		q = q.Where("status = ?", f.Status)
	}
	var out []Conversation
	if err := q.Find(&out).Error; err != nil {
		return nil, fmt.Errorf("list conversations: %w", err)
	}
	return out, nil
}

// ResetKey archives the session key's active conversation (reason manual)
// from outside a running gateway, such as the CLI. A gateway that has the
// conversation in memory notices on its next append and starts a new one.
func (s *DB) ResetKey(ctx context.Context, key string, at time.Time) (*Conversation, error) {
	conv, err := s.ActiveConversation(ctx, key)
	if err != nil || conv == nil {
		return nil, err
	}
	if _, err := s.Archive(ctx, conv.ID, ReasonManual, at, -1); err != nil {
		return nil, err
	}
	return conv, nil
}
