package gateway

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions"
)

// Tests of a connection's life: frames the reader refuses without closing,
// the ones it closes for, the hello deadline, keepalive, and shutdown.

func TestBadFramesKeepTheConnection(t *testing.T) {
	e := newEnv(t, agent.Echo{}, WSOptions{RatePerSecond: 1000, RateBurst: 1000}, nil, nil)
	c, _, _ := e.dial(nil, "")
	c.sendRaw(`{"type":"message","text":"too early"}`)
	if f := c.expect("error"); f["code"] != "bad_frame" {
		t.Fatalf("message before hello = %v", f)
	}
	c.send(map[string]any{"type": "hello", "user": "ann"})
	c.expect("ready")
	for _, bad := range []string{
		`not json`,
		`{"type":"dance"}`,
		`{"type":"message"}`,
		`{"type":"message","text":"   "}`,
		`{"type":"hello"}`,
		`{"type":"message","text":"x","extra":1}`,
		`[1,2,3]`,
		`{"type":"message","text":"a"}{"type":"stop"}`,
	} {
		c.sendRaw(bad)
		if f := c.expect("error"); f["code"] != "bad_frame" {
			t.Fatalf("%s: got %v, want bad_frame", bad, f)
		}
	}
	c.c.WriteMessage(websocket.BinaryMessage, []byte{1, 2, 3})
	if f := c.expect("error"); f["code"] != "bad_frame" {
		t.Fatalf("binary frame: %v", f)
	}
	c.send(map[string]any{"type": "message", "id": "ok", "text": "still here"})
	if r := c.expect("reply"); r["text"] != "echo: still here (history: 0)" {
		t.Fatalf("after bad frames: %v", r)
	}
}

func TestOversizeFrameCloses1009(t *testing.T) {
	e := newEnv(t, agent.Echo{}, WSOptions{MaxFrameBytes: 1024}, nil, nil)
	other, _ := e.connect(map[string]any{"user": "bob"})
	c, _ := e.connect(map[string]any{"user": "ann"})
	c.send(map[string]any{"type": "message", "text": strings.Repeat("x", 2000)})
	if code := c.expectClose(); code != websocket.CloseMessageTooBig {
		t.Fatalf("close code %d, want 1009", code)
	}
	other.send(map[string]any{"type": "message", "text": "fine"})
	if r := other.expect("reply"); r["status"] != "ok" {
		t.Fatalf("other connection: %v", r)
	}
	var n int64
	e.db.Gorm().Model(&sessions.Message{}).Where("content LIKE ?", "xxx%").Count(&n)
	if n != 0 {
		t.Fatal("the oversize message was stored")
	}
}

func TestHelloDeadline(t *testing.T) {
	e := newEnv(t, agent.Echo{}, WSOptions{HelloTimeout: 100 * time.Millisecond}, nil, nil)
	c, _, _ := e.dial(nil, "")
	if code := c.expectClose(); code != websocket.ClosePolicyViolation {
		t.Fatalf("close code %d, want 1008 when no hello arrives", code)
	}
}

func TestDeadPeerIsDropped(t *testing.T) {
	e := newEnv(t, agent.Echo{}, WSOptions{PingInterval: 50 * time.Millisecond}, nil, nil)
	// live keeps reading — gorilla answers pings as it reads — and hands
	// its frames over.
	live, _ := e.connect(map[string]any{"user": "live"})
	frames := make(chan map[string]any, 16)
	go func() {
		defer close(frames)
		live.c.SetReadDeadline(time.Time{})
		for {
			var f map[string]any
			if err := live.c.ReadJSON(&f); err != nil {
				return
			}
			frames <- f
		}
	}()
	// dead's WebSocket is never read again, so it never answers a ping.
	// Its socket is read raw, which answers nothing: it ends when the
	// server closes the connection, or times out if it never does.
	dead, _ := e.connect(map[string]any{"user": "dead"})
	raw := dead.c.UnderlyingConn()
	raw.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, raw)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the server never dropped the peer that answers no pings")
	}
	waitFor(t, func() bool { return e.ws.Connections() == 1 })

	// The peer that answers pings outlived the dead one's pong wait, and
	// still talks.
	live.send(map[string]any{"type": "message", "id": "after", "text": "still here"})
	for f := range frames {
		if f["type"] == "reply" {
			if f["text"] != "echo: still here (history: 0)" {
				t.Fatalf("reply = %v", f)
			}
			return
		}
	}
	t.Fatal("the live peer was dropped too")
}

func TestShutdownCloses1001(t *testing.T) {
	e := newEnv(t, agent.Echo{}, WSOptions{}, nil, nil)
	c, _ := e.connect(map[string]any{"user": "ann"})
	e.ws.StopAccepting()
	if _, resp, err := e.dial(nil, ""); err == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("new connection while draining: %v", err)
	}
	e.ws.Shutdown(context.Background())
	if code := c.expectClose(); code != websocket.CloseGoingAway {
		t.Fatalf("close code %d, want 1001", code)
	}
	if n := e.ws.Connections(); n != 0 {
		t.Fatalf("%d connections after shutdown", n)
	}
}
