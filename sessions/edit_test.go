package sessions

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/chatgate/chatgate/sessions/store"
)

// An edit of a message waiting out its debounce replaces its text: one
// turn answers the edited text, and the edit stores no message of its own.
func TestEditDuringDebounceReplacesTheText(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		rec := &recorder{}
		c := newClock(t0)
		m := New(db, rec, Options{Now: c.Now, After: c.After, Logger: quiet,
			Policies: busyPolicy(BusyPolicy{Mode: BusyCollect, Debounce: time.Second})})
		t.Cleanup(func() { m.Shutdown(context.Background()) })
		tk := submit(t, m, withID(msg("websocket:ann", "helo wrld"), "c-1"))
		if !c.WaitTimers(1, 20*time.Second) {
			t.Fatal("the runner did not wait out the debounce")
		}
		ed, err := m.Edit(context.Background(), withID(msg("websocket:ann", "hello world"), "c-1-e1"), "c-1", Hooks{})
		if err != nil {
			t.Fatal(err)
		}
		if !ed.Replaced || ed.Seq != tk.Seq() || ed.Ticket != nil {
			t.Fatalf("edit = %+v, want the original (seq %d) replaced", ed, tk.Seq())
		}
		c.Advance(time.Second)
		out := wait(t, tk)
		if n := rec.calls.Load(); n != 1 || out.Reply.Text != "echo: hello world (history: 0)" {
			t.Fatalf("%d agent calls, reply %q; want one answering the edited text", n, out.Reply.Text)
		}
		rows := transcript(t, db, tk.ConversationID())
		if len(rows) != 2 || rows[0].Content != "hello world" {
			t.Fatalf("transcript %+v: want the edited message and its reply", rows)
		}
		// The same edit again changes nothing and runs nothing.
		again, err := m.Edit(context.Background(), withID(msg("websocket:ann", "hello world"), "c-1-e1"), "c-1", Hooks{})
		if err != nil || !again.Replaced || again.Ticket != nil || rec.calls.Load() != 1 {
			t.Fatalf("repeated edit = %+v, %v, %d calls", again, err, rec.calls.Load())
		}
	})
}

// An edit of an answered message is a new message quoting it, answered
// once however often the edit is repeated.
func TestEditAfterTheReplyIsANewMessage(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		rec := &recorder{}
		m := newManager(t, db, rec, newClock(t0), nil)
		first := handle(t, m, withID(msg("websocket:ann", "helo"), "c-1"))
		edit := withID(msg("websocket:ann", "hello"), "c-1-e1")
		for i := range 2 {
			ed, err := m.Edit(context.Background(), edit, "c-1", Hooks{})
			if err != nil {
				t.Fatal(err)
			}
			if ed.Replaced || ed.Ticket == nil {
				t.Fatalf("edit %d = %+v, want a new message", i, ed)
			}
			out := wait(t, ed.Ticket)
			want := "echo: " + EditedText("helo", "hello") + " (history: 2)"
			if out.Reply.Text != want || out.Duplicate != (i == 1) {
				t.Fatalf("edit %d answered %q (duplicate %v), want %q", i, out.Reply.Text, out.Duplicate, want)
			}
		}
		if n := rec.calls.Load(); n != 2 {
			t.Fatalf("%d agent calls, want 2: the message and its edit once", n)
		}
		rows := transcript(t, db, first.ConversationID)
		if len(rows) != 4 || rows[0].Content != "helo" || rows[2].Content != `(edited my earlier message "helo") hello` {
			t.Fatalf("transcript %+v", rows)
		}
		if _, err := m.Edit(context.Background(), withID(msg("websocket:ann", "x"), "e"), "nope", Hooks{}); !errors.Is(err, ErrEditNotFound) {
			t.Fatalf("edit of an unknown message: %v, want ErrEditNotFound", err)
		}
	})
}

// An edit that finds the turn claimed (the claim won the race) is a new
// message: the conditional update decides, not the cached row.
func TestEditAfterTheClaimIsANewMessage(t *testing.T) {
	db := openStore(t, store.DriverSQLite, t.TempDir()+"/g.db")
	h := newHoldFirst()
	m := newManager(t, db, h, newClock(t0), busyPolicy(BusyPolicy{Mode: BusyCollect}))
	tk := submit(t, m, withID(msg("websocket:ann", "helo"), "c-1"))
	<-h.started // running
	ed, err := m.Edit(context.Background(), withID(msg("websocket:ann", "hello"), "c-1-e1"), "c-1", Hooks{})
	if err != nil || ed.Replaced || ed.Ticket == nil {
		t.Fatalf("edit = %+v, %v; want a new message", ed, err)
	}
	close(h.release)
	if out := wait(t, tk); out.Reply.Text != "echo: helo (history: 0)" {
		t.Fatalf("first reply %q", out.Reply.Text)
	}
	if out := wait(t, ed.Ticket); out.Reply.Text != "echo: "+EditedText("helo", "hello")+" (history: 2)" {
		t.Fatalf("edit's reply %q", out.Reply.Text)
	}
}

func TestEditPendingIsConditional(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		c := newClock(t0)
		m := New(db, &recorder{}, Options{Now: c.Now, After: c.After, Logger: quiet,
			Policies: busyPolicy(BusyPolicy{Mode: BusyCollect, Debounce: time.Hour})})
		t.Cleanup(func() { m.Shutdown(context.Background()) })
		tk := submit(t, m, withID(msg("websocket:ann", "a"), "c-1"))
		ctx := context.Background()
		if ok, err := db.EditPending(ctx, tk.ConversationID(), tk.Seq(), "b"); err != nil || !ok {
			t.Fatalf("pending: %v %v", ok, err)
		}
		if err := db.Gorm().Exec("UPDATE messages SET turn_state = 'running', turn_attempt = 1 WHERE conversation_id = ?", tk.ConversationID()).Error; err != nil {
			t.Fatal(err)
		}
		if ok, err := db.EditPending(ctx, tk.ConversationID(), tk.Seq(), "c"); err != nil || ok {
			t.Fatalf("claimed: %v %v, want no edit", ok, err)
		}
		if rows := transcript(t, db, tk.ConversationID()); rows[0].Content != "b" {
			t.Fatalf("content %q", rows[0].Content)
		}
	})
}
