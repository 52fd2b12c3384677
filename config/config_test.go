package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

func env(vars map[string]string) LookupEnv {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

func parse(t *testing.T, yaml string) (*Config, error) {
	t.Helper()
	return Parse([]byte(strings.TrimLeft(yaml, "\n")), "bot.yaml", env(nil))
}

func mustParse(t *testing.T, yaml string) *Config {
	t.Helper()
	c, err := parse(t, yaml)
	if err != nil {
		t.Fatalf("unexpected error:\n%v", err)
	}
	return c
}

func TestEmbeddedDefaults(t *testing.T) {
	c, err := Embedded(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Gateway.Listen != "127.0.0.1:8765" || c.Storage.Driver != "sqlite" || c.Storage.DSN != "gateway.db" || c.Agent.Backend != "echo" {
		t.Fatalf("embedded defaults = %+v", c)
	}
	if c.TelegramEnabled() {
		t.Fatal("telegram enabled without TELEGRAM_TOKEN")
	}
	c, err = Embedded(env(map[string]string{"TELEGRAM_TOKEN": "123456:ABC"}))
	if err != nil {
		t.Fatal(err)
	}
	if !c.TelegramEnabled() || c.Channels.Telegram.Token != "123456:ABC" {
		t.Fatalf("TELEGRAM_TOKEN not picked up: %q", c.Channels.Telegram.Token)
	}
}

func TestMaxHistoryLadder(t *testing.T) {
	tests := []struct {
		name     string
		yaml     string
		want     int
		wantFrom string
		warning  string
	}{
		{"default", ``, 100, "default", ""},
		{"top-level", `
session:
  max_history: 30
`, 30, "session.max_history (bot.yaml:2)", ""},
		{"channel session beats top-level", `
session:
  max_history: 30
channels:
  telegram:
    session:
      max_history: 20
`, 20, "channels.telegram.session.max_history (bot.yaml:6)", ""},
		{"legacy beats everything", `
session:
  max_history: 30
channels:
  telegram:
    max_history: 10
    session:
      max_history: 20
`, 10, "channels.telegram.max_history (bot.yaml:5)", "channels.telegram.max_history (10) and channels.telegram.session.max_history (20, bot.yaml:7) are both set"},
		{"legacy and session agree: no warning", `
channels:
  telegram:
    max_history: 10
    session:
      max_history: 10
`, 10, "channels.telegram.max_history (bot.yaml:3)", ""},
		{"zero is a value, not unset", `
session:
  max_history: 50
channels:
  telegram:
    session:
      max_history: 0
`, 0, "channels.telegram.session.max_history (bot.yaml:6)", ""},
		{"env expansion is typed", `
channels:
  telegram:
    max_history: ${MAXH:-7}
`, 7, "channels.telegram.max_history (bot.yaml:3)", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustParse(t, tt.yaml)
			p := c.Policy(ChannelTelegram)
			if p.MaxHistory.V != tt.want || p.MaxHistory.From != tt.wantFrom {
				t.Fatalf("max_history = %d from %q, want %d from %q", p.MaxHistory.V, p.MaxHistory.From, tt.want, tt.wantFrom)
			}
			warnings := strings.Join(c.Warnings, "\n")
			if tt.warning == "" && strings.Contains(warnings, "max_history") {
				t.Fatalf("unexpected warning: %s", warnings)
			}
			if tt.warning != "" && !strings.Contains(warnings, tt.warning) {
				t.Fatalf("warnings %q lack %q", warnings, tt.warning)
			}
			// The other channel is untouched by telegram's keys.
			if ws := c.Policy(ChannelWebSocket); strings.HasPrefix(ws.MaxHistory.From, "channels.telegram") {
				t.Fatalf("websocket took telegram's value: %+v", ws.MaxHistory)
			}
		})
	}
}

func TestResetMergedFieldByField(t *testing.T) {
	c := mustParse(t, `
session:
  reset:
    mode: daily
    at_hour: 4
    timezone: Europe/Berlin
    idle_minutes: 30
channels:
  websocket:
    session:
      reset:
        mode: both
        idle_minutes: 15
`)
	ws := c.Policy(ChannelWebSocket)
	if ws.ResetMode.V != "both" || ws.IdleMinutes.V != 15 || ws.AtHour.V != 4 || ws.Timezone.V != "Europe/Berlin" {
		t.Fatalf("websocket policy = %+v", ws)
	}
	if ws.AtHour.From != "session.reset.at_hour (bot.yaml:4)" || ws.IdleMinutes.From != "channels.websocket.session.reset.idle_minutes (bot.yaml:12)" {
		t.Fatalf("provenance = %q, %q", ws.AtHour.From, ws.IdleMinutes.From)
	}
	tg := c.Policy(ChannelTelegram)
	if tg.ResetMode.V != "daily" || tg.IdleMinutes.V != 30 {
		t.Fatalf("telegram policy = %+v", tg)
	}
	var out strings.Builder
	c.Describe(&out)
	for _, want := range []string{"channel websocket (enabled)", "reset.mode", "both", "channels.websocket.session.reset.mode (bot.yaml:11)", "channel telegram (disabled: no token)"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("Describe output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestBadInput(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string // each must appear in the error text
	}{
		{"invalid yaml", "session:\n  max_history: [1,\n", []string{"bot.yaml:", "invalid YAML"}},
		{"unknown key with suggestion", `
session:
  max_histroy: 5
`, []string{`bot.yaml:2: session.max_histroy: unknown key "max_histroy" in session (did you mean "max_history"?)`}},
		{"unknown top-level key", `
chanels: {}
`, []string{`bot.yaml:1: chanels: unknown key "chanels" at the top level (did you mean "channels"?)`}},
		{"at_hour out of range", `
session:
  reset:
    mode: daily
    at_hour: 24
`, []string{"bot.yaml:4: session.reset.at_hour: must be an hour from 0 to 23, got 24"}},
		{"daily without at_hour", `
channels:
  telegram:
    session:
      reset:
        mode: both
`, []string{`bot.yaml:5: channels.telegram.session.reset.mode: reset mode "both" for channel telegram needs reset.at_hour`}},
		{"idle_minutes below 1", `
session:
  reset:
    mode: idle
    idle_minutes: 0
`, []string{"bot.yaml:4: session.reset.idle_minutes: must be at least 1, got 0"}},
		{"unknown timezone", `
session:
  reset:
    timezone: Mars/Olympus
`, []string{`bot.yaml:3: session.reset.timezone: "Mars/Olympus" is not an IANA time zone`}},
		{"unknown backend", `
agent:
  backend: gpt
`, []string{`bot.yaml:2: agent.backend: "gpt" is not one of [echo openai]`}},
		{"unset variable", `
agent:
  backend: openai
  openai:
    model: gpt-4o-mini
    api_key: ${OPENAI_API_KEY}
`, []string{"bot.yaml:5: agent.openai.api_key: environment variable OPENAI_API_KEY is not set"}},
		{"wrong type", `
session:
  max_history: lots
`, []string{"bot.yaml:2: session.max_history: cannot use !!str `lots` into int"}},
		{"bare number duration", `
shutdown:
  drain_timeout: 10
`, []string{"bot.yaml:2: shutdown.drain_timeout:", `"10" is not a duration`}},
		{"every problem at once", `
storage:
  driver: mysql
session:
  reset:
    mode: weekly
    at_hour: -1
`, []string{`storage.driver: "mysql" is not one of`, `session.reset.mode: "weekly"`, "session.reset.at_hour: must be an hour"}},
		{"webhook without secret", `
channels:
  telegram:
    token: "1:x"
    mode: webhook
    webhook:
      url: https://bot.example.com/telegram/webhook
`, []string{"channels.telegram.webhook.secret: webhook mode needs a secret"}},
		{"unknown streaming mode", `
channels:
  telegram:
    token: "1:x"
    streaming: typewriter
`, []string{`bot.yaml:4: channels.telegram.streaming: "typewriter" is not one of [auto draft edits off]`}},
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
					t.Fatalf("error\n%v\nlacks %q", err, want)
				}
			}
		})
	}
}

func TestEnvExpansion(t *testing.T) {
	c, err := Parse([]byte(`
agent:
  instructions: "Hello ${NAME}, price $$5"
  openai:
    base_url: ${BASE:-http://127.0.0.1:9/v1}
channels:
  websocket:
    auth_tokens:
      alice: ${ALICE_TOKEN}
`), "bot.yaml", env(map[string]string{"NAME": "Ann", "ALICE_TOKEN": "0123456789abcdef0123"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Agent.Instructions != "Hello Ann, price $5" {
		t.Fatalf("instructions = %q", c.Agent.Instructions)
	}
	if c.Agent.OpenAI.BaseURL != "http://127.0.0.1:9/v1" {
		t.Fatalf("base_url = %q", c.Agent.OpenAI.BaseURL)
	}
	if c.Channels.WebSocket.AuthTokens["alice"] != "0123456789abcdef0123" {
		t.Fatalf("auth_tokens = %v", c.Channels.WebSocket.AuthTokens)
	}
}

func TestNumericTokenStaysString(t *testing.T) {
	c, err := Parse([]byte("channels:\n  telegram:\n    token: ${T}\n"), "bot.yaml", env(map[string]string{"T": "123456"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Channels.Telegram.Token != "123456" {
		t.Fatalf("token = %q", c.Channels.Telegram.Token)
	}
}

func TestDrainTimeoutWarning(t *testing.T) {
	c := mustParse(t, "shutdown:\n  drain_timeout: 28s\n")
	if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], "bot.yaml:2: shutdown.drain_timeout") {
		t.Fatalf("warnings = %q", c.Warnings)
	}
	if c.Shutdown.DrainTimeout.D() != 28*time.Second {
		t.Fatalf("drain_timeout = %v", c.Shutdown.DrainTimeout.D())
	}
}

func TestExampleFileIsValidAndComplete(t *testing.T) {
	path := filepath.Join("..", "bot.yaml.example")
	c, err := Load(path, env(map[string]string{}))
	if err != nil {
		t.Fatalf("bot.yaml.example does not load:\n%v", err)
	}
	// Every key of the schema must appear in the example, so that the
	// example documents all of them.
	data, _ := os.ReadFile(path)
	var missing []string
	for _, key := range schemaKeys(t) {
		if c.lines[key] == 0 && !documented(data, key) {
			missing = append(missing, key)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("bot.yaml.example does not document: %v", missing)
	}
}

// schemaKeys lists the dotted path of every leaf key of Config.
func schemaKeys(t *testing.T) []string {
	t.Helper()
	var out []string
	var walk func(reflect.Type, string)
	walk = func(rt reflect.Type, path string) {
		for rt.Kind() == reflect.Pointer {
			rt = rt.Elem()
		}
		if rt.Kind() != reflect.Struct || reflect.PointerTo(rt).Implements(unmarshalerType) {
			out = append(out, path)
			return
		}
		for name, ft := range yamlFields(rt) {
			walk(ft, join(path, name))
		}
	}
	walk(reflect.TypeFor[Config](), "")
	sort.Strings(out)
	return out
}

func documented(data []byte, key string) bool {
	leaf := key[strings.LastIndex(key, ".")+1:]
	re := regexp.MustCompile(`(?m)^\s*#\s*` + regexp.QuoteMeta(leaf) + `:`)
	return re.Match(data)
}

func TestNotifyResets(t *testing.T) {
	c := mustParse(t, "session:\n  reset:\n    mode: idle\nchannels:\n  telegram:\n    token: \"123456:abcdefghijklmnop\"\n    notify_resets: true\n")
	if !c.Channels.Telegram.NotifyResets || len(c.Warnings) != 0 {
		t.Fatalf("notify_resets = %v, warnings %q", c.Channels.Telegram.NotifyResets, c.Warnings)
	}
	var out strings.Builder
	c.Describe(&out)
	if !regexp.MustCompile(`notify_resets +true +channels\.telegram\.notify_resets \(bot\.yaml:7\)`).MatchString(out.String()) {
		t.Fatalf("Describe lacks notify_resets:\n%s", out.String())
	}
	// Without a reset policy there is nothing to notify of: warned.
	c = mustParse(t, "channels:\n  telegram:\n    notify_resets: true\n")
	if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], "bot.yaml:3: channels.telegram.notify_resets: has no effect") {
		t.Fatalf("warnings = %q", c.Warnings)
	}
	if _, err := parse(t, "channels:\n  telegram:\n    notify_resets: sometimes\n"); err == nil {
		t.Fatal("notify_resets: sometimes was accepted")
	}
}

func TestAlbumWait(t *testing.T) {
	c := mustParse(t, "channels:\n  telegram:\n    token: \"123456:abcdefghijklmnop\"\n")
	var out strings.Builder
	c.Describe(&out)
	if c.Channels.Telegram.AlbumWaitMS != DefaultAlbumWaitMS || !regexp.MustCompile(`album_wait_ms +800 +default`).MatchString(out.String()) {
		t.Fatalf("album_wait_ms = %d; Describe:\n%s", c.Channels.Telegram.AlbumWaitMS, out.String())
	}
	c = mustParse(t, "channels:\n  telegram:\n    album_wait_ms: 1500\n")
	out.Reset()
	c.Describe(&out)
	if c.Channels.Telegram.AlbumWaitMS != 1500 || !regexp.MustCompile(`album_wait_ms +1500 +channels\.telegram\.album_wait_ms \(bot\.yaml:3\)`).MatchString(out.String()) {
		t.Fatalf("album_wait_ms = %d; Describe:\n%s", c.Channels.Telegram.AlbumWaitMS, out.String())
	}
	for _, bad := range []string{"50", "6000", "-1", "soon"} {
		_, err := parse(t, "channels:\n  telegram:\n    album_wait_ms: "+bad+"\n")
		if err == nil || !strings.Contains(err.Error(), "bot.yaml:3") || !strings.Contains(err.Error(), "album_wait_ms") {
			t.Errorf("album_wait_ms: %s: %v, want an error at bot.yaml:3", bad, err)
		}
	}
}

func TestDelayNotice(t *testing.T) {
	if got := mustParse(t, "session:\n  max_history: 10\n").DelayNotice(); got != DefaultDelayNotice {
		t.Fatalf("default delay_notice = %v, want %v", got, DefaultDelayNotice)
	}
	c := mustParse(t, "session:\n  delay_notice: 0s\n")
	var out strings.Builder
	c.Describe(&out)
	if c.DelayNotice() != 0 || !regexp.MustCompile(`session\.delay_notice +off`).MatchString(out.String()) {
		t.Fatalf("delay_notice 0s = %v; described:\n%s", c.DelayNotice(), out.String())
	}
	if got := mustParse(t, "session:\n  delay_notice: 45s\n").DelayNotice(); got != 45*time.Second {
		t.Fatalf("delay_notice = %v", got)
	}
	for yaml, want := range map[string]string{
		"session:\n  delay_notice: -1s\n":                                 "bot.yaml:2: session.delay_notice: must not be negative",
		"channels:\n  websocket:\n    session:\n      delay_notice: 5s\n": "bot.yaml:4: channels.websocket.session.delay_notice: is a setting of the top-level session only",
		"session:\n  delay_notice: soon\n":                                "bot.yaml:2: session.delay_notice:",
	} {
		_, err := parse(t, yaml)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", yaml, err, want)
		}
	}
}

// storage.timeout defaults to 10 s, is described for PostgreSQL, and a
// value below 100 ms, or not a duration, is an error at its line.
func TestStorageTimeout(t *testing.T) {
	pg := "storage:\n  driver: postgres\n  dsn: postgres://chatgate@127.0.0.1:5432/chatgate\n"
	c := mustParse(t, pg)
	var out strings.Builder
	c.Describe(&out)
	if c.Storage.Timeout.D() != DefaultStorageTimeout || !regexp.MustCompile(`storage\.timeout +10s`).MatchString(out.String()) {
		t.Fatalf("default storage.timeout = %v; described:\n%s", c.Storage.Timeout.D(), out.String())
	}
	if got := mustParse(t, pg+"  timeout: 3s\n").Storage.Timeout.D(); got != 3*time.Second {
		t.Fatalf("storage.timeout = %v, want 3s", got)
	}
	for yaml, want := range map[string]string{
		pg + "  timeout: 50ms\n": "bot.yaml:4: storage.timeout: must be at least 100ms",
		pg + "  timeout: -1s\n":  "bot.yaml:4: storage.timeout: must be at least 100ms",
		pg + "  timeout: soon\n": "bot.yaml:4: storage.timeout:",
	} {
		_, err := parse(t, yaml)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", yaml, err, want)
		}
	}
}

func TestTranscription(t *testing.T) {
	c := mustParse(t, `
agent:
  backend: openai
  openai:
    model: gpt-4o-mini
    transcription_model: whisper-1
    max_audio_bytes: 8MiB
`)
	if !c.Transcribes() || c.Agent.OpenAI.TranscriptionModel != "whisper-1" || c.Agent.OpenAI.MaxAudioBytes != 8<<20 || len(c.Warnings) != 0 {
		t.Fatalf("openai = %+v, warnings %q", c.Agent.OpenAI, c.Warnings)
	}
	var out strings.Builder
	c.Describe(&out)
	for _, re := range []string{
		`(?m)^agent openai$`,
		`transcription_model +whisper-1 +agent\.openai\.transcription_model \(bot\.yaml:5\)`,
		`max_audio_bytes +8MiB +agent\.openai\.max_audio_bytes \(bot\.yaml:6\)`,
	} {
		if !regexp.MustCompile(re).MatchString(out.String()) {
			t.Fatalf("Describe lacks %s:\n%s", re, out.String())
		}
	}

	// Off by default; the size limit defaults to the Bot API's download
	// limit.
	c = mustParse(t, "agent:\n  backend: openai\n  openai:\n    model: m\n")
	out.Reset()
	c.Describe(&out)
	if c.Transcribes() || c.Agent.OpenAI.MaxAudioBytes != DefaultMaxAudioBytes ||
		!regexp.MustCompile(`transcription_model +off: .* +default`).MatchString(out.String()) {
		t.Fatalf("default: transcribes %v, max_audio_bytes %d; described:\n%s", c.Transcribes(), c.Agent.OpenAI.MaxAudioBytes, out.String())
	}

	// A model for a backend that does not transcribe is warned of.
	c = mustParse(t, "agent:\n  openai:\n    transcription_model: whisper-1\n")
	if c.Transcribes() || len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], "bot.yaml:3: agent.openai.transcription_model: has no effect: agent.backend is echo") {
		t.Fatalf("echo with a transcription model: warnings %q", c.Warnings)
	}
	// Over 20MiB, Telegram's Bot API cannot serve the file.
	c = mustParse(t, "agent:\n  backend: openai\n  openai:\n    model: m\n    transcription_model: w\n    max_audio_bytes: 25MiB\nchannels:\n  telegram:\n    token: \"1:x\"\n")
	if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], "bot.yaml:6: agent.openai.max_audio_bytes: is over 20MiB") {
		t.Fatalf("25MiB with Telegram: warnings %q", c.Warnings)
	}

	for yaml, want := range map[string]string{
		"agent:\n  openai:\n    max_audio_bytes: 12\n":               "bot.yaml:3: agent.openai.max_audio_bytes: must be between 1KiB and 1GiB",
		"agent:\n  openai:\n    max_audio_bytes: 2GiB\n":             "bot.yaml:3: agent.openai.max_audio_bytes: must be between 1KiB and 1GiB",
		"agent:\n  openai:\n    max_audio_bytes: lots\n":             `bot.yaml:3: agent.openai.max_audio_bytes: "lots" is not a size`,
		"agent:\n  openai:\n    transcription_model: \" whisper\"\n": `bot.yaml:3: agent.openai.transcription_model: " whisper" has spaces around it`,
		"agent:\n  openai:\n    transcription_modle: whisper-1\n":    `bot.yaml:3: agent.openai.transcription_modle: unknown key "transcription_modle" in agent.openai (did you mean "transcription_model"?)`,
	} {
		_, err := parse(t, yaml)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", yaml, err, want)
		}
	}
}
