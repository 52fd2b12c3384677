package schedules

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func utc(y int, m time.Month, d, h, min int) time.Time {
	return time.Date(y, m, d, h, min, 0, 0, time.UTC)
}

func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// fires lists the next n due times of w after from, in UTC.
func fires(w When, from time.Time, n int) []time.Time {
	var out []time.Time
	for t := from; len(out) < n; {
		t = w.Next(t)
		if t.IsZero() {
			break
		}
		out = append(out, t.UTC())
	}
	return out
}

func sameTimes(a, b []time.Time) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

// The DST changes of 2026: Europe/Berlin springs from 02:00 CET to 03:00
// CEST on 29 March at 01:00 UTC and falls back from 03:00 CEST to 02:00
// CET on 25 October at 01:00 UTC; America/New_York springs from 02:00 EST
// to 03:00 EDT on 8 March at 07:00 UTC and falls back from 02:00 EDT to
// 01:00 EST on 1 November at 06:00 UTC.
//
// A cron expression that names its hours fires once every local day: at
// the end of the gap when the clock skips its time, at the first
// occurrence when the clock shows it twice. One with * in the hour field
// follows the clock's hours as robfig/cron does: real hours across either
// change, no fire in an hour the clock skips, another in an hour it
// repeats.
func TestCronAcrossDST(t *testing.T) {
	for _, tt := range []struct {
		name, zone, expr string
		from             time.Time
		want             []time.Time
	}{
		{"berlin spring, named hour in the gap: at the end of the gap", "Europe/Berlin", "30 2 * * *", utc(2026, 3, 27, 12, 0),
			[]time.Time{utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1, 0), utc(2026, 3, 30, 0, 30)}},
		{"berlin fall, named hour repeated: its first occurrence", "Europe/Berlin", "30 2 * * *", utc(2026, 10, 23, 12, 0),
			[]time.Time{utc(2026, 10, 24, 0, 30), utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)}},
		{"berlin spring, every minute of a skipped hour: one fire", "Europe/Berlin", "*/20 2 * * *", utc(2026, 3, 28, 12, 0),
			[]time.Time{utc(2026, 3, 29, 1, 0), utc(2026, 3, 30, 0, 0), utc(2026, 3, 30, 0, 20)}},
		{"berlin fall, minutes of a repeated hour: the first hour's", "Europe/Berlin", "*/20 2 * * *", utc(2026, 10, 24, 12, 0),
			[]time.Time{utc(2026, 10, 25, 0, 0), utc(2026, 10, 25, 0, 20), utc(2026, 10, 25, 0, 40), utc(2026, 10, 26, 1, 0)}},
		{"berlin spring, hourly at :30: real hours", "Europe/Berlin", "30 * * * *", utc(2026, 3, 28, 23, 0),
			[]time.Time{utc(2026, 3, 28, 23, 30), utc(2026, 3, 29, 0, 30), utc(2026, 3, 29, 1, 30), utc(2026, 3, 29, 2, 30)}},
		{"berlin fall, hourly at :30: real hours, 02:30 twice", "Europe/Berlin", "30 * * * *", utc(2026, 10, 24, 23, 0),
			[]time.Time{utc(2026, 10, 24, 23, 30), utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 1, 30), utc(2026, 10, 25, 2, 30)}},
		{"berlin spring, even hours: 02:00 skipped", "Europe/Berlin", "0 */2 * * *", utc(2026, 3, 28, 22, 0),
			[]time.Time{utc(2026, 3, 28, 23, 0), utc(2026, 3, 29, 2, 0), utc(2026, 3, 29, 4, 0)}},
		{"berlin fall, even hours: 02:00 twice", "Europe/Berlin", "0 */2 * * *", utc(2026, 10, 24, 22, 30),
			[]time.Time{utc(2026, 10, 25, 0, 0), utc(2026, 10, 25, 1, 0), utc(2026, 10, 25, 3, 0)}},
		{"new york spring, named hour in the gap: at the end of the gap", "America/New_York", "30 2 * * *", utc(2026, 3, 6, 12, 0),
			[]time.Time{utc(2026, 3, 7, 7, 30), utc(2026, 3, 8, 7, 0), utc(2026, 3, 9, 6, 30)}},
		{"new york fall, named hour repeated: its first occurrence", "America/New_York", "30 1 * * *", utc(2026, 10, 30, 12, 0),
			[]time.Time{utc(2026, 10, 31, 5, 30), utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)}},
		{"new york fall, a weekday brief at 8: the same local time", "America/New_York", "0 8 * * 1-5", utc(2026, 10, 30, 0, 0),
			[]time.Time{utc(2026, 10, 30, 12, 0), utc(2026, 11, 2, 13, 0), utc(2026, 11, 3, 13, 0)}},
		{"new york spring, every 15 minutes: real time", "America/New_York", "*/15 * * * *", utc(2026, 3, 8, 6, 40),
			[]time.Time{utc(2026, 3, 8, 6, 45), utc(2026, 3, 8, 7, 0), utc(2026, 3, 8, 7, 15)}},
		{"new york fall, every 15 minutes: real time", "America/New_York", "*/15 * * * *", utc(2026, 11, 1, 5, 40),
			[]time.Time{utc(2026, 11, 1, 5, 45), utc(2026, 11, 1, 6, 0), utc(2026, 11, 1, 6, 15)}},
		{"@daily in berlin: local midnight", "Europe/Berlin", "@daily", utc(2026, 3, 28, 0, 0),
			[]time.Time{utc(2026, 3, 28, 23, 0), utc(2026, 3, 29, 22, 0)}},
		{"utc: no change", "UTC", "0 9 * * *", utc(2026, 3, 29, 0, 0),
			[]time.Time{utc(2026, 3, 29, 9, 0), utc(2026, 3, 30, 9, 0)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w, err := ParseCron(tt.expr, zone(t, tt.zone))
			if err != nil {
				t.Fatal(err)
			}
			if got := fires(w, tt.from, len(tt.want)); !sameTimes(got, tt.want) {
				t.Fatalf("%s in %s after %s fires at\n%v\nwant\n%v", tt.expr, tt.zone, tt.from, got, tt.want)
			}
		})
	}
}

// Over a whole year of each zone, minute by minute of the DST days and
// day by day otherwise, a daily schedule fires exactly once per local
// day, at the wall-clock time it names or, on a gap day, at the end of
// the gap; and Next always moves forward.
func TestDailyCronOncePerLocalDay(t *testing.T) {
	for _, name := range []string{"Europe/Berlin", "America/New_York"} {
		loc := zone(t, name)
		for _, expr := range []string{"30 2 * * *", "0 1 * * *", "59 23 * * *"} {
			w, err := ParseCron(expr, loc)
			if err != nil {
				t.Fatal(err)
			}
			perDay := map[string]int{}
			prev := utc(2026, 1, 1, 0, 0)
			for n := 0; n < 366; n++ {
				next := w.Next(prev)
				if !next.After(prev) {
					t.Fatalf("%s %s: Next(%s) = %s", name, expr, prev, next)
				}
				perDay[next.In(loc).Format("2006-01-02")]++
				prev = next
			}
			for day, n := range perDay {
				if n != 1 {
					t.Errorf("%s %s: %d fires on %s", name, expr, n, day)
				}
			}
			if len(perDay) != 366 {
				t.Errorf("%s %s: fires on %d days of 366", name, expr, len(perDay))
			}
		}
	}
}

func TestParseCronRefuses(t *testing.T) {
	for expr, want := range map[string]string{
		"":                      "empty",
		"0 8 * *":               "five fields",
		"61 8 * * *":            "five fields",
		"0 0 8 * * *":           "five fields", // seconds are not read
		"CRON_TZ=UTC 0 8 * * *": "timezone",
		"@every 1h":             "every",
		"0 0 30 2 *":            "never fires",
		"@fortnightly":          "descriptor",
	} {
		if _, err := ParseCron(expr, nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseCron(%q) = %v, want an error saying %q", expr, err, want)
		}
	}
}

// every counts its interval in real time from the start of each day's
// window; the end of the window is not in it.
func TestEveryWithinActiveHours(t *testing.T) {
	ber := zone(t, "Europe/Berlin")
	hours := func(s string) Hours {
		h, err := ParseHours(s)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	for _, tt := range []struct {
		name  string
		every time.Duration
		hours Hours
		from  time.Time
		want  []time.Time
	}{
		{"two-hourly by day, in CET", 2 * time.Hour, hours("08:00-22:00"), utc(2026, 1, 10, 18, 0),
			[]time.Time{utc(2026, 1, 10, 19, 0), utc(2026, 1, 11, 7, 0), utc(2026, 1, 11, 9, 0)}},
		{"the window's start itself is due", 2 * time.Hour, hours("08:00-22:00"), utc(2026, 1, 11, 6, 59),
			[]time.Time{utc(2026, 1, 11, 7, 0)}},
		{"past midnight", 3 * time.Hour, hours("22:00-06:00"), utc(2026, 1, 10, 12, 0),
			[]time.Time{utc(2026, 1, 10, 21, 0), utc(2026, 1, 11, 0, 0), utc(2026, 1, 11, 3, 0), utc(2026, 1, 11, 21, 0)}},
		{"all day, an interval that does not divide it: each day starts anew", 7 * time.Hour, Hours{}, utc(2026, 1, 10, 12, 0),
			// local 14:00, 21:00, then 00:00 (23:00 UTC) and 07:00 of the next day
			[]time.Time{utc(2026, 1, 10, 13, 0), utc(2026, 1, 10, 20, 0), utc(2026, 1, 10, 23, 0), utc(2026, 1, 11, 6, 0)}},
		{"spring day, a window across the gap: real half hours", 30 * time.Minute, hours("01:30-04:00"), utc(2026, 3, 29, 0, 0),
			[]time.Time{utc(2026, 3, 29, 0, 30), utc(2026, 3, 29, 1, 0), utc(2026, 3, 29, 1, 30), utc(2026, 3, 29, 23, 30)}},
		{"fall day, a window across the repeat: real half hours", 30 * time.Minute, hours("01:30-04:00"), utc(2026, 10, 24, 23, 0),
			[]time.Time{utc(2026, 10, 24, 23, 30), utc(2026, 10, 25, 0, 0), utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 1, 0),
				utc(2026, 10, 25, 1, 30), utc(2026, 10, 25, 2, 0), utc(2026, 10, 25, 2, 30), utc(2026, 10, 26, 0, 30)}},
		{"spring day, a window starting in the gap: at its end", time.Hour, hours("02:30-05:00"), utc(2026, 3, 29, 0, 0),
			[]time.Time{utc(2026, 3, 29, 1, 0), utc(2026, 3, 29, 2, 0), utc(2026, 3, 30, 0, 30)}},
		{"hourly all day on the spring day: real hours, 23 of them", time.Hour, Hours{}, utc(2026, 3, 29, 21, 0),
			[]time.Time{utc(2026, 3, 29, 22, 0), utc(2026, 3, 29, 23, 0)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w, err := Every(tt.every, tt.hours, ber)
			if err != nil {
				t.Fatal(err)
			}
			if got := fires(w, tt.from, len(tt.want)); !sameTimes(got, tt.want) {
				t.Fatalf("%s after %s fires at\n%v\nwant\n%v", w, tt.from, got, tt.want)
			}
		})
	}
	// The spring day has 23 hours and the fall day 25: hourly all day
	// fires 23 and 25 times, one real hour apart.
	w, _ := Every(time.Hour, Hours{}, ber)
	for day, want := range map[time.Time]int{utc(2026, 3, 28, 23, 0): 23, utc(2026, 10, 24, 22, 0): 25} {
		due, _ := w.Due(day.Add(-time.Second), day.Add(26*time.Hour), 0)
		n := 0
		for i, d := range due {
			if d.In(ber).Day() != day.In(ber).Day() {
				continue
			}
			n++
			if i > 0 && d.Sub(due[i-1]) != time.Hour {
				t.Errorf("%s: %s is %s after the fire before", day, d, d.Sub(due[i-1]))
			}
		}
		if n != want {
			t.Errorf("hourly on the local day of %s: %d fires, want %d", day, n, want)
		}
	}
}

func TestEveryAndHoursRefuse(t *testing.T) {
	for _, d := range []time.Duration{0, 30 * time.Second, 90 * time.Second, 25 * time.Hour} {
		if _, err := Every(d, Hours{}, nil); err == nil {
			t.Errorf("every %s accepted", d)
		}
	}
	for _, s := range []string{"", "8-22", "08:00", "08:00-08:00", "00:00-24:00", "24:00-06:00", "08:60-09:00", "8:00-22:00", "08:00-25:00"} {
		if _, err := ParseHours(s); err == nil {
			t.Errorf("active hours %q accepted", s)
		}
	}
	for s, want := range map[string]Hours{"08:00-22:00": {480, 1320}, "22:00-06:00": {1320, 360}, "18:00-24:00": {1080, 1440}, " 09:30 - 17:00 ": {570, 1020}} {
		if h, err := ParseHours(s); err != nil || h != want {
			t.Errorf("ParseHours(%q) = %v, %v; want %v", s, h, err, want)
		}
	}
}

func TestAtOnce(t *testing.T) {
	at := utc(2026, 5, 1, 16, 0)
	w := At(at)
	if got := w.Next(at.Add(-time.Minute)); !got.Equal(at) {
		t.Fatalf("Next before = %s", got)
	}
	if got := w.Next(at); !got.IsZero() {
		t.Fatalf("Next at its time = %s, want none", got)
	}
}

// Due keeps the latest due times and counts the earlier ones.
func TestDueKeepsTheLatest(t *testing.T) {
	w, _ := ParseCron("0 * * * *", nil)
	due, omitted := w.Due(utc(2026, 1, 1, 0, 0), utc(2026, 1, 2, 0, 30), 3)
	if want := []time.Time{utc(2026, 1, 1, 22, 0), utc(2026, 1, 1, 23, 0), utc(2026, 1, 2, 0, 0)}; !sameTimes(due, want) || omitted != 21 {
		t.Fatalf("Due = %v, %d omitted; want %v, 21", due, omitted, want)
	}
	if due, omitted := w.Due(utc(2026, 1, 1, 0, 0), utc(2026, 1, 1, 0, 59), 3); len(due) != 0 || omitted != 0 {
		t.Fatalf("Due in an hour with none = %v, %d", due, omitted)
	}
}

func TestMinGap(t *testing.T) {
	for _, tt := range []struct {
		spec Spec
		want time.Duration
	}{
		{Spec{Cron: "0 8,9 * * *"}, time.Hour},
		{Spec{Cron: "0 8 * * 1-5"}, 24 * time.Hour},
		{Spec{Every: 7 * time.Hour}, 3 * time.Hour}, // 21:00 to the next day's 00:00
		{Spec{Every: 30 * time.Minute, Hours: "08:00-22:00"}, 30 * time.Minute},
		{Spec{At: utc(2026, 6, 1, 0, 0)}, 0},
	} {
		w, err := tt.spec.When()
		if err != nil {
			t.Fatal(err)
		}
		if got := w.MinGap(utc(2026, 1, 1, 0, 0), 500); got != tt.want {
			t.Errorf("MinGap of %s = %s, want %s", w, got, tt.want)
		}
	}
}
