package config

import (
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/chatgate/chatgate/schedules"
)

// Schedule is one entry of schedules: a turn the bot takes on time, once
// per due time, in the conversation of its target.
type Schedule struct {
	// Name is the schedule's identity, in its fires' keys and in logs;
	// unique, a–z 0–9 _ -.
	Name string `yaml:"name"`
	// When: a cron expression, or every (whole minutes, 1m–24h) within
	// optional active_hours; both read in timezone.
	Cron        string   `yaml:"cron"`
	Every       Duration `yaml:"every"`
	ActiveHours string   `yaml:"active_hours"`
	// Timezone is an IANA name (default UTC).
	Timezone string `yaml:"timezone"`
	// Target is whose conversation the turn is.
	Target ScheduleTarget `yaml:"target"`
	// Prompt is the turn's message to the model, marked as scheduled,
	// not as the user's words.
	Prompt string `yaml:"prompt"`
	// Misfire is what a fire missed while no gateway ran does: once (the
	// default: the latest runs late within max_late) or skip.
	Misfire string `yaml:"misfire"`
	// MaxLate bounds how late a missed fire runs under once (default
	// schedules.DefaultMaxLate).
	MaxLate Duration `yaml:"max_late"`
	// Quiet: a reply that is schedules.QuietReply is stored and not sent.
	Quiet bool `yaml:"quiet"`
	// TokensPerDay is the schedule's own budget of model tokens a day,
	// the day as the target channel's budgets count it, over all its
	// fires (0: none but the users').
	TokensPerDay int64 `yaml:"tokens_per_day"`
}

// ScheduleTarget is the conversation a schedule's turns belong to: a
// Telegram chat (and topic), a WebSocket principal, or every session of
// a channel that opted in to the schedule. Channel is always given.
type ScheduleTarget struct {
	Channel string `yaml:"channel"`
	// Chat is a Telegram chat id: a user's id for their private chat, a
	// group's (negative) id.
	Chat int64 `yaml:"chat"`
	// Topic is the chat's forum topic (message_thread_id); 0: none.
	Topic int `yaml:"topic"`
	// Principal is a WebSocket principal.
	Principal string `yaml:"principal"`
	// AllSessions targets every session of Channel whose user opted in
	// to this schedule (a stored per-session choice; none by default).
	AllSessions bool `yaml:"all_sessions"`
}

// SessionSchedules is session.schedules: the reminders and check-ins
// users make in the chat. Each key on its own overrides the level above.
type SessionSchedules struct {
	// Enabled offers the model the reminder tools (default false).
	Enabled *bool `yaml:"enabled"`
	// MaxPerUser is how many reminders one user (session key) keeps at
	// once (default DefaultMaxReminders).
	MaxPerUser *int `yaml:"max_per_user"`
	// MinInterval is the shortest time between two fires of one
	// recurring reminder (default DefaultReminderInterval).
	MinInterval *Duration `yaml:"min_interval"`
}

// Defaults and bounds of schedules and session.schedules.
const (
	DefaultMaxReminders     = 10
	MaxMaxReminders         = 1000
	DefaultReminderInterval = time.Hour
	MinReminderInterval     = time.Minute
	MaxScheduleName         = 64
)

// ScheduleLimits are a channel's effective session.schedules.
type ScheduleLimits struct {
	Enabled     Value[bool]
	MaxPerUser  Value[int]
	MinInterval Value[time.Duration]
}

var scheduleNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

// Spec is the schedule's times as the schedules package reads them.
func (s Schedule) Spec() schedules.Spec {
	return schedules.Spec{Cron: s.Cron, Every: s.Every.D(), Hours: s.ActiveHours, Timezone: s.Timezone}
}

// MisfireRule is the schedule's rule for fires missed while no gateway
// ran.
func (s Schedule) MisfireRule() schedules.Misfire {
	return schedules.Misfire{Rule: s.Misfire, MaxLate: s.MaxLate.D()}
}

// Key is the store's key of the schedule's fires; for all_sessions, of
// its fires in one session (schedules.OperatorSessionKey).
func (s Schedule) Key(sessionKey string) string {
	if s.Target.AllSessions {
		return schedules.OperatorSessionKey(s.Name, sessionKey)
	}
	return schedules.OperatorKey(s.Name)
}

func (c *Config) applyScheduleDefaults() {
	for i := range c.Schedules {
		s := &c.Schedules[i]
		if s.Timezone == "" {
			s.Timezone = DefaultTimezone
		}
		if s.Misfire == "" {
			s.Misfire = schedules.MisfireOnce
		}
		if s.MaxLate == 0 && s.Misfire == schedules.MisfireOnce {
			s.MaxLate = Duration(schedules.DefaultMaxLate)
		}
	}
}

// scheduleLimits resolves a channel's session.schedules:
// channels.<c>.session.schedules.<key> → session.schedules.<key> →
// default.
func (c *Config) scheduleLimits(base string, s Session) ScheduleLimits {
	top := c.Session.Schedules
	return ScheduleLimits{
		Enabled: pick(c, false,
			cand[bool]{base + ".session.schedules.enabled", s.Schedules.Enabled},
			cand[bool]{"session.schedules.enabled", top.Enabled}),
		MaxPerUser: pick(c, DefaultMaxReminders,
			cand[int]{base + ".session.schedules.max_per_user", s.Schedules.MaxPerUser},
			cand[int]{"session.schedules.max_per_user", top.MaxPerUser}),
		MinInterval: pick(c, DefaultReminderInterval,
			cand[time.Duration]{base + ".session.schedules.min_interval", (*time.Duration)(s.Schedules.MinInterval)},
			cand[time.Duration]{"session.schedules.min_interval", (*time.Duration)(top.MinInterval)}),
	}
}

// validateSessionSchedules checks one level's session.schedules (path is
// "session" or "channels.<c>.session").
func (c *Config) validateSessionSchedules(path string, s SessionSchedules) Errors {
	var errs Errors
	if n := s.MaxPerUser; n != nil && (*n < 1 || *n > MaxMaxReminders) {
		errs = append(errs, c.errAt(path+".schedules.max_per_user", "must be 1–%d, got %d", MaxMaxReminders, *n))
	}
	if d := s.MinInterval; d != nil && d.D() < MinReminderInterval {
		errs = append(errs, c.errAt(path+".schedules.min_interval", "must be at least %s, got %s", MinReminderInterval, d.D()))
	}
	return errs
}

// validateSchedules checks every entry of schedules.
func (c *Config) validateSchedules() Errors {
	var errs Errors
	named := map[string]string{} // name → path of the entry that has it
	for i, s := range c.Schedules {
		p := fmt.Sprintf("schedules[%d]", i)
		bad := func(key, format string, args ...any) { errs = append(errs, c.errAt(join(p, key), format, args...)) }
		required := func(key, format string, args ...any) {
			if isBroken(c.broken, p+"."+key) {
				return
			}
			e := c.errAt(p+"."+key, format, args...)
			if e.Line == 0 {
				e.Line = c.lines[p] // the key is missing: the entry's own line
			}
			errs = append(errs, e)
		}
		switch {
		case s.Name == "":
			required("name", "required: the schedule's name (a–z, 0–9, _ and -), unique")
		case !scheduleNameRE.MatchString(s.Name):
			bad("name", "%q may only have a–z, 0–9, _ and - (and start with a letter or digit)", s.Name)
		case len(s.Name) > MaxScheduleName:
			bad("name", "%q is longer than %d characters", s.Name, MaxScheduleName)
		case named[s.Name] != "":
			bad("name", "%q is already the name of %s (%s)", s.Name, named[s.Name], c.where(named[s.Name]))
		default:
			named[s.Name] = p
		}
		errs = append(errs, c.validateScheduleWhen(p, s)...)
		errs = append(errs, c.validateScheduleTarget(p, s.Target)...)
		if strings.TrimSpace(s.Prompt) == "" {
			required("prompt", "required: the message the model gets at each fire")
		}
		switch s.Misfire {
		case schedules.MisfireOnce, schedules.MisfireSkip:
		default:
			bad("misfire", "%q is not one of %s, %s", s.Misfire, schedules.MisfireOnce, schedules.MisfireSkip)
		}
		switch {
		case s.MaxLate < 0:
			bad("max_late", "must not be negative")
		case s.MaxLate != 0 && s.MaxLate.D() < schedules.OnTime:
			bad("max_late", "must be at least %s (a fire that late is on time anyway), got %s", schedules.OnTime, s.MaxLate.D())
		case s.Misfire == schedules.MisfireSkip && c.lines[p+".max_late"] > 0:
			c.warn(p+".max_late", "has no effect with misfire: skip, which runs no fire late")
		}
		if s.TokensPerDay < 0 {
			bad("tokens_per_day", "must be 0 or more (0: no budget of its own), got %d", s.TokensPerDay)
		}
	}
	return errs
}

// validateScheduleWhen checks when a schedule fires: exactly one of cron
// and every, active_hours with every only, a time zone.
func (c *Config) validateScheduleWhen(p string, s Schedule) Errors {
	var errs Errors
	bad := func(key, format string, args ...any) { errs = append(errs, c.errAt(join(p, key), format, args...)) }
	unread := func(key string) bool { return isBroken(c.broken, p+"."+key) }
	loc, err := schedules.LoadLocation(s.Timezone)
	if err != nil {
		bad("timezone", "%v", err)
		loc = time.UTC
	}
	label := "this schedule"
	if s.Name != "" {
		label = fmt.Sprintf("schedule %q", s.Name)
	}
	switch {
	case s.Cron == "" && s.Every == 0:
		if !unread("cron") && !unread("every") {
			errs = append(errs, c.errAt(p, "%s needs cron (such as \"0 8 * * 1-5\") or every (such as \"2h\", with active_hours if need be)", label))
		}
	case s.Cron != "" && s.Every != 0:
		bad("every", "%s has both cron (%s) and every: give one of them", label, c.where(p+".cron"))
	case s.Cron != "":
		if _, err := schedules.ParseCron(s.Cron, loc); err != nil {
			bad("cron", "%v", err)
		}
	default:
		if err := schedules.CheckEvery(s.Every.D()); err != nil {
			bad("every", "%v", err)
		}
	}
	if s.ActiveHours != "" {
		if s.Cron != "" {
			bad("active_hours", "goes with every only; a cron expression's hour field says when %s fires", label)
		} else if _, err := schedules.ParseHours(s.ActiveHours); err != nil {
			bad("active_hours", "%v", err)
		}
	}
	return errs
}

// validateScheduleTarget checks whose conversation a schedule's turns
// belong to.
func (c *Config) validateScheduleTarget(p string, t ScheduleTarget) Errors {
	var errs Errors
	p += ".target"
	bad := func(key, format string, args ...any) { errs = append(errs, c.errAt(join(p, key), format, args...)) }
	unread := func(key string) bool { return isBroken(c.broken, p+"."+key) }
	if isBroken(c.broken, p) {
		return nil
	}
	set := 0
	for _, on := range []bool{t.Chat != 0, t.Principal != "", t.AllSessions} {
		if on {
			set++
		}
	}
	switch t.Channel {
	case "":
		if !unread("channel") {
			e := c.errAt(p+".channel", "required: %s or %s", ChannelTelegram, ChannelWebSocket)
			if e.Line == 0 {
				e.Line = c.lines[p]
			}
			if e.Line == 0 {
				e.Line = c.lines[strings.TrimSuffix(p, ".target")]
			}
			errs = append(errs, e)
		}
		return errs
	case ChannelTelegram:
		if t.Principal != "" {
			bad("principal", "is a WebSocket principal; a telegram target names a chat (and topic), or all_sessions")
		}
		if !c.TelegramEnabled() {
			c.warn(p+".channel", "channels.telegram has no token: this schedule's turns have no chat to go to")
		}
	case ChannelWebSocket:
		if t.Chat != 0 {
			bad("chat", "is a Telegram chat; a websocket target names a principal, or all_sessions")
		}
		if t.Topic != 0 {
			bad("topic", "is a Telegram forum topic; a websocket target names a principal, or all_sessions")
		}
		if !c.WebSocketEnabled() {
			c.warn(p+".channel", "channels.websocket is disabled: this schedule's turns have no client to go to")
		}
	default:
		bad("channel", "%q is not one of %s, %s", t.Channel, ChannelTelegram, ChannelWebSocket)
		return errs
	}
	switch {
	case set == 0 && t.Channel == ChannelTelegram:
		errs = append(errs, c.errAt(p, "names no conversation: give chat (a Telegram chat id, and topic if need be), or all_sessions: true"))
	case set == 0:
		errs = append(errs, c.errAt(p, "names no conversation: give principal, or all_sessions: true"))
	case t.AllSessions && set > 1:
		bad("all_sessions", "goes to every session of the channel that opted in; leave out chat and principal, which name one")
	}
	if t.Topic < 0 {
		bad("topic", "must be a forum topic's id (message_thread_id), got %d", t.Topic)
	} else if t.Topic != 0 && t.Chat == 0 && t.Channel == ChannelTelegram {
		bad("topic", "goes with chat: the topic of which chat?")
	}
	if t.Principal != "" && strings.TrimSpace(t.Principal) != t.Principal {
		bad("principal", "%q has spaces around it", t.Principal)
	}
	return errs
}

// describeSchedules prints the operator's schedules for `gateway check`:
// when each fires, where, and its rules.
func (c *Config) describeSchedules(tw io.Writer) {
	if len(c.Schedules) == 0 {
		return
	}
	fmt.Fprintf(tw, "schedules\n")
	for i, s := range c.Schedules {
		p := fmt.Sprintf("schedules[%d]", i)
		when := "cron " + s.Cron
		if s.Cron == "" {
			when = "every " + s.Every.D().String()
			if s.ActiveHours != "" {
				when += " " + s.ActiveHours
			}
		}
		fmt.Fprintf(tw, "  %s\t%s %s\t%s (%s)\n", s.Name, when, s.Timezone, p, c.where(p))
		fmt.Fprintf(tw, "    target\t%s\t%s\n", targetText(s.Target), c.from(p+".target"))
		misfire := s.Misfire
		if s.Misfire == schedules.MisfireOnce {
			misfire += ", max_late " + s.MaxLate.D().String()
		}
		fmt.Fprintf(tw, "    misfire\t%s\t%s\n", misfire, c.from(p+".misfire"))
		fmt.Fprintf(tw, "    quiet\t%t\t%s\n", s.Quiet, c.from(p+".quiet"))
		fmt.Fprintf(tw, "    tokens_per_day\t%s\t%s\n", limitText(float64(s.TokensPerDay), false), c.from(p+".tokens_per_day"))
	}
}

// describeScheduleLimits prints a channel's session.schedules when any
// of its keys is set.
func describeScheduleLimits(w io.Writer, l ScheduleLimits) {
	if l.Enabled.From == "default" && l.MaxPerUser.From == "default" && l.MinInterval.From == "default" {
		return
	}
	fmt.Fprintf(w, "  schedules.enabled\t%t\t%s\n", l.Enabled.V, l.Enabled.From)
	fmt.Fprintf(w, "  schedules.max_per_user\t%d\t%s\n", l.MaxPerUser.V, l.MaxPerUser.From)
	fmt.Fprintf(w, "  schedules.min_interval\t%s\t%s\n", l.MinInterval.V, l.MinInterval.From)
}

// targetText is a schedule's target as `gateway check` prints it.
func targetText(t ScheduleTarget) string {
	switch {
	case t.AllSessions:
		return t.Channel + ": every session that opted in"
	case t.Chat != 0 && t.Topic != 0:
		return t.Channel + " chat " + strconv.FormatInt(t.Chat, 10) + " topic " + strconv.Itoa(t.Topic)
	case t.Chat != 0:
		return t.Channel + " chat " + strconv.FormatInt(t.Chat, 10)
	}
	return t.Channel + " principal " + t.Principal
}
