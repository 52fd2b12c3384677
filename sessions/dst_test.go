package sessions

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions/store"
)

// dstDay is a day whose daily reset hour is swallowed by a DST gap or
// occurs twice, with the reset instants (UTC) of it and its neighbours.
type dstDay struct {
	name     string
	zone     string
	hour     int
	day      time.Time // the DST day, 00:00 UTC
	before   time.Time // the reset of the day before
	boundary time.Time // the one reset of the DST day
	repeat   time.Time // the hour's second occurrence on a repeat day; zero on a gap day
	after    time.Time // the reset of the day after
}

func utc(y int, m time.Month, d, h int) time.Time { return time.Date(y, m, d, h, 0, 0, 0, time.UTC) }

var dstDays = []dstDay{
	// 02:00 CET → 03:00 CEST: the reset is at 03:00 CEST.
	{"berlin gap", "Europe/Berlin", 2, utc(2026, 3, 29, 0), utc(2026, 3, 28, 1), utc(2026, 3, 29, 1), time.Time{}, utc(2026, 3, 30, 0)},
	// 03:00 CEST → 02:00 CET: 02:00 occurs at 00:00 and 01:00 UTC.
	{"berlin repeat", "Europe/Berlin", 2, utc(2026, 10, 25, 0), utc(2026, 10, 24, 0), utc(2026, 10, 25, 0), utc(2026, 10, 25, 1), utc(2026, 10, 26, 1)},
	// 02:00 EST → 03:00 EDT: the reset is at 03:00 EDT.
	{"new york gap", "America/New_York", 2, utc(2026, 3, 8, 0), utc(2026, 3, 7, 7), utc(2026, 3, 8, 7), time.Time{}, utc(2026, 3, 9, 6)},
	// 02:00 EDT → 01:00 EST: 01:00 occurs at 05:00 and 06:00 UTC.
	{"new york repeat", "America/New_York", 1, utc(2026, 11, 1, 0), utc(2026, 10, 31, 5), utc(2026, 11, 1, 5), utc(2026, 11, 1, 6), utc(2026, 11, 2, 6)},
}

func (d dstDay) policy(t *testing.T) ResetPolicy {
	t.Helper()
	loc, err := time.LoadLocation(d.zone)
	if err != nil {
		t.Fatal(err)
	}
	return ResetPolicy{Mode: ResetDaily, AtHour: d.hour, Location: loc}
}

// On a DST day the boundary is the first valid instant at or after the
// local at_hour (the end of the gap), or the hour's first occurrence; the
// schedule's next instant is where Boundary moves on, and there is one per
// local day.
func TestDailyBoundaryOnDSTDays(t *testing.T) {
	for _, d := range dstDays {
		t.Run(d.name, func(t *testing.T) {
			p := d.policy(t)
			for _, c := range []struct {
				now, boundary, next time.Time
			}{
				{d.boundary.Add(-time.Second), d.before, d.boundary},
				{d.boundary, d.boundary, d.after},
				{d.boundary.Add(30 * time.Minute), d.boundary, d.after},
				{d.boundary.Add(90 * time.Minute), d.boundary, d.after}, // on a repeat day: the hour again
				{d.after.Add(-time.Nanosecond), d.boundary, d.after},
			} {
				if got := p.Boundary(c.now); !got.Equal(c.boundary) {
					t.Errorf("Boundary(%s) = %s, want %s", c.now, got.UTC(), c.boundary)
				}
				if got := p.NextBoundary(c.now); !got.Equal(c.next) {
					t.Errorf("NextBoundary(%s) = %s, want %s", c.now, got.UTC(), c.next)
				}
			}
			if !d.repeat.IsZero() {
				if l := d.repeat.In(p.Location); l.Hour() != d.hour || l.Minute() != 0 {
					t.Fatalf("test data: %s is %s, not the repeated hour", d.repeat, l)
				}
			}
			// Minute by minute from one day's boundary to the day after next: Boundary changes exactly at
			// the instants NextBoundary names, once per local day.
			var fires []time.Time
			for now := d.before; !now.After(d.after.Add(time.Hour)); now = now.Add(time.Minute) {
				next := p.NextBoundary(now)
				if !next.After(now) || !p.Boundary(next).Equal(next) || !p.Boundary(next.Add(-time.Nanosecond)).Before(next) {
					t.Fatalf("at %s: NextBoundary %s is not where Boundary moves on", now, next)
				}
				if b := p.Boundary(now); len(fires) == 0 || !b.Equal(fires[len(fires)-1]) {
					fires = append(fires, b)
				}
			}
			if want := fmt.Sprint([]time.Time{d.before, d.boundary, d.after}); fmt.Sprint(utcAll(fires)) != want {
				t.Fatalf("boundaries over three days = %v, want %v", utcAll(fires), want)
			}
		})
	}
}

func utcAll(ts []time.Time) []time.Time {
	out := make([]time.Time, len(ts))
	for i, t := range ts {
		out[i] = t.UTC()
	}
	return out
}

// The swept daily reset fires on a DST day once, at the boundary the check
// on every message uses: not skipped on a gap day, not repeated with the
// hour. A conversation started in the repeated hour lives until the next
// day's reset, by the sweep and by the check on arrival alike.
func TestDailySweepOnDSTDays(t *testing.T) {
	for _, d := range dstDays {
		t.Run(d.name, func(t *testing.T) {
			drivers(t, func(t *testing.T, open func() *store.DB) {
				db := open()
				p := d.policy(t)
				start := d.day.Add(-12 * time.Hour)
				c := newClock(start)
				// websocket is swept; telegram, with the same policy, is
				// only checked on arrival.
				m := newManager(t, db, agent.Echo{}, c, map[string]Policy{
					"websocket": {MaxHistory: 10, Reset: p},
					"telegram":  {MaxHistory: 10, Reset: p},
				})
				seedConversations(t, db, "old", 3, start)
				ann := handle(t, m, msg("websocket:ann", "hi"))
				tg := func(text string) Outcome {
					return handle(t, m, Inbound{Channel: "telegram", SessionKey: "telegram:dm:7", UserID: "7", Text: text})
				}
				bob := tg("hi")
				sw := NewSweeper(m, quiet)
				if err := sw.Start(); err != nil {
					t.Fatal(err)
				}
				defer sw.Stop()

				// The instants the running cron entry fires at.
				sched := sw.entries()["daily:websocket"]
				var fires []time.Time
				for at := sched.Next(start); at.Before(d.after.Add(time.Hour)); at = sched.Next(at) {
					fires = append(fires, at.UTC())
				}
				if want := fmt.Sprint([]time.Time{d.boundary, d.after}); fmt.Sprint(fires) != want {
					t.Fatalf("the daily sweep fires at %v, want %v: once on the DST day, at its boundary", fires, want)
				}

				sweep := func(at time.Time, want int) {
					t.Helper()
					c.Set(at)
					if n, err := sw.RunSweep("daily:websocket"); err != nil || n != want {
						t.Fatalf("sweep at %s archived %d (%v), want %d", at, n, err, want)
					}
				}
				same := func(what string, got, want Outcome) {
					t.Helper()
					if got.ConversationID != want.ConversationID {
						t.Fatalf("%s: conversation %s, want %s (no reset)", what, got.ConversationID, want.ConversationID)
					}
				}
				fresh := func(what string, got, old Outcome) {
					t.Helper()
					if got.ConversationID == old.ConversationID || !strings.HasSuffix(got.Reply.Text, "(history: 0)") {
						t.Fatalf("%s: conversation %s replying %q, want a new one", what, got.ConversationID, got.Reply.Text)
					}
				}

				c.Set(d.boundary.Add(-time.Second))
				same("websocket a second before the boundary", handle(t, m, msg("websocket:ann", "still")), ann)
				same("telegram a second before the boundary", tg("still"), bob)

				sweep(d.boundary, 4) // the three seeded and ann's
				c.Set(d.boundary.Add(30 * time.Minute))
				ann2 := handle(t, m, msg("websocket:ann", "new day"))
				fresh("websocket after the sweep", ann2, ann)
				bob2 := tg("new day")
				fresh("telegram after the boundary", bob2, bob)

				// An hour later: on a repeat day the same wall-clock time
				// again. Nothing resets a second time.
				c.Set(d.boundary.Add(90 * time.Minute))
				same("websocket in the repeated hour", handle(t, m, msg("websocket:ann", "again")), ann2)
				same("telegram in the repeated hour", tg("again"), bob2)
				if !d.repeat.IsZero() {
					sweep(d.repeat, 0) // were the sweep run at the hour's second occurrence
				}

				sweep(d.after, 1) // ann's conversation of the DST day
				c.Set(d.after)
				fresh("telegram at the next day's boundary", tg("next day"), bob2)
				var archived int64
				db.Gorm().Model(&Conversation{}).Where("status = ? AND channel = ?", StatusArchived, "websocket").Count(&archived)
				if archived != 5 {
					t.Fatalf("%d websocket conversations archived, want 5: each once", archived)
				}
			})
		})
	}
}
