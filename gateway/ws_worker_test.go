package gateway

import (
	"fmt"
	"testing"
	"time"

	"github.com/chatgate/chatgate/sessions"
)

// Tests of the frames a connection's worker runs after hello: bursts
// acknowledged at once and answered once, the bound on messages waiting,
// and stop.

// Messages sent while a turn runs are acknowledged at once and answered
// by one reply that covers them; a resend of a covered id gets that reply.
func TestBurstIsAckedAtOnceAndAnsweredOnce(t *testing.T) {
	g := newGate()
	e := newEnv(t, g, WSOptions{}, map[string]sessions.Policy{
		Channel: {MaxHistory: 100, Busy: sessions.BusyPolicy{Mode: sessions.BusyCollect}},
	}, nil)
	c, _ := e.connect(map[string]any{"user": "ann"})
	c.send(map[string]any{"type": "message", "id": "c-1", "text": "first"})
	c.expect("ack")
	<-g.started // c-1's turn runs until released
	for i, id := range []string{"c-2", "c-3", "c-4"} {
		c.send(map[string]any{"type": "message", "id": id, "text": fmt.Sprint("more ", i)})
	}
	for i, id := range []string{"c-2", "c-3", "c-4"} {
		// The turn is still held: these acks did not wait for it.
		if a := c.expect("ack"); a["id"] != id || num(a["seq"]) != int64(i+2) {
			t.Fatalf("ack = %v, want %s", a, id)
		}
	}
	close(g.release)
	r1 := c.expect("reply")
	if r1["reply_to"] != "c-1" || r1["text"] != "echo: first (history: 0)" || fmt.Sprint(strs(r1["covers"])) != "[c-1]" {
		t.Fatalf("first reply = %v", r1)
	}
	r2 := c.expect("reply")
	if r2["reply_to"] != "c-4" || r2["text"] != "echo: more 0\nmore 1\nmore 2 (history: 2)" ||
		fmt.Sprint(strs(r2["covers"])) != "[c-2 c-3 c-4]" || r2["status"] != "ok" {
		t.Fatalf("burst reply = %v", r2)
	}
	// Nothing else comes for the burst: the next frames are the next
	// message's.
	c.send(map[string]any{"type": "message", "id": "c-5", "text": "after"})
	if a := c.expect("ack"); a["id"] != "c-5" {
		t.Fatalf("ack = %v", a)
	}
	if r := c.expect("reply"); r["reply_to"] != "c-5" || fmt.Sprint(strs(r["covers"])) != "[c-5]" {
		t.Fatalf("reply after the burst = %v", r)
	}
	g.mu.Lock()
	calls := g.calls
	g.mu.Unlock()
	if calls != 3 {
		t.Fatalf("%d agent calls, want 3 (first, the burst, after)", calls)
	}
	// A covered id that is not the last one, resent: its ack, and the
	// reply that answered it, from storage.
	c.send(map[string]any{"type": "message", "id": "c-3", "text": "more 1"})
	if a := c.expect("ack"); a["id"] != "c-3" || num(a["seq"]) != 3 {
		t.Fatalf("ack of the resent id = %v", a)
	}
	if r := c.expect("reply"); r["reply_to"] != "c-4" || num(r["seq"]) != num(r2["seq"]) || r["text"] != r2["text"] ||
		fmt.Sprint(strs(r["covers"])) != "[c-2 c-3 c-4]" {
		t.Fatalf("reply to the resent id = %v", r)
	}
}

// QueueSize bounds the messages a connection has waiting for replies.
func TestWaitingMessagesAreBounded(t *testing.T) {
	g := newGate()
	e := newEnv(t, g, WSOptions{QueueSize: 2}, nil, nil)
	c, _ := e.connect(map[string]any{"user": "ann"})
	c.send(map[string]any{"type": "message", "id": "c-1", "text": "one"})
	c.expect("ack")
	<-g.started
	c.send(map[string]any{"type": "message", "id": "c-2", "text": "two"})
	c.expect("ack")
	c.send(map[string]any{"type": "message", "id": "c-3", "text": "three"})
	if f := c.expect("error"); f["code"] != "rate_limited" {
		t.Fatalf("third message waiting = %v", f)
	}
	close(g.release)
	c.expect("reply")
	if r := c.expect("reply"); r["reply_to"] != "c-2" {
		t.Fatalf("reply = %v", r)
	}
	c.send(map[string]any{"type": "message", "id": "c-3", "text": "three"})
	if r := c.expect("reply"); r["reply_to"] != "c-3" {
		t.Fatalf("reply once the others were answered = %v", r)
	}
}

func TestStop(t *testing.T) {
	g := newGate()
	e := newEnv(t, g, WSOptions{}, nil, nil)
	c, _ := e.connect(map[string]any{"user": "ann"})
	c.send(map[string]any{"type": "stop"})
	if f := c.expect("error"); f["code"] != "not_found" {
		t.Fatalf("stop with nothing running = %v", f)
	}
	c.send(map[string]any{"type": "message", "id": "c-1", "text": "long"})
	c.expect("ack")
	if d := c.expect("delta"); d["text"] != "partial " {
		t.Fatalf("delta = %v", d)
	}
	<-g.started
	c.send(map[string]any{"type": "stop"})
	r := c.expect("reply")
	if r["status"] != "interrupted" || r["text"] != "partial " {
		t.Fatalf("stopped reply = %v", r)
	}
}

// Stop while messages wait for their turn (debounce): the turn is not run,
// and its reply, stopped, covers them.
func TestStopWhileBurstWaits(t *testing.T) {
	g := newGate()
	e := newEnv(t, g, WSOptions{}, map[string]sessions.Policy{
		Channel: {MaxHistory: 100, Busy: sessions.BusyPolicy{Mode: sessions.BusyCollect, Debounce: time.Hour, DebounceMax: time.Hour}},
	}, nil)
	c, _ := e.connect(map[string]any{"user": "ann"})
	c.send(map[string]any{"type": "message", "id": "c-1", "text": "one"})
	c.expect("ack")
	c.send(map[string]any{"type": "message", "id": "c-2", "text": "two"})
	c.expect("ack")
	c.send(map[string]any{"type": "stop"})
	r := c.expect("reply")
	if r["reply_to"] != "c-2" || r["status"] != "interrupted" || r["text"] != "" || fmt.Sprint(strs(r["covers"])) != "[c-1 c-2]" {
		t.Fatalf("stopped burst = %v", r)
	}
	g.mu.Lock()
	calls := g.calls
	g.mu.Unlock()
	if calls != 0 {
		t.Fatalf("%d agent calls for a stopped burst", calls)
	}
}
