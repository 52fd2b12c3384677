package sessions

// The timetable: the operator's schedules in force (bot.yaml schedules,
// handed down as plain values and replaced whole on a reload), as users
// and operators see them — what a session gets on the clock (/status),
// the schedules it may opt in to (/schedules, the schedules frame), and
// its choice about each. The fires themselves are the scheduler's.

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/chatgate/chatgate/schedules"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// ErrNoSchedule refuses an opt-in to a schedule that is not offered to
// the session: none of that name in the configuration in force, one of
// another channel, or one with a single target rather than all_sessions.
var ErrNoSchedule = errors.New("no schedule of that name is offered here")

// Spec is when the schedule fires as bot.yaml writes it: "cron 0 8 * *
// 1-5", "every 2h0m0s 08:00-22:00".
func (s OperatorSchedule) Spec() string {
	w := s.When.String()
	if strings.HasPrefix(w, "every ") || strings.HasPrefix(w, "at ") {
		return w
	}
	return "cron " + w
}

// WhenText is when the schedule fires, as written, with its time zone:
// "cron 0 8 * * 1-5 (Europe/Berlin)".
func (s OperatorSchedule) WhenText() string {
	return s.Spec() + " (" + s.When.Location().String() + ")"
}

// TargetText says whose conversation the schedule's turns are, for
// people, as bot.yaml names it: "telegram chat 42", "telegram chat -100
// topic 7", "websocket principal ann", "websocket: every session that
// opted in".
func (t ScheduleTarget) TargetText() string {
	switch {
	case t.AllSessions:
		return t.Channel + ": every session that opted in"
	case t.ChatID != "":
		chat, topic, ok := strings.Cut(t.ChatID, "/")
		if ok {
			return t.Channel + " chat " + chat + " topic " + topic
		}
		return t.Channel + " chat " + chat
	case t.UserID != "":
		return t.Channel + " principal " + t.UserID
	}
	return t.Channel + " " + t.SessionKey
}

// NextFires is up to n of the schedule's due times after t, soonest
// first.
func (s OperatorSchedule) NextFires(t time.Time, n int) []time.Time {
	var out []time.Time
	for len(out) < n {
		t = s.When.Next(t)
		if t.IsZero() {
			break
		}
		out = append(out, t)
	}
	return out
}

// offeredTo reports whether a session of channel may opt in to s.
func (s OperatorSchedule) offeredTo(channel string) bool {
	return s.Target.AllSessions && s.Target.Channel == channel
}

// OptIn is a schedule a session may opt in to, and whether it has.
type OptIn struct {
	Name string
	// When is when it fires (OperatorSchedule.WhenText), Next its next
	// due time (zero: due no more).
	When string
	Next time.Time
	// Location is the schedule's time zone, which Next is read in.
	Location *time.Location
	On       bool
}

// Scheduled is what a session has on the clock, for /status: its
// reminders still due and the operator's schedules it gets (one that
// targets it, or an all_sessions one it opted in to), each with the
// soonest due time, read in its own time zone.
type Scheduled struct {
	Reminders        int
	NextReminder     time.Time // zero: none due
	NextReminderZone *time.Location
	Schedules        []string // by name
	NextSchedule     time.Time
	NextScheduleZone *time.Location
	// Offered counts the all_sessions schedules of the session's
	// channel it has not opted in to.
	Offered int
}

// timetableStore is what the timetable reads and writes of the store:
// the sessions' choices about all_sessions schedules, and their
// reminders.
type timetableStore interface {
	SessionOptIns(ctx context.Context, sessionKey string) ([]string, error)
	SetScheduleOptIn(ctx context.Context, o ledger.ScheduleOptIn, on bool) error
	Reminders(ctx context.Context, sessionKey string) ([]ledger.Reminder, error)
}

// Timetable is the operator's schedules in force and the sessions'
// choices about them. Built in the gateway's wiring, its list set from
// the configuration at start and again by each reload (Set).
type Timetable struct {
	store timetableStore
	now   func() time.Time
	list  atomic.Pointer[[]OperatorSchedule]
}

// NewTimetable returns a timetable of no schedules, on st; now is its
// clock (default time.Now).
func NewTimetable(st timetableStore, now func() time.Time) *Timetable {
	if now == nil {
		now = time.Now
	}
	t := &Timetable{store: st, now: now}
	t.list.Store(&[]OperatorSchedule{})
	return t
}

// Set replaces the schedules in force: those of a reloaded
// configuration.
func (t *Timetable) Set(list []OperatorSchedule) {
	l := slices.Clone(list)
	t.list.Store(&l)
}

// Schedules are the schedules in force, in the configuration's order.
func (t *Timetable) Schedules() []OperatorSchedule { return slices.Clone(*t.list.Load()) }

// Schedule is the schedule in force called name.
func (t *Timetable) Schedule(name string) (OperatorSchedule, bool) {
	for _, s := range *t.list.Load() {
		if s.Name == name {
			return s, true
		}
	}
	return OperatorSchedule{}, false
}

// OptIns lists the schedules a session of channel may opt in to (its
// channel's all_sessions schedules), each with whether it has.
func (t *Timetable) OptIns(ctx context.Context, channel, sessionKey string) ([]OptIn, error) {
	if channel == "" || sessionKey == "" {
		return nil, ErrBadInbound
	}
	on, err := t.store.SessionOptIns(ctx, sessionKey)
	if err != nil {
		return nil, err
	}
	now := t.now()
	var out []OptIn
	for _, s := range *t.list.Load() {
		if !s.offeredTo(channel) {
			continue
		}
		out = append(out, OptIn{Name: s.Name, When: s.WhenText(), Next: s.When.Next(now), Location: s.When.Location(),
			On: slices.Contains(on, s.Name)})
	}
	return out, nil
}

// SetOptIn records a session's choice about the schedule called name
// and returns the session's opt-ins after it. Opting in needs a schedule
// offered to the session's channel (ErrNoSchedule otherwise, whatever
// the name: a user cannot subscribe to a schedule meant for one chat, or
// for another channel). Opting out also takes back a choice about a
// schedule no longer offered.
func (t *Timetable) SetOptIn(ctx context.Context, channel, sessionKey, name string, on bool) ([]OptIn, error) {
	if channel == "" || sessionKey == "" {
		return nil, ErrBadInbound
	}
	s, ok := t.Schedule(name)
	offered := ok && s.offeredTo(channel)
	if !offered {
		if on {
			return nil, ErrNoSchedule
		}
		mine, err := t.store.SessionOptIns(ctx, sessionKey)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(mine, name) {
			return nil, ErrNoSchedule
		}
	}
	err := t.store.SetScheduleOptIn(ctx, ledger.ScheduleOptIn{SessionKey: sessionKey, Schedule: name, Channel: channel, CreatedAt: t.now().UTC()}, on)
	if err != nil {
		return nil, err
	}
	return t.OptIns(ctx, channel, sessionKey)
}

// Scheduled is what the session of channel and sessionKey has on the
// clock.
func (t *Timetable) Scheduled(ctx context.Context, channel, sessionKey string) (Scheduled, error) {
	var sc Scheduled
	rems, err := t.store.Reminders(ctx, sessionKey)
	if err != nil {
		return sc, err
	}
	for _, r := range rems {
		if r.NextDueAt == nil || r.CancelledAt != nil {
			continue
		}
		sc.Reminders++
		if sc.NextReminder.IsZero() || r.NextDueAt.Before(sc.NextReminder) {
			sc.NextReminder = r.NextDueAt.UTC()
			sc.NextReminderZone, err = schedules.LoadLocation(r.Timezone)
			if err != nil {
				sc.NextReminderZone = time.UTC
			}
		}
	}
	on, err := t.store.SessionOptIns(ctx, sessionKey)
	if err != nil {
		return sc, err
	}
	now := t.now()
	for _, s := range *t.list.Load() {
		gets := !s.Target.AllSessions && s.Target.SessionKey == sessionKey
		if s.offeredTo(channel) {
			if gets = slices.Contains(on, s.Name); !gets {
				sc.Offered++
			}
		}
		if !gets {
			continue
		}
		sc.Schedules = append(sc.Schedules, s.Name)
		if next := s.When.Next(now); !next.IsZero() && (sc.NextSchedule.IsZero() || next.Before(sc.NextSchedule)) {
			sc.NextSchedule, sc.NextScheduleZone = next, s.When.Location()
		}
	}
	return sc, nil
}
