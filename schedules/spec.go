package schedules

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Spec is how a schedule's times are written: exactly one of Cron,
// Every (with Hours, optional) and At, and the time zone they are read
// in. Operator schedules come from bot.yaml; a user's reminder keeps its
// Spec as Text.
type Spec struct {
	Cron  string
	Every time.Duration
	Hours string // active hours, "08:00-22:00"; with Every only
	At    time.Time
	// Timezone is an IANA name; "" is UTC.
	Timezone string
}

// When parses the spec.
func (s Spec) When() (When, error) {
	loc, err := LoadLocation(s.Timezone)
	if err != nil {
		return When{}, err
	}
	n := 0
	for _, set := range []bool{s.Cron != "", s.Every != 0, !s.At.IsZero()} {
		if set {
			n++
		}
	}
	switch {
	case n != 1:
		return When{}, errors.New("a schedule needs exactly one of cron, every and at")
	case s.Hours != "" && s.Every == 0:
		return When{}, errors.New("active hours go with every only")
	case s.Cron != "":
		return ParseCron(s.Cron, loc)
	case s.Every != 0:
		var h Hours
		if s.Hours != "" {
			if h, err = ParseHours(s.Hours); err != nil {
				return When{}, err
			}
		}
		return Every(s.Every, h, loc)
	}
	return At(s.At.In(loc)), nil
}

// LoadLocation is the time zone of an IANA name; "" is UTC. Local, the
// host's zone, is refused: replicas on different hosts would fire at
// different instants.
func LoadLocation(name string) (*time.Location, error) {
	switch name {
	case "", "UTC":
		return time.UTC, nil
	case "Local":
		return nil, errors.New(`"Local" is the host's zone, which replicas may not share: name the zone, such as Europe/Berlin`)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%q is not an IANA time zone such as Europe/Berlin", name)
	}
	return loc, nil
}

// Text is the spec's times as one line, the form a reminder's row keeps
// (its time zone is kept beside it): "cron 0 8 * * 1-5", "every 2h0m0s",
// "every 30m0s 08:00-22:00" or "at 2026-03-29T18:00:00Z".
func (s Spec) Text() string {
	switch {
	case s.Cron != "":
		return "cron " + strings.TrimSpace(s.Cron)
	case s.Every != 0:
		if s.Hours != "" {
			return "every " + s.Every.String() + " " + s.Hours
		}
		return "every " + s.Every.String()
	case !s.At.IsZero():
		return "at " + s.At.UTC().Format(time.RFC3339)
	}
	return ""
}

// SpecFromText reads what Text wrote, with the time zone kept beside it.
func SpecFromText(text, timezone string) (Spec, error) {
	kind, rest, _ := strings.Cut(strings.TrimSpace(text), " ")
	rest = strings.TrimSpace(rest)
	s := Spec{Timezone: timezone}
	switch kind {
	case "cron":
		s.Cron = rest
	case "every":
		d, hours, _ := strings.Cut(rest, " ")
		v, err := time.ParseDuration(d)
		if err != nil {
			return Spec{}, fmt.Errorf("%q: %q is not a duration", text, d)
		}
		s.Every, s.Hours = v, strings.TrimSpace(hours)
	case "at":
		t, err := time.Parse(time.RFC3339, rest)
		if err != nil {
			return Spec{}, fmt.Errorf("%q: %q is not a time such as 2026-03-29T18:00:00Z", text, rest)
		}
		s.At = t
	default:
		return Spec{}, fmt.Errorf("%q is not a schedule (cron …, every … or at …)", text)
	}
	if _, err := s.When(); err != nil {
		return Spec{}, err
	}
	return s, nil
}
