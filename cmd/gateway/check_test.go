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
	code, out, errOut := runCmd(t, "check", "-c", path)
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
