package config

import (
	"fmt"
	"reflect"
	"strings"
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
	key  string // the key path that set V; "" for a default
	// unread: the key that would set V has a value that could not be
	// read; V is the default, and nothing may be concluded from it.
	unread bool
}

// value is V of a Value of any type: what SamePolicies compares.
func (v Value[T]) value() any { return v.V }

// valued is implemented by every Value.
type valued interface{ value() any }

// Policy is one channel's effective conversation policy.
type Policy struct {
	Channel     string
	MaxHistory  Value[int]
	ResetMode   Value[string]
	IdleMinutes Value[int]
	AtHour      Value[int] // From is "" when no at_hour is set anywhere
	Timezone    Value[string]

	// Busy modes: what a message does while its session has a turn
	// running or waiting.
	BusyMode      Value[string] // queue, collect or interrupt
	DebounceMS    Value[int]
	DebounceMaxMS Value[int] // never below DebounceMS
	MaxBatch      Value[int]

	// MaxHistoryTokens: 0 bounds the history by max_history alone.
	MaxHistoryTokens Value[int]
	// Compaction: summaries of what falls out of the window.
	CompactionEnabled  Value[bool]
	CompactionKeepLast Value[int] // never above MaxHistory
	CompactionPrompt   Value[string]

	// ToolServers names the agent.tools.servers this channel's turns are
	// offered, in order; a server's users allowlist narrows it per user.
	ToolServers Value[[]string]

	// Budget is what a user of the channel may spend with the model;
	// UserBudgets the users with budgets of their own (Config.userBudgets).
	Budget      Budget
	UserBudgets map[string]Budget

	// Schedules are the reminders and check-ins its users may make.
	Schedules ScheduleLimits

	// Memory is what the bot keeps about the channel's users across
	// conversations; UserMemory the users with settings of their own.
	Memory     Memory
	UserMemory map[string]Memory
}

// Location is the policy's time zone; the name was validated on load.
func (p Policy) Location() *time.Location {
	loc, err := time.LoadLocation(p.Timezone.V)
	if err != nil {
		return time.UTC
	}
	return loc
}

// SamePolicies reports whether a and b resolve every setting of every
// channel to the same value. Where a value came from (the From of each
// Value) does not count: a key moved to another line, or from a channel to
// the top level with the same value, changes nothing. Every field of
// Policy is compared, whatever it is, so a setting added to Policy is
// compared without being named here.
func SamePolicies(a, b []Policy) bool {
	return sameValues(reflect.ValueOf(a), reflect.ValueOf(b))
}

func sameValues(a, b reflect.Value) bool {
	if a.Type() != b.Type() {
		return false
	}
	if a.CanInterface() {
		if av, ok := a.Interface().(valued); ok {
			return reflect.DeepEqual(av.value(), b.Interface().(valued).value())
		}
	}
	switch a.Kind() {
	case reflect.Struct:
		for i := range a.NumField() {
			if !sameValues(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	case reflect.Slice:
		if a.Len() != b.Len() {
			return false
		}
		for i := range a.Len() {
			if !sameValues(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	case reflect.Map:
		if a.Len() != b.Len() {
			return false
		}
		for _, k := range a.MapKeys() {
			bv := b.MapIndex(k)
			if !bv.IsValid() || !sameValues(a.MapIndex(k), bv) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a.Interface(), b.Interface())
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
// busy_mode, debounce_ms, debounce_max_ms, max_batch: each
// channels.<c>.session.<key> → session.<key> → default; debounce_ms
// defaults to 0 for websocket and 1500 for telegram.
// tools: channels.<c>.session.tools → session.tools → every server of
// agent.tools.servers. limits and schedules: key by key, as busy_mode.
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

	p.BusyMode = pick(c, DefaultBusyMode,
		cand[string]{base + ".session.busy_mode", s.BusyMode},
		cand[string]{"session.busy_mode", c.Session.BusyMode})
	debounce := DefaultDebounceMS
	if name == ChannelTelegram {
		debounce = DefaultTelegramDebounceMS
	}
	p.DebounceMS = pick(c, debounce,
		cand[int]{base + ".session.debounce_ms", s.DebounceMS},
		cand[int]{"session.debounce_ms", c.Session.DebounceMS})
	p.DebounceMaxMS = pick(c, DefaultDebounceMaxMS,
		cand[int]{base + ".session.debounce_max_ms", s.DebounceMaxMS},
		cand[int]{"session.debounce_max_ms", c.Session.DebounceMaxMS})
	if p.DebounceMaxMS.key == "" && p.DebounceMaxMS.V < p.DebounceMS.V {
		// A debounce longer than the default cap is not cut short by
		// the cap nobody set.
		p.DebounceMaxMS = Value[int]{V: p.DebounceMS.V, From: "default, raised to debounce_ms"}
	}
	p.MaxBatch = pick(c, DefaultMaxBatch,
		cand[int]{base + ".session.max_batch", s.MaxBatch},
		cand[int]{"session.max_batch", c.Session.MaxBatch})

	p.MaxHistoryTokens = pick(c, 0,
		cand[int]{base + ".session.max_history_tokens", s.MaxHistoryTokens},
		cand[int]{"session.max_history_tokens", c.Session.MaxHistoryTokens})
	cmp := c.Session.Compaction
	p.CompactionEnabled = pick(c, false,
		cand[bool]{base + ".session.compaction.enabled", s.Compaction.Enabled},
		cand[bool]{"session.compaction.enabled", cmp.Enabled})
	p.CompactionKeepLast = pick(c, p.MaxHistory.V,
		cand[int]{base + ".session.compaction.keep_last", s.Compaction.KeepLast},
		cand[int]{"session.compaction.keep_last", cmp.KeepLast})
	if p.CompactionKeepLast.key == "" {
		p.CompactionKeepLast.From = "default: max_history"
	} else if p.CompactionKeepLast.V > p.MaxHistory.V {
		p.CompactionKeepLast = Value[int]{V: p.MaxHistory.V, From: p.CompactionKeepLast.From + ", lowered to max_history", key: p.CompactionKeepLast.key}
	}
	p.CompactionPrompt = pick(c, "", // "": the built-in prompt (sessions.DefaultCompactionPrompt)
		cand[string]{base + ".session.compaction.prompt", s.Compaction.Prompt},
		cand[string]{"session.compaction.prompt", cmp.Prompt})

	p.ToolServers = pick(c, c.ToolServerNames(),
		cand[[]string]{base + ".session.tools", s.Tools},
		cand[[]string]{"session.tools", c.Session.Tools})
	if p.ToolServers.From == "default" {
		p.ToolServers.From = "all configured (default)"
	}
	p.Budget = c.budget(base, s)
	p.UserBudgets = c.userBudgets(base, s, p.Budget)
	p.Schedules = c.scheduleLimits(base, s)
	p.Memory = c.memory(base, s)
	p.UserMemory = c.userMemory(base, s, p.Memory)
	return p
}

type cand[T any] struct {
	path string
	v    *T
}

func pick[T any](c *Config, def T, cands ...cand[T]) Value[T] {
	for _, k := range cands {
		if isBroken(c.broken, k.path) {
			return Value[T]{V: def, From: fmt.Sprintf("%s (%s, unreadable)", k.path, c.where(k.path)), key: k.path, unread: true}
		}
		if k.v != nil {
			return Value[T]{V: *k.v, From: fmt.Sprintf("%s (%s)", k.path, c.where(k.path)), key: k.path}
		}
	}
	return Value[T]{V: def, From: "default"}
}

// problems records a warning when both max_history keys of the channel are
// set to different values.
func (p Policy) problems(c *Config) Errors {
	var errs Errors
	base := "channels." + p.Channel
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

// dailyProblems reports each reset mode that resets daily for a channel
// that has no at_hour: once per mode key, naming the channels (a top-level
// mode daily without at_hour is one mistake, not one per channel).
func (c *Config) dailyProblems() Errors {
	var order []string
	channels := map[string][]Policy{}
	for _, p := range c.Policies() {
		if !p.Daily() || p.AtHour.From != "" {
			continue
		}
		k := p.ResetMode.key
		if _, ok := channels[k]; !ok {
			order = append(order, k)
		}
		channels[k] = append(channels[k], p)
	}
	var errs Errors
	for _, k := range order {
		ps := channels[k]
		of, where := "channel "+ps[0].Channel, "channels."+ps[0].Channel+".session.reset"
		if len(ps) > 1 {
			names := make([]string, len(ps))
			for i, p := range ps {
				names[i] = p.Channel
			}
			of, where = "channels "+strings.Join(names, " and "), "each channel's session.reset"
		}
		errs = append(errs, c.errAt(k, "reset mode %q for %s needs reset.at_hour (0–23), set in session.reset or %s", ps[0].ResetMode.V, of, where))
	}
	return errs
}

// debounceProblems reports each debounce_max_ms set lower than the
// effective debounce_ms of a channel it applies to: once per key and
// debounce_ms, naming the channels.
func (c *Config) debounceProblems() Errors {
	type clash struct {
		maxKey, from  string
		max, debounce int
	}
	var order []clash
	channels := map[clash][]string{}
	for _, p := range c.Policies() {
		mx, d := p.DebounceMaxMS, p.DebounceMS
		if mx.key == "" || mx.unread || d.unread || mx.V < 0 || d.V < 0 || mx.V >= d.V {
			continue
		}
		k := clash{mx.key, d.From, mx.V, d.V}
		if _, ok := channels[k]; !ok {
			order = append(order, k)
		}
		channels[k] = append(channels[k], p.Channel)
	}
	var errs Errors
	for _, k := range order {
		of := "channel " + channels[k][0]
		if len(channels[k]) > 1 {
			of = "channels " + strings.Join(channels[k], " and ")
		}
		errs = append(errs, c.errAt(k.maxKey, "%d is lower than debounce_ms %d (%s) of %s; it must be at least debounce_ms",
			k.max, k.debounce, k.from, of))
	}
	return errs
}
