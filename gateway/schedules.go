package gateway

// The schedules frames (docs/protocol.md, "Schedules"): the operator's
// schedules that go to every session of this channel that opted in
// (bot.yaml schedules with target all_sessions), and the session's
// choice about each.
//
// {"type":"schedules"} is answered with a schedules frame listing them,
// each with opted_in; {"type":"schedule_opt_in","name":"checkin","on":true}
// opts in (false: out) and is answered with the schedules frame after
// the choice, which the session's other connections get too. A name no
// schedule of this channel's opt-in list has — a schedule with one
// target, another channel's, one removed by a reload, or made up — is
// refused with not_found and changes nothing. Both run on the
// connection's worker, in order.

import (
	"context"
	"errors"
	"time"

	"github.com/chatgate/chatgate/sessions"
)

// maxScheduleName bounds a schedule_opt_in frame's name (config's
// MaxScheduleName is less).
const maxScheduleName = 128

var (
	errNoSchedules = &wsError{"unsupported", "this gateway offers no schedules to opt in to"}
	errNoSchedule  = &wsError{"not_found", "no schedule of that name is offered here; send {\"type\":\"schedules\"} for the list"}
)

// Schedules are the operator's schedules a session may opt in to, and
// its choices (sessions.Timetable); a nil door offers none.
type Schedules interface {
	OptIns(ctx context.Context, channel, sessionKey string) ([]sessions.OptIn, error)
	SetOptIn(ctx context.Context, channel, sessionKey, name string, on bool) ([]sessions.OptIn, error)
}

// scheduleInfo is one schedule of a schedules frame.
type scheduleInfo struct {
	Name string `json:"name"`
	// When is when it fires as written, with its time zone; Next its
	// next due time (absent when due no more).
	When     string `json:"when"`
	Timezone string `json:"timezone"`
	Next     string `json:"next,omitempty"`
	OptedIn  bool   `json:"opted_in"`
}

// schedulesFrame lists the schedules a session may opt in to.
type schedulesFrame struct {
	Type      string         `json:"type"`
	Schedules []scheduleInfo `json:"schedules"`
}

func newSchedulesFrame(list []sessions.OptIn) schedulesFrame {
	f := schedulesFrame{Type: "schedules", Schedules: make([]scheduleInfo, 0, len(list))}
	for _, o := range list {
		zone := time.UTC
		if o.Location != nil {
			zone = o.Location
		}
		f.Schedules = append(f.Schedules, scheduleInfo{Name: o.Name, When: o.When, Timezone: zone.String(), Next: rfc3339(o.Next), OptedIn: o.On})
	}
	return f
}

// schedules runs a schedules frame (name nil) or a schedule_opt_in one.
func (c *wsConn) schedules(ctx context.Context, in sessions.Inbound, name *string, on *bool) {
	defer c.finish()
	door := c.ws.sess.Schedules
	if door == nil {
		c.sendError(errNoSchedules)
		return
	}
	if name == nil {
		list, err := door.OptIns(ctx, in.Channel, in.SessionKey)
		if err != nil {
			c.sendError(readError(err, "the schedules could not be read; try again"))
			return
		}
		c.enqueue(encode(newSchedulesFrame(list)))
		return
	}
	list, err := door.SetOptIn(ctx, in.Channel, in.SessionKey, *name, *on)
	switch {
	case errors.Is(err, sessions.ErrNoSchedule):
		c.sendError(errNoSchedule)
		return
	case err != nil:
		c.sendError(readError(err, "the choice could not be stored; send it again"))
		return
	}
	frame := encode(newSchedulesFrame(list))
	for _, other := range c.ws.connsOf(c.key) {
		if other != c {
			other.enqueue(frame)
		}
	}
	c.enqueue(frame)
}
