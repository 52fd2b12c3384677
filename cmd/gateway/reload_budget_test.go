package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chatgate/chatgate/internal/llmtest"
	"github.com/chatgate/chatgate/internal/pgtest"
)

// TestReloadAppliesBudgets changes session.limits in the bot.yaml of a
// running gateway and reloads, through the reloader SIGHUP calls and
// through the admin API: the next turn is held to the new budget. Over
// it, the user gets the plain note and the model is not called; under a
// raised one, the model is called. Raising, lowering, and a user's own
// budget (limits.users) raised and lowered, on both stores. Each answer
// of the model spends 2 tokens.
func TestReloadAppliesBudgets(t *testing.T) {
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			dir := t.TempDir()
			dsn := filepath.Join(dir, "g.db")
			if driver == "postgres" {
				dsn = pgtest.DSN(t)
			}
			llm := &llmtest.Server{}
			llmSrv := httptest.NewServer(llm)
			t.Cleanup(llmSrv.Close)
			addr := freeAddr(t)
			conf := func(limits string) string {
				return fmt.Sprintf(`gateway:
  listen: %s
storage:
  driver: %s
  dsn: %q
agent:
  backend: openai
  openai: {base_url: %s/v1, model: m, max_retries: 0}
admin:
  tokens:
    ops: ops-token-0123456789
session:
  limits:
%s
shutdown:
  drain_timeout: 1s
`, addr, driver, dsn, llmSrv.URL, limits)
			}
			path := filepath.Join(dir, "bot.yaml")
			write := func(limits string) {
				t.Helper()
				if err := os.WriteFile(path, []byte(conf(limits)), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			write("    tokens_per_day: 2")
			s, logs := startServer(t, path)
			sighup := func(limits string) {
				t.Helper()
				write(limits)
				if err := s.reloads.reload("SIGHUP"); err != nil {
					t.Fatal(err)
				}
				if changed := lastReload(logs.String()); !strings.Contains(changed, "session.limits") {
					t.Fatalf("the reload's log says changed=%q, want session.limits", changed)
				}
			}
			adminReload := func(limits string) {
				t.Helper()
				write(limits)
				if code, body := request(t, "POST", "http://"+addr+"/admin/api/reload", "ops-token-0123456789"); code != http.StatusOK {
					t.Fatalf("admin reload: %d %s", code, body)
				}
			}
			alice, _ := dialClient(t, addr, map[string]any{"user": "alice"})
			bob, _ := dialClient(t, addr, map[string]any{"user": "bob"})
			n := 0
			// answered says a message and checks that the model answered
			// it; refused, that the user got the budget's note and the
			// model was not called.
			answered := func(cl *wsClient, who string) {
				t.Helper()
				n++
				calls := len(llm.Requests())
				r := last(cl.say(t, fmt.Sprint("m-", n), "hello"))
				if r["type"] != "reply" || r["text"] != llmtest.Reply || len(llm.Requests()) != calls+1 {
					t.Fatalf("%s's message %d: %v (%d model calls), want the model's answer", who, n, r, len(llm.Requests())-calls)
				}
			}
			refused := func(cl *wsClient, who string, limit int) {
				t.Helper()
				n++
				calls := len(llm.Requests())
				r := last(cl.say(t, fmt.Sprint("m-", n), "hello"))
				want := fmt.Sprintf("You have reached today's limit of %d tokens, so this message was not answered", limit)
				if r["type"] != "reply" || !strings.HasPrefix(fmt.Sprint(r["text"]), want) || len(llm.Requests()) != calls {
					t.Fatalf("%s's message %d: %v (%d model calls), want %q and no model call", who, n, r, len(llm.Requests())-calls, want)
				}
			}

			answered(alice, "alice") // 2 tokens: at the limit of 2
			refused(alice, "alice", 2)

			sighup("    tokens_per_day: 10") // raised
			answered(alice, "alice")         // 4 tokens

			sighup("    tokens_per_day: 3") // lowered below what alice spent
			refused(alice, "alice", 3)

			// alice's own budget raised over the channel's, through the
			// admin API.
			adminReload("    tokens_per_day: 3\n    users:\n      websocket:alice: {tokens_per_day: 100}")
			answered(alice, "alice") // 6 tokens
			answered(bob, "bob")     // 2 tokens, under 3

			// bob's own budget lowered under the channel's, raised.
			sighup("    tokens_per_day: 100\n    users:\n      websocket:bob: {tokens_per_day: 1}")
			refused(bob, "bob", 1)
			answered(alice, "alice") // 8 tokens

			// The users' budgets taken away: the channel's applies to both.
			sighup("    tokens_per_day: 5")
			refused(alice, "alice", 5)
			answered(bob, "bob")
		})
	}
}
