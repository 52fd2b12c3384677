package gateway

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/clocktest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
)

// inputs is an echo agent that records each call's input.
type inputs struct {
	mu  sync.Mutex
	got []string
}

func (a *inputs) Name() string  { return "inputs" }
func (a *inputs) Model() string { return "echo" }
func (a *inputs) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	a.mu.Lock()
	a.got = append(a.got, req.Input)
	a.mu.Unlock()
	return agent.Echo{}.Reply(ctx, req, onDelta)
}

func (a *inputs) calls() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.got...)
}

// An edit frame while its message waits out the debounce replaces the
// text: the ack says so (edited, the original's seq), and the one reply,
// to the original, answers the edited text.
func TestEditInsideTheDebounce(t *testing.T) {
	db, err := store.Open(context.Background(), store.DriverSQLite, filepath.Join(t.TempDir(), "g.db"), store.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clock := clocktest.New(time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC))
	ag := &inputs{}
	mgr := sessions.New(db, ag, sessions.Options{Logger: quiet, Now: clock.Now, After: clock.After,
		Policies: map[string]sessions.Policy{Channel: {MaxHistory: 100, Busy: sessions.BusyPolicy{Mode: sessions.BusyCollect, Debounce: time.Second}}}})
	e := serveEnv(t, db, mgr, WSOptions{}, false)
	c, _ := e.connect(map[string]any{"user": "ann"})
	c.send(map[string]any{"type": "message", "id": "c-1", "text": "helo wrld"})
	ack := c.expect("ack")
	if !clock.WaitTimers(1, 20*time.Second) {
		t.Fatal("the turn did not wait out the debounce")
	}
	c.send(map[string]any{"type": "edit", "id": "c-1-e1", "edits": "c-1", "text": "hello world"})
	edited := c.expect("ack")
	if edited["id"] != "c-1-e1" || edited["edited"] != "c-1" || edited["seq"] != ack["seq"] {
		t.Fatalf("edit's ack = %v, want the original (seq %v) edited", edited, ack["seq"])
	}
	clock.Advance(2 * time.Second)
	r := c.expect("reply")
	if r["reply_to"] != "c-1" || r["text"] != "echo: hello world (history: 0)" {
		t.Fatalf("reply = %v, want the edited text answered", r)
	}
	if got := ag.calls(); len(got) != 1 || got[0] != "hello world" {
		t.Fatalf("agent calls %q, want one with the edited text", got)
	}
}

// An edit frame after the reply is a new message quoting the edit: its
// own ack and reply (reply_to the edit's id), once however often it is
// sent; an edit of an unknown id is not_found, one without edits a
// bad_frame.
func TestEditAfterTheReply(t *testing.T) {
	ag := &inputs{}
	e := newEnv(t, ag, WSOptions{}, nil, nil)
	c, _ := e.connect(map[string]any{"user": "ann"})
	c.send(map[string]any{"type": "message", "id": "c-1", "text": "helo"})
	if r := c.expect("reply"); r["text"] != "echo: helo (history: 0)" {
		t.Fatalf("reply = %v", r)
	}
	quoted := sessions.EditedText("helo", "hello")
	for i := range 2 {
		c.send(map[string]any{"type": "edit", "id": "c-1-e1", "edits": "c-1", "text": "hello"})
		ack := c.expect("ack")
		if ack["id"] != "c-1-e1" || ack["seq"] != float64(3) || ack["edited"] != nil {
			t.Fatalf("edit %d: ack = %v, want the edit's own (seq 3)", i, ack)
		}
		r := c.expect("reply")
		if r["reply_to"] != "c-1-e1" || r["text"] != "echo: "+quoted+" (history: 2)" {
			t.Fatalf("edit %d: reply = %v, want the quoted edit answered", i, r)
		}
	}
	if got := ag.calls(); len(got) != 2 || got[1] != quoted {
		t.Fatalf("agent calls %q, want the message, then the quoted edit once", got)
	}
	c.send(map[string]any{"type": "edit", "id": "x", "edits": "nope", "text": "hi"})
	if f := c.expect("error"); f["code"] != "not_found" {
		t.Fatalf("edit of an unknown message: %v", f)
	}
	c.send(map[string]any{"type": "edit", "id": "y", "text": "hi"})
	if f := c.expect("error"); f["code"] != "bad_frame" {
		t.Fatalf("edit without edits: %v", f)
	}
}
