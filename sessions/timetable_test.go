package sessions

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/chatgate/chatgate/schedules"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
)

// schedule is an OperatorSchedule of spec, as the wiring makes one from
// bot.yaml.
func schedule(t *testing.T, name, channel, key string, spec schedules.Spec) OperatorSchedule {
	t.Helper()
	w, err := spec.When()
	if err != nil {
		t.Fatal(err)
	}
	return OperatorSchedule{Name: name, Target: ScheduleTarget{Channel: channel, SessionKey: key, AllSessions: key == ""}, When: w}
}

func testSchedules(t *testing.T) []OperatorSchedule {
	return []OperatorSchedule{
		schedule(t, "brief", "websocket", "websocket:ann", schedules.Spec{Cron: "0 8 * * *", Timezone: "Europe/Berlin"}),
		schedule(t, "checkin", "websocket", "", schedules.Spec{Every: 2 * time.Hour, Timezone: "America/New_York"}),
		schedule(t, "tg_only", "telegram", "", schedules.Spec{Cron: "0 9 * * 1", Timezone: "UTC"}),
		schedule(t, "group", "telegram", "telegram:group:-100", schedules.Spec{Cron: "0 9 * * *"}),
	}
}

// Opt-ins: a session lists its channel's all_sessions schedules; it can
// opt in to those only — not to another channel's, not to one with a
// single target, not to a made-up name, not to one a reload took out —
// and a refused opt-in stores nothing. Opting out also takes back a
// choice about a schedule no longer offered, once.
func TestTimetableOptIns(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		ctx := context.Background()
		c := newClock(time.Date(2026, 3, 29, 0, 30, 0, 0, time.UTC))
		tt := NewTimetable(db, c.Now)
		tt.Set(testSchedules(t))

		list, err := tt.OptIns(ctx, "websocket", "websocket:bob")
		if err != nil || len(list) != 1 || list[0].Name != "checkin" || list[0].On {
			t.Fatalf("opt-ins of bob %+v, %v", list, err)
		}
		// 20:30 in New York: the next is 22:00 there.
		if want := time.Date(2026, 3, 29, 2, 0, 0, 0, time.UTC); !list[0].Next.Equal(want) || list[0].Location.String() != "America/New_York" ||
			list[0].When != "every 2h0m0s (America/New_York)" {
			t.Fatalf("checkin listed as %+v, next %v", list[0], list[0].Next)
		}
		for _, name := range []string{"tg_only", "brief", "group", "nope", "checkin:websocket:ann", ""} {
			if _, err := tt.SetOptIn(ctx, "websocket", "websocket:bob", name, true); !errors.Is(err, ErrNoSchedule) {
				t.Fatalf("opt in to %q: %v, want ErrNoSchedule", name, err)
			}
		}
		if names, err := db.SessionOptIns(ctx, "websocket:bob"); err != nil || len(names) != 0 {
			t.Fatalf("refused opt-ins stored %v, %v", names, err)
		}
		for range 2 { // twice: the second changes nothing
			list, err = tt.SetOptIn(ctx, "websocket", "websocket:bob", "checkin", true)
			if err != nil || len(list) != 1 || !list[0].On {
				t.Fatalf("opt in: %+v, %v", list, err)
			}
		}
		if keys, _ := db.OptedIn(ctx, "checkin", "websocket", "", 10); fmt.Sprint(keys) != "[websocket:bob]" {
			t.Fatalf("opted in to checkin: %v", keys)
		}
		if _, err := tt.SetOptIn(ctx, "", "websocket:bob", "checkin", true); !errors.Is(err, ErrBadInbound) {
			t.Fatalf("no channel: %v", err)
		}

		// A reload takes checkin out: no new opt-in, but bob can opt out,
		// once.
		tt.Set(testSchedules(t)[2:])
		if _, err := tt.SetOptIn(ctx, "websocket", "websocket:cid", "checkin", true); !errors.Is(err, ErrNoSchedule) {
			t.Fatalf("opt in to a schedule a reload took out: %v", err)
		}
		if list, err := tt.SetOptIn(ctx, "websocket", "websocket:bob", "checkin", false); err != nil || len(list) != 0 {
			t.Fatalf("opt out of a schedule taken out: %+v, %v", list, err)
		}
		if _, err := tt.SetOptIn(ctx, "websocket", "websocket:bob", "checkin", false); !errors.Is(err, ErrNoSchedule) {
			t.Fatalf("opt out twice: %v", err)
		}
		if names, _ := db.SessionOptIns(ctx, "websocket:bob"); len(names) != 0 {
			t.Fatalf("opt-ins left %v", names)
		}
	})
}

// Status tells what a session has on the clock: its reminders still
// due with the soonest in its own zone, the schedules it gets (its own
// target's and the all_sessions ones it opted in to) with the soonest
// next fire across their zones, and how many more it may opt in to.
// Without a timetable Status tells nothing of it.
func TestStatusScheduled(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		ctx := context.Background()
		c := newClock(time.Date(2026, 3, 29, 0, 30, 0, 0, time.UTC)) // the night Berlin goes to summer time
		m := newManager(t, db, &recorder{}, c, nil)
		ann := msg("websocket:ann", "")
		if st, err := m.Standing().Status(ctx, ann); err != nil || st.Scheduled != nil {
			t.Fatalf("without a timetable: %+v, %v", st.Scheduled, err)
		}
		tt := NewTimetable(db, c.Now)
		tt.Set(testSchedules(t))
		m.Standing().UseTimetable(tt)

		for i, at := range []time.Time{c.Now().Add(5 * time.Hour), c.Now().Add(3 * time.Hour), c.Now().Add(time.Hour)} {
			due := at
			r := &ledger.Reminder{SessionKey: "websocket:ann", Channel: "websocket", Spec: "at x", Timezone: []string{"UTC", "Europe/Berlin", "UTC"}[i],
				Text: "call", NextDueAt: &due, CreatedAt: c.Now()}
			if ok, err := db.AddReminder(ctx, r, 10); err != nil || !ok {
				t.Fatal(ok, err)
			}
			if i == 2 { // the soonest is cancelled
				if ok, err := db.CancelReminder(ctx, r.ID, "websocket:ann", c.Now()); err != nil || !ok {
					t.Fatal(ok, err)
				}
			}
		}
		st, err := m.Standing().Status(ctx, ann)
		if err != nil {
			t.Fatal(err)
		}
		sc := st.Scheduled
		if sc == nil || sc.Reminders != 2 || !sc.NextReminder.Equal(c.Now().Add(3*time.Hour)) || sc.NextReminderZone.String() != "Europe/Berlin" ||
			fmt.Sprint(sc.Schedules) != "[brief]" || sc.Offered != 1 {
			t.Fatalf("ann before opting in: %+v", sc)
		}
		// brief at 08:00 summer time in Berlin: 06:00 UTC.
		if want := time.Date(2026, 3, 29, 6, 0, 0, 0, time.UTC); !sc.NextSchedule.Equal(want) || sc.NextScheduleZone.String() != "Europe/Berlin" {
			t.Fatalf("next schedule %v (%v), want %v", sc.NextSchedule, sc.NextScheduleZone, want)
		}
		if _, err := tt.SetOptIn(ctx, "websocket", "websocket:ann", "checkin", true); err != nil {
			t.Fatal(err)
		}
		st, err = m.Standing().Status(ctx, ann)
		if err != nil {
			t.Fatal(err)
		}
		// checkin's 22:00 in New York comes first.
		sc = st.Scheduled
		if fmt.Sprint(sc.Schedules) != "[brief checkin]" || sc.Offered != 0 ||
			!sc.NextSchedule.Equal(time.Date(2026, 3, 29, 2, 0, 0, 0, time.UTC)) || sc.NextScheduleZone.String() != "America/New_York" {
			t.Fatalf("ann after opting in: %+v", sc)
		}
		// A telegram session is offered tg_only, gets nothing yet.
		st, err = m.Standing().Status(ctx, Inbound{Channel: "telegram", SessionKey: "telegram:dm:5"})
		if err != nil || st.Scheduled.Reminders != 0 || len(st.Scheduled.Schedules) != 0 || st.Scheduled.Offered != 1 {
			t.Fatalf("telegram session: %+v, %v", st.Scheduled, err)
		}
	})
}

// The retention purge deletes the fires settled longer ago than
// storage.retention_days, keeping each schedule's latest; without a
// retention period it deletes none.
func TestRetentionPurgesFires(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		ctx := context.Background()
		c := newClock(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
		key := schedules.OperatorKey("brief")
		for d := 40; d >= 0; d -= 10 { // five fires, 40 to 0 days old
			due := c.Now().AddDate(0, 0, -d)
			held, ok, err := db.ClaimFire(ctx, ledger.FireClaim{ScheduleKey: key, DueAt: due, SessionKey: "websocket:ann", Owner: "r",
				LeaseUntil: due.Add(time.Minute), At: due})
			if err != nil || !ok {
				t.Fatal(ok, err)
			}
			if err := db.SettleFire(ctx, ledger.FireEnd{ScheduleKey: key, DueAt: due, From: ledger.FireClaimed, Owner: "r", Attempt: held.Attempt,
				State: ledger.FireSent, At: due}); err != nil {
				t.Fatal(err)
			}
		}
		keep := New(db, &recorder{}, Options{Now: c.Now, Logger: quiet})
		if p, err := NewSweeper(keep, nil).RunRetention(ctx); err != nil || p.Fires != 0 {
			t.Fatalf("without retention_days: %+v, %v", p, err)
		}
		m := New(db, &recorder{}, Options{Now: c.Now, Logger: quiet, RetentionDays: 25})
		p, err := NewSweeper(m, nil).RunRetention(ctx)
		if err != nil || p.Fires != 2 {
			t.Fatalf("purged %+v, %v; want the fires 40 and 30 days old", p, err)
		}
		fires, err := db.Fires(ctx, key, time.Time{}, 10)
		if err != nil || len(fires) != 3 || !fires[2].DueAt.Equal(c.Now().AddDate(0, 0, -20)) {
			t.Fatalf("left %+v, %v", fires, err)
		}
	})
}
