package config

import (
	"errors"
	"strings"
	"testing"
)

// busy is the part of a Policy the busy keys resolve to, for comparison.
type busy struct {
	mode                    string
	debounce, max, maxBatch int
}

func busyOf(p Policy) busy {
	return busy{p.BusyMode.V, p.DebounceMS.V, p.DebounceMaxMS.V, p.MaxBatch.V}
}

func TestConfigBusyDefaultsPerChannel(t *testing.T) {
	c := mustParse(t, ``)
	for _, tt := range []struct {
		channel string
		want    busy
	}{
		{ChannelWebSocket, busy{"collect", 0, 5000, 20}},
		{ChannelTelegram, busy{"collect", 1500, 5000, 20}},
	} {
		p := c.Policy(tt.channel)
		if got := busyOf(p); got != tt.want {
			t.Errorf("%s: busy = %+v, want %+v", tt.channel, got, tt.want)
		}
		for key, from := range map[string]string{
			"busy_mode": p.BusyMode.From, "debounce_ms": p.DebounceMS.From,
			"debounce_max_ms": p.DebounceMaxMS.From, "max_batch": p.MaxBatch.From,
		} {
			if from != "default" {
				t.Errorf("%s: %s from %q, want default", tt.channel, key, from)
			}
		}
	}
}

func TestConfigBusyPrecedence(t *testing.T) {
	c := mustParse(t, `
session:
  busy_mode: queue
  debounce_ms: 200
  debounce_max_ms: 3000
  max_batch: 10
channels:
  telegram:
    session:
      busy_mode: interrupt
      debounce_ms: 0
      max_batch: 1000
`)
	ws, tg := c.Policy(ChannelWebSocket), c.Policy(ChannelTelegram)
	if got, want := busyOf(ws), (busy{"queue", 200, 3000, 10}); got != want {
		t.Errorf("websocket busy = %+v, want %+v", got, want)
	}
	if got, want := busyOf(tg), (busy{"interrupt", 0, 3000, 1000}); got != want {
		t.Errorf("telegram busy = %+v, want %+v", got, want)
	}
	for _, tt := range []struct{ got, want string }{
		{ws.BusyMode.From, "session.busy_mode (bot.yaml:2)"},
		{ws.DebounceMS.From, "session.debounce_ms (bot.yaml:3)"},
		{ws.DebounceMaxMS.From, "session.debounce_max_ms (bot.yaml:4)"},
		{ws.MaxBatch.From, "session.max_batch (bot.yaml:5)"},
		{tg.BusyMode.From, "channels.telegram.session.busy_mode (bot.yaml:9)"},
		// 0 is a value, not unset: it beats the top level's 200 and
		// telegram's default 1500.
		{tg.DebounceMS.From, "channels.telegram.session.debounce_ms (bot.yaml:10)"},
		// A key the channel leaves out comes from the top level.
		{tg.DebounceMaxMS.From, "session.debounce_max_ms (bot.yaml:4)"},
		{tg.MaxBatch.From, "channels.telegram.session.max_batch (bot.yaml:11)"},
	} {
		if tt.got != tt.want {
			t.Errorf("from %q, want %q", tt.got, tt.want)
		}
	}
}

// A debounce_ms above the default cap, with no debounce_max_ms set
// anywhere, raises the cap instead of being cut short by it.
func TestConfigBusyDefaultCapFollowsLongDebounce(t *testing.T) {
	c := mustParse(t, `
channels:
  telegram:
    session:
      debounce_ms: 8000
`)
	tg := c.Policy(ChannelTelegram)
	if tg.DebounceMaxMS.V != 8000 || tg.DebounceMaxMS.From != "default, raised to debounce_ms" {
		t.Fatalf("debounce_max_ms = %d from %q", tg.DebounceMaxMS.V, tg.DebounceMaxMS.From)
	}
	if ws := c.Policy(ChannelWebSocket); ws.DebounceMaxMS.V != 5000 || ws.DebounceMaxMS.From != "default" {
		t.Fatalf("websocket debounce_max_ms = %+v", ws.DebounceMaxMS)
	}
}

func TestConfigBusyAcceptsBounds(t *testing.T) {
	c := mustParse(t, `
session:
  max_batch: 1
  debounce_ms: 0
  debounce_max_ms: 0
channels:
  telegram:
    session:
      max_batch: 1000
      debounce_ms: 2000
      debounce_max_ms: 2000
`)
	if got, want := busyOf(c.Policy(ChannelWebSocket)), (busy{"collect", 0, 0, 1}); got != want {
		t.Errorf("websocket busy = %+v, want %+v", got, want)
	}
	if got, want := busyOf(c.Policy(ChannelTelegram)), (busy{"collect", 2000, 2000, 1000}); got != want {
		t.Errorf("telegram busy = %+v, want %+v", got, want)
	}
}

func TestConfigBusyErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string // each must appear in the error text
		not  []string // none may appear
	}{
		{"unknown busy_mode names the allowed ones", `
session:
  busy_mode: batch
`, []string{`bot.yaml:2: session.busy_mode: "batch" is not one of queue, collect, interrupt`}, nil},
		{"unknown busy_mode in a channel", `
channels:
  websocket:
    session:
      busy_mode: Collect
`, []string{`bot.yaml:4: channels.websocket.session.busy_mode: "Collect" is not one of queue, collect, interrupt`}, nil},
		{"negative debounce_ms", `
channels:
  telegram:
    session:
      debounce_ms: -1
`, []string{"bot.yaml:4: channels.telegram.session.debounce_ms: must be 0 or more, got -1"}, nil},
		{"negative debounce_max_ms", `
session:
  debounce_max_ms: -5
`, []string{"bot.yaml:2: session.debounce_max_ms: must be 0 or more, got -5"}, nil},
		{"max_batch 0", `
session:
  max_batch: 0
`, []string{"bot.yaml:2: session.max_batch: must be 1–1000, got 0"}, nil},
		{"max_batch above 1000", `
channels:
  telegram:
    session:
      max_batch: 1001
`, []string{"bot.yaml:4: channels.telegram.session.max_batch: must be 1–1000, got 1001"}, nil},
		{"debounce_ms as a duration", `
session:
  debounce_ms: 1.5s
`, []string{"bot.yaml:2: session.debounce_ms: cannot use !!str `1.5s` into int"}, nil},
		{"debounce_max_ms below the channel's debounce_ms", `
channels:
  websocket:
    session:
      debounce_ms: 800
      debounce_max_ms: 500
`, []string{"bot.yaml:5: channels.websocket.session.debounce_max_ms: 500 is lower than debounce_ms 800 (channels.websocket.session.debounce_ms (bot.yaml:4)) of channel websocket; it must be at least debounce_ms"}, nil},
		{"top-level debounce_max_ms below telegram's default debounce_ms", `
session:
  debounce_max_ms: 1000
`, []string{"bot.yaml:2: session.debounce_max_ms: 1000 is lower than debounce_ms 1500 (default) of channel telegram"},
			[]string{"channel websocket"}},
		{"one error for a clash both channels inherit", `
session:
  debounce_ms: 3000
  debounce_max_ms: 1000
`, []string{"bot.yaml:3: session.debounce_max_ms: 1000 is lower than debounce_ms 3000 (session.debounce_ms (bot.yaml:2)) of channels websocket and telegram"},
			[]string{"of channel "}},
		{"channel debounce_ms above the top-level cap", `
session:
  debounce_max_ms: 2000
channels:
  telegram:
    session:
      debounce_ms: 2500
`, []string{"bot.yaml:2: session.debounce_max_ms: 2000 is lower than debounce_ms 2500 (channels.telegram.session.debounce_ms (bot.yaml:6)) of channel telegram"},
			[]string{"websocket"}},
		{"busy problems are reported with the others", `
agent:
  backend: gpt
session:
  busy_mode: batch
  max_batch: 0
  debounce_ms: 900
  debounce_max_ms: 100
`, []string{`agent.backend: "gpt"`, `session.busy_mode: "batch"`, "session.max_batch: must be 1–1000", "bot.yaml:7: session.debounce_max_ms: 100 is lower than debounce_ms 900"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parse(t, tt.yaml)
			if err == nil {
				t.Fatal("no error")
			}
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("error is %T, want Errors", err)
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error\n%v\nlacks %q", err, want)
				}
			}
			for _, not := range tt.not {
				if strings.Contains(err.Error(), not) {
					t.Errorf("error\n%v\nhas %q", err, not)
				}
			}
		})
	}
}

func TestDescribeBusy(t *testing.T) {
	c := mustParse(t, `
session:
  busy_mode: queue
channels:
  telegram:
    session:
      busy_mode: interrupt
      debounce_max_ms: 4000
      max_batch: 5
`)
	var out strings.Builder
	c.Describe(&out)
	text := out.String()
	ws, tg, ok := strings.Cut(text, "channel telegram")
	if !ok {
		t.Fatalf("no telegram section:\n%s", text)
	}
	for _, tt := range []struct {
		section, key, value, from string
	}{
		{ws, "busy_mode", "queue", "session.busy_mode (bot.yaml:2)"},
		{ws, "debounce_ms", "0", "default"},
		{ws, "debounce_max_ms", "5000", "default"},
		{ws, "max_batch", "20", "default; unused: queue takes one message per turn"},
		{tg, "busy_mode", "interrupt", "channels.telegram.session.busy_mode (bot.yaml:6)"},
		{tg, "debounce_ms", "1500", "default"},
		{tg, "debounce_max_ms", "4000", "channels.telegram.session.debounce_max_ms (bot.yaml:7)"},
		{tg, "max_batch", "5", "channels.telegram.session.max_batch (bot.yaml:8)"},
	} {
		if !hasRow(tt.section, tt.key, tt.value, tt.from) {
			t.Errorf("Describe lacks row %s %s %s in\n%s", tt.key, tt.value, tt.from, tt.section)
		}
	}
}

// hasRow reports whether text has a line "  key  value  from" (columns
// padded with spaces).
func hasRow(text, key, value, from string) bool {
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == key && f[1] == value && strings.Join(f[2:], " ") == from {
			return true
		}
	}
	return false
}
