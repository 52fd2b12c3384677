package gateway

import (
	"context"
	"fmt"
	"testing"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/pgtest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
)

// newReplica runs one gateway of several on the PostgreSQL schema dsn:
// its own store, session manager (listening for the others' events),
// WebSocket channel and loopback HTTP server.
func newReplica(t *testing.T, dsn string, ag agent.Agent) *env {
	t.Helper()
	db, err := store.Open(context.Background(), store.DriverPostgres, dsn, store.OpenOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return serveEnv(t, db, sessions.New(db, ag, sessions.Options{Logger: quiet, Events: db.Events()}), WSOptions{}, true)
}

// A client sends a slow message to replica A, loses its connection,
// resumes on replica B, and gets the reply A stores there, live.
func TestReplyFromAnotherReplicaArrivesLive(t *testing.T) {
	dsn := pgtest.DSN(t)
	g := newGate()
	a := newReplica(t, dsn, g)
	b := newReplica(t, dsn, agent.Echo{})

	c, ready := a.connect(map[string]any{"user": "ann"})
	c.send(map[string]any{"type": "message", "id": "c-1", "text": "slow question"})
	ack := c.expect("ack")
	<-g.started
	c.c.UnderlyingConn().Close() // the phone changes networks; the balancer picks B

	c2, ready2 := b.connect(map[string]any{"session": ready["session"], "last_seq": num(ack["seq"]), "conversation": ready["conversation"]})
	if ready2["resumed"] != true || ready2["conversation"] != ready["conversation"] || len(ready2["history"].([]any)) != 0 {
		t.Fatalf("ready on B = %v", ready2)
	}
	close(g.release) // A stores the reply
	r := c2.expect("reply")
	if r["reply_to"] != "c-1" || num(r["seq"]) != 2 || r["text"] != "echo: slow question (history: 0)" || r["status"] != "ok" ||
		fmt.Sprint(strs(r["covers"])) != "[c-1]" {
		t.Fatalf("reply on B = %v", r)
	}
}

// A reset made through replica A reaches the same user's client on B.
func TestResetOnOneReplicaReachesClientsOnAnother(t *testing.T) {
	dsn := pgtest.DSN(t)
	a := newReplica(t, dsn, agent.Echo{})
	b := newReplica(t, dsn, agent.Echo{})
	ca, readyA := a.connect(map[string]any{"user": "ann"})
	cb, readyB := b.connect(map[string]any{"user": "ann"})
	if readyA["conversation"] != readyB["conversation"] {
		t.Fatalf("one user, two conversations: %v, %v", readyA["conversation"], readyB["conversation"])
	}
	ca.send(map[string]any{"type": "reset"})
	local := ca.expect("reset")
	remote := cb.expect("reset")
	if remote["conversation"] != local["conversation"] || remote["conversation"] == readyA["conversation"] || remote["reason"] != "manual" {
		t.Fatalf("reset on A = %v, on B = %v", local, remote)
	}
	// B's cached conversation is gone: its next turn is in the new one.
	cb.send(map[string]any{"type": "message", "id": "b-1", "text": "hi"})
	if r := cb.expect("reply"); r["text"] != "echo: hi (history: 0)" {
		t.Fatalf("reply on B after the reset = %v", r)
	}
}

// After a gap in the events of other replicas, each connection is sent
// the replies stored after the last seq it was sent, and nothing it had.
func TestMissedEventsAreRecheckedFromStorage(t *testing.T) {
	e := newEnv(t, agent.Echo{}, WSOptions{}, nil, nil)
	c, _ := e.connect(map[string]any{"user": "ann"})
	c.send(map[string]any{"type": "message", "id": "c-1", "text": "here"})
	if r := c.expect("reply"); num(r["seq"]) != 2 {
		t.Fatalf("reply = %v", r)
	}
	// Another runner answers a message of ann's; this channel is not told.
	in := sessions.Inbound{Channel: Channel, SessionKey: sessions.WebSocketKey("ann"), UserID: "ann", ClientMsgID: "x-1", Text: "elsewhere"}
	if _, err := e.mgr.Handle(context.Background(), in, sessions.Hooks{}); err != nil {
		t.Fatal(err)
	}
	e.ws.onReply(sessions.ReplyEvent{Missed: true})
	r := c.expect("reply")
	if r["reply_to"] != "x-1" || num(r["seq"]) != 4 || r["text"] != "echo: elsewhere (history: 2)" || fmt.Sprint(strs(r["covers"])) != "[x-1]" {
		t.Fatalf("re-checked reply = %v", r)
	}
	// Nothing else was re-sent: the next frames answer the next message.
	c.send(map[string]any{"type": "message", "id": "c-2", "text": "again"})
	if a := c.expect("ack"); a["id"] != "c-2" {
		t.Fatalf("ack = %v", a)
	}
	if r := c.expect("reply"); r["reply_to"] != "c-2" || num(r["seq"]) != 6 {
		t.Fatalf("reply after the re-check = %v", r)
	}
}
