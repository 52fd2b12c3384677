package main

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chatgate/chatgate/config"
	"github.com/chatgate/chatgate/internal/mcptest"
	"github.com/chatgate/chatgate/internal/tooltest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
	"github.com/chatgate/chatgate/sessions/storetest"
	"github.com/chatgate/chatgate/tools/mcpclient"
)

// A model's tool call is untrusted: a prompt injection can name any
// tool. A tool the policy does not offer a turn's user never runs, even
// when the model names it — the servers' users allowlists and the
// channel's session.tools decide what runs as they decide what is
// offered. The call is stored denied, and the model is told no server
// offers it.
func TestToolNotOfferedNeverRuns(t *testing.T) {
	const servers = `
agent:
  tools:
    servers:
      - name: admin
        url: http://127.0.0.1:9/mcp
        approve: auto
        users: ["websocket:carol"]
      - name: pub
        url: http://127.0.0.1:9/mcp
        approve: auto
`
	for _, c := range []struct {
		name, yaml, user string
		offered          []string // the tool names the model is offered
		runs             bool     // admin__echo runs
	}{
		{name: "other user's server", yaml: servers, user: "bob", offered: []string{"pub__echo"}},
		{name: "allowed user", yaml: servers, user: "carol", offered: []string{"admin__echo", "pub__echo"}, runs: true},
		{name: "channel offers none", yaml: servers + "session:\n  tools: []\n", user: "carol"},
		{name: "channel offers another server", yaml: servers + "session:\n  tools: [pub]\n", user: "carol", offered: []string{"pub__echo"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			storetest.Drivers(t, func(t *testing.T, open func() *store.DB) {
				cfg, err := config.Parse([]byte(c.yaml), "bot.yaml", func(string) (string, bool) { return "", false })
				if err != nil {
					t.Fatal(err)
				}
				admin := offerRig(t, cfg)
				db := open()
				model := tooltest.Asking(tooltest.Call("c1", "admin__echo", map[string]string{"text": "the secret"}))
				m := sessions.New(db, model, sessions.Options{Events: db.Events(), Tools: mcpclient.Offer{Set: admin.set, Servers: toolPolicy(cfg.Agent.Tools.Servers, cfg.Policies())},
					Policies: policies(cfg), Logger: slog.New(slog.DiscardHandler), RetryPause: 10 * time.Millisecond})
				defer m.Shutdown(context.Background())
				tk, err := m.Submit(context.Background(), sessions.Inbound{Channel: "websocket", SessionKey: sessions.WebSocketKey(c.user),
					UserID: c.user, ClientMsgID: "m1", Text: "tell me the secret"}, sessions.Hooks{})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				out, err := tk.Wait(ctx)
				if err != nil {
					t.Fatal(err)
				}
				var offered []string
				for _, tool := range model.Requests()[0].Tools {
					offered = append(offered, tool.Name)
				}
				if !slices.Equal(offered, c.offered) {
					t.Fatalf("offered %v, want %v", offered, c.offered)
				}
				var rows []ledger.ToolCall
				if err := db.Gorm().Find(&rows).Error; err != nil {
					t.Fatal(err)
				}
				if len(rows) != 1 {
					t.Fatalf("tool calls = %+v", rows)
				}
				if c.runs {
					if out.Reply.Text != "answer: the secret" || len(admin.srv.Calls()) != 1 || rows[0].State != ledger.ToolDone {
						t.Fatalf("reply %q, %d runs, call %s: the offered tool should run", out.Reply.Text, len(admin.srv.Calls()), rows[0].State)
					}
					return
				}
				if strings.Contains(out.Reply.Text, "the secret") || out.Reply.Text != "answer: "+sessions.ToolGoneText {
					t.Fatalf("reply = %q, want the model told no server offers the tool", out.Reply.Text)
				}
				if n := len(admin.srv.Calls()); n != 0 || rows[0].State != ledger.ToolDenied || rows[0].Runs != 0 {
					t.Fatalf("a tool never offered: %d runs at the server, call %s (%d runs)", n, rows[0].State, rows[0].Runs)
				}
			})
		})
	}
}

type offerServers struct {
	set *mcpclient.Set
	srv *mcptest.Server // admin's
}

// offerRig connects cfg's servers (admin, pub) to MCP test servers in
// the process, each offering echo only, and waits until both listed it.
func offerRig(t *testing.T, cfg *config.Config) offerServers {
	t.Helper()
	var out offerServers
	cfgs := toolServers(cfg)
	for i := range cfgs {
		srv, tr := mcptest.InMemory(t)
		cfgs[i].URL, cfgs[i].Transport, cfgs[i].Tools = "", tr, []string{"echo"}
		if cfgs[i].Name == "admin" {
			out.srv = srv
		}
	}
	out.set = mcpclient.New(cfgs, slog.New(slog.DiscardHandler))
	out.set.Start(context.Background())
	t.Cleanup(out.set.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range cfgs {
		if err := out.set.WaitListed(ctx, c.Name); err != nil {
			t.Fatal(err)
		}
	}
	return out
}
