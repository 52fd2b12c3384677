package main

import (
	"strings"
	"testing"

	"github.com/chatgate/chatgate/config"
	"github.com/chatgate/chatgate/sessions/store"
)

// Five problems of five kinds — a bad duration, an unknown key, a bad time
// zone, a daily reset without at_hour and a negative size — are five lines
// of one run, each file:line: key: message. A value of the wrong type no
// longer hides the rest, nor do the rest hide the check of keys against
// each other.
func TestCheckReportsFiveProblemsOfFiveKinds(t *testing.T) {
	path := writeConfig(t, `locks:
  ttl: banana
storage:
  retention_dayz: 30
channels:
  telegram:
    session:
      reset:
        mode: daily
        timezone: Europe/Berlinn
  websocket:
    max_frame_bytes: -1
`)
	code, out, errOut := runCmd(t, "check", "-c", path)
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, out, errOut)
	}
	want := []string{
		path + `:2: locks.ttl: "banana" is not a duration (write it as "10s", "5m" or "1h")`,
		path + `:4: storage.retention_dayz: unknown key "retention_dayz" in storage (did you mean "retention_days"?)`,
		path + ":12: channels.websocket.max_frame_bytes: must be at least 256, got -1",
		path + `:10: channels.telegram.session.reset.timezone: "Europe/Berlinn" is not an IANA time zone such as Europe/Berlin`,
		path + `:9: channels.telegram.session.reset.mode: reset mode "daily" for channel telegram needs reset.at_hour (0–23), set in session.reset or channels.telegram.session.reset`,
	}
	if got := strings.Split(strings.TrimSpace(errOut), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("stderr:\n%s\nwant exactly:\n%s", errOut, strings.Join(want, "\n"))
	}
	if out != "" {
		t.Fatalf("stdout of a failed check: %q", out)
	}
}

// The configuration's default storage.timeout is the store's own default,
// which applies where a store is opened without one.
func TestStorageTimeoutDefaultsAgree(t *testing.T) {
	if config.DefaultStorageTimeout != store.DefaultTimeout {
		t.Fatalf("config.DefaultStorageTimeout = %v, store.DefaultTimeout = %v", config.DefaultStorageTimeout, store.DefaultTimeout)
	}
}
