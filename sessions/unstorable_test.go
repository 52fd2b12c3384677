package sessions_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/agent/openai"
	"github.com/chatgate/chatgate/internal/faults"
	"github.com/chatgate/chatgate/internal/llmtest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
	"github.com/chatgate/chatgate/sessions/storetest"
	"github.com/chatgate/chatgate/tools/mcpclient"
)

// nul is text no PostgreSQL text column takes as it is (a NUL byte, and
// a byte that is not UTF-8); stored is how both stores keep it.
const nul, stored = "a\x00b\xffc", "a\uFFFDb\uFFFDc"

// A user's own text with NUL: the gateway refuses a message that is not
// UTF-8 at the door, but takes a NUL.
const userNul, userStored = "a\x00b", "a\uFFFDb"

// TestUnstorableTextInATurn: a NUL byte or invalid UTF-8 in what a turn
// stores — the user's text and the model's answer echoing it, a tool's
// result echoing the model's argument, the raw arguments a model server
// sent — is stored as U+FFFD on both stores: the reply arrives, the tool
// call is settled, and the next message is answered. Before, PostgreSQL
// refused the write for good and the turn retried it for ever.
func TestUnstorableTextInATurn(t *testing.T) {
	storetest.Drivers(t, func(t *testing.T, open func() *store.DB) {
		t.Run("user text echoed by the model", func(t *testing.T) {
			db := open()
			m := sessions.New(db, agent.Echo{}, sessions.Options{Events: db.Events(), Logger: slog.New(slog.DiscardHandler),
				Policies: map[string]sessions.Policy{"websocket": {MaxHistory: 50}}, RetryPause: 10 * time.Millisecond})
			defer m.Shutdown(context.Background())
			key := sessions.WebSocketKey("echo")
			out := handleWithin(t, m, sessions.Inbound{Channel: "websocket", SessionKey: key, UserID: "echo", ClientMsgID: "m1", Text: "say " + userNul})
			if out.Reply.Status != ledger.MsgOK || !strings.Contains(out.Reply.Text, "say ") {
				t.Fatalf("reply = %+v", out.Reply)
			}
			lines := transcript(t, db, key)
			if len(lines) != 2 || lines[0] != "user:say "+userStored || !strings.HasPrefix(lines[1], "assistant:echo: say "+userStored) {
				t.Fatalf("stored transcript = %q", lines)
			}
			// A resend of the same id is answered from storage, not run again.
			again := handleWithin(t, m, sessions.Inbound{Channel: "websocket", SessionKey: key, UserID: "echo", ClientMsgID: "m1", Text: "say " + userNul})
			if again.Reply.Seq != out.Reply.Seq {
				t.Fatalf("a resend got %+v, want the stored reply %d", again.Reply, out.Reply.Seq)
			}
			next := handleWithin(t, m, sessions.Inbound{Channel: "websocket", SessionKey: key, UserID: "echo", ClientMsgID: "m2", Text: "then"})
			if next.Reply.Status != ledger.MsgOK || !strings.Contains(next.Reply.Text, "then") {
				t.Fatalf("next reply = %+v", next.Reply)
			}
		})
		t.Run("tool result", func(t *testing.T) {
			r := newToolRig(t, open, mcpclient.ServerConfig{}, once(call("c1", "t__echo", map[string]string{"text": nul})))
			m := r.manager(t, "a", nil, sessions.Options{})
			defer m.Shutdown(context.Background())
			out := wait(t, r.submit(t, m, "u1", "m1", "echo it"))
			if out.Reply.Status != ledger.MsgOK || !strings.HasPrefix(out.Reply.Text, "answer: ") {
				t.Fatalf("reply = %+v", out.Reply)
			}
			rows := toolCalls(t, r.db)
			// (The tool's JSON turned the invalid byte into U+FFFD; the NUL
			// came back.)
			if len(rows) != 1 || rows[0].State != ledger.ToolDone || rows[0].Result != "a\uFFFDb\uFFFDc" {
				t.Fatalf("tool calls = %+v", rows)
			}
			lines := transcript(t, r.db, sessions.WebSocketKey("u1"))
			if len(lines) != 4 || lines[2] != "tool:"+stored || lines[3] != "assistant:answer: "+stored {
				t.Fatalf("stored transcript = %q", lines)
			}
			if next := wait(t, r.submit(t, m, "u1", "m2", "again")); next.Reply.Status != ledger.MsgOK {
				t.Fatalf("next reply = %+v", next.Reply)
			}
		})
		t.Run("arguments from a model server", func(t *testing.T) {
			_, set := toolServer(t, mcpclient.ServerConfig{})
			model, ag := llmtest.AgentWith(t, openai.Config{Model: "m"})
			// The arguments carry a raw NUL (JSON's \u0000 on the wire), and
			// the answer too.
			model.Script(llmtest.Queue(llmtest.Answer{ToolCalls: []llmtest.ToolCall{{Name: "t__echo", Arguments: "{\"text\":\"x\x00y\"}"}}},
				llmtest.Answer{Text: "done \x00"}))
			db := open()
			m := sessions.New(db, ag, sessions.Options{Events: db.Events(), Tools: mcpclient.Offer{Set: set}, Logger: slog.New(slog.DiscardHandler),
				Policies: map[string]sessions.Policy{"websocket": {MaxHistory: 50}}, RetryPause: 10 * time.Millisecond})
			defer m.Shutdown(context.Background())
			key := sessions.WebSocketKey("llm")
			out := handleWithin(t, m, sessions.Inbound{Channel: "websocket", SessionKey: key, UserID: "llm", ClientMsgID: "m1", Text: "go"})
			if out.Reply.Status != ledger.MsgOK || out.Reply.Text != "done \x00" {
				t.Fatalf("reply = %+v", out.Reply)
			}
			rows := toolCalls(t, db)
			if last := rows[len(rows)-1]; last.SessionKey != key || !ledger.ToolSettled(last.State) || last.Arguments != "{\"text\":\"x\uFFFDy\"}" {
				t.Fatalf("tool call = %+v", last)
			}
			if lines := transcript(t, db, key); lines[len(lines)-1] != "assistant:done \uFFFD" {
				t.Fatalf("stored transcript = %q", lines)
			}
			next := handleWithin(t, m, sessions.Inbound{Channel: "websocket", SessionKey: key, UserID: "llm", ClientMsgID: "m2", Text: "next"})
			if next.Reply.Status != ledger.MsgOK || next.Reply.Text != llmtest.Reply {
				t.Fatalf("next reply = %+v", next.Reply)
			}
		})
	})
}

// TestRejectedStorageFailsTheTurn: a storage step the database refuses
// for good (the fault seam's Refusal, which the store reports as
// ledger.ErrRejected) is not retried: the turn is settled failed with
// RejectedText, its user is told, a tool call whose outcome was refused
// is settled all the same, and the session goes on — the next message is
// answered, and /stop stops a turn. A transient failure of the same step
// is still retried until it lands.
func TestRejectedStorageFailsTheTurn(t *testing.T) {
	storetest.Drivers(t, func(t *testing.T, open func() *store.DB) {
		t.Run("reply", func(t *testing.T) {
			db := open()
			f := faults.New(db)
			rec := &gatedEcho{}
			m := sessions.New(db, rec, sessions.Options{Events: db.Events(), Logger: slog.New(slog.DiscardHandler),
				Policies: map[string]sessions.Policy{"websocket": {MaxHistory: 50}}, RetryPause: 10 * time.Millisecond})
			defer m.Shutdown(context.Background())
			key := sessions.WebSocketKey("rej")
			in := func(id, text string) sessions.Inbound {
				return sessions.Inbound{Channel: "websocket", SessionKey: key, UserID: "rej", ClientMsgID: id, Text: text}
			}
			f.Reject("Append(reply)", 1)
			out := handleWithin(t, m, in("m1", "hello"))
			if out.Reply.Status != ledger.MsgFailed || out.Reply.Text != sessions.RejectedText {
				t.Fatalf("reply = %+v, want the failure notice", out.Reply)
			}
			aside := faults.Aside(context.Background())
			turn, err := db.TurnByClientID(aside, key, "m1")
			if err != nil || turn == nil || turn.State != ledger.TurnFailed {
				t.Fatalf("turn = %+v, %v; want it settled failed", turn, err)
			}
			if reply, err := db.FinalReply(aside, turn.ConversationID, turn.Seq); err != nil || reply == nil ||
				reply.Status != ledger.MsgFailed || !strings.HasPrefix(reply.Error, sessions.RejectedPrefix) {
				t.Fatalf("stored reply = %+v, %v", reply, err)
			}
			if open := storetest.OpenTurns(t, db, out.ConversationID); len(open) != 0 {
				t.Fatalf("open turns %v", open)
			}
			// The session goes on.
			if next := handleWithin(t, m, in("m2", "again")); next.Reply.Status != ledger.MsgOK {
				t.Fatalf("next reply = %+v", next.Reply)
			}
			// /stop still stops a turn.
			started, _ := rec.gate()
			tk, err := m.Submit(context.Background(), in("m3", "long"), sessions.Hooks{})
			if err != nil {
				t.Fatal(err)
			}
			<-started
			if !m.Stop(key) {
				t.Fatal("Stop found no turn")
			}
			if out := wait(t, tk); out.Reply.Status != ledger.MsgInterrupted {
				t.Fatalf("stopped reply = %+v", out.Reply)
			}
		})
		t.Run("transient reply failure", func(t *testing.T) {
			db := open()
			f := faults.New(db)
			ag := &gatedEcho{}
			m := sessions.New(db, ag, sessions.Options{Events: db.Events(), Logger: slog.New(slog.DiscardHandler),
				Policies: map[string]sessions.Policy{"websocket": {MaxHistory: 50}}, RetryPause: 10 * time.Millisecond})
			defer m.Shutdown(context.Background())
			started, release := ag.gate()
			tk, err := m.Submit(context.Background(), sessions.Inbound{Channel: "websocket", SessionKey: sessions.WebSocketKey("flaky"),
				UserID: "flaky", ClientMsgID: "m1", Text: "hi"}, sessions.Hooks{})
			if err != nil {
				t.Fatal(err)
			}
			// Storage goes down while the model answers: the reply's append
			// fails until it heals.
			<-started
			f.Down(faults.Before)
			close(release)
			if !f.WaitFailures(3, 10*time.Second) {
				t.Fatal("the outage failed no call")
			}
			f.Heal()
			if out := wait(t, tk); out.Reply.Status != ledger.MsgOK {
				t.Fatalf("reply = %+v, want it stored once storage answers", out.Reply)
			}
		})
		t.Run("tool outcome", func(t *testing.T) {
			r := newToolRig(t, open, mcpclient.ServerConfig{}, once(call("c1", "t__counter", map[string]string{"key": "k"})))
			f := faults.New(r.db)
			m := r.manager(t, "a", nil, sessions.Options{})
			defer m.Shutdown(context.Background())
			f.Reject("EndTool", 1)
			out := wait(t, r.submit(t, m, "u1", "m1", "count"))
			if out.Reply.Status != ledger.MsgFailed || out.Reply.Text != sessions.RejectedText {
				t.Fatalf("reply = %+v, want the failure notice", out.Reply)
			}
			rows := toolCalls(t, r.db)
			if len(rows) != 1 || rows[0].State != ledger.ToolFailed || rows[0].Result != sessions.ToolUnstoredText {
				t.Fatalf("tool calls = %+v, want the call settled failed", rows)
			}
			if next := wait(t, r.submit(t, m, "u1", "m2", "again")); next.Reply.Status != ledger.MsgOK {
				t.Fatalf("next reply = %+v", next.Reply)
			}
		})
		t.Run("tool round", func(t *testing.T) {
			r := newToolRig(t, open, mcpclient.ServerConfig{}, once(call("c1", "t__counter", map[string]string{"key": "k"})))
			f := faults.New(r.db)
			m := r.manager(t, "a", nil, sessions.Options{})
			defer m.Shutdown(context.Background())
			// The round's assistant message (the first reply-side append).
			f.Reject("Append(reply)", 1)
			out := wait(t, r.submit(t, m, "u1", "m1", "count"))
			if out.Reply.Status != ledger.MsgFailed || out.Reply.Text != sessions.RejectedText {
				t.Fatalf("reply = %+v, want the failure notice", out.Reply)
			}
			if n := r.srv.Count(); n != 0 {
				t.Fatalf("the tool ran %d times for a round never stored", n)
			}
			if next := wait(t, r.submit(t, m, "u1", "m2", "again")); next.Reply.Status != ledger.MsgOK {
				t.Fatalf("next reply = %+v", next.Reply)
			}
		})
	})
}

// handleWithin is Handle, failing the test past 20 s.
func handleWithin(t *testing.T, m *sessions.Manager, in sessions.Inbound) sessions.Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := m.Handle(ctx, in, sessions.Hooks{})
	if err != nil {
		t.Fatal(fmt.Errorf("Handle(%q): %w", in.Text, err))
	}
	return out
}

// gatedEcho is agent.Echo that, once gated, waits for its release (or
// its context) before it answers, and says when it started.
type gatedEcho struct {
	mu      sync.Mutex
	started chan struct{}
	release chan struct{}
}

// gate makes the next call wait: it says on started that it began, and
// answers once release is closed.
func (g *gatedEcho) gate() (started, release chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.started, g.release = make(chan struct{}, 1), make(chan struct{})
	return g.started, g.release
}

func (*gatedEcho) Name() string  { return "gated" }
func (*gatedEcho) Model() string { return "echo" }
func (g *gatedEcho) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	g.mu.Lock()
	started, release := g.started, g.release
	g.started, g.release = nil, nil
	g.mu.Unlock()
	if release != nil {
		started <- struct{}{}
		select {
		case <-ctx.Done():
			return agent.Reply{}, ctx.Err()
		case <-release:
		}
	}
	return agent.Echo{}.Reply(ctx, req, onDelta)
}
