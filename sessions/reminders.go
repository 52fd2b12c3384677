package sessions

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/chatgate/chatgate/schedules"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// ReminderPolicy is a channel's session.schedules: whether its users may
// make reminders in the chat, how many one user (session key) keeps at
// once, and the shortest time between two fires of a recurring one.
type ReminderPolicy struct {
	Enabled     bool
	MaxPerUser  int           // 0: DefaultMaxReminders
	MinInterval time.Duration // 0: DefaultReminderInterval
}

// Defaults and bounds of reminders.
const (
	DefaultMaxReminders     = 10
	DefaultReminderInterval = time.Hour
	// MaxReminderText bounds the text a reminder keeps (what the model
	// gets at each fire), in bytes.
	MaxReminderText = 2000
	// maxSpecText bounds a reminder's schedule as its row keeps it
	// (ledger.Reminder.Spec) and its time zone's name.
	maxSpecText = 255
	maxZoneName = 64
	// intervalProbe is how many fires of a cron expression are looked
	// at for the shortest time between two (ReminderPolicy.MinInterval).
	intervalProbe = 2000
)

// Errors of Reminders. ErrBadReminder wraps what is wrong with a
// reminder asked for (a time in the past, a bad time zone, ...), in words
// a user (or the model) can act on.
var (
	ErrRemindersOff     = errors.New("reminders are not enabled here")
	ErrBadReminder      = errors.New("not a reminder that can be made")
	ErrTooManyReminders = errors.New("too many reminders")
	ErrNoSuchReminder   = errors.New("no such reminder")
)

// Reminders is the reminders users make in the chat (ledger.Reminder):
// made, listed and cancelled here, for the session that owns them, within
// its channel's ReminderPolicy; fired by the scheduler, which reads their
// NextDueAt. A session key is always the caller's to give — the turn's
// own, a Telegram chat's, a WebSocket connection's — never the model's.
// New builds it; Manager.Reminders returns it.
type Reminders struct {
	store  ReminderStore
	policy func(channel string) Policy
	now    func() time.Time
}

// ReminderStore is what Reminders reads and writes of the store
// (store.DB's remindersql.go).
type ReminderStore interface {
	AddReminder(ctx context.Context, r *ledger.Reminder, limit int) (bool, error)
	Reminders(ctx context.Context, sessionKey string) ([]ledger.Reminder, error)
	CancelReminder(ctx context.Context, id int64, sessionKey string, at time.Time) (bool, error)
}

// NewReminders returns Reminders over st, with a channel's policy from
// policy and the time from now.
func NewReminders(st ReminderStore, policy func(channel string) Policy, now func() time.Time) *Reminders {
	return &Reminders{store: st, policy: policy, now: now}
}

// Reminders returns the reminders users make in the chat.
func (m *Manager) Reminders() *Reminders { return m.reminders }

// Enabled reports whether the channel's users may make reminders.
func (r *Reminders) Enabled(channel string) bool { return r.policy(channel).Reminders.Enabled }

// limits is the channel's ReminderPolicy with its defaults.
func (r *Reminders) limits(channel string) ReminderPolicy {
	p := r.policy(channel).Reminders
	if p.MaxPerUser <= 0 {
		p.MaxPerUser = DefaultMaxReminders
	}
	if p.MinInterval <= 0 {
		p.MinInterval = DefaultReminderInterval
	}
	return p
}

// ReminderRequest is a reminder asked for.
type ReminderRequest struct {
	SessionKey string // the owner
	Channel    string
	// Spec is when: At (once), Cron or Every (recurring), in Spec.Timezone.
	Spec schedules.Spec
	// Text is what the model gets at each fire.
	Text string
	// CallKey is the idempotency key of the tool call that asks for it
	// (""): the same key makes one reminder however often it is run.
	CallKey string
}

// Create makes a reminder for the request's session, or says why not:
// ErrRemindersOff, ErrTooManyReminders, or ErrBadReminder wrapping the
// reason. Its first due time is computed here, on the manager's clock.
func (r *Reminders) Create(ctx context.Context, req ReminderRequest) (ledger.Reminder, error) {
	if req.SessionKey == "" || req.Channel == "" {
		return ledger.Reminder{}, errors.New("a reminder needs its session and channel")
	}
	if !r.Enabled(req.Channel) {
		return ledger.Reminder{}, ErrRemindersOff
	}
	lim := r.limits(req.Channel)
	now := r.now().UTC()
	text, err := keptReminderText(req.Text)
	if err != nil {
		return ledger.Reminder{}, err
	}
	next, err := checkSpec(req.Spec, now, lim.MinInterval)
	if err != nil {
		return ledger.Reminder{}, err
	}
	row := ledger.Reminder{SessionKey: req.SessionKey, Channel: req.Channel, Spec: req.Spec.Text(), Timezone: req.Spec.Timezone,
		Text: text, NextDueAt: &next, CreatedAt: now, CallKey: req.CallKey}
	ok, err := r.store.AddReminder(ctx, &row, lim.MaxPerUser)
	if err != nil {
		return ledger.Reminder{}, err
	}
	if !ok {
		return ledger.Reminder{}, fmt.Errorf("%w: you keep %d already, the most allowed; cancel one first", ErrTooManyReminders, lim.MaxPerUser)
	}
	return row, nil
}

// List returns the session's reminders that are still due, oldest first.
func (r *Reminders) List(ctx context.Context, sessionKey string) ([]ledger.Reminder, error) {
	return r.store.Reminders(ctx, sessionKey)
}

// Cancel cancels the session's reminder id: ErrNoSuchReminder when the
// session has no such reminder still due (another session's id, one
// cancelled already, one that fired for the last time).
func (r *Reminders) Cancel(ctx context.Context, sessionKey string, id int64) error {
	ok, err := r.store.CancelReminder(ctx, id, sessionKey, r.now())
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: %d is not one of your reminders (cancelled or done already?)", ErrNoSuchReminder, id)
	}
	return nil
}

func bad(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadReminder, fmt.Sprintf(format, args...))
}

// keptReminderText is a reminder's text as it is kept, or why it cannot be.
func keptReminderText(s string) (string, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return "", bad("the text is empty: say what to be reminded of")
	case !utf8.ValidString(s):
		return "", bad("the text is not valid UTF-8")
	case strings.ContainsRune(s, 0):
		return "", bad("the text holds a NUL character")
	case len(s) > MaxReminderText:
		return "", bad("the text is %d bytes long; at most %d are kept", len(s), MaxReminderText)
	}
	return s, nil
}

// checkSpec returns a spec's first due time after now, or why it cannot
// be a reminder: a bad time zone or expression, a time in the past, or
// fires closer together than minInterval.
func checkSpec(spec schedules.Spec, now time.Time, minInterval time.Duration) (time.Time, error) {
	if len(spec.Timezone) > maxZoneName {
		return time.Time{}, bad("the time zone's name is too long")
	}
	if _, err := schedules.LoadLocation(spec.Timezone); err != nil {
		return time.Time{}, bad("%v", err)
	}
	if len(spec.Text()) > maxSpecText {
		return time.Time{}, bad("the schedule is too long")
	}
	when, err := spec.When()
	if err != nil {
		return time.Time{}, bad("%v", err)
	}
	next := when.Next(now)
	switch {
	case !spec.At.IsZero():
		if next.IsZero() {
			return time.Time{}, bad("%s is not in the future (it is %s now)", spec.At.UTC().Format(time.RFC3339), now.Format(time.RFC3339))
		}
		return next, nil
	case next.IsZero():
		return time.Time{}, bad("the schedule is never due")
	case spec.Every != 0 && spec.Every < minInterval:
		return time.Time{}, bad("every %s is more often than allowed: at least %s between two fires", shortDuration(spec.Every), shortDuration(minInterval))
	}
	// A cron expression's fires, and the last of an interval's within its
	// active hours, may come closer together than its period.
	if gap := shortestGap(when, now); gap < minInterval {
		return time.Time{}, bad("%q fires as often as every %s; at least %s between two fires is allowed",
			strings.TrimSpace(strings.TrimPrefix(spec.Text(), "cron ")), shortDuration(gap), shortDuration(minInterval))
	}
	return next, nil
}

// shortestGap is the shortest time between two consecutive fires of a
// cron schedule among its next intervalProbe fires after now: enough to
// see every pattern of a week of minutes, and a DST change's.
func shortestGap(w schedules.When, now time.Time) time.Duration {
	gap := time.Duration(1<<63 - 1)
	prev := w.Next(now)
	for range intervalProbe {
		next := w.Next(prev)
		if next.IsZero() {
			break
		}
		gap = min(gap, next.Sub(prev))
		prev = next
	}
	return gap
}

// ReminderNext is when the reminder is next due, on the clock of its
// time zone; the zero time when it is due no more.
func ReminderNext(r ledger.Reminder) time.Time {
	if r.NextDueAt == nil {
		return time.Time{}
	}
	loc, err := schedules.LoadLocation(r.Timezone)
	if err != nil {
		loc = time.UTC
	}
	return r.NextDueAt.In(loc)
}

// ReminderRepeats is how a recurring reminder repeats, as a user reads it
// ("every 2h", "cron 0 8 * * 1-5"), and "" for a one-time reminder.
func ReminderRepeats(r ledger.Reminder) string {
	spec, err := schedules.SpecFromText(r.Spec, r.Timezone)
	if err != nil {
		return r.Spec
	}
	switch {
	case spec.Every != 0:
		s := "every " + shortDuration(spec.Every)
		if spec.Hours != "" {
			s += " within " + spec.Hours
		}
		return s
	case spec.Cron != "":
		return "cron " + spec.Cron
	}
	return ""
}

// shortDuration is d as a person writes it: "2h", "1h30m", "45m".
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
