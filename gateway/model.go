package gateway

import (
	"context"
	"errors"
	"math"
	"strings"
	"time"

	"github.com/chatgate/chatgate/sessions"
)

// The status and model frames (docs/protocol.md, "Status and models").
//
// {"type":"status"} is answered with a status frame: the conversation,
// the history window against the model's context, the summary, the
// model, the user's usage against their budget, the busy mode and the
// next reset.
//
// {"type":"model"} asks for the models the session may choose (ready's
// models tells whether there are any), {"type":"model","name":"Smart"}
// chooses one ("" goes back to the default); both are answered with a
// model frame, which a choice also sends to the session's other
// connections. Without agent.models: the error unsupported. Both run on
// the connection's worker, in order: a message sent after a choice is
// answered with the model chosen.

// maxModelName bounds a model frame's name (config.MaxModelName is less).
const maxModelName = 128

var errNoModels = &wsError{"unsupported", "this gateway offers no choice of model (agent.models is not set)"}

// modelInfo is a model as frames show it.
type modelInfo struct {
	// Name is "" for the agent's own model when it is none of the
	// offered ones (the default).
	Name          string `json:"name"`
	ID            string `json:"id"`
	ContextTokens int    `json:"context_tokens,omitempty"`
}

func infoOf(md sessions.Model) modelInfo {
	return modelInfo{Name: md.Name, ID: md.ID, ContextTokens: md.ContextTokens}
}

// modelFrame is where a session stands among the models it may choose.
type modelFrame struct {
	Type    string      `json:"type"`
	Models  []modelInfo `json:"models"`
	Current modelInfo   `json:"current"`
	Default modelInfo   `json:"default"`
	// Chosen is the name of the model the session chose ("": none);
	// Gone tells that it is no longer offered (Current is the default).
	Chosen string `json:"chosen"`
	Gone   bool   `json:"gone,omitempty"`
}

func newModelFrame(st sessions.ModelState) modelFrame {
	f := modelFrame{Type: "model", Models: make([]modelInfo, 0, len(st.Models)), Current: infoOf(st.Current),
		Default: infoOf(st.Default), Chosen: st.Chosen, Gone: st.Gone}
	for _, md := range st.Models {
		f.Models = append(f.Models, infoOf(md))
	}
	return f
}

// model runs a model frame: name nil asks, else chooses.
func (c *wsConn) model(ctx context.Context, in sessions.Inbound, name *string) {
	defer c.finish()
	if !c.ws.sess.OffersModels() {
		c.sendError(errNoModels)
		return
	}
	if name == nil {
		st, err := c.ws.sess.Models(ctx, in)
		if err != nil {
			c.sendError(readError(err, "the models could not be read; try again"))
			return
		}
		c.enqueue(encode(newModelFrame(st)))
		return
	}
	st, err := c.ws.sess.ChooseModel(ctx, in, *name)
	switch {
	case errors.Is(err, sessions.ErrNoModels):
		c.sendError(errNoModels)
		return
	case errors.Is(err, sessions.ErrUnknownModel):
		st, lerr := c.ws.sess.Models(ctx, in)
		names := make([]string, 0, len(st.Models))
		for _, md := range st.Models {
			names = append(names, md.Name)
		}
		msg := "no model of that name is offered"
		if lerr == nil {
			msg += "; the models are: " + strings.Join(names, ", ")
		}
		c.sendError(errNotFound.with("%s", msg))
		return
	case err != nil:
		c.sendError(readError(err, "the choice could not be stored; choose again"))
		return
	}
	frame := encode(newModelFrame(st))
	for _, other := range c.ws.connsOf(c.key) {
		if other != c {
			other.enqueue(frame)
		}
	}
	c.enqueue(frame)
}

// statusFrame is a session's standing (sessions.Status).
type statusFrame struct {
	Type string `json:"type"`
	// Conversation is "" when the session has none yet.
	Conversation string `json:"conversation"`
	StartedAt    string `json:"started_at,omitempty"`
	Messages     int64  `json:"messages"`
	History      struct {
		Messages int `json:"messages"`
		// Tokens is estimated: 4 bytes of text a token, 4 more a message,
		// the system prompt included.
		Tokens        int `json:"tokens"`
		ContextTokens int `json:"context_tokens,omitempty"`
		// Percent of the context (absent when its size is unknown).
		Percent *float64 `json:"percent,omitempty"`
	} `json:"history"`
	Summary  *summaryInfo `json:"summary,omitempty"`
	Model    modelInfo    `json:"model"`
	BusyMode string       `json:"busy_mode"`
	Reset    resetInfo    `json:"reset"`
	Usage    usageInfo    `json:"usage"`
	// Scheduled is what the session has on the clock (absent when the
	// gateway keeps no timetable).
	Scheduled *scheduledInfo `json:"scheduled,omitempty"`
}

// scheduledInfo is a session's reminders and the operator's schedules it
// gets (sessions.Scheduled); each next time comes with the zone it is
// read in.
type scheduledInfo struct {
	Reminders            int      `json:"reminders"`
	NextReminder         string   `json:"next_reminder,omitempty"`
	NextReminderTimezone string   `json:"next_reminder_timezone,omitempty"`
	Schedules            []string `json:"schedules"`
	NextSchedule         string   `json:"next_schedule,omitempty"`
	NextScheduleTimezone string   `json:"next_schedule_timezone,omitempty"`
	// Offered counts the schedules the session may opt in to and has
	// not (the schedules frame lists them).
	Offered int `json:"offered"`
}

func newScheduledInfo(sc *sessions.Scheduled) *scheduledInfo {
	if sc == nil {
		return nil
	}
	out := &scheduledInfo{Reminders: sc.Reminders, NextReminder: rfc3339(sc.NextReminder), Schedules: sc.Schedules,
		NextSchedule: rfc3339(sc.NextSchedule), Offered: sc.Offered}
	if out.Schedules == nil {
		out.Schedules = []string{}
	}
	if !sc.NextReminder.IsZero() && sc.NextReminderZone != nil {
		out.NextReminderTimezone = sc.NextReminderZone.String()
	}
	if !sc.NextSchedule.IsZero() && sc.NextScheduleZone != nil {
		out.NextScheduleTimezone = sc.NextScheduleZone.String()
	}
	return out
}

type summaryInfo struct {
	Text    string `json:"text"`
	Through int64  `json:"through"`
	At      string `json:"at"`
}

type resetInfo struct {
	Mode        string `json:"mode"`
	IdleMinutes int    `json:"idle_minutes,omitempty"`
	AtHour      *int   `json:"at_hour,omitempty"`
	Timezone    string `json:"timezone,omitempty"`
	// Next is when the conversation resets by itself, Reason why; Due
	// when that time has passed (the next message opens a new one).
	Next   string `json:"next,omitempty"`
	Reason string `json:"reason,omitempty"`
	Due    bool   `json:"due,omitempty"`
}

type usageInfo struct {
	Day       sessions.UsageTotals `json:"day"`
	Month     sessions.UsageTotals `json:"month"`
	Budget    sessions.Budget      `json:"budget"`
	DayEnds   string               `json:"day_ends"`
	MonthEnds string               `json:"month_ends"`
	// Over names the budget used up ("" while the user may go on).
	Over string `json:"over,omitempty"`
}

func newStatusFrame(st sessions.Status, now time.Time) statusFrame {
	f := statusFrame{Type: "status", Conversation: st.Conversation, StartedAt: rfc3339(st.StartedAt), Messages: st.Messages,
		Model: infoOf(st.Model.Current), BusyMode: string(st.Busy)}
	f.History.Messages, f.History.Tokens, f.History.ContextTokens = st.HistoryMessages, st.HistoryTokens, st.Model.Current.ContextTokens
	if pct, ok := st.ContextPercent(); ok && !math.IsNaN(pct) {
		f.History.Percent = &pct
	}
	if s := st.Summary; s != nil {
		f.Summary = &summaryInfo{Text: s.Text, Through: s.Through, At: rfc3339(s.At)}
	}
	r := st.Reset
	f.Reset = resetInfo{Mode: string(r.Mode), Next: rfc3339(st.NextReset), Reason: st.NextResetReason}
	if f.Reset.Mode == "" {
		f.Reset.Mode = string(sessions.ResetNone)
	}
	switch r.Mode {
	case sessions.ResetIdle, sessions.ResetDaily, sessions.ResetBoth:
		f.Reset.Timezone = r.TimeZone().String()
		if r.Mode != sessions.ResetDaily {
			f.Reset.IdleMinutes = int(r.IdleFor / time.Minute)
		}
		if r.Mode != sessions.ResetIdle {
			h := r.AtHour
			f.Reset.AtHour = &h
		}
	}
	f.Reset.Due = !st.NextReset.IsZero() && !st.NextReset.After(now)
	u := st.Usage
	f.Usage = usageInfo{Day: u.Day, Month: u.Month, Budget: u.Budget, DayEnds: rfc3339(u.DayEnds), MonthEnds: rfc3339(u.MonthEnds), Over: u.Over()}
	f.Scheduled = newScheduledInfo(st.Scheduled)
	return f
}

// status runs a status frame.
func (c *wsConn) status(ctx context.Context, in sessions.Inbound) {
	defer c.finish()
	st, err := c.ws.sess.Status(ctx, in)
	if err != nil {
		c.sendError(readError(err, "the status could not be read; try again"))
		return
	}
	c.enqueue(encode(newStatusFrame(st, c.ws.opts.Now())))
}

// readError is the error frame of a status or model frame that failed:
// unavailable while the gateway shuts down, else internal with msg.
func readError(err error, msg string) *wsError {
	if errors.Is(err, sessions.ErrShuttingDown) {
		return errUnavailable
	}
	return errInternal.with("%s", msg)
}
