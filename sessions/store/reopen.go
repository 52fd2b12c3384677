package store

import (
	"context"
	"errors"
	"fmt"

	"gorm.io/gorm"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// LastArchived returns the session key's most recently archived
// conversation that holds messages, or nil. Empty conversations (opened
// and archived before anyone wrote) are passed over: going back to one
// would show nothing. Of two archived at the same instant, the one started
// later is the more recent.
func (s *DB) LastArchived(ctx context.Context, key string) (*ledger.Conversation, error) {
	var c ledger.Conversation
	err := s.read.WithContext(ctx).
		Where("session_key = ? AND status = 'archived' AND last_seq > 0", key).
		Order("archived_at DESC, started_at DESC").Take(&c).Error
	if notFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load last archived conversation of %s: %w", key, err)
	}
	return &c, nil
}

// Reopen archives r.Current and makes r.Previous the key's active
// conversation, in one transaction: the current one is archived first,
// which frees the key's place in the one-active-per-key index for the
// reopened one. Its idle clock starts again at r.At. It fails with
// ErrStale, changing nothing, when either conversation is no longer as the
// caller saw it, or another process opened a conversation for the key
// meanwhile.
func (s *DB) Reopen(ctx context.Context, r ledger.Reopen) error {
	err := s.commit.do(ctx, func(tx *gorm.DB) error {
		if r.Current != "" {
			res := tx.Model(&ledger.Conversation{}).
				Where("id = ? AND session_key = ? AND status = ? AND last_seq = ?", r.Current, r.SessionKey, ledger.StatusActive, r.ExpectSeq).
				Updates(map[string]any{"status": ledger.StatusArchived, "archived_at": r.At, "reset_reason": ledger.ReasonManual})
			if res.Error != nil {
				return res.Error
			}
			if res.RowsAffected != 1 {
				return ledger.ErrStale
			}
			if err := s.recordExtraction(tx, r.Current, r.At); err != nil {
				return err
			}
		}
		set := map[string]any{"status": ledger.StatusActive, "archived_at": nil, "reset_reason": "", "last_activity_at": r.At}
		if r.StartedAt != nil {
			set["started_at"] = *r.StartedAt
		}
		res := tx.Model(&ledger.Conversation{}).
			Where("id = ? AND session_key = ? AND status = ?", r.Previous, r.SessionKey, ledger.StatusArchived).
			Updates(set)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected != 1 {
			return ledger.ErrStale
		}
		return nil
	})
	switch {
	case errors.Is(err, ledger.ErrStale), errors.Is(err, gorm.ErrDuplicatedKey):
		return ledger.ErrStale
	case err != nil:
		return fmt.Errorf("reopen conversation %s of %s: %w", r.Previous, r.SessionKey, err)
	}
	return nil
}
