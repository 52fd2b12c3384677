package schedules

import (
	"fmt"
	"strconv"
	"strings"
)

// Hours is a daily window of active hours in a schedule's time zone, as
// minutes from local midnight: From is in it, To is not. To ≤ From is a
// window past midnight ("22:00-06:00"); To may be 24:00. The zero Hours
// is no window (all day).
type Hours struct {
	From, To int
}

// IsZero reports whether h is no window.
func (h Hours) IsZero() bool { return h == Hours{} }

// String is h as written: "08:00-22:00".
func (h Hours) String() string {
	return clock(h.From) + "-" + clock(h.To)
}

func clock(m int) string { return fmt.Sprintf("%02d:%02d", m/60, m%60) }

// ParseHours reads a window of active hours, "HH:MM-HH:MM" on a 24-hour
// clock ("08:00-22:00"; "22:00-06:00" runs past midnight; the end may be
// 24:00). Start and end may not be equal.
func ParseHours(s string) (Hours, error) {
	from, to, ok := strings.Cut(strings.TrimSpace(s), "-")
	if !ok {
		return Hours{}, fmt.Errorf("%q is not a window such as 08:00-22:00", s)
	}
	f, err := parseClock(strings.TrimSpace(from), false)
	if err != nil {
		return Hours{}, fmt.Errorf("%q: the start %v", s, err)
	}
	t, err := parseClock(strings.TrimSpace(to), true)
	if err != nil {
		return Hours{}, fmt.Errorf("%q: the end %v", s, err)
	}
	if f == t {
		return Hours{}, fmt.Errorf("%q starts and ends at the same time (leave active_hours out for all day)", s)
	}
	if f == 0 && t == 24*60 {
		return Hours{}, fmt.Errorf("%q is the whole day (leave active_hours out)", s)
	}
	return Hours{From: f, To: t}, nil
}

// parseClock reads "HH:MM" as minutes from midnight; 24:00 only when
// end.
func parseClock(s string, end bool) (int, error) {
	h, m, ok := strings.Cut(s, ":")
	if !ok || len(h) != 2 || len(m) != 2 {
		return 0, fmt.Errorf("%q is not a time such as 08:00", s)
	}
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	switch {
	case err1 != nil || err2 != nil || hh < 0 || mm < 0 || mm > 59:
		return 0, fmt.Errorf("%q is not a time such as 08:00", s)
	case hh == 24 && mm == 0 && end:
		return 24 * 60, nil
	case hh > 23:
		return 0, fmt.Errorf("%q is not a time of day (00:00 to 23:59)", s)
	}
	return hh*60 + mm, nil
}
