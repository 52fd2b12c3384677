package store

// The SQL of users' reminders (ledger.Reminder) and of the sessions that
// opted in to an operator's all-sessions schedule (ledger.ScheduleOptIn).
// Idle reminders live here, not in memory: a scheduler finds the due ones
// through an index that holds only reminders still due, and moves each
// one's next due time by a conditional update, so one replica moves it.

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// AddReminder stores r (its ID is set) unless its session already keeps
// limit reminders that are still due; ok is false then, and nothing is
// stored. A reminder with a CallKey that a stored one has already is not
// stored again: r becomes the stored one, and ok is true (the tool call
// that made it ran again after a crash).
//
// The count and the insert are one transaction. SQLite has one writer,
// so the count is exact; on PostgreSQL two replicas (or two connections)
// could each count below the limit and both insert, so the transaction
// first takes a transaction-scoped advisory lock named by the session
// key: the second waits for the first's commit and counts its row.
func (s *DB) AddReminder(ctx context.Context, r *ledger.Reminder, limit int) (ok bool, err error) {
	return observe(ctx, s, ledger.Call{Op: "AddReminder"}, func() (bool, error) {
		row := *r
		row.ID = 0
		row.CreatedAt = row.CreatedAt.UTC()
		if row.NextDueAt != nil {
			due := fireTime(*row.NextDueAt)
			row.NextDueAt = &due
		}
		kept, ok, err := addOwned(ctx, s, owned[ledger.Reminder]{
			lock: "chatgate:reminders:" + row.SessionKey, owner: row.SessionKey, callKey: row.CallKey, limit: limit,
			ownerOf: func(r *ledger.Reminder) string { return r.SessionKey },
			count: func(tx *gorm.DB) *gorm.DB {
				return tx.Model(&ledger.Reminder{}).Where("session_key = ? AND cancelled_at IS NULL AND next_due_at IS NOT NULL", row.SessionKey)
			},
		}, &row)
		if err != nil {
			return false, fmt.Errorf("store a reminder of %s: %w", r.SessionKey, err)
		}
		switch {
		case kept != nil:
			*r = *kept
		case ok:
			r.ID = row.ID
		}
		return ok, nil
	})
}

// owned describes a row that one owner keeps a limited number of, and
// that its writer's call key makes once (addOwned): reminders, notes.
type owned[T any] struct {
	lock    string // the advisory lock's name, one per owner
	owner   string
	callKey string
	limit   int // ≤ 0: none
	ownerOf func(*T) string
	count   func(tx *gorm.DB) *gorm.DB // the owner's rows that count against limit
}

// addOwned stores row unless its owner keeps o.limit rows already (ok
// false, nothing stored); a row whose call key a stored one has already
// is not stored again: that one is returned as kept, with ok true (its
// writer ran again after a crash), and a call key of another owner's row
// is an error. The look, the count and the insert are one transaction:
// SQLite has one writer, so the count is exact; on PostgreSQL two
// connections could each count below the limit and both insert, so the
// transaction first takes a transaction-scoped advisory lock named by the
// owner, and the second waits for the first's commit and counts its row.
func addOwned[T any](ctx context.Context, s *DB, o owned[T], row *T) (kept *T, ok bool, err error) {
	err = s.commit.do(ctx, func(tx *gorm.DB) error {
		ok, kept = false, nil
		if s.driver == DriverPostgres {
			if err := tx.Exec("SELECT pg_advisory_xact_lock(hashtext(?))", o.lock).Error; err != nil {
				return err
			}
		}
		if o.callKey != "" {
			var found []T
			if err := tx.Where("call_key = ?", o.callKey).Limit(1).Find(&found).Error; err != nil {
				return err
			}
			if len(found) == 1 {
				if o.ownerOf(&found[0]) != o.owner {
					return fmt.Errorf("%w: call key %q made a row of another owner", ledger.ErrRejected, o.callKey)
				}
				kept, ok = &found[0], true
				return nil
			}
		}
		if o.limit > 0 {
			var n int64
			if err := o.count(tx).Count(&n).Error; err != nil {
				return err
			}
			if n >= int64(o.limit) {
				return nil
			}
		}
		if err := tx.Create(row).Error; err != nil {
			return err
		}
		ok = true
		return nil
	})
	return kept, ok, err
}

// Reminders returns the reminders of a session that are still due, oldest
// first.
func (s *DB) Reminders(ctx context.Context, sessionKey string) ([]ledger.Reminder, error) {
	return observe(ctx, s, ledger.Call{Op: "Reminders"}, func() ([]ledger.Reminder, error) {
		var out []ledger.Reminder
		if err := s.read.WithContext(ctx).Where("session_key = ? AND cancelled_at IS NULL AND next_due_at IS NOT NULL", sessionKey).
			Order("id").Find(&out).Error; err != nil {
			return nil, fmt.Errorf("load the reminders of %s: %w", sessionKey, err)
		}
		return out, nil
	})
}

// Reminder returns the reminder with that id, or nil.
func (s *DB) Reminder(ctx context.Context, id int64) (*ledger.Reminder, error) {
	return observe(ctx, s, ledger.Call{Op: "Reminder"}, func() (*ledger.Reminder, error) {
		return takeByID[ledger.Reminder](ctx, s, "reminder", id)
	})
}

// CancelReminder cancels the session's reminder id: it is due no more.
// false when the session has no such reminder not cancelled yet (another
// session's id, or cancelled already: a second tap of a Cancel button).
func (s *DB) CancelReminder(ctx context.Context, id int64, sessionKey string, at time.Time) (bool, error) {
	return observe(ctx, s, ledger.Call{Op: "CancelReminder"}, func() (bool, error) {
		var n int64
		err := s.commit.do(ctx, func(tx *gorm.DB) error {
			res := tx.Exec(`UPDATE reminders SET cancelled_at = ?, next_due_at = NULL WHERE id = ? AND session_key = ? AND cancelled_at IS NULL`,
				at.UTC(), id, sessionKey)
			n = res.RowsAffected
			return res.Error
		})
		if err != nil {
			return false, fmt.Errorf("cancel reminder %d: %w", id, err)
		}
		return n == 1, nil
	})
}

// DueReminders returns up to limit reminders due at or before now,
// the most overdue first.
func (s *DB) DueReminders(ctx context.Context, now time.Time, limit int) ([]ledger.Reminder, error) {
	return observe(ctx, s, ledger.Call{Op: "DueReminders"}, func() ([]ledger.Reminder, error) {
		var out []ledger.Reminder
		if err := s.read.WithContext(ctx).Where("next_due_at IS NOT NULL AND next_due_at <= ?", now.UTC()).
			Order("next_due_at, id").Limit(limit).Find(&out).Error; err != nil {
			return nil, fmt.Errorf("load due reminders: %w", err)
		}
		return out, nil
	})
}

// AdvanceReminder moves a reminder's next due time from from to next (nil:
// due no more, a one-time reminder that fired); false when it was not due
// at from any more (another replica moved it, or it was cancelled).
func (s *DB) AdvanceReminder(ctx context.Context, id int64, from time.Time, next *time.Time) (bool, error) {
	return observe(ctx, s, ledger.Call{Op: "AdvanceReminder"}, func() (bool, error) {
		var to *time.Time
		if next != nil {
			t := fireTime(*next)
			to = &t
		}
		var n int64
		err := s.commit.do(ctx, func(tx *gorm.DB) error {
			res := tx.Exec(`UPDATE reminders SET next_due_at = ? WHERE id = ? AND next_due_at = ? AND cancelled_at IS NULL`, to, id, fireTime(from))
			n = res.RowsAffected
			return res.Error
		})
		if err != nil {
			return false, fmt.Errorf("advance reminder %d: %w", id, err)
		}
		return n == 1, nil
	})
}

// SetScheduleOptIn records a session's choice about an operator schedule
// that goes to every session of its channel that opted in: on opts in
// (again: a no-op), off opts out.
func (s *DB) SetScheduleOptIn(ctx context.Context, o ledger.ScheduleOptIn, on bool) error {
	return observe0(ctx, s, ledger.Call{Op: "SetScheduleOptIn"}, func() error {
		err := s.commit.do(ctx, func(tx *gorm.DB) error {
			if !on {
				return tx.Where("session_key = ? AND schedule = ?", o.SessionKey, o.Schedule).Delete(&ledger.ScheduleOptIn{}).Error
			}
			row := o
			row.CreatedAt = row.CreatedAt.UTC()
			return tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&row).Error
		})
		if err != nil {
			return fmt.Errorf("store the choice of %s about schedule %s: %w", o.SessionKey, o.Schedule, err)
		}
		return nil
	})
}

// OptedIn returns up to limit session keys of the channel that opted in
// to the schedule, after the key after ("": from the first), in order: a
// scheduler pages through them to fan one fire out.
func (s *DB) OptedIn(ctx context.Context, schedule, channel, after string, limit int) ([]string, error) {
	return observe(ctx, s, ledger.Call{Op: "OptedIn"}, func() ([]string, error) {
		var keys []string
		if err := s.read.WithContext(ctx).Model(&ledger.ScheduleOptIn{}).
			Where("schedule = ? AND channel = ? AND session_key > ?", schedule, channel, after).
			Order("session_key").Limit(limit).Pluck("session_key", &keys).Error; err != nil {
			return nil, fmt.Errorf("load the sessions opted in to %s: %w", schedule, err)
		}
		return keys, nil
	})
}

// SessionOptIns returns the schedules a session opted in to, by name.
func (s *DB) SessionOptIns(ctx context.Context, sessionKey string) ([]string, error) {
	return observe(ctx, s, ledger.Call{Op: "SessionOptIns"}, func() ([]string, error) {
		var names []string
		if err := s.read.WithContext(ctx).Model(&ledger.ScheduleOptIn{}).Where("session_key = ?", sessionKey).
			Order("schedule").Pluck("schedule", &names).Error; err != nil {
			return nil, fmt.Errorf("load the schedules %s opted in to: %w", sessionKey, err)
		}
		return names, nil
	})
}
