package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"gopkg.in/yaml.v3"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/agent/openai"
	"github.com/chatgate/chatgate/bots/telegram"
	"github.com/chatgate/chatgate/config"
	"github.com/chatgate/chatgate/gateway"
	"github.com/chatgate/chatgate/internal/llmtest"
	"github.com/chatgate/chatgate/internal/mcptest"
	"github.com/chatgate/chatgate/internal/telegramtest"
	"github.com/chatgate/chatgate/sessions"
)

// startServer runs serve's start in this process on the bot.yaml at path
// and stops the gateway when the test ends. The test reaches its parts:
// the reloader (what SIGHUP and the admin API's reload call) and the
// consumers it hands the settings to.
func startServer(t *testing.T, path string) (*server, *syncBuffer) {
	t.Helper()
	cfg, err := config.Load(path, os.LookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	stderr := &syncBuffer{}
	s := newServer(cfg, path, stderr)
	ctx, cancel := context.WithCancel(context.Background())
	if err := s.start(ctx); err != nil {
		s.failed(err)
		s.release()
		cancel()
		t.Fatalf("start: %v\n%s", err, stderr.String())
	}
	t.Cleanup(func() {
		cancel()
		if code := s.shutdown(s.wait()); code != 0 {
			t.Errorf("shutdown: exit %d\n%s", code, stderr.String())
		}
		s.release()
		if t.Failed() {
			t.Logf("gateway log:\n%s", stderr.String())
		}
	})
	return s, stderr
}

// yamlDoc is a bot.yaml as nested mappings, to change one key of.
type yamlDoc map[string]any

// with returns a copy of d with the key at path set to v.
func (d yamlDoc) with(path string, v any) yamlDoc {
	out := deepCopy(d).(yamlDoc)
	m := map[string]any(out)
	parts := strings.Split(path, ".")
	for _, p := range parts[:len(parts)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	m[parts[len(parts)-1]] = v
	return out
}

func deepCopy(v any) any {
	switch v := v.(type) {
	case yamlDoc:
		return yamlDoc(deepCopy(map[string]any(v)).(map[string]any))
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = deepCopy(x)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = deepCopy(x)
		}
		return out
	}
	return v
}

func (d yamlDoc) write(t *testing.T, path string) {
	t.Helper()
	data, err := yaml.Marshal(map[string]any(d))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// running is what the parts of a running gateway hold, read from each:
// the session manager's policies, agent and tool lists, the channels'
// settings, the delay notice and the log level. A reload that applies a
// key changes it.
type running struct {
	Policies      map[string]sessions.Policy
	Zones         map[string]string // the policies' time zones, by name
	Instructions  string
	Agent         string // the backend and its configuration
	Compactor     string
	Models        []sessions.Model
	ContextTokens int
	Tools         map[string][]string // offered to alice, by channel
	WebSocket     gateway.WSSettings
	Telegram      telegram.Settings
	DelayNotice   time.Duration
	Level         slog.Level
	Schedules     []string // the scheduler's, each as name, times, target and prompt
}

func describeAgent(a agent.Agent) string {
	if o, ok := a.(*openai.Backend); ok {
		return fmt.Sprintf("openai %+v", o.Config())
	}
	return fmt.Sprintf("%T", a)
}

func runningOf(s *server) running {
	live := s.mgr.Settings()
	r := running{Policies: map[string]sessions.Policy{}, Zones: map[string]string{}, Tools: map[string][]string{},
		Instructions: live.Instructions, Agent: describeAgent(live.Agent), Models: live.Models, ContextTokens: live.ContextTokens,
		WebSocket: s.ws.Settings(), DelayNotice: s.mgr.Health().DelayNotice(), Level: s.level.Level()}
	if live.Compactor != nil {
		r.Compactor = describeAgent(live.Compactor)
	}
	for _, ch := range []string{config.ChannelWebSocket, config.ChannelTelegram} {
		p := s.mgr.Policy(ch)
		r.Zones[ch] = p.Reset.Location.String()
		p.Reset.Location = nil
		r.Policies[ch] = p
		if s.liveTools != nil {
			r.Tools[ch] = s.liveTools.offered(ch, "alice")
		}
	}
	if s.bot != nil {
		r.Telegram = s.bot.Settings()
	}
	for name, sc := range s.scheduler.Schedules() {
		r.Schedules = append(r.Schedules, fmt.Sprintf("%s %s %+v %q", name, sc.When, sc.Target, sc.Prompt))
	}
	slices.Sort(r.Schedules)
	return r
}

// liveSamples are, for each key documented live, new values a reload is
// to apply (different from reloadBase's). A channel's session keys
// (channels.<c>.session) are tested with the samples of session's own,
// but those of the top level only.
var liveSamples = map[string][]any{
	"schedules": {[]any{map[string]any{"name": "brief", "cron": "0 8 * * *", "prompt": "Write the brief.",
		"target": map[string]any{"channel": "websocket", "principal": "ann"}}}},
	"agent.backend":                        {"echo"},
	"agent.name":                           {"other"},
	"agent.instructions":                   {"Answer in French."},
	"agent.openai.base_url":                {"http://127.0.0.1:2/v1"},
	"agent.openai.api_key":                 {"another-key"},
	"agent.openai.model":                   {"m2"},
	"agent.openai.timeout":                 {"7s"},
	"agent.openai.max_retries":             {3},
	"agent.openai.stream":                  {false},
	"agent.openai.price_per_1k_prompt":     {0.5},
	"agent.openai.price_per_1k_completion": {0.7},
	"agent.openai.context_tokens":          {4096},
	"agent.openai.transcription_model":     {"whisper-2"},
	"agent.models":                         {[]any{map[string]any{"name": "Fast", "model": "fast-1"}}},
	"session.max_history":                  {7},
	"session.max_history_tokens":           {500},
	"session.reset":                        {map[string]any{"mode": "idle"}, map[string]any{"mode": "daily", "at_hour": 4}, map[string]any{"mode": "idle", "idle_minutes": 5}, map[string]any{"mode": "daily", "at_hour": 3, "timezone": "Europe/Berlin"}},
	"session.compaction":                   {map[string]any{"enabled": true}, map[string]any{"keep_last": 4}, map[string]any{"prompt": "Sum it up."}, map[string]any{"model": "summariser"}},
	"session.busy_mode":                    {"queue"},
	"session.debounce_ms":                  {300},
	"session.debounce_max_ms":              {6000},
	"session.max_batch":                    {3},
	"session.delay_notice":                 {"3s"},
	"session.tools":                        {[]any{}},
	"session.limits":                       {map[string]any{"tokens_per_day": 100}, map[string]any{"cost_per_day": 0.5}, map[string]any{"cost_per_month": 9}, map[string]any{"users": map[string]any{"websocket:alice": map[string]any{"tokens_per_day": 5}}}},
	"session.schedules":                    {map[string]any{"enabled": true}, map[string]any{"max_per_user": 4}, map[string]any{"min_interval": "2h"}},
	"session.memory":                       {map[string]any{"enabled": true}, map[string]any{"inject_tokens": 50}, map[string]any{"max_notes": 3}, map[string]any{"extract_on_reset": true}, map[string]any{"users": map[string]any{"websocket:alice": map[string]any{"enabled": true}}}},
	"channels.<c>.max_history":             {9},
	"channels.websocket.auth_tokens":       {map[string]any{"bob": "tok-bob-0123456789ab"}},
	"channels.websocket.allow_anonymous":   {true},
	"channels.websocket.rate_limit":        {map[string]any{"per_second": 2}, map[string]any{"burst": 3}, map[string]any{"global_per_second": 50, "global_burst": 60}},
	"channels.telegram.allowed_users":      {[]any{42}},
	"channels.telegram.group_policy":       {"all"},
	"channels.telegram.rate_limit":         {map[string]any{"per_second": 2}, map[string]any{"burst": 3}, map[string]any{"global_per_second": 50, "global_burst": 60}},
	"log.level":                            {"debug"},
}

// topLevelOnly are the keys of session a channel's session may not set.
var topLevelOnly = []string{"delay_notice", "cache_bytes", "compaction.model"}

// reloadBase is the bot.yaml the live keys are changed in: the openai
// backend (with transcription), a tool server, Telegram, every live key
// at a value its sample differs from.
func reloadBase(dir, addr, llmURL, apiURL, mcpURL string) yamlDoc {
	return yamlDoc{
		"gateway": map[string]any{"listen": addr},
		"storage": map[string]any{"dsn": filepath.Join(dir, "g.db")},
		"agent": map[string]any{
			"backend": "openai",
			"openai": map[string]any{"base_url": llmURL + "/v1", "model": "m", "max_retries": 0,
				"transcription_model": "whisper-1"},
			"tools": map[string]any{"servers": []any{map[string]any{"name": "demo", "url": mcpURL, "approve": "auto"}}},
		},
		"channels": map[string]any{
			"telegram": map[string]any{"token": telegramtest.Token, "api_url": apiURL, "poll_timeout": "1s"},
		},
		"shutdown": map[string]any{"drain_timeout": "1s"},
		"log":      map[string]any{"level": "info"},
	}
}

// lastReload is the changed= of the last "config reloaded" line.
var reloadedRE = regexp.MustCompile(`msg="config reloaded" changed=("[^"]*"|\S+)`)

func lastReload(log string) string {
	m := reloadedRE.FindAllStringSubmatch(log, -1)
	if len(m) == 0 {
		return ""
	}
	return strings.Trim(m[len(m)-1][1], `"`)
}

// docReloadKeys is the table of "What a reload applies" in
// docs/configuration.md.
func docReloadKeys(t *testing.T) []reloadKey {
	t.Helper()
	text := docFiles(t)[filepath.Join("docs", "configuration.md")]
	_, table, ok := strings.Cut(text, "\n## What a reload applies\n")
	if !ok {
		t.Fatal("docs/configuration.md has no section \"What a reload applies\"")
	}
	var out []reloadKey
	row := regexp.MustCompile("^\\| `([^`]+)` \\| (live|restart) \\|(.*)\\|$")
	for _, l := range strings.Split(table, "\n") {
		if strings.HasPrefix(l, "#") {
			break
		}
		if !strings.HasPrefix(l, "| `") {
			continue
		}
		m := row.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("docs/configuration.md, What a reload applies: a row that is not | `key` | live or restart | note |: %q", l)
		}
		out = append(out, reloadKey{path: m[1], live: m[2] == "live", note: strings.TrimSpace(m[3])})
	}
	return out
}

// TestReloadKeysAreEveryKeyAndDocumented: reloadKeys names every key of
// bot.yaml once, as live or restart, and docs/configuration.md shows the
// same table. A key added to the configuration and to neither fails here.
func TestReloadKeysAreEveryKeyAndDocumented(t *testing.T) {
	docs := docReloadKeys(t)
	var code []reloadKey
	for _, k := range reloadKeys {
		code = append(code, reloadKey{path: k.path, live: k.live, note: k.note})
	}
	if !reflect.DeepEqual(docs, code) {
		var b strings.Builder
		for _, k := range reloadKeys {
			class := "restart"
			if k.live {
				class = "live"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", k.path, class, k.note)
		}
		t.Fatalf("docs/configuration.md, What a reload applies, differs from reloadKeys; the table of reloadKeys is:\n%s", b.String())
	}
	covered := map[string]int{}
	for _, key := range config.Keys() {
		var by []string
		for _, k := range reloadKeys {
			for _, p := range k.paths() {
				if key == p || strings.HasPrefix(key, p+".") {
					by = append(by, k.path)
					covered[k.path]++
				}
			}
		}
		if len(by) != 1 {
			t.Errorf("key %s is in reloadKeys (and the docs' table) %d times %v: want once, as live or restart", key, len(by), by)
		}
	}
	for _, k := range reloadKeys {
		if covered[k.path] == 0 {
			t.Errorf("reloadKeys names %s, which is no key of bot.yaml", k.path)
		}
	}
}

// TestReloadAppliesEveryLiveKey changes each key the docs mark live, one
// at a time, in the bot.yaml of a running gateway and reloads through the
// reloader (what SIGHUP and the admin API call): what the gateway's parts
// hold changes, and the reload's log names the key; a reload back to the
// first file gives back what they held. A key marked live without a
// sample here fails too.
func TestReloadAppliesEveryLiveKey(t *testing.T) {
	dir := t.TempDir()
	llm := &llmtest.Server{}
	// Closed after the gateway stops (t.Cleanup runs last in, first out).
	llmSrv := httptest.NewServer(llm)
	t.Cleanup(llmSrv.Close)
	api := telegramtest.New(t)
	apiSrv := httptest.NewServer(api)
	t.Cleanup(apiSrv.Close)
	tools := mcptest.New()
	mcpSrv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return tools.MCP }, nil))
	t.Cleanup(mcpSrv.Close)
	base := reloadBase(dir, freeAddr(t), llmSrv.URL, apiSrv.URL, mcpSrv.URL)
	path := filepath.Join(dir, "bot.yaml")
	base.write(t, path)
	s, logs := startServer(t, path)
	before := runningOf(s)

	type change struct {
		path   string // the key changed
		logged string // the key of reloadKeys the log names
		v      any
	}
	var changes []change
	for _, k := range docReloadKeys(t) {
		if !k.live {
			continue
		}
		if k.path == "channels.<c>.session" {
			for _, ch := range []string{config.ChannelWebSocket, config.ChannelTelegram} {
				for key, vs := range liveSamples {
					sub, ok := strings.CutPrefix(key, "session.")
					if !ok || slices.ContainsFunc(topLevelOnly, func(top string) bool { return sub == top || strings.HasPrefix(top, sub+".") }) {
						continue
					}
					for _, v := range vs {
						if m, ok := v.(map[string]any); ok && m["model"] != nil {
							continue // compaction.model: top level only
						}
						changes = append(changes, change{"channels." + ch + ".session." + sub, "channels." + ch + ".session", v})
					}
				}
			}
			continue
		}
		vs, ok := liveSamples[k.path]
		if !ok || len(vs) == 0 {
			t.Errorf("%s is documented live and has no sample in liveSamples: add one, so that this test shows a reload applies it", k.path)
			continue
		}
		for _, p := range k.paths() {
			for _, v := range vs {
				changes = append(changes, change{p, p, v})
			}
		}
	}
	if len(changes) < 40 {
		t.Fatalf("%d changes tried; the docs mark more keys live than that", len(changes))
	}
	for _, c := range changes {
		name := fmt.Sprintf("%s=%v", c.path, c.v)
		doc := base
		if m, ok := c.v.(map[string]any); ok && (strings.HasSuffix(c.path, ".reset") || strings.HasSuffix(c.path, ".compaction") ||
			strings.HasSuffix(c.path, ".limits") || strings.HasSuffix(c.path, ".rate_limit")) {
			// A section: each of its keys set on its own.
			for k, v := range m {
				doc = doc.with(c.path+"."+k, v)
			}
		} else {
			doc = doc.with(c.path, c.v)
		}
		doc.write(t, path)
		if err := s.reloads.reload("SIGHUP"); err != nil {
			t.Fatalf("%s: reload: %v", name, err)
		}
		after := runningOf(s)
		if reflect.DeepEqual(after, before) {
			t.Errorf("%s: documented live, but the running gateway holds what it held before the reload", name)
		}
		if changed := lastReload(logs.String()); !slices.Contains(strings.Split(changed, ", "), c.logged) {
			t.Errorf("%s: the reload's log says changed=%q", name, changed)
		}
		base.write(t, path)
		if err := s.reloads.reload("SIGHUP"); err != nil {
			t.Fatalf("%s: reload back: %v", name, err)
		}
		if back := runningOf(s); !reflect.DeepEqual(back, before) {
			t.Errorf("%s: a reload back to the first file left\n%+v\nwant\n%+v", name, back, before)
		}
	}
}
