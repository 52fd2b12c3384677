package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
)

var quiet = slog.New(slog.DiscardHandler)

// gate is an LLM stand-in whose replies wait until the test releases them.
// It streams "partial " first so tests can see deltas and interruptions.
type gate struct {
	mu      sync.Mutex
	release chan struct{}
	started chan string
	calls   int
}

func newGate() *gate { return &gate{release: make(chan struct{}), started: make(chan string, 16)} }

func (g *gate) Name() string  { return "gate" }
func (g *gate) Model() string { return "gate" }
func (g *gate) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	g.mu.Lock()
	g.calls++
	g.mu.Unlock()
	onDelta("partial ")
	g.started <- req.Input
	select {
	case <-ctx.Done():
		return agent.Reply{}, ctx.Err()
	case <-g.release:
	}
	return agent.Echo{}.Reply(ctx, req, nil)
}

type env struct {
	t   *testing.T
	srv *httptest.Server
	mgr *sessions.Manager
	db  *store.DB
	ws  *WebSocket
}

func newEnv(t *testing.T, ag agent.Agent, opts WSOptions, policies map[string]sessions.Policy, now func() time.Time) *env {
	t.Helper()
	db, err := store.Open(context.Background(), store.DriverSQLite, filepath.Join(t.TempDir(), "g.db"), store.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mgr := sessions.New(db, ag, sessions.Options{Logger: quiet, Policies: policies, Now: now})
	return serveEnv(t, db, mgr, opts, false)
}

// serveEnv serves mgr's WebSocket channel and web page on a loopback HTTP
// server, its rescuer running when rescue is set, and stops it all when
// the test ends.
func serveEnv(t *testing.T, db *store.DB, mgr *sessions.Manager, opts WSOptions, rescue bool) *env {
	t.Helper()
	opts.Logger = quiet
	ws := NewWebSocket(mgr, opts)
	if rescue {
		mgr.StartRescuer()
	}
	srv := New(quiet)
	srv.Handle("GET /ws", ws)
	srv.Handle("GET /", WebPage())
	hs := httptest.NewServer(srv.mux)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ws.Shutdown(ctx)
		hs.Close()
		mgr.Shutdown(ctx)
		db.Close()
	})
	return &env{t: t, srv: hs, mgr: mgr, db: db, ws: ws}
}

type client struct {
	t *testing.T
	c *websocket.Conn
}

func (e *env) dial(header http.Header, query string) (*client, *http.Response, error) {
	url := "ws" + strings.TrimPrefix(e.srv.URL, "http") + "/ws" + query
	c, resp, err := websocket.DefaultDialer.Dial(url, header)
	if err != nil {
		return nil, resp, err
	}
	e.t.Cleanup(func() { c.Close() })
	return &client{t: e.t, c: c}, resp, nil
}

func (e *env) connect(hello map[string]any) (*client, map[string]any) {
	e.t.Helper()
	c, _, err := e.dial(nil, "")
	if err != nil {
		e.t.Fatal(err)
	}
	if hello == nil {
		hello = map[string]any{}
	}
	hello["type"] = "hello"
	c.send(hello)
	return c, c.expect("ready")
}

func (c *client) send(v any) {
	c.t.Helper()
	if err := c.c.WriteJSON(v); err != nil {
		c.t.Fatal(err)
	}
}

func (c *client) sendRaw(s string) {
	c.t.Helper()
	if err := c.c.WriteMessage(websocket.TextMessage, []byte(s)); err != nil {
		c.t.Fatal(err)
	}
}

// next returns the next frame, or the close error.
func (c *client) next() (map[string]any, error) {
	c.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, data, err := c.c.ReadMessage()
	if err != nil {
		return nil, err
	}
	var f map[string]any
	if err := json.Unmarshal(data, &f); err != nil {
		c.t.Fatalf("server sent non-JSON %q", data)
	}
	return f, nil
}

// expect returns the next frame of the given type, skipping deltas and
// acks unless they are what is expected.
func (c *client) expect(typ string) map[string]any {
	c.t.Helper()
	for {
		f, err := c.next()
		if err != nil {
			c.t.Fatalf("waiting for %s: %v", typ, err)
		}
		if (f["type"] == "delta" || f["type"] == "ack") && f["type"] != typ {
			continue
		}
		if f["type"] != typ {
			c.t.Fatalf("got %v, want a %s frame", f, typ)
		}
		return f
	}
}

// expectClose reads until the server closes, and returns the close code.
func (c *client) expectClose() int {
	c.t.Helper()
	for {
		_, err := c.next()
		if err == nil {
			continue
		}
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			return ce.Code
		}
		c.t.Fatalf("want a close frame, got %v", err)
	}
}

func num(v any) int64 { f, _ := v.(float64); return int64(f) }

func TestHelloMessageAckReply(t *testing.T) {
	e := newEnv(t, agent.Echo{}, WSOptions{}, nil, nil)
	c, ready := e.connect(map[string]any{"user": "ann"})
	if ready["resumed"] != false || len(ready["session"].(string)) < 40 || ready["user"] != "ann" || ready["conversation"] == "" {
		t.Fatalf("ready = %v", ready)
	}
	if h := ready["history"].([]any); len(h) != 0 {
		t.Fatalf("history of a new user = %v", h)
	}
	c.send(map[string]any{"type": "message", "id": "c-1", "text": "hi"})
	ack := c.expect("ack")
	if ack["id"] != "c-1" || num(ack["seq"]) != 1 {
		t.Fatalf("ack = %v", ack)
	}
	delta := c.expect("delta")
	if delta["reply_to"] != "c-1" || delta["text"] != "echo: hi (history: 0)" {
		t.Fatalf("delta = %v", delta)
	}
	reply := c.expect("reply")
	if reply["reply_to"] != "c-1" || num(reply["seq"]) != 2 || reply["text"] != "echo: hi (history: 0)" || reply["status"] != "ok" {
		t.Fatalf("reply = %v", reply)
	}
	c.send(map[string]any{"type": "message", "text": "no id"})
	c.expect("ack")
	if r := c.expect("reply"); r["text"] != "echo: no id (history: 2)" {
		t.Fatalf("second reply = %v", r)
	}
}

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

// waitFor polls for an asynchronous effect (a turn finishing on another
// goroutine), bounded; no policy is timed by it.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 10s")
		}
		time.Sleep(5 * time.Millisecond)
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
	if n, err := e.mgr.SweepIdle(context.Background()); n != 1 || err != nil {
		t.Fatalf("sweep = %d, %v", n, err)
	}
	r := c.expect("reset")
	if r["reason"] != "idle" || r["conversation"] == "" || r["conversation"] == ready["conversation"] {
		t.Fatalf("reset notice = %v", r)
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

func TestAuth(t *testing.T) {
	tokens := map[string]string{"alice": "alice-token-0123456789", "bob": "bob-token-0123456789xx"}
	e := newEnv(t, agent.Echo{}, WSOptions{AuthTokens: tokens}, nil, nil)

	t.Run("bearer header", func(t *testing.T) {
		c, _, err := e.dial(http.Header{"Authorization": {"Bearer alice-token-0123456789"}}, "")
		if err != nil {
			t.Fatal(err)
		}
		c.send(map[string]any{"type": "hello", "user": "mallory"})
		if r := c.expect("ready"); r["user"] != "alice" {
			t.Fatalf("principal = %v, want alice whatever hello says", r["user"])
		}
	})
	t.Run("query token", func(t *testing.T) {
		c, _, err := e.dial(nil, "?token=bob-token-0123456789xx")
		if err != nil {
			t.Fatal(err)
		}
		c.send(map[string]any{"type": "hello"})
		if r := c.expect("ready"); r["user"] != "bob" {
			t.Fatalf("ready = %v", r)
		}
	})
	t.Run("token in hello", func(t *testing.T) {
		c, _, _ := e.dial(nil, "")
		c.send(map[string]any{"type": "hello", "token": "bob-token-0123456789xx"})
		if r := c.expect("ready"); r["user"] != "bob" {
			t.Fatalf("ready = %v", r)
		}
	})
	for name, tc := range map[string]struct {
		header http.Header
		query  string
		frame  string
	}{
		"wrong header token":   {header: http.Header{"Authorization": {"Bearer nope-nope-nope-nope"}}, frame: `{"type":"hello"}`},
		"no token at all":      {frame: `{"type":"hello","user":"alice"}`},
		"wrong token in hello": {frame: `{"type":"hello","token":"alice-token-0123456788"}`},
		"message before hello": {frame: `{"type":"message","text":"hi"}`},
		"garbage before hello": {frame: `not json`},
	} {
		t.Run(name, func(t *testing.T) {
			c, _, err := e.dial(tc.header, tc.query)
			if err != nil {
				t.Fatal(err)
			}
			c.sendRaw(tc.frame)
			f, err := c.next()
			if err == nil && (f["type"] != "error" || f["code"] != "unauthorized") {
				t.Fatalf("got %v, want an unauthorized error", f)
			}
			if code := c.expectClose(); code != websocket.ClosePolicyViolation {
				t.Fatalf("close code %d, want 1008", code)
			}
		})
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

func TestRateLimit(t *testing.T) {
	e := newEnv(t, agent.Echo{}, WSOptions{RatePerSecond: 1, RateBurst: 3}, nil, nil)
	c, _ := e.connect(map[string]any{"user": "ann"}) // hello used one token
	for i := 0; i < 10; i++ {
		c.send(map[string]any{"type": "stop"})
	}
	limited := 0
	for i := 0; i < 10; i++ {
		f := c.expect("error")
		if f["code"] == "rate_limited" {
			limited++
		}
	}
	if limited < 5 {
		t.Fatalf("%d of 10 flooding frames were rate limited, want most", limited)
	}
}

func TestHelloDeadline(t *testing.T) {
	e := newEnv(t, agent.Echo{}, WSOptions{HelloTimeout: 100 * time.Millisecond}, nil, nil)
	c, _, _ := e.dial(nil, "")
	if code := c.expectClose(); code != websocket.ClosePolicyViolation {
		t.Fatalf("close code %d, want 1008 when no hello arrives", code)
	}
}

func TestOriginCheck(t *testing.T) {
	e := newEnv(t, agent.Echo{}, WSOptions{AllowedOrigins: []string{"https://chat.example.com"}}, nil, nil)
	if _, resp, err := e.dial(http.Header{"Origin": {"https://evil.example.com"}}, ""); err == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("foreign origin accepted: %v", err)
	}
	if _, _, err := e.dial(http.Header{"Origin": {"https://chat.example.com"}}, ""); err != nil {
		t.Fatalf("allowed origin refused: %v", err)
	}
	if _, _, err := e.dial(http.Header{"Origin": {e.srv.URL}}, ""); err != nil {
		t.Fatalf("same origin refused: %v", err)
	}
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

func TestManyConcurrentClients(t *testing.T) {
	// Queue mode: each message is its own turn, so every client gets one
	// reply per message, in order (collect would merge the ones sent
	// while a turn runs).
	e := newEnv(t, agent.Echo{}, WSOptions{}, map[string]sessions.Policy{
		Channel: {MaxHistory: 100, Busy: sessions.BusyPolicy{Mode: sessions.BusyQueue}},
	}, nil)
	const clients, msgs = 200, 3
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c, _, err := e.dial(nil, "")
			if err != nil {
				errs <- err
				return
			}
			c.c.WriteJSON(map[string]any{"type": "hello", "user": fmt.Sprint("u", i)})
			for j := 0; j < msgs; j++ {
				c.c.WriteJSON(map[string]any{"type": "message", "id": fmt.Sprint("m", j), "text": fmt.Sprint("hello ", j)})
			}
			replies := 0
			for replies < msgs {
				f, err := c.next()
				if err != nil {
					errs <- fmt.Errorf("client %d: %v", i, err)
					return
				}
				if f["type"] == "reply" {
					want := fmt.Sprintf("echo: hello %d (history: %d)", replies, replies*2)
					if f["text"] != want || f["reply_to"] != fmt.Sprint("m", replies) {
						errs <- fmt.Errorf("client %d reply %d = %v, want %q", i, replies, f, want)
						return
					}
					replies++
				}
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var n int64
	e.db.Gorm().Model(&sessions.Message{}).Count(&n)
	if n != clients*msgs*2 {
		t.Fatalf("%d messages stored, want %d", n, clients*msgs*2)
	}
}

func TestWebPageIsServed(t *testing.T) {
	e := newEnv(t, agent.Echo{}, WSOptions{}, nil, nil)
	for path, want := range map[string]string{"/": "<title>chatgate</title>", "/app.js": "protocol v1", "/style.css": "@media"} {
		resp, err := http.Get(e.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		buf := make([]byte, 64<<10)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(b.String(), want) {
			t.Fatalf("GET %s = %d, lacks %q", path, resp.StatusCode, want)
		}
		if strings.Contains(b.String(), "https://") && path != "/app.js" {
			t.Fatalf("GET %s references an external resource", path)
		}
	}
}

func TestOpenAIStreamsDeltaFrames(t *testing.T) {
	llm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, part := range []string{"Hel", "lo ", "there"} {
			fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", part)
			w.(http.Flusher).Flush()
		}
		fmt.Fprint(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	}))
	defer llm.Close()
	ag := agent.NewOpenAI(agent.OpenAIConfig{BaseURL: llm.URL, APIKey: "k", Model: "m", Stream: true})
	e := newEnv(t, ag, WSOptions{}, nil, nil)
	c, _ := e.connect(map[string]any{"user": "ann"})
	c.send(map[string]any{"type": "message", "id": "q", "text": "hi"})
	c.expect("ack")
	var streamed []string
	for {
		f, err := c.next()
		if err != nil {
			t.Fatal(err)
		}
		if f["type"] == "delta" {
			streamed = append(streamed, f["text"].(string))
			continue
		}
		if f["type"] != "reply" || f["text"] != "Hello there" || f["reply_to"] != "q" {
			t.Fatalf("final frame = %v", f)
		}
		break
	}
	if strings.Join(streamed, "|") != "Hel|lo |there" {
		t.Fatalf("deltas = %q", streamed)
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
	if ran, _, err := e.mgr.Recover(context.Background(), time.Hour); ran != 1 || err != nil {
		t.Fatalf("Recover = %d, %v", ran, err)
	}
	// One turn answers both (busy mode collect); its reply covers them.
	r := c.expect("reply")
	if r["reply_to"] != "lost-2" || r["text"] != "echo: are you back?\nhello? (history: 0)" || num(r["seq"]) != 3 ||
		fmt.Sprint(strs(r["covers"])) != "[lost-1 lost-2]" {
		t.Fatalf("recovered reply = %v", r)
	}
}

// strs is a JSON array of strings as a []string.
func strs(v any) []string {
	var out []string
	for _, s := range v.([]any) {
		out = append(out, s.(string))
	}
	return out
}

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

// openFirst is the session manager with a hook that runs as a hello
// starts reading the history its ready carries.
type openFirst struct {
	Sessions
	hook func(in sessions.Inbound)
}

func (o openFirst) Open(ctx context.Context, in sessions.Inbound, afterSeq int64, limit int) (sessions.Transcript, error) {
	o.hook(in)
	return o.Sessions.Open(ctx, in, afterSeq, limit)
}

// A reply delivered to a key while a connection of it is saying hello —
// registered for the key's frames, its ready not yet sent — reaches the
// client after ready, never before it.
func TestNothingBeforeReady(t *testing.T) {
	e := newEnv(t, agent.Echo{}, WSOptions{}, nil, nil)
	var ws *WebSocket
	ws = NewWebSocket(openFirst{Sessions: e.mgr, hook: func(in sessions.Inbound) {
		ws.deliverStored(context.Background(), sessions.Delivery{Channel: Channel, SessionKey: in.SessionKey, ClientMsgID: "c-9",
			UserSeq: 1, Reply: sessions.Reply{Seq: 2, Text: "finished while away", Status: sessions.MsgOK},
			Turn: sessions.TurnRef{ConversationID: "conv", Seq: 1}})
	}}, WSOptions{Logger: quiet})
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
