package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chatgate/chatgate/config"
	"github.com/chatgate/chatgate/internal/mcptest"
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

const toolsYAML = `agent:
  tools:
    max_rounds: 6
    servers:
      - name: notes
        command: chatgate-mcp-demo
        args: ["-notes", "notes.txt"]
        tools: [notes_add, notes_list]
        tool_rules:
          notes_list: {approve: auto, idempotent: true}
      - name: search
        url: https://mcp.example.com/search
        headers: {Authorization: "Bearer ${SEARCH_TOKEN}"}
        approve: auto
        users: ["12345", "websocket:alice"]
channels:
  websocket:
    auth_tokens: {alice: "${ALICE_TOKEN}"}
  telegram:
    token: "123456:abcdefghijklmnop"
    session:
      tools: [notes, search]
session:
  tools: [notes]
`

// gateway check prints each channel's tool servers with where they came
// from, and once what each server is; a header's value never.
func TestCheckPrintsToolServers(t *testing.T) {
	t.Setenv("SEARCH_TOKEN", "tok-0123456789-secret")
	t.Setenv("ALICE_TOKEN", "alice-0123456789abcdef")
	path := writeConfig(t, toolsYAML)
	// The servers are not there to start: what is printed is the point.
	code, out, errOut := runCmd(t, "check", "-tools=false", "-c", path)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	ws, tg, ok := strings.Cut(out, "channel telegram")
	if !ok {
		t.Fatalf("no telegram section:\n%s", out)
	}
	for _, tt := range []struct{ section, line string }{
		{ws, "tools notes session.tools (" + path + ":24)"},
		{tg, "tools notes, search channels.telegram.session.tools (" + path + ":22)"},
		{tg, "max_rounds 6 agent.tools.max_rounds (" + path + ":3)"},
		{tg, "approve_timeout 10m0s default"},
		{tg, "server notes"},
		{tg, "stdio chatgate-mcp-demo (2 args) agent.tools.servers[0].command (" + path + ":6)"},
		{tg, "approve notes_list auto agent.tools.servers[0].tool_rules.notes_list.approve (" + path + ":10)"},
		{tg, "server search"},
		{tg, "url https://mcp.example.com/search (headers Authorization) agent.tools.servers[1].url (" + path + ":12)"},
		{tg, "users 12345, websocket:alice agent.tools.servers[1].users (" + path + ":15)"},
	} {
		if !hasWords(tt.section, tt.line) {
			t.Errorf("gateway check lacks %q in\n%s", tt.line, tt.section)
		}
	}
	for _, secret := range []string{"tok-0123456789-secret", "Bearer", "alice-0123456789abcdef"} {
		if strings.Contains(out+errOut, secret) {
			t.Errorf("gateway check prints %q:\n%s%s", secret, out, errOut)
		}
	}
}

// hasWords reports whether text has a line of these words, however its
// columns are padded.
func hasWords(text, line string) bool {
	want := strings.Join(strings.Fields(line), " ")
	for _, l := range strings.Split(text, "\n") {
		if strings.Join(strings.Fields(l), " ") == want {
			return true
		}
	}
	return false
}

// Each mistake of agent.tools is a file:line: key: message of its own.
func TestCheckReportsToolMistakes(t *testing.T) {
	path := writeConfig(t, `agent:
  tools:
    max_rounds: 100
    servers:
      - name: notes
      - name: notes
        command: notes-mcp
        url: ftp://mcp.example.com/
session:
  tools: [serch]
`)
	code, out, errOut := runCmd(t, "check", "-c", path)
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, out, errOut)
	}
	want := []string{
		path + ":3: agent.tools.max_rounds: must be 1–64, got 100",
		path + `:5: agent.tools.servers[0]: server "notes" needs command (a program the gateway starts, spoken to over stdio) or url (a streamable HTTP endpoint)`,
		path + `:6: agent.tools.servers[1].name: "notes" is already the name of agent.tools.servers[0] (` + path + ":5)",
		path + `:8: agent.tools.servers[1].url: server "notes" has both command (` + path + ":7) and url: give one of them",
		path + `:8: agent.tools.servers[1].url: "ftp://mcp.example.com/" is not an http(s) URL`,
		path + `:10: session.tools[0]: "serch" is not a server of agent.tools.servers (configured: notes)`,
	}
	if got := strings.Split(strings.TrimSpace(errOut), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("stderr:\n%s\nwant exactly:\n%s", errOut, strings.Join(want, "\n"))
	}
}

// gateway check starts each tool server once, within its timeout: one
// that starts is said to, with its tools; one whose command is not found,
// that exits, or that lists nothing in time is a warning at its line,
// with the reason, and the file still passes (the gateway runs without
// it and keeps trying). -tools=false skips the tries.
func TestCheckTriesToStartTheToolServers(t *testing.T) {
	ok := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return mcptest.New().MCP }, nil))
	defer ok.Close()
	stop := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // a server that takes the request and never answers
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	defer hang.Close()
	defer close(stop)
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh to start")
	}
	path := writeConfig(t, fmt.Sprintf(`agent:
  tools:
    servers:
      - name: fine
        url: %s
      - name: missing
        command: %s
      - name: exits
        command: %s
        args: ["-c", "echo 'Error: Cannot find module x' >&2; exit 3"]
      - name: mute
        url: %s
        timeout: 1s
`, ok.URL, filepath.Join(t.TempDir(), "no-such-server"), sh, hang.URL))
	code, out, errOut := runCmd(t, "check", "-c", path)
	if code != 0 {
		t.Fatalf("exit %d, want 0 (warnings only)\n%s%s", code, out, errOut)
	}
	for _, line := range []string{"tool server fine: started, 6 tools", "tool server missing: cannot start",
		"tool server exits: cannot start", "tool server mute: cannot start"} {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("gateway check lacks %q in\n%s", line, out)
		}
	}
	warnings := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(l, "warning: "); ok {
			for _, name := range []string{"fine", "missing", "exits", "mute"} {
				if strings.Contains(rest, `tool server "`+name+`" cannot start`) {
					warnings[name] = rest
				}
			}
		}
	}
	for name, want := range map[string]string{
		"missing": path + `:6: agent.tools.servers[1]: tool server "missing" cannot start: connect: `,
		"exits":   path + `:8: agent.tools.servers[2]: tool server "exits" cannot start: connect: `,
		"mute":    path + `:11: agent.tools.servers[3]: tool server "mute" cannot start: it did not answer within its timeout (1s)`,
	} {
		if !strings.HasPrefix(warnings[name], want) {
			t.Errorf("warning for %s = %q, want it to start %q", name, warnings[name], want)
		}
	}
	if !strings.Contains(warnings["exits"], `(its last line on stderr: "Error: Cannot find module x")`) {
		t.Errorf("the warning for a server that exits does not say what it said: %q", warnings["exits"])
	}
	if !strings.Contains(warnings["missing"], "no-such-server") {
		t.Errorf("the warning for a missing command does not name it: %q", warnings["missing"])
	}
	if w, ok := warnings["fine"]; ok {
		t.Errorf("a server that started is warned about: %q", w)
	}

	code, out, errOut = runCmd(t, "check", "-tools=false", "-c", path)
	if code != 0 || strings.Contains(out, "tool server ") || strings.Contains(out, "cannot start") {
		t.Fatalf("check -tools=false = %d\n%s%s", code, out, errOut)
	}
}
