package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// problems parses yaml and returns its problems as "line: key: message"
// lines, without the file name.
func problems(t *testing.T, src string) []string {
	t.Helper()
	_, err := parse(t, src)
	if err == nil {
		return nil
	}
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("error is %T, want Errors", err)
	}
	out := make([]string, len(errs))
	for i, e := range errs {
		out[i] = strings.TrimPrefix(e.Error(), "bot.yaml:")
	}
	return out
}

// A value of the wrong type costs only its own key: the rest of the file is
// still read, checked value by value and key against key, and every
// problem is reported in the same run.
func TestEveryKindOfProblemInOneRun(t *testing.T) {
	got := problems(t, `
locks:
  ttl: banana
  max_entries: -3
sesion:
  max_history: 5
session:
  max_history: lots
  reset:
    mode: daily
    timezone: Mars/Olympus
channels:
  websocket:
    allowed_origins: {a: b}
    auth_tokens: [x]
  telegram:
    allowed_users: [1, bob]
    group_scope: [user]
    session:
      busy_mode: queue
      busy_mode: collect
`)
	want := []string{
		`2: locks.ttl: "banana" is not a duration (write it as "10s", "5m" or "1h")`,
		`4: sesion: unknown key "sesion" at the top level (did you mean "session"?)`,
		"7: session.max_history: cannot use !!str `lots` into int",
		"13: channels.websocket.allowed_origins: cannot use a mapping here: want a list",
		"14: channels.websocket.auth_tokens: cannot use a list here: want a mapping of names to values",
		"16: channels.telegram.allowed_users[1]: cannot use !!str `bob` into int64",
		"17: channels.telegram.group_scope: cannot use !!seq into string",
		`20: channels.telegram.session.busy_mode: key "busy_mode" is already defined at line 19`,
		`10: session.reset.timezone: "Mars/Olympus" is not an IANA time zone such as Europe/Berlin`,
		"3: locks.max_entries: must not be negative",
		`9: session.reset.mode: reset mode "daily" for channels websocket and telegram needs reset.at_hour (0–23), set in session.reset or each channel's session.reset`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A key that could not be read keeps its zero value in place of the one the
// file meant; no check may report that stand-in as a second problem.
func TestAnUnreadableKeyIsReportedOnce(t *testing.T) {
	tests := []struct{ name, yaml, want string }{
		{"at_hour of a daily reset", `
session:
  reset:
    mode: daily
    at_hour: four
`, "4: session.reset.at_hour: cannot use !!str `four` into int"},
		{"channel at_hour overrides the top level's", `
session:
  reset: {mode: both}
channels:
  telegram:
    session:
      reset: {at_hour: [4]}
  websocket:
    session:
      reset: {at_hour: 4}
`, "6: channels.telegram.session.reset.at_hour: cannot use !!seq into int"},
		{"debounce_ms under its cap", `
channels:
  telegram:
    session:
      debounce_ms: slow
      debounce_max_ms: 100
`, "4: channels.telegram.session.debounce_ms: cannot use !!str `slow` into int"},
		{"a whole block", `
session:
  reset: daily
`, "2: session.reset: cannot use !!str `daily` here: want a mapping of keys"},
		{"a webhook secret", `
channels:
  telegram:
    token: "1:x"
    mode: webhook
    webhook:
      url: https://bot.example.com/telegram/webhook
      secret: {a: b}
`, "7: channels.telegram.webhook.secret: cannot use !!map into string"},
		{"an unset variable", `
storage:
  driver: postgres
  dsn: ${DATABASE_URL}
`, "3: storage.dsn: environment variable DATABASE_URL is not set (set it, or write ${DATABASE_URL:-default})"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := problems(t, tt.yaml)
			if strings.Join(got, "\n") != tt.want {
				t.Fatalf("problems:\n%s\nwant only:\n%s", strings.Join(got, "\n"), tt.want)
			}
		})
	}
}

// The key-by-key decoder reads a valid file exactly as yaml.v3 decodes it
// whole.
func TestDecoderMatchesYAMLDecode(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "bot.yaml.example"))
	if err != nil {
		t.Fatal(err)
	}
	extra := `
channels:
  websocket:
    auth_tokens: {alice: "0123456789abcdef", bob: ~}
    allowed_origins: [https://chat.example.com, "*"]
    rate_limit: {per_second: 2.5, burst: 4}
  telegram:
    allowed_users: [12, 34]
    session:
      reset: &r {mode: idle, idle_minutes: 5}
      max_history:
recovery:
  rerun_interrupted: false
`
	for name, src := range map[string]string{"bot.yaml.example": string(data), "extra": extra, "tools": fullTools} {
		t.Run(name, func(t *testing.T) {
			var doc, doc2 yaml.Node
			if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
				t.Fatal(err)
			}
			yaml.Unmarshal([]byte(src), &doc2)
			w := walker{file: "bot.yaml", env: env(nil), lines: map[string]int{}}
			w.walk(doc.Content[0], reflect.TypeFor[Config](), "")
			w2 := walker{file: "bot.yaml", env: env(nil), lines: map[string]int{}}
			w2.walk(doc2.Content[0], reflect.TypeFor[Config](), "")
			var mine, theirs Config
			d := decoder{file: "bot.yaml", broken: map[string]bool{}}
			d.decode(doc.Content[0], reflect.ValueOf(&mine).Elem(), "")
			if len(d.errs) > 0 {
				t.Fatal(d.errs)
			}
			if err := doc2.Content[0].Decode(&theirs); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(mine, theirs) {
				t.Fatalf("decoded\n%+v\nyaml.v3 decodes\n%+v", mine, theirs)
			}
		})
	}
}
