package gateway

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions"
)

// Tests of hello and ready: resuming with a session token, refusing
// another principal's token, and nothing sent before ready.

func TestResumeDeliversReplyFinishedWhileAway(t *testing.T) {
	g := newGate()
	e := newEnv(t, g, WSOptions{}, nil, nil)
	c, ready := e.connect(map[string]any{"user": "ann"})
	token := ready["session"].(string)
	conv := ready["conversation"].(string)
	c.send(map[string]any{"type": "message", "id": "c-1", "text": "slow question"})
	ack := c.expect("ack")
	<-g.started
	c.c.UnderlyingConn().Close() // the phone loses its connection
	close(g.release)             // the reply finishes while nobody listens
	waitFor(t, func() bool {
		msgs, _ := e.db.MessagesAfter(context.Background(), conv, 1, 0)
		return len(msgs) == 1
	})
	c2, ready2 := e.connect(map[string]any{"session": token, "last_seq": num(ack["seq"]), "conversation": conv})
	if ready2["resumed"] != true || ready2["session"] != token || ready2["user"] != "ann" || ready2["conversation"] != conv {
		t.Fatalf("ready on resume = %v", ready2)
	}
	h := ready2["history"].([]any)
	if len(h) != 1 {
		t.Fatalf("history = %v, want exactly the missed reply", h)
	}
	item := h[0].(map[string]any)
	if num(item["seq"]) != 2 || item["role"] != "assistant" || item["text"] != "echo: slow question (history: 0)" || item["status"] != "ok" {
		t.Fatalf("missed reply = %v", item)
	}
	// A repeated id after the reconnect is answered from storage.
	c2.send(map[string]any{"type": "message", "id": "c-1", "text": "slow question"})
	if a := c2.expect("ack"); num(a["seq"]) != 1 {
		t.Fatalf("ack of resent id = %v", a)
	}
	if r := c2.expect("reply"); num(r["seq"]) != 2 || r["text"] != "echo: slow question (history: 0)" {
		t.Fatalf("reply to resent id = %v", r)
	}
	g.mu.Lock()
	calls := g.calls
	g.mu.Unlock()
	if calls != 1 {
		t.Fatalf("agent ran %d times, want 1", calls)
	}
}

func TestCrossPrincipalResumeIsRefused(t *testing.T) {
	t.Run("auth mode", func(t *testing.T) {
		tokens := map[string]string{"alice": "alice-token-0123456789", "bob": "bob-token-0123456789xx"}
		e := newEnv(t, agent.Echo{}, WSOptions{AuthTokens: tokens}, nil, nil)
		a, _, _ := e.dial(nil, "?token=alice-token-0123456789")
		a.send(map[string]any{"type": "hello"})
		ra := a.expect("ready")
		a.send(map[string]any{"type": "message", "text": "alice's secret"})
		a.expect("reply")
		b, _, _ := e.dial(nil, "?token=bob-token-0123456789xx")
		b.send(map[string]any{"type": "hello", "session": ra["session"], "last_seq": 0})
		rb := b.expect("ready")
		if rb["resumed"] != false || rb["session"] == ra["session"] || rb["user"] != "bob" || len(rb["history"].([]any)) != 0 {
			t.Fatalf("bob with alice's token got %v", rb)
		}
	})
	t.Run("dev mode", func(t *testing.T) {
		e := newEnv(t, agent.Echo{}, WSOptions{}, nil, nil)
		a, ra := e.connect(map[string]any{"user": "alice"})
		a.send(map[string]any{"type": "message", "text": "alice's secret"})
		a.expect("reply")
		_, rb := e.connect(map[string]any{"user": "bob", "session": ra["session"]})
		if rb["resumed"] != false || rb["user"] != "bob" || len(rb["history"].([]any)) != 0 {
			t.Fatalf("bob with alice's token got %v", rb)
		}
		_, rc := e.connect(map[string]any{"session": "made-up-token"})
		if rc["resumed"] != false || !strings.HasPrefix(rc["user"].(string), "guest-") {
			t.Fatalf("unknown token got %v", rc)
		}
		// The rightful owner resumes without naming herself.
		_, rd := e.connect(map[string]any{"session": ra["session"]})
		if rd["resumed"] != true || rd["user"] != "alice" || len(rd["history"].([]any)) != 2 {
			t.Fatalf("alice's resume = %v", rd)
		}
	})
}

// openFirst is the session manager with a hook that runs as a hello
// starts reading the history its ready carries.
type openFirst struct {
	Transcripts
	hook func(in sessions.Inbound)
}

func (o openFirst) Open(ctx context.Context, in sessions.Inbound, afterSeq int64, limit int) (sessions.Transcript, error) {
	o.hook(in)
	return o.Transcripts.Open(ctx, in, afterSeq, limit)
}

// A reply delivered to a key while a connection of it is saying hello —
// registered for the key's frames, its ready not yet sent — reaches the
// client after ready, never before it.
func TestNothingBeforeReady(t *testing.T) {
	e := newEnv(t, agent.Echo{}, WSOptions{}, nil, nil)
	var ws *WebSocket
	doors := SessionsOf(e.mgr)
	doors.Transcripts = openFirst{Transcripts: e.mgr.Conversations(), hook: func(in sessions.Inbound) {
		ws.deliverStored(context.Background(), sessions.Delivery{Channel: Channel, SessionKey: in.SessionKey, ClientMsgID: "c-9",
			UserSeq: 1, Reply: sessions.Reply{Seq: 2, Text: "finished while away", Status: sessions.MsgOK},
			Turn: sessions.TurnRef{ConversationID: "conv", Seq: 1}})
	}}
	ws = NewWebSocket(doors, WSOptions{Logger: quiet})
	srv := httptest.NewServer(ws)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ws.Shutdown(ctx)
		srv.Close()
	})
	c, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	cl := &client{t: t, c: c}
	cl.send(map[string]any{"type": "hello", "user": "ann"})
	cl.expect("ready")
	if r := cl.expect("reply"); r["text"] != "finished while away" || r["reply_to"] != "c-9" {
		t.Fatalf("reply after ready = %v", r)
	}
}
