package sessions

// The Scheduler's part for reminders users make: a reminder's next time
// is its own row's next_due_at, turned into a fire when it comes due
// (runReminders); its times read back from the row (reminderWhen).

import (
	"context"
	"log/slog"
	"time"

	"github.com/chatgate/chatgate/schedules"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// runReminders turns the reminders due into fires: each due time of a
// reminder is claimed as the fire (ReminderKey, due), then the reminder
// advanced to its next time. A crash between the two leaves the reminder
// due: the next pass finds the fire claimed, or settled, and advances it.
func (s *Scheduler) runReminders(ctx context.Context, now time.Time) error {
	due, err := s.store.DueReminders(ctx, now, s.opts.Batch)
	if err != nil || len(due) == 0 {
		return err
	}
	if len(due) == s.opts.Batch {
		s.backlog.Store(true)
	}
	s.each(len(due), func(i int) {
		r := due[i]
		if !s.delivers(r.Channel) {
			return // due still: the reminder is not advanced
		}
		s.took.Add(1)
		w, err := reminderWhen(&r)
		at := *r.NextDueAt
		if err != nil {
			s.log.Warn("a reminder's time cannot be read; it is due no more", slog.Int64("reminder", r.ID), slog.String("error", err.Error()))
			_, aerr := s.store.AdvanceReminder(ctx, r.ID, at, nil)
			s.logErr(aerr)
			return
		}
		key := schedules.ReminderKey(r.ID)
		run := at
		if now.Sub(at) > schedules.OnTime {
			d := schedules.Misfire{MaxLate: s.opts.ReminderMaxLate}.Catchup(w, at.Add(-time.Nanosecond), now, keptSkips)
			d = withFirst(d, at)
			if s.decided(ctx, key, r.SessionKey, d, now, func(time.Time) {}) != nil {
				return
			}
			run = time.Time{}
			if d.Run != nil {
				run = d.Run.Due
			}
		}
		if !run.IsZero() {
			s.runReminder(ctx, &r, run, now)
		}
		var next *time.Time
		if n := w.Next(latestOf(at, run, now.Add(-schedules.OnTime))); !n.IsZero() {
			next = &n
		}
		_, aerr := s.store.AdvanceReminder(ctx, r.ID, at, next)
		s.logErr(aerr)
	})
	return nil
}

// reminderWhen is a reminder's times.
func reminderWhen(r *ledger.Reminder) (schedules.When, error) {
	spec, err := schedules.SpecFromText(r.Spec, r.Timezone)
	if err != nil {
		return schedules.When{}, err
	}
	return spec.When()
}
