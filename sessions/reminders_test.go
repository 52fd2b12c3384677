package sessions

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/chatgate/chatgate/schedules"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
)

func reminderPolicies(p ReminderPolicy) map[string]Policy {
	return map[string]Policy{"websocket": {MaxHistory: 100, Reset: ResetPolicy{Mode: ResetNone}, Reminders: p}}
}

// A reminder's first due time is computed on the manager's clock, in its
// time zone, across each DST change of two zones: a daily cron fires at
// its wall-clock hour (at the gap's end when the clock skips it, at the
// first occurrence when it shows it twice), a one-time reminder at its
// instant, and an interval counts real time.
func TestReminderNextDueAcrossDST(t *testing.T) {
	cases := []struct {
		name string
		now  time.Time // UTC
		spec schedules.Spec
		want time.Time // UTC
	}{
		// Berlin springs forward at 01:00 UTC on 29 March 2026 (02:00 CET → 03:00 CEST).
		{"berlin daily 08:00 before the change", utc(2026, 3, 28, 12), schedules.Spec{Cron: "0 8 * * *", Timezone: "Europe/Berlin"}, utc(2026, 3, 29, 6)},
		{"berlin daily 02:30 in the gap", utc(2026, 3, 28, 12), schedules.Spec{Cron: "30 2 * * *", Timezone: "Europe/Berlin"}, utc(2026, 3, 29, 1)},
		{"berlin at, local offset", utc(2026, 3, 28, 12), schedules.Spec{At: time.Date(2026, 3, 29, 18, 0, 0, 0, time.FixedZone("CEST", 2*3600)), Timezone: "Europe/Berlin"}, utc(2026, 3, 29, 16)},
		{"berlin every 1h across the gap", time.Date(2026, 3, 29, 0, 30, 0, 0, time.UTC), schedules.Spec{Every: time.Hour, Timezone: "Europe/Berlin"}, time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC)},
		// Berlin falls back at 01:00 UTC on 25 October 2026: 02:30 shows twice.
		{"berlin daily 02:30 shown twice", utc(2026, 10, 24, 12), schedules.Spec{Cron: "30 2 * * *", Timezone: "Europe/Berlin"}, time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC)},
		{"berlin daily 08:00 after the fall", utc(2026, 10, 24, 12), schedules.Spec{Cron: "0 8 * * *", Timezone: "Europe/Berlin"}, utc(2026, 10, 25, 7)},
		// New York springs forward at 07:00 UTC on 8 March 2026.
		{"new york daily 08:00 after the change", utc(2026, 3, 7, 20), schedules.Spec{Cron: "0 8 * * *", Timezone: "America/New_York"}, utc(2026, 3, 8, 12)},
		{"new york daily 02:15 in the gap", utc(2026, 3, 7, 20), schedules.Spec{Cron: "15 2 * * *", Timezone: "America/New_York"}, utc(2026, 3, 8, 7)},
		// New York falls back at 06:00 UTC on 1 November 2026.
		{"new york daily 01:30 shown twice", utc(2026, 10, 31, 20), schedules.Spec{Cron: "30 1 * * *", Timezone: "America/New_York"}, time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC)},
		{"new york weekdays 09:00 after the fall", utc(2026, 10, 31, 20), schedules.Spec{Cron: "0 9 * * 1-5", Timezone: "America/New_York"}, utc(2026, 11, 2, 14)},
	}
	db := openStore(t, store.DriverSQLite, t.TempDir()+"/r.db")
	c := newClock(utc(2026, 1, 1, 0))
	m := newManager(t, db, &recorder{}, c, reminderPolicies(ReminderPolicy{Enabled: true, MaxPerUser: 100, MinInterval: time.Hour}))
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c.Set(tc.now)
			key := "websocket:dst" + string(rune('a'+i))
			r, err := m.Reminders().Create(context.Background(), ReminderRequest{SessionKey: key, Channel: "websocket", Spec: tc.spec, Text: "stretch"})
			if err != nil {
				t.Fatal(err)
			}
			if r.NextDueAt == nil || !r.NextDueAt.Equal(tc.want) {
				t.Fatalf("next due %v; want %v", r.NextDueAt, tc.want)
			}
			// What the scheduler reads back: the row's spec and zone give
			// the same schedule.
			list, err := m.Reminders().List(context.Background(), key)
			if err != nil || len(list) != 1 {
				t.Fatalf("list %+v, %v", list, err)
			}
			got := list[0]
			spec, err := schedules.SpecFromText(got.Spec, got.Timezone)
			if err != nil {
				t.Fatal(err)
			}
			w, _ := spec.When()
			if !got.NextDueAt.Equal(tc.want) || !w.Next(tc.now).Equal(tc.want) || got.Timezone != tc.spec.Timezone {
				t.Fatalf("stored %+v (spec %+v); want due %v", got, spec, tc.want)
			}
		})
	}
}

// What a user (or a model) asks for that cannot be a reminder is refused
// with a reason, and nothing is stored.
func TestReminderCreateRefuses(t *testing.T) {
	db := openStore(t, store.DriverSQLite, t.TempDir()+"/r.db")
	now := time.Date(2026, 4, 1, 9, 0, 0, 0, time.UTC)
	c := newClock(now)
	pol := reminderPolicies(ReminderPolicy{Enabled: true, MaxPerUser: 2, MinInterval: 30 * time.Minute})
	pol["telegram"] = Policy{MaxHistory: 100, Reset: ResetPolicy{Mode: ResetNone}} // reminders off
	m := newManager(t, db, &recorder{}, c, pol)
	ctx := context.Background()
	const key = "websocket:ann"
	create := func(spec schedules.Spec, text string) error {
		_, err := m.Reminders().Create(ctx, ReminderRequest{SessionKey: key, Channel: "websocket", Spec: spec, Text: text})
		return err
	}
	soon := schedules.Spec{At: now.Add(time.Hour)}
	for _, tc := range []struct {
		name string
		spec schedules.Spec
		text string
		want string
	}{
		{"past", schedules.Spec{At: now.Add(-time.Minute)}, "x", "not in the future"},
		{"now", schedules.Spec{At: now}, "x", "not in the future"},
		{"every too often", schedules.Spec{Every: 10 * time.Minute}, "x", "more often than allowed"},
		{"cron too often", schedules.Spec{Cron: "*/5 * * * *"}, "x", "fires as often as every 5m"},
		{"cron two close fires a day", schedules.Spec{Cron: "0,10 8 * * *", Timezone: "Europe/Berlin"}, "x", "every 10m"},
		{"bad zone", schedules.Spec{Cron: "0 8 * * *", Timezone: "Mars/Olympus"}, "x", "not an IANA time zone"},
		{"host zone", schedules.Spec{Cron: "0 8 * * *", Timezone: "Local"}, "x", "host's zone"},
		{"bad cron", schedules.Spec{Cron: "every morning"}, "x", "not a cron expression"},
		{"never", schedules.Spec{Cron: "0 0 30 2 *"}, "x", "never fires"},
		{"two whens", schedules.Spec{Cron: "0 8 * * *", Every: time.Hour}, "x", "exactly one"},
		{"no when", schedules.Spec{}, "x", "exactly one"},
		{"empty text", soon, "  \n ", "text is empty"},
		{"long text", soon, strings.Repeat("a", MaxReminderText+1), "at most 2000"},
		{"nul", soon, "call\x00Ann", "NUL"},
		{"invalid utf-8", soon, "call \xff Ann", "UTF-8"},
	} {
		err := create(tc.spec, tc.text)
		if !errors.Is(err, ErrBadReminder) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want ErrBadReminder saying %q", tc.name, err, tc.want)
		}
	}
	if list, _ := m.Reminders().List(ctx, key); len(list) != 0 {
		t.Fatalf("refused reminders were stored: %+v", list)
	}
	if _, err := m.Reminders().Create(ctx, ReminderRequest{SessionKey: "telegram:dm:1", Channel: "telegram", Spec: soon, Text: "x"}); !errors.Is(err, ErrRemindersOff) {
		t.Fatalf("a channel without reminders: %v", err)
	}
	// The limit: two kept, a third refused; a cancel makes room.
	if err := create(schedules.Spec{Every: 30 * time.Minute}, "drink water"); err != nil {
		t.Fatal(err)
	}
	if err := create(soon, "call Ann"); err != nil {
		t.Fatal(err)
	}
	if err := create(soon, "call Bob"); !errors.Is(err, ErrTooManyReminders) {
		t.Fatalf("a third reminder over max_per_user 2: %v", err)
	}
	list, _ := m.Reminders().List(ctx, key)
	if len(list) != 2 {
		t.Fatalf("list %+v", list)
	}
	// Another session cannot cancel them; their owner can, once.
	if err := m.Reminders().Cancel(ctx, "websocket:eve", list[0].ID); !errors.Is(err, ErrNoSuchReminder) {
		t.Fatalf("cancelled by another session: %v", err)
	}
	if err := m.Reminders().Cancel(ctx, key, list[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := m.Reminders().Cancel(ctx, key, list[0].ID); !errors.Is(err, ErrNoSuchReminder) {
		t.Fatalf("cancelled twice: %v", err)
	}
	if err := create(soon, "call Bob"); err != nil {
		t.Fatalf("after a cancel: %v", err)
	}
	// A reload that turns reminders off stops new ones at once.
	m.Reconfigure(Settings{Policies: reminderPolicies(ReminderPolicy{})})
	if err := create(soon, "late"); !errors.Is(err, ErrRemindersOff) {
		t.Fatalf("after a reload turned reminders off: %v", err)
	}
}

func TestReminderRepeats(t *testing.T) {
	for spec, want := range map[string]string{
		"every 2h0m0s":            "every 2h",
		"every 1h10m0s":           "every 1h10m",
		"every 30m0s 08:00-22:00": "every 30m within 08:00-22:00",
		"cron 0 8 * * 1-5":        "cron 0 8 * * 1-5",
		"at 2026-03-29T18:00:00Z": "",
	} {
		if got := ReminderRepeats(ledgerReminder(spec)); got != want {
			t.Errorf("%q: %q; want %q", spec, got, want)
		}
	}
}

func ledgerReminder(spec string) ledger.Reminder {
	return ledger.Reminder{Spec: spec, Timezone: "Europe/Berlin"}
}
