package config

import (
	"fmt"
	"time"
)

// Channel names.
const (
	ChannelWebSocket = "websocket"
	ChannelTelegram  = "telegram"
)

// Value is an effective setting and where it came from: a key path with its
// file and line, or "default".
type Value[T any] struct {
	V    T
	From string
}

// Policy is one channel's effective conversation policy.
type Policy struct {
	Channel     string
	MaxHistory  Value[int]
	ResetMode   Value[string]
	IdleMinutes Value[int]
	AtHour      Value[int] // From is "" when no at_hour is set anywhere
	Timezone    Value[string]
}

// Location is the policy's time zone; the name was validated on load.
func (p Policy) Location() *time.Location {
	loc, err := time.LoadLocation(p.Timezone.V)
	if err != nil {
		return time.UTC
	}
	return loc
}

// Daily reports whether the policy resets at a fixed hour.
func (p Policy) Daily() bool { return p.ResetMode.V == ResetDaily || p.ResetMode.V == ResetBoth }

// Idle reports whether the policy resets after inactivity.
func (p Policy) Idle() bool { return p.ResetMode.V == ResetIdle || p.ResetMode.V == ResetBoth }

// Policies resolves the effective policy of every channel.
//
// max_history: channels.<c>.max_history (legacy, highest) →
// channels.<c>.session.max_history → session.max_history → 100.
// reset: channels.<c>.session.reset overrides session.reset field by field.
func (c *Config) Policies() []Policy {
	return []Policy{
		c.policy(ChannelWebSocket, c.Channels.WebSocket.MaxHistory, c.Channels.WebSocket.Session),
		c.policy(ChannelTelegram, c.Channels.Telegram.MaxHistory, c.Channels.Telegram.Session),
	}
}

// Policy returns the effective policy of one channel.
func (c *Config) Policy(channel string) Policy {
	for _, p := range c.Policies() {
		if p.Channel == channel {
			return p
		}
	}
	panic("config: unknown channel " + channel)
}

func (c *Config) policy(name string, legacy *int, s Session) Policy {
	base := "channels." + name
	p := Policy{Channel: name}
	p.MaxHistory = pick(c, DefaultMaxHistory,
		cand[int]{base + ".max_history", legacy},
		cand[int]{base + ".session.max_history", s.MaxHistory},
		cand[int]{"session.max_history", c.Session.MaxHistory})
	top := c.Session.Reset
	p.ResetMode = pick(c, ResetNone,
		cand[string]{base + ".session.reset.mode", s.Reset.Mode},
		cand[string]{"session.reset.mode", top.Mode})
	p.IdleMinutes = pick(c, DefaultIdleMinutes,
		cand[int]{base + ".session.reset.idle_minutes", s.Reset.IdleMinutes},
		cand[int]{"session.reset.idle_minutes", top.IdleMinutes})
	p.AtHour = pick(c, -1,
		cand[int]{base + ".session.reset.at_hour", s.Reset.AtHour},
		cand[int]{"session.reset.at_hour", top.AtHour})
	if p.AtHour.From == "default" {
		p.AtHour.From = ""
	}
	p.Timezone = pick(c, DefaultTimezone,
		cand[string]{base + ".session.reset.timezone", s.Reset.Timezone},
		cand[string]{"session.reset.timezone", top.Timezone})
	return p
}

type cand[T any] struct {
	path string
	v    *T
}

func pick[T any](c *Config, def T, cands ...cand[T]) Value[T] {
	for _, k := range cands {
		if k.v != nil {
			return Value[T]{V: *k.v, From: fmt.Sprintf("%s (%s)", k.path, c.where(k.path))}
		}
	}
	return Value[T]{V: def, From: "default"}
}

// problems reports what is wrong with a resolved policy, and records a warning
// when both max_history keys of the channel are set to different values.
func (p Policy) problems(c *Config) Errors {
	var errs Errors
	base := "channels." + p.Channel
	if p.Daily() && p.AtHour.From == "" {
		modeKey := base + ".session.reset.mode"
		if c.lines[modeKey] == 0 {
			modeKey = "session.reset.mode"
		}
		errs = append(errs, c.errAt(modeKey, "reset mode %q for channel %s needs reset.at_hour (0–23), set in session.reset or %s.session.reset", p.ResetMode.V, p.Channel, base))
	}
	legacy, nested := c.channelMaxHistory(p.Channel)
	if legacy != nil && nested != nil && *legacy != *nested {
		c.warn(base+".max_history", "%s.max_history (%d) and %s.session.max_history (%d, %s) are both set; using %d from the legacy key %s.max_history",
			base, *legacy, base, *nested, c.where(base+".session.max_history"), *legacy, base)
	}
	return errs
}

func (c *Config) channelMaxHistory(channel string) (legacy, nested *int) {
	switch channel {
	case ChannelWebSocket:
		return c.Channels.WebSocket.MaxHistory, c.Channels.WebSocket.Session.MaxHistory
	case ChannelTelegram:
		return c.Channels.Telegram.MaxHistory, c.Channels.Telegram.Session.MaxHistory
	}
	return nil, nil
}
