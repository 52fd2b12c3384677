package store

// The SQL of the models session keys chose (ledger.ModelChoice): one row
// per key that chose, read when a turn needs it and written by a choice.

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// ModelChoice returns the name of the model the key chose ("" when it
// chose none).
func (s *DB) ModelChoice(ctx context.Context, key string) (string, error) {
	var c ledger.ModelChoice
	err := s.read.WithContext(ctx).Where("session_key = ?", key).Take(&c).Error
	if notFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read the model of %s: %w", key, err)
	}
	return c.Name, nil
}

// SetModelChoice stores the key's choice of model, name, durably; ""
// forgets it (the key uses the default model again).
func (s *DB) SetModelChoice(ctx context.Context, key, name string, at time.Time) error {
	err := s.commit.do(ctx, func(tx *gorm.DB) error {
		if name == "" {
			return tx.Where("session_key = ?", key).Delete(&ledger.ModelChoice{}).Error
		}
		return tx.Clauses(clause.OnConflict{
			Columns:   []clause.Column{{Name: "session_key"}},
			DoUpdates: clause.AssignmentColumns([]string{"name", "updated_at"}),
		}).Create(&ledger.ModelChoice{SessionKey: key, Name: name, UpdatedAt: at.UTC()}).Error
	})
	if err != nil {
		return fmt.Errorf("store the model of %s: %w", key, err)
	}
	return nil
}

// PurgeModelChoices deletes the choices made before cutoff by keys that
// have no conversation left (the retention purge took them all), in one
// set-based statement.
func (s *DB) PurgeModelChoices(ctx context.Context, cutoff time.Time) (int64, error) {
	var n int64
	err := s.commit.do(ctx, func(tx *gorm.DB) error {
		tx = tx.WithContext(maintenance(tx.Statement.Context))
		res := tx.Where("updated_at < ? AND NOT EXISTS (SELECT 1 FROM conversations c WHERE c.session_key = model_choices.session_key)", cutoff.UTC()).
			Delete(&ledger.ModelChoice{})
		n = res.RowsAffected
		return res.Error
	})
	if err != nil {
		return 0, fmt.Errorf("purge model choices: %w", err)
	}
	return n, nil
}
