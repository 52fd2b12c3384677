package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/clocktest"
	"github.com/chatgate/chatgate/internal/pgtest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
)

// historyTexts returns the texts of a frame's history, in order.
func historyTexts(f map[string]any) []string {
	items, _ := f["history"].([]any)
	out := make([]string, 0, len(items))
	for _, it := range items {
		out = append(out, it.(map[string]any)["text"].(string))
	}
	return out
}

// resume_previous takes the session back to the conversation before the
// reset: the connection that asked and a second connection of the same
// principal both get a reset frame (reason resume) with the reopened
// history, and the next message is answered there (the echo agent's
// history count shows it).
func TestResumePreviousSwitchesEveryConnection(t *testing.T) {
	e := newEnv(t, agent.Echo{}, WSOptions{}, nil, nil)
	a, ready := e.connect(map[string]any{"user": "ann"})
	b, _ := e.connect(map[string]any{"user": "ann"})
	a.send(map[string]any{"type": "message", "id": "a1", "text": "one"})
	a.expect("reply")
	a.send(map[string]any{"type": "reset"})
	a.expect("reset")
	if r := b.expect("reset"); r["reason"] != "manual" {
		t.Fatalf("B told of the reset: %v", r)
	}
	a.send(map[string]any{"type": "message", "id": "a2", "text": "two"})
	if rep := a.expect("reply"); rep["text"] != "echo: two (history: 0)" {
		t.Fatalf("after reset: %v", rep)
	}

	a.send(map[string]any{"type": "resume_previous"})
	for name, c := range map[string]*client{"asking": a, "other": b} {
		r := c.expect("reset")
		got := historyTexts(r)
		if r["reason"] != "resume" || r["conversation"] != ready["conversation"] ||
			len(got) != 2 || got[0] != "one" || got[1] != "echo: one (history: 0)" {
			t.Fatalf("%s connection got %v", name, r)
		}
	}
	b.send(map[string]any{"type": "message", "id": "b1", "text": "three"})
	if rep := b.expect("reply"); rep["text"] != "echo: three (history: 2)" {
		t.Fatalf("after resume_previous: %v", rep)
	}
	convs, _ := e.db.ListConversations(context.Background(), store.ListFilter{SessionKey: "websocket:ann"})
	if len(convs) != 2 {
		t.Fatalf("%d conversations, want both kept", len(convs))
	}
}

// With nothing archived, resume_previous gets not_found and the
// connection goes on.
func TestResumePreviousWithNothingToResume(t *testing.T) {
	e := newEnv(t, agent.Echo{}, WSOptions{}, nil, nil)
	c, _ := e.connect(map[string]any{"user": "bob"})
	c.send(map[string]any{"type": "resume_previous"})
	if f := c.expect("error"); f["code"] != "not_found" {
		t.Fatalf("resume_previous with nothing archived: %v", f)
	}
	c.send(map[string]any{"type": "message", "id": "m", "text": "hi"})
	if rep := c.expect("reply"); rep["text"] != "echo: hi (history: 0)" {
		t.Fatalf("after not_found: %v", rep)
	}
}

// An idle reset frame says how long the idle period is, so a client can
// tell why.
func TestIdleResetFrameSaysHowLong(t *testing.T) {
	clock := clocktest.New(time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC))
	e := newEnv(t, agent.Echo{}, WSOptions{}, map[string]sessions.Policy{
		Channel: {MaxHistory: 50, Reset: sessions.ResetPolicy{Mode: sessions.ResetIdle, IdleFor: 45 * time.Minute}},
	}, clock.Now)
	c, _ := e.connect(map[string]any{"user": "cy"})
	c.send(map[string]any{"type": "message", "text": "hi"})
	c.expect("reply")
	clock.Advance(time.Hour)
	if n, err := sessions.NewSweeper(e.mgr, nil).SweepIdle(context.Background()); n != 1 || err != nil {
		t.Fatalf("sweep = %d, %v", n, err)
	}
	if r := c.expect("reset"); r["reason"] != "idle" || num(r["idle_minutes"]) != 45 {
		t.Fatalf("idle reset frame = %v", r)
	}
}

// A resume_previous made through replica A switches the same user's
// client on B to the reopened conversation, with its history.
func TestResumePreviousReachesClientsOnAnotherReplica(t *testing.T) {
	dsn := pgtest.DSN(t)
	a := newReplica(t, dsn, agent.Echo{})
	b := newReplica(t, dsn, agent.Echo{})
	ca, ready := a.connect(map[string]any{"user": "ann"})
	cb, _ := b.connect(map[string]any{"user": "ann"})
	ca.send(map[string]any{"type": "message", "id": "a1", "text": "one"})
	ca.expect("reply")
	ca.send(map[string]any{"type": "reset"})
	ca.expect("reset")
	cb.expectSkipping("reset", "reply") // A's reply may be forwarded to B too
	ca.send(map[string]any{"type": "resume_previous"})
	ca.expect("reset")
	r := cb.expectSkipping("reset", "reply")
	if got := historyTexts(r); r["reason"] != "resume" || r["conversation"] != ready["conversation"] || len(got) != 2 || got[0] != "one" {
		t.Fatalf("client on B got %v", r)
	}
	cb.send(map[string]any{"type": "message", "id": "b1", "text": "two"})
	if rep := cb.expect("reply"); rep["text"] != "echo: two (history: 2)" {
		t.Fatalf("on B after the resume: %v", rep)
	}
}

// expectSkipping returns the next frame of type typ, skipping frames of
// the skip type (and deltas and acks).
func (c *client) expectSkipping(typ, skip string) map[string]any {
	c.t.Helper()
	for {
		f, err := c.next()
		if err != nil {
			c.t.Fatalf("waiting for %s: %v", typ, err)
		}
		switch f["type"] {
		case typ:
			return f
		case skip, "delta", "ack":
			continue
		}
		c.t.Fatalf("got %v, want a %s frame", f, typ)
	}
}

// A sweep's announcement that runs after a resume_previous reopened the
// conversation the sweep archived (the user went back at the moment of
// the sweep) says nothing: the resume's frame, with the history, already
// told the client, and an idle reset frame naming the reopened
// conversation would make the page show it as new and empty.
func TestSweepAnnouncedAfterResumeSaysNothing(t *testing.T) {
	e := newEnv(t, agent.Echo{}, WSOptions{}, nil, nil)
	a, ready := e.connect(map[string]any{"user": "sue"})
	a.send(map[string]any{"type": "message", "id": "s1", "text": "one"})
	a.expect("reply")
	a.send(map[string]any{"type": "reset"})
	a.expect("reset")
	a.send(map[string]any{"type": "message", "id": "s2", "text": "two"})
	a.expect("reply")
	a.send(map[string]any{"type": "resume_previous"})
	if r := a.expect("reset"); r["reason"] != "resume" || r["conversation"] != ready["conversation"] {
		t.Fatalf("resume: %v", r)
	}
	// The sweep had archived the first conversation before the resume
	// reopened it; its announcement comes only now.
	key := sessions.WebSocketKey("sue")
	e.ws.announceSweep(sessions.ResetEvent{Channel: Channel, SessionKey: key, OldConversation: ready["conversation"].(string),
		Reason: sessions.ReasonIdle}, e.ws.connsOf(key))
	// Anything it sent would come before the answer to this stop.
	a.send(map[string]any{"type": "stop"})
	if f := a.expect("error"); f["code"] != "not_found" {
		t.Fatalf("after the late sweep announcement: %v", f)
	}
}
