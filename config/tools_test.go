package config

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

const fullTools = `
agent:
  tools:
    max_rounds: 5
    approve_timeout: 2m
    servers:
      - name: notes
        command: chatgate-mcp-demo
        args: ["-notes", "notes.txt"]
        env: {NOTES_DIR: "${NOTES_DIR:-/var/lib/notes}"}
        timeout: 10s
        max_result_bytes: 8KiB
        tools: [notes_add, notes_list]
        approve: ask
        idempotent: false
        users: ["12345", "websocket:alice"]
        tool_rules:
          notes_list: {approve: auto, idempotent: true}
      - name: search
        url: https://search.example.com/mcp
        headers: {Authorization: "Bearer ${SEARCH_TOKEN}"}
session:
  tools: [search]
channels:
  telegram:
    token: "123456:abcdefghijklmnop"
    session:
      tools: [notes, search]
`

func TestToolsFullConfig(t *testing.T) {
	c, err := Parse([]byte(strings.TrimLeft(fullTools, "\n")), "bot.yaml", env(map[string]string{"SEARCH_TOKEN": "s3cret-bearer-token"}))
	if err != nil {
		t.Fatalf("unexpected error:\n%v", err)
	}
	if c.Agent.MaxRounds() != 5 || c.Agent.ApproveTimeout() != 2*time.Minute {
		t.Fatalf("max_rounds %d, approve_timeout %v", c.Agent.MaxRounds(), c.Agent.ApproveTimeout())
	}
	notes, ok := c.Agent.ToolServer("notes")
	if !ok {
		t.Fatal("no server notes")
	}
	yes := true
	want := ToolServer{
		Name: "notes", Command: "chatgate-mcp-demo", Args: []string{"-notes", "notes.txt"},
		Env:     map[string]string{"NOTES_DIR": "/var/lib/notes"},
		Timeout: Duration(10 * time.Second), MaxResultBytes: 8 << 10,
		Tools: []string{"notes_add", "notes_list"}, Approve: ApproveAsk,
		Users:     []string{"12345", "websocket:alice"},
		ToolRules: map[string]ToolRule{"notes_list": {Approve: ApproveAuto, Idempotent: &yes}},
	}
	if !reflect.DeepEqual(notes, want) {
		t.Fatalf("notes =\n%+v\nwant\n%+v", notes, want)
	}
	search, _ := c.Agent.ToolServer("search")
	if search.URL != "https://search.example.com/mcp" || search.Headers["Authorization"] != "Bearer s3cret-bearer-token" {
		t.Fatalf("search = %+v", search)
	}
	// Defaults of a server that sets nothing but its transport.
	if search.Timeout.D() != DefaultToolTimeout || search.MaxResultBytes != DefaultToolResultBytes || search.Approve != ApproveAsk || search.Idempotent || len(search.Tools) != 0 {
		t.Fatalf("search defaults = %+v", search)
	}

	ws, tg := c.Policy(ChannelWebSocket).ToolServers, c.Policy(ChannelTelegram).ToolServers
	if !slices.Equal(ws.V, []string{"search"}) || ws.From != "session.tools (bot.yaml:22)" {
		t.Fatalf("websocket tools = %v from %q", ws.V, ws.From)
	}
	if !slices.Equal(tg.V, []string{"notes", "search"}) || tg.From != "channels.telegram.session.tools (bot.yaml:27)" {
		t.Fatalf("telegram tools = %v from %q", tg.V, tg.From)
	}
}

func TestToolsDefaults(t *testing.T) {
	c := mustParse(t, "")
	if c.Agent.MaxRounds() != DefaultMaxToolRounds || c.Agent.ApproveTimeout() != DefaultApproveTimeout {
		t.Fatalf("max_rounds %d, approve_timeout %v", c.Agent.MaxRounds(), c.Agent.ApproveTimeout())
	}
	if m := c.Agent.Tools.Media; m.MaxBytes != DefaultToolMediaBytes || m.MaxItems != DefaultToolMediaItems {
		t.Fatalf("media limits = %+v", m)
	}
	if v := c.Policy(ChannelTelegram).ToolServers; len(v.V) != 0 {
		t.Fatalf("tools without servers = %v", v.V)
	}
	var out strings.Builder
	c.Describe(&out)
	if strings.Contains(out.String(), "tools") {
		t.Fatalf("Describe mentions tools with none configured:\n%s", out.String())
	}
}

func TestToolServersLadder(t *testing.T) {
	servers := `
agent:
  tools:
    servers:
      - {name: notes, command: notes-mcp}
      - {name: search, url: "http://127.0.0.1:8931/mcp"}
`
	tests := []struct {
		name   string
		yaml   string
		ws, tg []string
		wsFrom string
		tgFrom string
	}{
		{"default: every server", "", []string{"notes", "search"}, []string{"notes", "search"},
			"all configured (default)", "all configured (default)"},
		{"top level", "session:\n  tools: [search]\n", []string{"search"}, []string{"search"},
			"session.tools (bot.yaml:7)", "session.tools (bot.yaml:7)"},
		{"channel over top level", "session:\n  tools: [search]\nchannels:\n  websocket:\n    session:\n      tools: [notes]\n",
			[]string{"notes"}, []string{"search"}, "channels.websocket.session.tools (bot.yaml:11)", "session.tools (bot.yaml:7)"},
		{"an empty list is no tools", "channels:\n  telegram:\n    session:\n      tools: []\n",
			[]string{"notes", "search"}, []string{}, "all configured (default)", "channels.telegram.session.tools (bot.yaml:9)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustParse(t, servers+tt.yaml)
			ws, tg := c.Policy(ChannelWebSocket).ToolServers, c.Policy(ChannelTelegram).ToolServers
			if !slices.Equal(ws.V, tt.ws) || ws.From != tt.wsFrom {
				t.Errorf("websocket = %q from %q, want %q from %q", ws.V, ws.From, tt.ws, tt.wsFrom)
			}
			if !slices.Equal(tg.V, tt.tg) || tg.From != tt.tgFrom {
				t.Errorf("telegram = %q from %q, want %q from %q", tg.V, tg.From, tt.tg, tt.tgFrom)
			}
		})
	}
}

func TestToolServerOffers(t *testing.T) {
	s := ToolServer{Users: []string{"12345", "websocket:alice", "telegram:678"}}
	for _, tt := range []struct {
		channel, user string
		want          bool
	}{
		{ChannelTelegram, "12345", true},
		{ChannelWebSocket, "12345", true}, // a bare entry names a user on any channel
		{ChannelWebSocket, "alice", true},
		{ChannelTelegram, "alice", false},
		{ChannelTelegram, "678", true},
		{ChannelWebSocket, "678", false},
		{ChannelWebSocket, "bob", false},
	} {
		if got := s.Offers(tt.channel, tt.user); got != tt.want {
			t.Errorf("Offers(%s, %s) = %t, want %t", tt.channel, tt.user, got, tt.want)
		}
	}
	if !(ToolServer{}).Offers(ChannelTelegram, "1") {
		t.Error("a server without users is not offered to everyone")
	}
}

// Each mistake in agent.tools and session.tools is one line naming file,
// line and key.
func TestToolsErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want string
	}{
		{"neither command nor url", `
agent:
  tools:
    servers:
      - name: notes
        timeout: 5s
`, `4: agent.tools.servers[0]: server "notes" needs command (a program the gateway starts, spoken to over stdio) or url (a streamable HTTP endpoint)`},
		{"both command and url", `
agent:
  tools:
    servers:
      - name: notes
        command: notes-mcp
        url: http://127.0.0.1:8931/mcp
`, `6: agent.tools.servers[0].url: server "notes" has both command (bot.yaml:5) and url: give one of them`},
		{"url scheme", `
agent:
  tools:
    servers:
      - name: notes
        url: ftp://files.example.com/mcp
`, `5: agent.tools.servers[0].url: "ftp://files.example.com/mcp" is not an http(s) URL`},
		{"approve value", `
agent:
  tools:
    servers:
      - name: notes
        command: notes-mcp
        approve: sometimes
`, `6: agent.tools.servers[0].approve: "sometimes" is not one of auto, ask, deny`},
		{"tool rule approve value", `
agent:
  tools:
    servers:
      - name: notes
        command: notes-mcp
        tool_rules:
          notes_add: {approve: never}
`, `7: agent.tools.servers[0].tool_rules.notes_add.approve: "never" is not one of auto, ask, deny`},
		{"duplicate name", `
agent:
  tools:
    servers:
      - {name: notes, command: notes-mcp}
      - {name: notes, url: "http://127.0.0.1:8931/mcp"}
`, `5: agent.tools.servers[1].name: "notes" is already the name of agent.tools.servers[0] (bot.yaml:4)`},
		{"name with __", `
agent:
  tools:
    servers:
      - {name: my__notes, command: notes-mcp}
`, `4: agent.tools.servers[0].name: "my__notes" contains "__", which joins a server's name to its tools' names (name__tool)`},
		{"name with capitals", `
agent:
  tools:
    servers:
      - {name: Notes, command: notes-mcp}
`, `4: agent.tools.servers[0].name: "Notes" may only have a–z, 0–9, _ and -`},
		{"name missing", `
agent:
  tools:
    servers:
      - {command: notes-mcp}
`, `4: agent.tools.servers[0].name: required: the server's name, which prefixes its tools' names (name__tool)`},
		{"unknown server in session.tools", `
agent:
  tools:
    servers:
      - {name: notes, command: notes-mcp}
session:
  tools: [notes, nots]
`, `6: session.tools[1]: "nots" is not a server of agent.tools.servers (did you mean "notes"?)`},
		{"unknown server in a channel's session.tools", `
agent:
  tools:
    servers:
      - {name: notes, command: notes-mcp}
channels:
  telegram:
    session:
      tools:
        - search
`, `9: channels.telegram.session.tools[0]: "search" is not a server of agent.tools.servers (configured: notes)`},
		{"session.tools without servers", `
session:
  tools: [notes]
`, `2: session.tools[0]: "notes" is not a server of agent.tools.servers (none is configured)`},
		{"tool rule not in the allowlist", `
agent:
  tools:
    servers:
      - name: notes
        command: notes-mcp
        tools: [notes_add, notes_list]
        tool_rules:
          notes_lst: {approve: auto}
`, `8: agent.tools.servers[0].tool_rules.notes_lst: "notes_lst" is not in the tools allowlist of server "notes" (notes_add, notes_list); did you mean "notes_list"?`},
		{"media max_bytes too large", `
agent:
  tools:
    media:
      max_bytes: 51MiB
`, `4: agent.tools.media.max_bytes: must be 1 byte–50MiB, got 53477376`},
		{"media max_items too many", `
agent:
  tools:
    media:
      max_items: 33
`, `4: agent.tools.media.max_items: must be 1–32, got 33`},
		{"max_rounds too high", `
agent:
  tools:
    max_rounds: 65
`, `3: agent.tools.max_rounds: must be 1–64, got 65`},
		{"max_rounds zero", `
agent:
  tools:
    max_rounds: 0
`, `3: agent.tools.max_rounds: must be 1–64, got 0`},
		{"approve_timeout zero", `
agent:
  tools:
    approve_timeout: 0s
`, `3: agent.tools.approve_timeout: must be at least 1s, got 0s`},
		{"max_result_bytes too large", `
agent:
  tools:
    servers:
      - {name: notes, command: notes-mcp, max_result_bytes: 2MiB}
`, `4: agent.tools.servers[0].max_result_bytes: must be between 1KiB and 1MiB (as bytes, or with KiB or MiB: "16KiB"), got 2097152`},
		{"headers on a stdio server", `
agent:
  tools:
    servers:
      - name: notes
        command: notes-mcp
        headers: {Authorization: "Bearer x"}
`, `6: agent.tools.servers[0].headers: are for a server reached by url; server "notes" is started by command`},
		{"args on an HTTP server", `
agent:
  tools:
    servers:
      - name: notes
        url: http://127.0.0.1:8931/mcp
        args: [-v]
`, `6: agent.tools.servers[0].args: is for a server started by command; server "notes" has a url`},
		{"unknown key", `
agent:
  tools:
    servers:
      - name: notes
        command: notes-mcp
        aprove: auto
`, `6: agent.tools.servers[0].aprove: unknown key "aprove" in agent.tools.servers[0] (did you mean "approve"?)`},
		{"a tool's rule with an unknown key", `
agent:
  tools:
    servers:
      - name: notes
        command: notes-mcp
        tool_rules:
          notes_add: {approve: auto, retries: 3}
`, `7: agent.tools.servers[0].tool_rules.notes_add.retries: unknown key "retries" in agent.tools.servers[0].tool_rules.notes_add`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := problems(t, tt.yaml)
			if len(got) != 1 || !strings.HasPrefix(got[0], tt.want) {
				t.Fatalf("problems:\n%s\nwant exactly one, starting with\n%s", strings.Join(got, "\n"), tt.want)
			}
		})
	}
}

// A command whose value cannot be read is reported once: not again as a
// server with neither command nor url.
func TestToolServerUnreadableCommandReportedOnce(t *testing.T) {
	got := problems(t, `
agent:
  tools:
    servers:
      - name: notes
        command: {path: notes-mcp}
`)
	if len(got) != 1 || !strings.HasPrefix(got[0], "5: agent.tools.servers[0].command: cannot use !!map into string") {
		t.Fatalf("problems:\n%s", strings.Join(got, "\n"))
	}
}

func TestDescribeTools(t *testing.T) {
	c, err := Parse([]byte(strings.TrimLeft(fullTools, "\n")), "bot.yaml", env(map[string]string{"SEARCH_TOKEN": "s3cret-bearer-token"}))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	c.Describe(&out)
	text := out.String()
	ws, rest, _ := strings.Cut(text, "channel telegram")
	tg, block, ok := strings.Cut(rest, "\ntools\n")
	if !ok {
		t.Fatalf("no tools block:\n%s", text)
	}
	for _, tt := range []struct {
		section, line string
	}{
		{ws, "tools search session.tools (bot.yaml:22)"},
		{tg, "tools notes, search channels.telegram.session.tools (bot.yaml:27)"},
		{block, "max_rounds 5 agent.tools.max_rounds (bot.yaml:3)"},
		{block, "approve_timeout 2m0s agent.tools.approve_timeout (bot.yaml:4)"},
		{block, "server notes"},
		{block, "stdio chatgate-mcp-demo (2 args; env NOTES_DIR) agent.tools.servers[0].command (bot.yaml:7)"},
		{block, "timeout 10s agent.tools.servers[0].timeout (bot.yaml:10)"},
		{block, "max_result_bytes 8KiB agent.tools.servers[0].max_result_bytes (bot.yaml:11)"},
		{block, "tools notes_add, notes_list agent.tools.servers[0].tools (bot.yaml:12)"},
		{block, "approve ask agent.tools.servers[0].approve (bot.yaml:13)"},
		{block, "approve notes_list auto agent.tools.servers[0].tool_rules.notes_list.approve (bot.yaml:17)"},
		{block, "idempotent false agent.tools.servers[0].idempotent (bot.yaml:14)"},
		{block, "idempotent notes_list true agent.tools.servers[0].tool_rules.notes_list.idempotent (bot.yaml:17)"},
		{block, "users 12345, websocket:alice agent.tools.servers[0].users (bot.yaml:15)"},
		{block, "server search"},
		{block, "url https://search.example.com/mcp (headers Authorization) agent.tools.servers[1].url (bot.yaml:19)"},
		{block, "timeout 30s default"},
		{block, "max_result_bytes 16KiB default"},
		{block, "tools all it lists default"},
		{block, "approve ask default"},
		{block, "users everyone default"},
	} {
		if !hasLine(tt.section, tt.line) {
			t.Errorf("Describe lacks %q in\n%s", tt.line, tt.section)
		}
	}
	for _, secret := range []string{"s3cret-bearer-token", "Bearer", "/var/lib/notes", "notes.txt"} {
		if strings.Contains(text, secret) {
			t.Errorf("Describe prints %q:\n%s", secret, text)
		}
	}
}

// A URL's user, password and query are not printed: any of them may be a
// credential.
func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://search.example.com/mcp":              "https://search.example.com/mcp",
		"https://bob:pw@search.example.com/mcp":       "https://search.example.com/mcp",
		"http://127.0.0.1:8931/mcp?key=abc#frag":      "http://127.0.0.1:8931/mcp?…",
		"https://token@search.example.com/mcp?x=1&y=": "https://search.example.com/mcp?…",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// hasLine reports whether text has a line whose words are those of want
// (columns padded with spaces).
func hasLine(text, want string) bool {
	w := strings.Join(strings.Fields(want), " ")
	for _, line := range strings.Split(text, "\n") {
		if strings.Join(strings.Fields(line), " ") == w {
			return true
		}
	}
	return false
}

// A users allowlist means nothing on a WebSocket channel whose clients
// name themselves; it is warned about there, and only there.
func TestToolUsersWarning(t *testing.T) {
	base := `
agent:
  tools:
    servers:
      - {name: notes, command: notes-mcp, users: [alice]}
`
	c := mustParse(t, base)
	if w := strings.Join(c.Warnings, "\n"); !strings.Contains(w, "bot.yaml:4: agent.tools.servers[0].users: keeps nobody out on the websocket channel") {
		t.Fatalf("warnings = %q", w)
	}
	for _, extra := range []string{
		"channels:\n  websocket:\n    auth_tokens: {alice: \"0123456789abcdef\"}\n",
		"channels:\n  websocket:\n    session:\n      tools: []\n",
		"channels:\n  websocket:\n    enabled: false\n",
	} {
		if c := mustParse(t, base+extra); len(c.Warnings) != 0 {
			t.Errorf("with\n%swarnings = %q", extra, c.Warnings)
		}
	}
}
