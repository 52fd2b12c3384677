package config

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chatgate/chatgate/schedules"
)

const schedulesYAML = `
channels:
  telegram:
    token: "123456:abcdefghijklmnop"
schedules:
  - name: morning-brief
    cron: "0 8 * * 1-5"
    timezone: Europe/Berlin
    target: {channel: telegram, chat: -1001234567890, topic: 7}
    prompt: Write the morning brief.
    tokens_per_day: 20000
  - name: checkin
    every: 2h
    active_hours: "08:00-22:00"
    timezone: America/New_York
    target: {channel: telegram, all_sessions: true}
    prompt: Ask how the day goes.
    misfire: skip
    quiet: true
  - name: ann
    every: 30m
    target: {channel: websocket, principal: ann}
    prompt: Remind Ann to stretch.
    max_late: 1h
`

func TestSchedulesRead(t *testing.T) {
	c := mustParse(t, schedulesYAML)
	if len(c.Schedules) != 3 {
		t.Fatalf("schedules = %+v", c.Schedules)
	}
	brief, checkin, ann := c.Schedules[0], c.Schedules[1], c.Schedules[2]
	if brief.Misfire != schedules.MisfireOnce || brief.MaxLate.D() != schedules.DefaultMaxLate || brief.Target.Topic != 7 || brief.Target.Chat != -1001234567890 {
		t.Fatalf("morning-brief = %+v", brief)
	}
	if checkin.Misfire != schedules.MisfireSkip || checkin.MaxLate != 0 || !checkin.Quiet || !checkin.Target.AllSessions {
		t.Fatalf("checkin = %+v", checkin)
	}
	if ann.Timezone != "UTC" || ann.MaxLate.D() != time.Hour {
		t.Fatalf("ann = %+v", ann)
	}
	if brief.Key("") != "schedule:morning-brief" || checkin.Key("telegram:dm:5") != "schedule:checkin:telegram:dm:5" {
		t.Fatalf("keys %q, %q", brief.Key(""), checkin.Key("telegram:dm:5"))
	}
	// What config accepts, the schedules package reads.
	for _, s := range c.Schedules {
		w, err := s.Spec().When()
		if err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		if w.Next(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
			t.Fatalf("%s never fires", s.Name)
		}
		if err := s.MisfireRule().Check(); err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
	}
	if len(c.Warnings) != 0 {
		t.Fatalf("warnings = %q", c.Warnings)
	}

	var out strings.Builder
	c.Describe(&out)
	for _, re := range []string{
		`(?m)^schedules$`,
		`morning-brief +cron 0 8 \* \* 1-5 Europe/Berlin +schedules\[0\] \(bot.yaml:5\)`,
		`target +telegram chat -1001234567890 topic 7 +schedules\[0\].target \(bot.yaml:8\)`,
		`misfire +once, max_late 10m0s +default`,
		`tokens_per_day +20000 +schedules\[0\].tokens_per_day \(bot.yaml:10\)`,
		`checkin +every 2h0m0s 08:00-22:00 America/New_York`,
		`target +telegram: every session that opted in`,
		`misfire +skip +schedules\[1\].misfire \(bot.yaml:17\)`,
		`quiet +true`,
		`ann +every 30m0s UTC`,
		`target +websocket principal ann`,
	} {
		if !regexp.MustCompile(re).MatchString(out.String()) {
			t.Errorf("gateway check does not match %s:\n%s", re, out.String())
		}
	}
}

// Each problem of a schedule names its file, line and key, all of them
// in one run.
func TestScheduleProblems(t *testing.T) {
	got := problems(t, `
schedules:
  - name: Brief
    cron: "0 8 * *"
    timezone: Mars/Olympus
    target: {channel: telegram, chat: 5, principal: ann}
    prompt: hi
    misfire: later
    max_late: 30s
    tokens_per_day: -1
  - name: two
    cron: "0 8 * * *"
    every: 1h
    target: {channel: sms}
    prompt: hi
  - name: two
    every: 90s
    active_hours: "8-22"
    target: {channel: websocket, chat: 5, topic: 2}
  - cron: "0 0 30 2 *"
    active_hours: "08:00-20:00"
    target: {channel: websocket, principal: ann, all_sessions: true}
    prompt: hi
  - name: five
    prompt: hi
    target: {channel: telegram, topic: 3}
  - name: six
    every: 1h
    prompt: hi
  - name: seven
    every: 1h
    prompt: hi
    target: {channel: websocket}
session:
  schedules:
    max_per_user: 0
channels:
  telegram:
    session:
      schedules:
        min_interval: 30s
        enabled: maybe
`)
	want := []string{
		`41: channels.telegram.session.schedules.enabled: cannot use !!str ` + "`maybe`" + ` into bool`,
		`2: schedules[0].name: "Brief" may only have a–z, 0–9, _ and - (and start with a letter or digit)`,
		`4: schedules[0].timezone: "Mars/Olympus" is not an IANA time zone such as Europe/Berlin`,
		`3: schedules[0].cron: "0 8 * *" is not a cron expression of five fields (minute hour day month weekday) or a descriptor such as @daily: expected exactly 5 fields, found 4: [0 8 * *]`,
		`5: schedules[0].target.principal: is a WebSocket principal; a telegram target names a chat (and topic), or all_sessions`,
		`7: schedules[0].misfire: "later" is not one of once, skip`,
		`8: schedules[0].max_late: must be at least 1m0s (a fire that late is on time anyway), got 30s`,
		`9: schedules[0].tokens_per_day: must be 0 or more (0: no budget of its own), got -1`,
		`12: schedules[1].every: schedule "two" has both cron (bot.yaml:11) and every: give one of them`,
		`13: schedules[1].target.channel: "sms" is not one of telegram, websocket`,
		`15: schedules[2].name: "two" is already the name of schedules[1] (bot.yaml:10)`,
		`16: schedules[2].every: 1m30s is not whole minutes`,
		`17: schedules[2].active_hours: "8-22": the start "8" is not a time such as 08:00`,
		`18: schedules[2].target.chat: is a Telegram chat; a websocket target names a principal, or all_sessions`,
		`18: schedules[2].target.topic: is a Telegram forum topic; a websocket target names a principal, or all_sessions`,
		`15: schedules[2].prompt: required: the message the model gets at each fire`,
		`19: schedules[3].name: required: the schedule's name (a–z, 0–9, _ and -), unique`,
		`19: schedules[3].cron: "0 0 30 2 *" never fires`,
		`20: schedules[3].active_hours: goes with every only; a cron expression's hour field says when this schedule fires`,
		`21: schedules[3].target.all_sessions: goes to every session of the channel that opted in; leave out chat and principal, which name one`,
		`23: schedules[4]: schedule "five" needs cron (such as "0 8 * * 1-5") or every (such as "2h", with active_hours if need be)`,
		`25: schedules[4].target: names no conversation: give chat (a Telegram chat id, and topic if need be), or all_sessions: true`,
		`25: schedules[4].target.topic: goes with chat: the topic of which chat?`,
		`26: schedules[5].target.channel: required: telegram or websocket`,
		`32: schedules[6].target: names no conversation: give principal, or all_sessions: true`,
		`35: session.schedules.max_per_user: must be 1–1000, got 0`,
		`40: channels.telegram.session.schedules.min_interval: must be at least 1m0s, got 30s`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// session.schedules rides the policy ladder key by key, and gateway
// check prints it where a key is set.
func TestSessionSchedulesLadder(t *testing.T) {
	c := mustParse(t, `
session:
  schedules:
    enabled: true
    max_per_user: 5
channels:
  telegram:
    session:
      schedules:
        min_interval: 15m
        enabled: false
`)
	ws, tg := c.Policy(ChannelWebSocket).Schedules, c.Policy(ChannelTelegram).Schedules
	if !ws.Enabled.V || ws.MaxPerUser.V != 5 || ws.MinInterval.V != DefaultReminderInterval || ws.MinInterval.From != "default" {
		t.Fatalf("websocket: %+v", ws)
	}
	if tg.Enabled.V || tg.MaxPerUser.V != 5 || tg.MinInterval.V != 15*time.Minute ||
		tg.Enabled.From != "channels.telegram.session.schedules.enabled (bot.yaml:10)" || tg.MaxPerUser.From != "session.schedules.max_per_user (bot.yaml:4)" {
		t.Fatalf("telegram: %+v", tg)
	}
	var out strings.Builder
	c.Describe(&out)
	for _, re := range []string{
		`schedules.enabled +true +session.schedules.enabled \(bot.yaml:3\)`,
		`schedules.enabled +false +channels.telegram.session.schedules.enabled \(bot.yaml:10\)`,
		`schedules.min_interval +15m0s +channels.telegram.session.schedules.min_interval \(bot.yaml:9\)`,
		`schedules.max_per_user +5 +session.schedules.max_per_user \(bot.yaml:4\)`,
	} {
		if !regexp.MustCompile(re).MatchString(out.String()) {
			t.Errorf("gateway check does not match %s:\n%s", re, out.String())
		}
	}
	if d := mustParse(t, "session:\n  max_history: 5\n"); d.Policy(ChannelTelegram).Schedules.Enabled.V {
		t.Fatal("reminders are on by default")
	} else {
		var out strings.Builder
		d.Describe(&out)
		if strings.Contains(out.String(), "schedules") {
			t.Fatalf("nothing set, yet gateway check prints schedules:\n%s", out.String())
		}
	}
	a, b := mustParse(t, "session:\n  max_history: 5\n"), mustParse(t, "session:\n  max_history: 5\n  schedules: {max_per_user: 3}\n")
	if SamePolicies(a.Policies(), b.Policies()) {
		t.Fatal("session.schedules changed, yet SamePolicies")
	}
}

// Warnings: a target whose channel does not run, max_late with skip.
func TestScheduleWarnings(t *testing.T) {
	c := mustParse(t, `
channels:
  websocket:
    enabled: false
schedules:
  - name: a
    every: 1h
    target: {channel: telegram, chat: 42}
    prompt: hi
  - name: b
    every: 1h
    target: {channel: websocket, principal: ann}
    prompt: hi
    misfire: skip
    max_late: 5m
`)
	want := []string{
		"bot.yaml:7: schedules[0].target.channel: channels.telegram has no token: this schedule's turns have no chat to go to",
		"bot.yaml:11: schedules[1].target.channel: channels.websocket is disabled: this schedule's turns have no client to go to",
		"bot.yaml:14: schedules[1].max_late: has no effect with misfire: skip, which runs no fire late",
	}
	if strings.Join(c.Warnings, "\n") != strings.Join(want, "\n") {
		t.Fatalf("warnings:\n%s\nwant:\n%s", strings.Join(c.Warnings, "\n"), strings.Join(want, "\n"))
	}
}
