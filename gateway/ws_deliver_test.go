package gateway

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
)

// Tests of replies and resets reaching connections: a resumed connection
// gets the rest of a running turn, reset notices, the rescuer's replies,
// and no frames of an archived conversation's turn.

func TestResumeWhileTurnRunsGetsTheRestOfTheStream(t *testing.T) {
	g := newGate()
	e := newEnv(t, g, WSOptions{}, nil, nil)
	c, ready := e.connect(map[string]any{"user": "ann"})
	c.send(map[string]any{"type": "message", "id": "c-1", "text": "q"})
	c.expect("ack")
	<-g.started
	c.c.UnderlyingConn().Close()
	waitFor(t, func() bool { return e.ws.Connections() == 0 })
	c2, _ := e.connect(map[string]any{"session": ready["session"], "last_seq": 1, "conversation": ready["conversation"]})
	close(g.release)
	if r := c2.expect("reply"); r["reply_to"] != "c-1" || r["text"] != "echo: q (history: 0)" {
		t.Fatalf("reply on the resumed connection = %v", r)
	}
}

func TestResetFrame(t *testing.T) {
	e := newEnv(t, agent.Echo{}, WSOptions{}, nil, nil)
	c, ready := e.connect(map[string]any{"user": "ann"})
	c.send(map[string]any{"type": "message", "id": "a", "text": "one"})
	c.expect("reply")
	c.send(map[string]any{"type": "reset"})
	r := c.expect("reset")
	if r["reason"] != "manual" || r["conversation"] == "" || r["conversation"] == ready["conversation"] {
		t.Fatalf("reset = %v", r)
	}
	c.send(map[string]any{"type": "message", "id": "b", "text": "two"})
	if rep := c.expect("reply"); rep["text"] != "echo: two (history: 0)" {
		t.Fatalf("after reset = %v", rep)
	}
	convs, _ := e.db.ListConversations(context.Background(), store.ListFilter{SessionKey: "websocket:ann"})
	if len(convs) != 2 {
		t.Fatalf("%d conversations, want the archived one and the new one", len(convs))
	}
}

func TestPolicyResetNotice(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	e := newEnv(t, agent.Echo{}, WSOptions{}, map[string]sessions.Policy{
		Channel: {MaxHistory: 50, Reset: sessions.ResetPolicy{Mode: sessions.ResetIdle, IdleFor: time.Hour}},
	}, clock)
	c, ready := e.connect(map[string]any{"user": "ann"})
	c.send(map[string]any{"type": "message", "text": "hi"})
	c.expect("reply")
	mu.Lock()
	now = now.Add(2 * time.Hour)
	mu.Unlock()
	if n, err := sessions.NewSweeper(e.mgr, nil).SweepIdle(context.Background()); n != 1 || err != nil {
		t.Fatalf("sweep = %d, %v", n, err)
	}
	r := c.expect("reset")
	if r["reason"] != "idle" || r["conversation"] == "" || r["conversation"] == ready["conversation"] {
		t.Fatalf("reset notice = %v", r)
	}
}

func TestRecoveredReplyReachesConnectedClient(t *testing.T) {
	e := newEnv(t, agent.Echo{}, WSOptions{}, nil, nil)
	c, ready := e.connect(map[string]any{"user": "ann"})
	conv, err := e.db.Conversation(context.Background(), ready["conversation"].(string))
	if err != nil {
		t.Fatal(err)
	}
	// Two messages stored by an earlier process that died before answering:
	// their turns are held by a replica that no longer heartbeats.
	id1, id2 := "lost-1", "lost-2"
	now := time.Now().UTC()
	if err := e.db.Append(context.Background(), ledger.Append{Conv: conv, RequireActive: true, At: now,
		Messages: []sessions.Message{
			{ConversationID: conv.ID, Seq: 1, Role: "user", Content: "are you back?", ClientMsgID: &id1, Status: "ok", CreatedAt: now,
				TurnState: sessions.TurnRunning, TurnOwner: "dead-replica", TurnAttempt: 1},
			{ConversationID: conv.ID, Seq: 2, Role: "user", Content: "hello?", ClientMsgID: &id2, Status: "ok", CreatedAt: now,
				TurnState: sessions.TurnRunning, TurnOwner: "dead-replica", TurnAttempt: 1},
		}}); err != nil {
		t.Fatal(err)
	}
	if ran, _, err := e.mgr.Rescuer().Recover(context.Background(), time.Hour); ran != 1 || err != nil {
		t.Fatalf("Recover = %d, %v", ran, err)
	}
	// One turn answers both (busy mode collect); its reply covers them.
	r := c.expect("reply")
	if r["reply_to"] != "lost-2" || r["text"] != "echo: are you back?\nhello? (history: 0)" || num(r["seq"]) != 3 ||
		fmt.Sprint(strs(r["covers"])) != "[lost-1 lost-2]" {
		t.Fatalf("recovered reply = %v", r)
	}
}

// A message sent before a reset is answered in the archived conversation;
// the connection, told of the reset, gets none of that turn's frames.
func TestResetDuringTurnSendsNoFramesOfTheArchivedConversation(t *testing.T) {
	g := newGate()
	e := newEnv(t, g, WSOptions{}, nil, nil)
	c, ready := e.connect(map[string]any{"user": "ann"})
	c.send(map[string]any{"type": "message", "id": "old", "text": "before"})
	c.expect("ack")
	<-g.started
	c.send(map[string]any{"type": "reset"})
	if r := c.expect("reset"); r["conversation"] == ready["conversation"] {
		t.Fatalf("reset = %v", r)
	}
	c.send(map[string]any{"type": "message", "id": "new", "text": "after"})
	if a := c.expect("ack"); a["id"] != "new" || num(a["seq"]) != 1 {
		t.Fatalf("ack = %v", a)
	}
	close(g.release)
	for {
		f, err := c.next()
		if err != nil {
			t.Fatal(err)
		}
		if f["reply_to"] == "old" {
			t.Fatalf("frame of the archived conversation's turn after the reset: %v", f)
		}
		if f["type"] == "reply" {
			if f["reply_to"] != "new" || f["text"] != "echo: after (history: 0)" {
				t.Fatalf("reply = %v", f)
			}
			break
		}
	}
	// The old turn was answered, in the archived conversation.
	msgs, err := e.db.MessagesAfter(context.Background(), ready["conversation"].(string), 0, 0)
	if err != nil || len(msgs) != 2 || msgs[1].Content != "echo: before (history: 0)" {
		t.Fatalf("archived conversation = %+v, %v", msgs, err)
	}
}
