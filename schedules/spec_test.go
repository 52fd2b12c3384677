package schedules

import (
	"strings"
	"testing"
	"time"
)

// A reminder's spec is kept as one line of text and its time zone; read
// back, it is due at the same times.
func TestSpecTextRoundTrip(t *testing.T) {
	from := utc(2026, 3, 1, 0, 0)
	for _, s := range []Spec{
		{Cron: "0 8 * * 1-5", Timezone: "Europe/Berlin"},
		{Cron: "@daily", Timezone: "America/New_York"},
		{Every: 90 * time.Minute},
		{Every: 30 * time.Minute, Hours: "08:00-22:00", Timezone: "Europe/Berlin"},
		{At: time.Date(2026, 3, 29, 18, 0, 0, 0, zone(t, "Europe/Berlin")), Timezone: "Europe/Berlin"},
	} {
		w, err := s.When()
		if err != nil {
			t.Fatalf("%+v: %v", s, err)
		}
		back, err := SpecFromText(s.Text(), s.Timezone)
		if err != nil {
			t.Fatalf("%q: %v", s.Text(), err)
		}
		w2, err := back.When()
		if err != nil {
			t.Fatal(err)
		}
		if a, b := fires(w, from, 50), fires(w2, from, 50); !sameTimes(a, b) || len(a) == 0 {
			t.Errorf("%q read back fires at %v, want %v", s.Text(), b, a)
		}
	}
}

func TestSpecRefuses(t *testing.T) {
	for _, tt := range []struct {
		s    Spec
		want string
	}{
		{Spec{}, "exactly one"},
		{Spec{Cron: "0 8 * * *", Every: time.Hour}, "exactly one"},
		{Spec{Cron: "0 8 * * *", Hours: "08:00-10:00"}, "every only"},
		{Spec{Every: time.Hour, Timezone: "Mars/Olympus"}, "IANA"},
		{Spec{Every: time.Hour, Timezone: "Local"}, "host"},
	} {
		if _, err := tt.s.When(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v, want an error saying %q", tt.s, err, tt.want)
		}
	}
	for _, text := range []string{"", "daily 8", "every soon", "at tomorrow", "cron 0 0 30 2 *"} {
		if _, err := SpecFromText(text, ""); err == nil {
			t.Errorf("SpecFromText(%q) accepted", text)
		}
	}
}

func TestKeys(t *testing.T) {
	for _, tt := range []struct {
		key, name, session string
		reminder           int64
	}{
		{OperatorKey("brief"), "brief", "", 0},
		{OperatorSessionKey("checkin", "telegram:group:-100:topic:7"), "checkin", "telegram:group:-100:topic:7", 0},
		{ReminderKey(42), "", "", 42},
	} {
		name, session, id, ok := ParseKey(tt.key)
		if !ok || name != tt.name || session != tt.session || id != tt.reminder {
			t.Errorf("ParseKey(%q) = %q, %q, %d, %t", tt.key, name, session, id, ok)
		}
	}
	for _, bad := range []string{"", "schedule:", "reminder:x", "reminder:0", "other:1"} {
		if _, _, _, ok := ParseKey(bad); ok {
			t.Errorf("ParseKey(%q) ok", bad)
		}
	}
}

func TestIsQuiet(t *testing.T) {
	for reply, want := range map[string]bool{
		QuietReply:                  true,
		" nothing_to_report.\n":     true,
		"`NOTHING_TO_REPORT`":       true,
		"\"NOTHING_TO_REPORT\"":     true,
		"NOTHING_TO_REPORT, but hi": false,
		"Nothing to report today.":  false,
		"":                          false,
	} {
		if got := IsQuiet(reply); got != want {
			t.Errorf("IsQuiet(%q) = %t", reply, got)
		}
	}
}
