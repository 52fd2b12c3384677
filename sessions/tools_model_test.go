package sessions_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent/openai"
	"github.com/chatgate/chatgate/internal/llmtest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
	"github.com/chatgate/chatgate/sessions/storetest"
	"github.com/chatgate/chatgate/tools/mcpclient"
)

// The tool loop driven by a model server that asks for tools
// (internal/llmtest, an OpenAI-compatible server) through the gateway's
// OpenAI backend, streamed and not, against the MCP test server: what
// each case sends the model back is read from the model server's own
// record of its requests.
func TestToolLoopAgainstAModelServer(t *testing.T) {
	type tc = llmtest.ToolCall
	cases := []struct {
		name   string
		script llmtest.Script
		rounds int
		// want is the reply; check, when set, looks at the requests.
		want  string
		check func(t *testing.T, reqs []llmtest.Request)
	}{
		{name: "one call", script: llmtest.ToolThenAnswer("t__echo", `{"text":"hi"}`), want: llmtest.Done("hi")},
		{name: "two rounds", script: llmtest.Rounds([]tc{{Name: "t__counter", Arguments: `{"key":"a"}`}}, []tc{{Name: "t__counter", Arguments: `{"key":"a"}`}}),
			want: llmtest.Done("2")},
		{name: "parallel calls", script: llmtest.Rounds([]tc{{Name: "t__counter", Arguments: `{"key":"p"}`}, {Name: "t__echo", Arguments: `{"text":"x"}`}}),
			want: llmtest.Done("1", "x")},
		{name: "a tool error", script: llmtest.ToolThenAnswer("t__fail", `{"message":"no"}`), want: llmtest.Done("failed: no")},
		{name: "a timeout", script: llmtest.ToolThenAnswer("t__slow", `{}`), check: func(t *testing.T, reqs []llmtest.Request) {
			if r := reqs[len(reqs)-1].Results(); len(r) != 1 || !strings.Contains(r[0], "The call failed") || !strings.Contains(r[0], "deadline") {
				t.Fatalf("the model got %q for a call that timed out", r)
			}
		}},
		{name: "a result over the cap", script: llmtest.ToolThenAnswer("t__big", `{"bytes":5000}`), check: func(t *testing.T, reqs []llmtest.Request) {
			r := reqs[len(reqs)-1].Results()
			if len(r) != 1 || !strings.Contains(r[0], "[result cut") || len(r[0]) > 1200 {
				t.Fatalf("the model got %d bytes for a 5000-byte result: %.80q…", len(r[0]), r[0])
			}
		}},
		{name: "max_rounds reached", script: llmtest.AlwaysTool("t__counter", `{"key":"loop"}`), rounds: 2, want: llmtest.Reply,
			check: func(t *testing.T, reqs []llmtest.Request) {
				if len(reqs) != 3 || reqs[2].ToolChoice != "none" || reqs[1].ToolChoice == "none" || len(reqs[2].Tools) == 0 {
					t.Fatalf("%d requests; the third should say tool_choice none (it says %q)", len(reqs), reqs[len(reqs)-1].ToolChoice)
				}
			}},
	}
	storetest.Drivers(t, func(t *testing.T, open func() *store.DB) {
		for _, stream := range []bool{false, true} {
			for _, c := range cases {
				t.Run(fmt.Sprintf("%s/stream=%v", c.name, stream), func(t *testing.T) {
					srv, set := toolServer(t, mcpclient.ServerConfig{Timeout: 300 * time.Millisecond, MaxResultBytes: 1024})
					model, ag := llmtest.AgentWith(t, openai.Config{Model: "m", Stream: stream})
					model.Script(c.script)
					db := open()
					m := sessions.New(db, ag, sessions.Options{Events: db.Events(), Tools: mcpclient.Offer{Set: set}, MaxToolRounds: c.rounds,
						Logger: slog.New(slog.DiscardHandler), Policies: map[string]sessions.Policy{"websocket": {MaxHistory: 50}}})
					defer m.Shutdown(context.Background())
					in := sessions.Inbound{Channel: "websocket", SessionKey: sessions.WebSocketKey(fmt.Sprintf("u-%s-%v", strings.ReplaceAll(c.name, " ", "-"), stream)),
						UserID: "u", ClientMsgID: "m1", Text: "go"}
					tk, err := m.Submit(context.Background(), in, sessions.Hooks{})
					if err != nil {
						t.Fatal(err)
					}
					out := wait(t, tk)
					if c.want != "" && out.Reply.Text != c.want {
						t.Fatalf("reply = %q, want %q (server saw %d calls)", out.Reply.Text, c.want, len(srv.Calls()))
					}
					reqs := model.Received()
					if len(reqs) < 2 || len(reqs[0].Tools) == 0 {
						t.Fatalf("%d model requests; the first offered %v", len(reqs), reqs[0].Tools)
					}
					if c.check != nil {
						c.check(t, reqs)
					}
				})
			}
		}
	})
}
