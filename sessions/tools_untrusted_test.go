package sessions_test

import (
	"context"
	"strings"
	"testing"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
	"github.com/chatgate/chatgate/sessions/storetest"
	"github.com/chatgate/chatgate/tools/mcpclient"
)

// A model's arguments are untrusted: JSON that does not parse, or that
// is not an object, never reaches the server. The call is stored failed,
// the model is told why, and the turn (and the next one) is answered.
func TestBadArgumentsFromTheModelNeverReachTheServer(t *testing.T) {
	storetest.Drivers(t, func(t *testing.T, open func() *store.DB) {
		bad := []string{`{"text": "unterminated`, `[1, 2]`, `null`, `"just a string"`}
		var calls []agent.ToolCall
		for i, args := range bad {
			calls = append(calls, agent.ToolCall{ID: "c" + string(rune('a'+i)), Name: "t__echo", Arguments: args})
		}
		r := newToolRig(t, open, mcpclient.ServerConfig{}, once(calls...))
		m := r.manager(t, "a", nil, sessions.Options{})
		defer m.Shutdown(context.Background())
		out := wait(t, r.submit(t, m, "u1", "m1", "echo these"))
		parts := strings.Split(strings.TrimPrefix(out.Reply.Text, "answer: "), " | ")
		if out.Reply.Status != ledger.MsgOK || len(parts) != len(bad) {
			t.Fatalf("reply = %+v", out.Reply)
		}
		for i, p := range parts {
			if !strings.Contains(p, "did not run: its arguments are not") {
				t.Errorf("the model was told %q of arguments %q", p, bad[i])
			}
		}
		if n := len(r.srv.Calls()); n != 0 {
			t.Fatalf("the server got %d calls with bad arguments", n)
		}
		for _, c := range toolCalls(t, r.db) {
			if c.State != ledger.ToolFailed || !c.IsError {
				t.Errorf("call %s with arguments %q: %s", c.CallID, c.Arguments, c.State)
			}
		}
		if out := wait(t, r.submit(t, m, "u1", "m2", "hello")); out.Reply.Status != ledger.MsgOK {
			t.Fatalf("the next turn: %+v", out.Reply)
		}
	})
}
