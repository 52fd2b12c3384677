package store

// What the operator's tools read of schedule fires and reminders
// (query.Fires), the fires an export carries, and the retention purge of
// settled fires. The fires' own moves — claim, store, settle — are the
// scheduler's (ClaimFire and the statements beside it).

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/chatgate/chatgate/schedules"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/query"
)

// OperatorFires returns up to limit fires of the bot.yaml schedule
// called name, newest first (query.Fires): the fires of its key, and of
// its keys per session when it goes to all_sessions
// (schedules.OperatorSessionKey). The per-session keys are the range
// ["schedule:NAME:", "schedule:NAME;"), ";" being the byte after ":":
// a range on the primary key rather than a LIKE, whose _ a name may
// hold.
func (s *DB) OperatorFires(ctx context.Context, name string, limit int) ([]ledger.ScheduleFire, error) {
	return observe(ctx, s, ledger.Call{Op: "OperatorFires"}, func() ([]ledger.ScheduleFire, error) {
		key := schedules.OperatorKey(name)
		var out []ledger.ScheduleFire
		err := s.read.WithContext(maintenance(ctx)).
			Where("schedule_key = ? OR (schedule_key >= ? AND schedule_key < ?)", key, key+":", key+";").
			Order("due_at DESC, schedule_key").Limit(limit).Find(&out).Error
		if err != nil {
			return nil, fmt.Errorf("load the fires of schedule %s: %w", name, err)
		}
		return out, nil
	})
}

// ConversationFires returns the fires whose turns are in a conversation
// of a session, by the seq of their message: what an export carries.
func (s *DB) ConversationFires(ctx context.Context, sessionKey, convID string) ([]ledger.ScheduleFire, error) {
	return observe(ctx, s, ledger.Call{Op: "ConversationFires", Conv: convID}, func() ([]ledger.ScheduleFire, error) {
		var out []ledger.ScheduleFire
		// The session's index finds the rows; a session has few fires
		// next to its messages.
		err := s.read.WithContext(maintenance(ctx)).Where("session_key = ? AND conversation_id = ?", sessionKey, convID).
			Order("turn_seq, due_at").Find(&out).Error
		if err != nil {
			return nil, fmt.Errorf("load the fires of conversation %s: %w", convID, err)
		}
		return out, nil
	})
}

// ReminderCount counts the reminders still due, and the sessions that
// keep them (query.Fires), through the index of due reminders.
func (s *DB) ReminderCount(ctx context.Context) (query.ReminderCount, error) {
	return observe(ctx, s, ledger.Call{Op: "ReminderCount"}, func() (query.ReminderCount, error) {
		var row struct {
			Due      int64
			Sessions int64
		}
		db := s.read.WithContext(maintenance(ctx))
		err := db.Model(&ledger.Reminder{}).Select("COUNT(*) AS due, COUNT(DISTINCT session_key) AS sessions").
			Where("next_due_at IS NOT NULL AND cancelled_at IS NULL").Scan(&row).Error
		if err != nil {
			return query.ReminderCount{}, fmt.Errorf("count reminders: %w", err)
		}
		c := query.ReminderCount{Due: row.Due, Sessions: row.Sessions}
		if c.Due == 0 {
			return c, nil
		}
		var next ledger.Reminder
		err = db.Where("next_due_at IS NOT NULL AND cancelled_at IS NULL").Order("next_due_at").Limit(1).Take(&next).Error
		if err != nil && !notFound(err) {
			return query.ReminderCount{}, fmt.Errorf("find the next reminder: %w", err)
		}
		if next.NextDueAt != nil {
			t := next.NextDueAt.UTC()
			c.Next = &t
		}
		return c, nil
	})
}

// purgeFiresSQL deletes settled fires that ended before a cutoff, but
// never a schedule key's latest fire, settled or not: a scheduler counts
// the due times it missed from the latest fire it finds (LatestFire), so
// that fire stays however old it is, and no fire is taken twice.
const purgeFiresSQL = `DELETE FROM schedule_fires
	WHERE state IN ? AND ended_at < ?
	AND due_at < (SELECT MAX(f.due_at) FROM schedule_fires f WHERE f.schedule_key = schedule_fires.schedule_key)`

// settledFires are the states ledger.FireSettled calls over.
var settledFires = []string{ledger.FireSent, ledger.FireQuiet, ledger.FireSkippedLate, ledger.FireSkippedBudget, ledger.FireFailed, ledger.FireDropped}

// PurgeFires deletes the fires settled before endedBefore, but for each
// schedule key's latest (purgeFiresSQL), and returns how many: the
// retention purge's, with storage.retention_days.
func (s *DB) PurgeFires(ctx context.Context, endedBefore time.Time) (int64, error) {
	return observe(ctx, s, ledger.Call{Op: "PurgeFires"}, func() (int64, error) {
		var n int64
		err := s.commit.do(ctx, func(tx *gorm.DB) error {
			res := tx.WithContext(maintenance(tx.Statement.Context)).Exec(purgeFiresSQL, settledFires, endedBefore.UTC())
			n = res.RowsAffected
			return res.Error
		})
		if err != nil {
			return 0, fmt.Errorf("purge fires: %w", err)
		}
		return n, nil
	})
}
