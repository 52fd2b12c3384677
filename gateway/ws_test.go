package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/agent/openai"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
)

// The WebSocket channel's test harness — an agent the test holds back
// (gate), a channel served on loopback (env), a client speaking protocol
// v1 — and tests of the whole path, hello to reply.

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
	ws := NewWebSocket(SessionsOf(mgr), opts)
	if rescue {
		r := mgr.Rescuer()
		r.Listen()
		r.Start()
		t.Cleanup(r.Stop)
	}
	srv := New(quiet)
	srv.Handle("GET /ws", ws)
	srv.Handle("GET "+MediaPath+"{id}", ws.MediaHandler())
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

// strs is a JSON array of strings as a []string.
func strs(v any) []string {
	var out []string
	for _, s := range v.([]any) {
		out = append(out, s.(string))
	}
	return out
}

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
	ag := openai.New(openai.Config{BaseURL: llm.URL, APIKey: "k", Model: "m", Stream: true})
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
