// Package schedules computes when schedules fire: the due times of a cron
// expression or of an interval within active hours, in a time zone, and
// which of the due times missed while no gateway ran is run late and which
// are skipped. It reads no clock and stores nothing: callers pass the
// times, and the store keeps one row per fire (schedule key, due time),
// claimed once across replicas.
//
// Due times are instants. Where a time zone's clock jumps (DST), a
// schedule is read as a person reads a clock:
//
//   - A cron expression whose hour field names hours ("30 2 * * *",
//     "0 8,20 * * 1-5", @daily, @weekly, @monthly, @yearly) fires at those
//     wall-clock times. A time that does not exist that day (the clock
//     jumps from 02:00 to 03:00) fires once at the end of the gap, when
//     the clock shows 03:00; a time that occurs twice (03:00 back to
//     02:00) fires at its first occurrence only. So a daily schedule fires
//     once every local day, as the daily reset does.
//   - A cron expression with * in the hour field ("*/15 * * * *",
//     "0 * * * *", "0 */2 * * *", @hourly) follows the hours as the clock
//     shows them, as robfig/cron computes it: an hour the clock skips has
//     no fire, an hour it repeats fires again. "0 * * * *" fires every
//     real hour across either change.
//   - every N within active hours counts N in real time from the start of
//     each local day's window (local midnight without active_hours); the
//     window's start and end are wall-clock times, moved and taken once
//     as above.
package schedules

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Bounds of every.
const (
	MinEvery = time.Minute
	MaxEvery = 24 * time.Hour
)

// When is a parsed schedule: the instants it is due. The zero When is
// never due.
type When struct {
	kind  kind
	loc   *time.Location
	cron  *cron.SpecSchedule // cronKind: the fields, in loc
	wall  *cron.SpecSchedule // cronKind, fixed: the same fields on the wall clock (UTC)
	fixed bool               // cronKind: the hour field names hours
	every time.Duration
	hours Hours
	at    time.Time // onceKind
	text  string
}

type kind int

const (
	never kind = iota
	cronKind
	everyKind
	onceKind
)

// Location is the time zone the schedule is read in (UTC when none).
func (w When) Location() *time.Location {
	if w.loc == nil {
		return time.UTC
	}
	return w.loc
}

// String describes the schedule as written.
func (w When) String() string { return w.text }

// cronParser reads the five fields of crontab(5) and the descriptors
// (@daily, @hourly, ...).
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseCron reads a cron expression of five fields (minute hour
// day-of-month month day-of-week) or a descriptor (@yearly, @monthly,
// @weekly, @daily, @hourly), in the time zone loc (nil: UTC). The time
// zone is not part of the expression (no CRON_TZ=), and intervals are
// written with Every, not @every. An expression that never fires (the
// 30th of February) is an error.
func ParseCron(expr string, loc *time.Location) (When, error) {
	if loc == nil {
		loc = time.UTC
	}
	expr = strings.TrimSpace(expr)
	switch {
	case expr == "":
		return When{}, errors.New("empty cron expression")
	case strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ="):
		return When{}, errors.New("the time zone is not part of the expression: write it as timezone")
	case strings.HasPrefix(expr, "@every"):
		return When{}, errors.New("@every is written as every (with active_hours if need be)")
	}
	s, err := cronParser.Parse(expr)
	if err != nil {
		return When{}, fmt.Errorf("%q is not a cron expression of five fields (minute hour day month weekday) or a descriptor such as @daily: %v", expr, err)
	}
	spec, ok := s.(*cron.SpecSchedule)
	if !ok {
		return When{}, fmt.Errorf("%q is not a cron expression", expr)
	}
	inLoc, wall := *spec, *spec
	inLoc.Location, wall.Location = loc, time.UTC
	w := When{kind: cronKind, loc: loc, cron: &inLoc, wall: &wall, fixed: namesHours(expr), text: expr}
	if w.Next(neverCheck).IsZero() {
		return When{}, fmt.Errorf("%q never fires", expr)
	}
	return w, nil
}

// neverCheck is where ParseCron looks for a first fire: robfig/cron
// looks five years ahead, which covers every day of a leap year.
var neverCheck = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// namesHours reports whether a cron expression's hours are named (no *
// in its hour field): then its times are wall-clock times (moved out of a
// DST gap, taken once when repeated).
func namesHours(expr string) bool {
	if strings.HasPrefix(expr, "@") {
		return expr != "@hourly"
	}
	f := strings.Fields(expr)
	return len(f) >= 2 && !strings.ContainsAny(f[1], "*?")
}

// Every is a schedule due every d (whole minutes, MinEvery to MaxEvery)
// within the active hours (the zero Hours: all day), counted from the
// start of each local day's window in loc (nil: UTC).
func Every(d time.Duration, hours Hours, loc *time.Location) (When, error) {
	if loc == nil {
		loc = time.UTC
	}
	if err := CheckEvery(d); err != nil {
		return When{}, err
	}
	text := "every " + d.String()
	if !hours.IsZero() {
		text += " " + hours.String()
	}
	return When{kind: everyKind, loc: loc, every: d, hours: hours, text: text}, nil
}

// CheckEvery reports an interval Every refuses.
func CheckEvery(d time.Duration) error {
	switch {
	case d < MinEvery:
		return fmt.Errorf("%s is shorter than %s", d, MinEvery)
	case d > MaxEvery:
		return fmt.Errorf("%s is longer than %s (write a cron expression for longer periods)", d, MaxEvery)
	case d%time.Minute != 0:
		return fmt.Errorf("%s is not whole minutes", d)
	}
	return nil
}

// At is a schedule due once, at t (a reminder's "at 18:00").
func At(t time.Time) When {
	return When{kind: onceKind, loc: t.Location(), at: t, text: "at " + t.Format(time.RFC3339)}
}

// Next is the first due time strictly after t, or the zero time when the
// schedule is due no more (a one-time schedule past its time).
func (w When) Next(t time.Time) time.Time {
	switch w.kind {
	case cronKind:
		if w.fixed {
			return w.nextWall(t)
		}
		return w.cron.Next(t)
	case everyKind:
		return w.nextEvery(t)
	case onceKind:
		if w.at.After(t) {
			return w.at
		}
	}
	return time.Time{}
}

// nextWall is Next of a cron expression that names its hours: the first
// wall-clock time it names whose instant (instant) is after t. Instants
// grow with wall-clock times, so the search starts at t's own.
func (w When) nextWall(t time.Time) time.Time {
	loc := w.Location()
	for c := civil(t, loc); ; {
		c = w.wall.Next(c)
		if c.IsZero() {
			return c
		}
		if at := instant(c, loc); at.After(t) {
			return at
		}
	}
}

// nextEvery is Next of an interval: the window of the day before (one
// that runs past midnight), of t's day, or of a later day.
func (w When) nextEvery(t time.Time) time.Time {
	loc := w.Location()
	l := t.In(loc)
	for d := -1; d < 4; d++ {
		start, end := w.window(l.Year(), l.Month(), l.Day()+d)
		if !end.After(start) || !end.After(t) {
			continue // a window DST emptied, or one already over
		}
		if start.After(t) {
			return start
		}
		next := start.Add((t.Sub(start)/w.every + 1) * w.every)
		if next.Before(end) {
			return next
		}
	}
	return time.Time{} // not reached: every day has a window
}

// window is the active window that starts on the local day y-m-d: its
// start and end instants (the end is not in it).
func (w When) window(y int, m time.Month, d int) (start, end time.Time) {
	loc := w.Location()
	h := w.hours
	if h.IsZero() {
		h = Hours{From: 0, To: 24 * 60}
	}
	day := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	to := h.To
	if to <= h.From {
		to += 24 * 60 // past midnight
	}
	return instant(day.Add(time.Duration(h.From)*time.Minute), loc), instant(day.Add(time.Duration(to)*time.Minute), loc)
}

// civil is t's wall clock in loc, as a time in UTC.
func civil(t time.Time, loc *time.Location) time.Time {
	l := t.In(loc)
	return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), time.UTC)
}

// instant is when loc's clock shows the wall-clock time c (a time in
// UTC): its first occurrence when the clock shows it twice, and the end
// of the gap (the instant of the jump) when the clock skips it.
func instant(c time.Time, loc *time.Location) time.Time {
	t := time.Date(c.Year(), c.Month(), c.Day(), c.Hour(), c.Minute(), c.Second(), c.Nanosecond(), loc)
	if civil(t, loc).Equal(c) {
		// The clock went back at the start of t's zone period: c may have
		// shown before, by as much as it went back.
		start, _ := t.ZoneBounds()
		if !start.IsZero() {
			_, off := t.Zone()
			_, before := start.Add(-time.Nanosecond).Zone()
			if before > off {
				if e := t.Add(-time.Duration(before-off) * time.Second); e.Before(start) && civil(e, loc).Equal(c) {
					return e
				}
			}
		}
		return t
	}
	// The clock skips c: time.Date moved it across the jump, one way or
	// the other; the jump is the bound of t's zone period on that side.
	start, end := t.ZoneBounds()
	if civil(t, loc).After(c) {
		return start
	}
	return end
}

// Due lists the due times in (after, upTo], oldest first: the latest
// keep of them (keep ≤ 0: all), and how many earlier ones were left out.
// Its cost grows with the number of due times in the range.
func (w When) Due(after, upTo time.Time, keep int) (due []time.Time, omitted int) {
	for t := w.Next(after); !t.IsZero() && !t.After(upTo); t = w.Next(t) {
		due = append(due, t)
		if keep > 0 && len(due) > keep {
			n := len(due) - keep
			omitted += n
			due = append(due[:0], due[n:]...)
		}
	}
	return due, omitted
}

// MinGap is the shortest time between two consecutive due times among
// the next n after from (or within two years of it, whichever comes
// first); 0 when fewer than two are due. Per-user limits on how often a
// reminder fires compare it with their minimum.
func (w When) MinGap(from time.Time, n int) time.Duration {
	var gap time.Duration
	prev := w.Next(from)
	horizon := from.AddDate(2, 0, 0)
	for i := 1; i < n && !prev.IsZero() && prev.Before(horizon); i++ {
		next := w.Next(prev)
		if next.IsZero() {
			break
		}
		if g := next.Sub(prev); gap == 0 || g < gap {
			gap = g
		}
		prev = next
	}
	return gap
}
