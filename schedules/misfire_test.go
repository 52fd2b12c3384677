package schedules

import (
	"testing"
	"time"
)

func TestDecide(t *testing.T) {
	h := func(n int) time.Time { return utc(2026, 4, 1, n, 0) }
	for _, tt := range []struct {
		name    string
		m       Misfire
		due     []time.Time
		now     time.Time
		run     time.Time // zero: nothing runs
		late    bool
		skipped int
	}{
		{"on time", Misfire{}, []time.Time{h(8)}, h(8).Add(2 * time.Second), h(8), false, 0},
		{"on time under skip too", Misfire{Rule: MisfireSkip}, []time.Time{h(8)}, h(8).Add(OnTime), h(8), false, 0},
		{"late within max_late: runs late", Misfire{}, []time.Time{h(8)}, h(8).Add(9 * time.Minute), h(8), true, 0},
		{"late at max_late exactly: runs", Misfire{MaxLate: 20 * time.Minute}, []time.Time{h(8)}, h(8).Add(20 * time.Minute), h(8), true, 0},
		{"beyond max_late: skipped", Misfire{}, []time.Time{h(8)}, h(8).Add(11 * time.Minute), time.Time{}, false, 1},
		{"late under skip: skipped", Misfire{Rule: MisfireSkip}, []time.Time{h(8)}, h(8).Add(OnTime + time.Second), time.Time{}, false, 1},
		{"not due yet", Misfire{}, []time.Time{h(9)}, h(8), time.Time{}, false, 0},
		{"only the latest runs", Misfire{}, []time.Time{h(6), h(7), h(8)}, h(8).Add(5 * time.Minute), h(8), true, 2},
		{"those not due yet are left out", Misfire{}, []time.Time{h(7), h(8), h(9)}, h(8).Add(time.Second), h(8), false, 1},
		{"nothing", Misfire{}, nil, h(8), time.Time{}, false, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := tt.m.Decide(tt.due, tt.now)
			switch {
			case tt.run.IsZero() && d.Run != nil:
				t.Fatalf("runs %+v, want nothing", *d.Run)
			case !tt.run.IsZero() && (d.Run == nil || !d.Run.Due.Equal(tt.run) || d.Run.IsLate() != tt.late || d.Run.Late != tt.now.Sub(tt.run)):
				t.Fatalf("runs %+v, want %s (late %t)", d.Run, tt.run, tt.late)
			}
			if len(d.Skipped) != tt.skipped {
				t.Fatalf("skipped %v, want %d", d.Skipped, tt.skipped)
			}
		})
	}
}

func TestMisfireCheck(t *testing.T) {
	for _, ok := range []Misfire{{}, {Rule: MisfireOnce, MaxLate: time.Hour}, {Rule: MisfireSkip}, {MaxLate: OnTime}} {
		if err := ok.Check(); err != nil {
			t.Errorf("%+v: %v", ok, err)
		}
	}
	for _, bad := range []Misfire{{Rule: "later"}, {MaxLate: 30 * time.Second}} {
		if err := bad.Check(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// gateway is what a scheduler keeps of one schedule between ticks: the
// latest due time it has a fire for (run or skipped), and what happened.
type gateway struct {
	w       When
	m       Misfire
	last    time.Time
	ran     []Fire
	skipped int
}

// tick is one pass of a scheduler at now: the fires due since the last
// one are decided, and the last moves past them.
func (g *gateway) tick(now time.Time) {
	d := g.m.Catchup(g.w, g.last, now, 100)
	if d.Run != nil {
		g.ran = append(g.ran, *d.Run)
		g.last = d.Run.Due
	}
	g.skipped += len(d.Skipped) + d.Omitted
	if n := len(d.Skipped); n > 0 && d.Skipped[n-1].After(g.last) {
		g.last = d.Skipped[n-1]
	}
}

// A scheduler on a fake clock, ticking every 10 seconds, is down for a
// day and a few minutes: an hourly schedule's 24 missed fires become one
// late fire under once (when the latest is within max_late) and none
// under skip; every other fire runs on time, once.
func TestMissedDayIsOneFireNotTwentyFour(t *testing.T) {
	for _, tt := range []struct {
		name      string
		m         Misfire
		downFor   time.Duration
		late      int // late fires run after the restart
		skippedAt int // fires skipped
	}{
		{"once, back 5 minutes after the latest", Misfire{Rule: MisfireOnce}, 24*time.Hour + 5*time.Minute, 1, 24},
		{"once, back 15 minutes after the latest", Misfire{Rule: MisfireOnce}, 24*time.Hour + 15*time.Minute, 0, 25},
		{"skip, back 5 minutes after the latest", Misfire{Rule: MisfireSkip}, 24*time.Hour + 5*time.Minute, 0, 25},
		{"once, down 30 seconds across a fire: on time", Misfire{Rule: MisfireOnce}, 30 * time.Second, 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w, err := ParseCron("0 * * * *", zone(t, "Europe/Berlin"))
			if err != nil {
				t.Fatal(err)
			}
			start := utc(2026, 3, 28, 6, 0).Add(-time.Second) // across the spring change
			g := &gateway{w: w, m: tt.m, last: start}
			downAt := utc(2026, 3, 28, 12, 0).Add(-15 * time.Second)
			upAt := downAt.Add(tt.downFor)
			end := upAt.Add(3 * time.Hour)
			for now := start; !now.After(end); now = now.Add(10 * time.Second) {
				if !now.Before(downAt) && now.Before(upAt) {
					continue // no gateway runs
				}
				g.tick(now)
			}
			var late int
			seen := map[time.Time]bool{}
			for _, f := range g.ran {
				if seen[f.Due] {
					t.Fatalf("%s ran twice", f.Due)
				}
				seen[f.Due] = true
				if f.IsLate() {
					late++
					if f.Due.Before(downAt) || f.Due.After(upAt) {
						t.Errorf("%s ran late, though no gateway was down then", f.Due)
					}
				} else if (f.Due.Before(downAt) || f.Due.After(upAt)) && f.Late > 10*time.Second {
					t.Errorf("%s ran %s after its time with the gateway up", f.Due, f.Late)
				}
			}
			if late != tt.late || g.skipped != tt.skippedAt {
				t.Fatalf("late fires %d, skipped %d; want %d, %d (ran %v)", late, g.skipped, tt.late, tt.skippedAt, g.ran)
			}
			// Every due time from start to end is run or skipped, once.
			due, _ := w.Due(start, end, 0)
			if len(due) != len(g.ran)+g.skipped {
				t.Fatalf("%d due times, %d ran and %d skipped", len(due), len(g.ran), g.skipped)
			}
		})
	}
}

// A schedule due every minute, after a day down: one fire runs late (or
// none), ten skipped due times are listed and the rest only counted.
func TestCatchupListsFewSkips(t *testing.T) {
	w, err := ParseCron("* * * * *", nil)
	if err != nil {
		t.Fatal(err)
	}
	after := utc(2026, 4, 1, 0, 0)
	now := after.Add(24*time.Hour + 30*time.Second)
	d := Misfire{}.Catchup(w, after, now, 10)
	if d.Run == nil || !d.Run.Due.Equal(utc(2026, 4, 2, 0, 0)) || d.Run.IsLate() {
		t.Fatalf("runs %+v", d.Run)
	}
	if len(d.Skipped) != 10 || d.Omitted != 24*60-11 || !d.Skipped[9].Equal(utc(2026, 4, 1, 23, 59)) {
		t.Fatalf("skipped %v, omitted %d", d.Skipped, d.Omitted)
	}
	d = Misfire{Rule: MisfireSkip}.Catchup(w, after, now.Add(2*time.Minute), 10)
	if d.Run == nil || d.Run.IsLate() || len(d.Skipped)+d.Omitted != 24*60+1 {
		t.Fatalf("skip: runs %+v, skipped %d + %d", d.Run, len(d.Skipped), d.Omitted)
	}
}
