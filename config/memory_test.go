package config

import (
	"strings"
	"testing"
)

const memoryYAML = `
session:
  memory:
    enabled: true
    inject_tokens: 300
    users:
      "telegram:dm:42": {extract_on_reset: true}
channels:
  telegram:
    session:
      memory:
        max_notes: 50
        users:
          "telegram:dm:42": {inject_tokens: 100}
          "telegram:dm:7": {enabled: false}
`

// session.memory resolves key by key, per channel and per user, each
// value with where it came from, and gateway check prints them.
func TestMemoryLadder(t *testing.T) {
	c := mustParse(t, memoryYAML)
	ws, tg := c.Policy(ChannelWebSocket), c.Policy(ChannelTelegram)
	if !ws.Memory.Enabled.V || ws.Memory.InjectTokens.V != 300 || ws.Memory.MaxNotes.V != DefaultMaxNotes || ws.Memory.ExtractOnReset.V {
		t.Fatalf("websocket memory %+v", ws.Memory)
	}
	if tg.Memory.MaxNotes.V != 50 || !strings.HasPrefix(tg.Memory.MaxNotes.From, "channels.telegram.session.memory.max_notes (bot.yaml:") ||
		!strings.HasPrefix(tg.Memory.InjectTokens.From, "session.memory.inject_tokens (bot.yaml:4)") {
		t.Fatalf("telegram memory %+v", tg.Memory)
	}
	u := tg.UserMemory["telegram:dm:42"]
	if !u.Enabled.V || u.InjectTokens.V != 100 || u.MaxNotes.V != 50 || !u.ExtractOnReset.V {
		t.Fatalf("user 42 on telegram %+v", u)
	}
	if !strings.HasPrefix(u.InjectTokens.From, "channels.telegram.session.memory.users.telegram:dm:42.inject_tokens (bot.yaml:") ||
		!strings.HasPrefix(u.ExtractOnReset.From, "session.memory.users.telegram:dm:42.extract_on_reset (bot.yaml:") ||
		u.MaxNotes.From != tg.Memory.MaxNotes.From {
		t.Fatalf("user 42 provenance %+v", u)
	}
	if off := tg.UserMemory["telegram:dm:7"]; off.Enabled.V {
		t.Fatalf("user 7 %+v", off)
	}
	if !c.MemoryOn() {
		t.Fatal("MemoryOn = false")
	}
	var out strings.Builder
	c.Describe(&out)
	for _, want := range []string{
		"memory.max_notes  50",
		"user telegram:dm:42 memory.inject_tokens  100",
		"user telegram:dm:7 memory.enabled  false",
		"session.memory.enabled (bot.yaml:3)",
	} {
		if !strings.Contains(strings.Join(strings.Fields(out.String()), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("check output lacks %q:\n%s", want, out.String())
		}
	}
	if off := mustParse(t, "session: {max_history: 5}\n"); off.MemoryOn() || off.Policy(ChannelWebSocket).Memory.Enabled.V {
		t.Fatal("memory on by default")
	}
}

// Out-of-range values name their file, line and key; a configured tool
// server may keep the name "memory" only while memory is off.
func TestMemoryRefusesBadValues(t *testing.T) {
	_, err := parse(t, `
session:
  memory:
    inject_tokens: -1
channels:
  websocket:
    session:
      memory:
        max_notes: 0
        users:
          "websocket:ann": {max_notes: 20000}
          "websocket:bo": {approve: deny}
`)
	if err == nil {
		t.Fatal("bad memory values accepted")
	}
	for _, want := range []string{"bot.yaml:3", "session.memory.inject_tokens", "channels.websocket.session.memory.max_notes",
		"channels.websocket.session.memory.users.websocket:ann.max_notes", "must be 1–10000",
		"bot.yaml:11", "channels.websocket.session.memory.users.websocket:bo.approve", `"deny" is not one of auto, ask`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	server := `
agent:
  tools:
    servers:
      - {name: memory, command: server-memory}
`
	if _, err := parse(t, server); err != nil {
		t.Fatalf("a server named memory with memory off: %v", err)
	}
	if _, err := parse(t, server+"session:\n  memory: {enabled: true}\n"); err == nil || !strings.Contains(err.Error(), "agent.tools.servers[0].name") ||
		!strings.Contains(err.Error(), "gateway's own memory tools") {
		t.Fatalf("a server named memory with memory on: %v", err)
	}
}

// A memory.users entry keyed by a group chat (no member) matches nobody
// under group_scope chat: gateway check says so.
func TestMemoryUsersGroupKeyWarns(t *testing.T) {
	c := mustParse(t, "session:\n  memory:\n    users:\n      \"telegram:group:-100\": {enabled: true}\n")
	if !strings.Contains(strings.Join(c.Warnings, "\n"), "telegram:group:-100:USER") {
		t.Fatalf("warnings %q", c.Warnings)
	}
}
