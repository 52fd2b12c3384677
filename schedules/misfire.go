package schedules

import (
	"fmt"
	"time"
)

// Misfire rules: what happens to a fire missed while no gateway ran.
const (
	// MisfireOnce runs the latest missed fire, late, when it is at most
	// max_late late; every earlier one is skipped.
	MisfireOnce = "once"
	// MisfireSkip runs no fire late: each one missed is skipped.
	MisfireSkip = "skip"
)

// DefaultMaxLate is how late a missed fire may run under MisfireOnce when
// max_late is not set.
const DefaultMaxLate = 10 * time.Minute

// OnTime is how late a fire may start and still count as on time, under
// either rule: the time a busy or restarting gateway takes to get to it.
// A fire later than that is late: it runs only under MisfireOnce within
// max_late, and its reply says it is late.
const OnTime = time.Minute

// Misfire is a schedule's rule for fires it missed.
type Misfire struct {
	Rule    string        // MisfireOnce or MisfireSkip; "" is MisfireOnce
	MaxLate time.Duration // MisfireOnce: 0 is DefaultMaxLate
}

// Check reports a rule Decide cannot apply.
func (m Misfire) Check() error {
	switch m.Rule {
	case "", MisfireOnce, MisfireSkip:
	default:
		return fmt.Errorf("%q is not one of %s, %s", m.Rule, MisfireOnce, MisfireSkip)
	}
	if m.MaxLate != 0 && m.MaxLate < OnTime {
		return fmt.Errorf("max_late %s is shorter than %s, the lateness every fire is allowed anyway", m.MaxLate, OnTime)
	}
	return nil
}

// maxLate is how late a fire may run under m.
func (m Misfire) maxLate() time.Duration {
	if m.Rule == MisfireSkip {
		return OnTime
	}
	if m.MaxLate == 0 {
		return DefaultMaxLate
	}
	return max(m.MaxLate, OnTime)
}

// Fire is a due time to run, and how late it runs.
type Fire struct {
	Due  time.Time
	Late time.Duration // now − Due when it was decided
}

// IsLate reports whether the fire runs later than OnTime: its reply says
// so.
func (f Fire) IsLate() bool { return f.Late > OnTime }

// Decision is what to do with a schedule's due times that have no fire
// yet: at most one to run; the others are skipped, never run.
type Decision struct {
	Run     *Fire       // nil: nothing to run
	Skipped []time.Time // oldest first
	// Omitted is how many due times before Skipped are skipped too
	// without being listed (When.Due's omitted, passed on).
	Omitted int
}

// Decide applies the rule to the due times that have no fire yet (oldest
// first; those after now are not due and are left out), at now: only the
// latest can run — on time, or late within the rule's limit — and every
// earlier one is skipped, so a gateway down for a day runs one fire of
// an hourly schedule, not 24.
func (m Misfire) Decide(due []time.Time, now time.Time) Decision {
	var d Decision
	n := len(due)
	for n > 0 && due[n-1].After(now) {
		n--
	}
	if n == 0 {
		return d
	}
	latest := due[n-1]
	d.Skipped = append(d.Skipped, due[:n-1]...)
	if late := now.Sub(latest); late <= m.maxLate() {
		d.Run = &Fire{Due: latest, Late: late}
	} else {
		d.Skipped = append(d.Skipped, latest)
	}
	return d
}

// Catchup is Decide over w's due times in (after, now]: after is the
// latest due time the schedule has a fire for (or when it was first
// seen). Of the due times before the latest, at most keep are listed in
// Skipped (keep ≤ 0: all), the earlier ones counted in Omitted.
func (m Misfire) Catchup(w When, after, now time.Time, keep int) Decision {
	if keep > 0 {
		keep++ // the latest, which may run
	}
	due, omitted := w.Due(after, now, keep)
	d := m.Decide(due, now)
	d.Omitted = omitted
	return d
}
