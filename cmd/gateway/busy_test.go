package main

import (
	"strings"
	"testing"
	"time"

	"github.com/chatgate/chatgate/config"
	"github.com/chatgate/chatgate/sessions"
)

func TestCheckPrintsBusyModes(t *testing.T) {
	path := writeConfig(t, `
session:
  busy_mode: interrupt
channels:
  telegram:
    session:
      debounce_ms: 700
`)
	code, out, errOut := runCmd(t, "check", "-c", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	// Columns are padded; compare each line's fields.
	var rows []string
	for _, line := range strings.Split(out, "\n") {
		rows = append(rows, strings.Join(strings.Fields(line), " "))
	}
	all := strings.Join(rows, "\n")
	for _, want := range []string{
		"busy_mode interrupt session.busy_mode (" + path + ":3)",
		"debounce_ms 0 default",
		"debounce_ms 700 channels.telegram.session.debounce_ms (" + path + ":7)",
		"debounce_max_ms 5000 default",
		"max_batch 20 default",
	} {
		if !strings.Contains(all, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestCheckRejectsDebounceMaxBelowDebounce(t *testing.T) {
	path := writeConfig(t, "channels:\n  telegram:\n    session:\n      debounce_max_ms: 1000\n")
	code, _, errOut := runCmd(t, "check", "-c", path)
	want := path + ":4: channels.telegram.session.debounce_max_ms: 1000 is lower than debounce_ms 1500 (default) of channel telegram"
	if code != 1 || !strings.HasPrefix(errOut, want) {
		t.Fatalf("exit %d, stderr:\n%s\nwant it to start with %q", code, errOut, want)
	}
}

// The session manager gets each channel's busy policy in durations.
func TestCheckPoliciesCarryBusyModes(t *testing.T) {
	cfg, err := config.Parse([]byte(`
session:
  busy_mode: queue
  debounce_max_ms: 2500
channels:
  websocket:
    session:
      max_batch: 7
      debounce_ms: 250
`), "bot.yaml", func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	got := policies(cfg)
	for channel, want := range map[string]sessions.BusyPolicy{
		config.ChannelWebSocket: {Mode: sessions.BusyQueue, Debounce: 250 * time.Millisecond, DebounceMax: 2500 * time.Millisecond, MaxBatch: 7},
		config.ChannelTelegram:  {Mode: sessions.BusyQueue, Debounce: 1500 * time.Millisecond, DebounceMax: 2500 * time.Millisecond, MaxBatch: 20},
	} {
		if got[channel].Busy != want {
			t.Errorf("%s: Busy = %+v, want %+v", channel, got[channel].Busy, want)
		}
	}
}
