package query

import (
	"context"
	"time"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// Fires reads the fires of schedules and users' reminders
// (ledger.ScheduleFire, ledger.Reminder): the outcomes `gateway
// schedules` and the admin API show.
type Fires interface {
	// OperatorFires returns up to limit fires of the bot.yaml schedule
	// called name, newest first: those of its one target, and those of
	// every session an all_sessions schedule went to.
	OperatorFires(ctx context.Context, name string, limit int) ([]ledger.ScheduleFire, error)
	// SessionFires returns up to limit fires whose turns go to a
	// session, newest first.
	SessionFires(ctx context.Context, sessionKey string, limit int) ([]ledger.ScheduleFire, error)
	// Reminders returns a session's reminders that are still due.
	Reminders(ctx context.Context, sessionKey string) ([]ledger.Reminder, error)
	// SessionOptIns returns the all_sessions schedules a session opted
	// in to, by name.
	SessionOptIns(ctx context.Context, sessionKey string) ([]string, error)
	// ReminderCount counts the reminders still due, of every session.
	ReminderCount(ctx context.Context) (ReminderCount, error)
}

// ReminderCount is how many reminders are still due, how many sessions
// keep them, and the soonest due time (nil when none is due).
type ReminderCount struct {
	Due      int64      `json:"due"`
	Sessions int64      `json:"sessions"`
	Next     *time.Time `json:"next,omitempty"`
}

// ExportFire is a fire whose turn is in an exported conversation: which
// schedule (its key: schedule:NAME, schedule:NAME:SESSION or
// reminder:ID), when it was due, how late it was claimed and how it
// ended.
type ExportFire struct {
	ScheduleKey string     `json:"schedule_key"`
	DueAt       time.Time  `json:"due_at"`
	State       string     `json:"state"`
	Attempt     int        `json:"attempt"`
	LateMS      int64      `json:"late_ms"`
	TurnSeq     int64      `json:"turn_seq"`
	DeliveryRef string     `json:"delivery_ref,omitempty"`
	Reason      string     `json:"reason,omitempty"`
	ClaimedAt   *time.Time `json:"claimed_at,omitempty"`
	EndedAt     *time.Time `json:"ended_at,omitempty"`
}

// ExportFireOf is f as an export shows it.
func ExportFireOf(f *ledger.ScheduleFire) ExportFire {
	return ExportFire{ScheduleKey: f.ScheduleKey, DueAt: f.DueAt.UTC(), State: f.State, Attempt: f.Attempt, LateMS: f.LateMS,
		TurnSeq: f.TurnSeq, DeliveryRef: f.DeliveryRef, Reason: f.Reason, ClaimedAt: f.ClaimedAt, EndedAt: f.EndedAt}
}
