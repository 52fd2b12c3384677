package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// The reminder frames (docs/protocol.md, "Reminders").
//
// {"type":"reminders"} is answered with a reminders frame: the session's
// reminders still due, each with its next time on its zone's clock.
// {"type":"reminder_cancel","id":12} cancels one of them and sends the
// reminders frame, as it is after the cancel, to every connection of the
// session; a reminder that is not the session's (or no longer due) gets
// the error not_found. Reminders are made by asking the bot (the model's
// reminder tools); the session is always the connection's own, never one
// a frame names. Both run on the connection's worker, in order.

// Reminders is the door of the reminder frames (sessions.Reminders).
type Reminders interface {
	Enabled(channel string) bool
	List(ctx context.Context, sessionKey string) ([]ledger.Reminder, error)
	Cancel(ctx context.Context, sessionKey string, id int64) error
}

var errNoReminders = &wsError{"unsupported", "this gateway keeps no reminders"}

// reminderInfo is a reminder as frames show it.
type reminderInfo struct {
	ID   int64  `json:"id"`
	Text string `json:"text"`
	// Next is the next due time, RFC 3339 on its zone's clock.
	Next     string `json:"next"`
	Timezone string `json:"timezone"`
	// Repeats is how it repeats ("every 2h", "cron 0 8 * * 1-5"); absent
	// for a one-time reminder.
	Repeats string `json:"repeats,omitempty"`
}

// remindersFrame is the session's reminders.
type remindersFrame struct {
	Type string `json:"type"`
	// Enabled tells whether the bot makes new reminders here
	// (session.schedules.enabled); those kept are listed either way.
	Enabled   bool           `json:"enabled"`
	Reminders []reminderInfo `json:"reminders"`
}

func newRemindersFrame(enabled bool, list []ledger.Reminder) remindersFrame {
	f := remindersFrame{Type: "reminders", Enabled: enabled, Reminders: make([]reminderInfo, 0, len(list))}
	for _, r := range list {
		info := reminderInfo{ID: r.ID, Text: r.Text, Timezone: r.Timezone, Repeats: sessions.ReminderRepeats(r)}
		if info.Timezone == "" {
			info.Timezone = "UTC"
		}
		if t := sessions.ReminderNext(r); !t.IsZero() {
			info.Next = t.Format(time.RFC3339)
		}
		f.Reminders = append(f.Reminders, info)
	}
	return f
}

// reminderCancel is a reminder_cancel frame: its id is a number, where
// most frames' is a string, so it is decoded apart.
type reminderCancel struct {
	Type string `json:"type"`
	ID   *int64 `json:"id"`
}

// decodeReminderCancel decodes a reminder_cancel frame; ok is false when
// data is no such frame.
func decodeReminderCancel(data []byte) (f *clientFrame, werr *wsError, ok bool) {
	var probe struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(data, &probe) != nil || probe.Type != "reminder_cancel" {
		return nil, nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var d reminderCancel
	if err := dec.Decode(&d); err != nil {
		return nil, errBadFrame.with("reminder_cancel is not valid: %v", err), true
	}
	if dec.More() {
		return nil, errBadFrame.with("one JSON object per frame"), true
	}
	switch {
	case d.ID == nil:
		return nil, errBadFrame.with("reminder_cancel needs the id of the reminder (id, a number)"), true
	case *d.ID <= 0:
		return nil, errBadFrame.with("reminder_cancel id must be a positive number"), true
	}
	return &clientFrame{Type: d.Type, ReminderID: *d.ID}, nil, true
}

// reminders runs a reminders frame.
func (c *wsConn) reminders(ctx context.Context) {
	defer c.finish()
	r := c.ws.sess.Reminders
	if r == nil {
		c.sendError(errNoReminders)
		return
	}
	f, werr := c.remindersFrame(ctx, r)
	if werr != nil {
		c.sendError(werr)
		return
	}
	c.enqueue(f)
}

// cancelReminder runs a reminder_cancel frame.
func (c *wsConn) cancelReminder(ctx context.Context, id int64) {
	defer c.finish()
	r := c.ws.sess.Reminders
	if r == nil {
		c.sendError(errNoReminders)
		return
	}
	switch err := r.Cancel(ctx, c.key, id); {
	case errors.Is(err, sessions.ErrNoSuchReminder):
		c.sendError(errNotFound.with("you have no reminder %d (cancelled or done already?)", id))
		return
	case err != nil:
		c.sendError(readError(err, "the reminder could not be cancelled; try again"))
		return
	}
	f, werr := c.remindersFrame(ctx, r)
	if werr != nil {
		c.sendError(werr)
		return
	}
	for _, other := range c.ws.connsOf(c.key) {
		if other != c {
			other.enqueue(f)
		}
	}
	c.enqueue(f)
}

func (c *wsConn) remindersFrame(ctx context.Context, r Reminders) ([]byte, *wsError) {
	list, err := r.List(ctx, c.key)
	if err != nil {
		return nil, readError(err, "the reminders could not be read; try again")
	}
	return encode(newRemindersFrame(r.Enabled(Channel), list)), nil
}
