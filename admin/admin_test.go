package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/gateway"
	"github.com/chatgate/chatgate/internal/clocktest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
)

const (
	aliceToken = "alice-token-0123456789"
	bobToken   = "bob-token-abcdefghijkl"
)

// syncBuffer collects log output written from the server's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// records returns the JSON log records written so far.
func (b *syncBuffer) records(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, rec)
	}
	return out
}

// env is a gateway with the admin API: a real SQLite store, a session
// manager, the WebSocket channel and the HTTP server on loopback.
type env struct {
	t     *testing.T
	url   string
	db    *store.DB
	mgr   *sessions.Manager
	ws    *gateway.WebSocket
	srv   *gateway.Server
	clock *clocktest.Clock
	logs  *syncBuffer
}

func newEnv(t *testing.T, ag agent.Agent) *env {
	t.Helper()
	return newEnvWith(t, ag, envOptions{})
}

// envOptions vary the gateway of newEnvWith.
type envOptions struct {
	// db is the store; nil: a new SQLite file.
	db *store.DB
	// managerClock runs the session manager on the env's clock too (the
	// day a turn's usage is tallied for), not on the real one.
	managerClock bool
	// schedules are the operator's schedules of the admin's timetable.
	schedules []sessions.OperatorSchedule
	// policies are the channels' policies (nil: the defaults).
	policies map[string]sessions.Policy
	// tools are the turns' tools (nil: none).
	tools sessions.Toolbox
}

func newEnvWith(t *testing.T, ag agent.Agent, o envOptions) *env {
	t.Helper()
	db := o.db
	if db == nil {
		var err error
		db, err = store.Open(context.Background(), store.DriverSQLite, filepath.Join(t.TempDir(), "g.db"), store.OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	logs := &syncBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	quiet := slog.New(slog.DiscardHandler)
	clock := clocktest.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	turns := CountTurns(gateway.NewMetrics(), clock.Now)
	mopts := sessions.Options{Logger: quiet, Observer: turns, Policies: o.policies, Tools: o.tools}
	if o.managerClock {
		mopts.Now = clock.Now
	}
	mgr := sessions.New(db, ag, mopts)
	ws := gateway.NewWebSocket(gateway.SessionsOf(mgr), gateway.WSOptions{Logger: quiet})
	srv := gateway.New(quiet)
	var tt *sessions.Timetable
	if o.schedules != nil {
		tt = sessions.NewTimetable(db, clock.Now)
		tt.Set(o.schedules)
	}
	adm := New(Options{Tokens: map[string]string{"alice": aliceToken, "bob": bobToken}, Store: db, Manager: mgr,
		Turns: turns, Connections: ws.Connections, Logger: log, Now: clock.Now, Timetable: tt})
	adm.Register(srv.Handle)
	srv.Handle("GET /ws", adm.Gate(ws))
	srv.AddCheck("admin", adm.ReadyCheck())
	srv.Started()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ws.Shutdown(ctx)
		srv.Shutdown(ctx)
		mgr.Shutdown(ctx)
		db.Close()
	})
	return &env{t: t, url: "http://" + ln.Addr().String(), db: db, mgr: mgr, ws: ws, srv: srv, clock: clock, logs: logs}
}

// do calls the API with a token ("" for none) and returns the status and
// body.
func (e *env) do(method, path, token string) (int, http.Header, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, body
}

// call calls the API as alice, wants status, and decodes the JSON answer.
func (e *env) call(method, path string, want int, out any) {
	e.t.Helper()
	code, _, body := e.do(method, path, aliceToken)
	if code != want {
		e.t.Fatalf("%s %s: status %d, want %d: %s", method, path, code, want, body)
	}
	if out != nil {
		if err := json.Unmarshal(body, out); err != nil {
			e.t.Fatalf("%s %s: %v: %s", method, path, err, body)
		}
	}
}

// wsClient is a WebSocket client of the gateway.
type wsClient struct {
	t *testing.T
	c *websocket.Conn
}

func (e *env) connect(user string) *wsClient {
	e.t.Helper()
	c, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(e.url, "http")+"/ws", nil)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	cl := &wsClient{t: e.t, c: c}
	cl.send(map[string]any{"type": "hello", "user": user})
	cl.expect("ready")
	return cl
}

func (c *wsClient) send(v any) {
	c.t.Helper()
	if err := c.c.WriteJSON(v); err != nil {
		c.t.Fatal(err)
	}
}

// expect reads frames until one of the type, failing on a close.
func (c *wsClient) expect(typ string) map[string]any {
	c.t.Helper()
	c.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		var f map[string]any
		if err := c.c.ReadJSON(&f); err != nil {
			c.t.Fatalf("waiting for %s: %v", typ, err)
		}
		if f["type"] == typ {
			return f
		}
	}
}

// say sends a message and waits for its reply.
func (c *wsClient) say(id, text string) map[string]any {
	c.t.Helper()
	c.send(map[string]any{"type": "message", "id": id, "text": text})
	return c.expect("reply")
}

// turn stores a user message of any channel through the manager and
// waits for its reply.
func (e *env) turn(channel, key, user, text string) sessions.Outcome {
	e.t.Helper()
	out, err := e.mgr.Handle(context.Background(), sessions.Inbound{Channel: channel, SessionKey: key, UserID: user, ChatID: user, Text: text}, sessions.Hooks{})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

type listAnswer struct {
	Conversations []sessions.Conversation `json:"conversations"`
	Total         int64                   `json:"total"`
	NextOffset    *int                    `json:"next_offset"`
}

func TestAuth(t *testing.T) {
	e := newEnv(t, agent.Echo{})
	for _, tc := range []struct {
		name, header string
	}{
		{"no token", ""},
		{"wrong token", "Bearer not-a-token-of-anyone"},
		{"a token's prefix", "Bearer " + aliceToken[:10]},
		{"not bearer", "Basic " + aliceToken},
		{"bare token", aliceToken},
	} {
		for _, path := range []string{"/admin/api/sessions", "/admin/api/stats", "/admin/api/usage", "/admin/api/usage?format=csv", "/admin/api/nothing-here"} {
			req, _ := http.NewRequest("GET", e.url+path, nil)
			if tc.header != "" {
				req.Header.Set("Authorization", tc.header)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var body map[string]string
			json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") || body["error"] == "" {
				t.Errorf("%s %s: %d %q %v, want 401 with WWW-Authenticate and an error", tc.name, path, resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body)
			}
		}
	}
	// A refused POST changed nothing.
	if code, _, _ := e.do("POST", "/admin/api/drain", "wrong-token-wrong-token"); code != http.StatusUnauthorized {
		t.Fatalf("drain with a wrong token: %d", code)
	}
	if not := e.srv.NotReady(); len(not) != 0 {
		t.Fatalf("a refused drain drained: %v", not)
	}
	// Each admin's token works, and the log names the admin it belongs to.
	for _, a := range []struct{ name, tok string }{{"alice", aliceToken}, {"bob", bobToken}} { // in this order
		code, _, body := e.do("GET", "/admin/api/sessions", a.tok)
		if code != http.StatusOK {
			t.Fatalf("%s: %d %s", a.name, code, body)
		}
	}
	var who []string
	for _, rec := range e.logs.records(t) {
		if rec["msg"] == "admin action" && rec["action"] == "list" {
			who = append(who, rec["who"].(string))
		}
	}
	if fmt.Sprint(who) != "[alice bob]" {
		t.Fatalf("list actions logged by %v, want [alice bob]", who)
	}
	// An unknown endpoint, with a token: a JSON 404.
	code, _, body := e.do("GET", "/admin/api/nothing-here", aliceToken)
	if code != http.StatusNotFound || !strings.Contains(string(body), `"error"`) {
		t.Fatalf("unknown endpoint: %d %s", code, body)
	}
}

func TestListTranscriptReset(t *testing.T) {
	e := newEnv(t, agent.Echo{})
	ann := e.connect("ann")
	ann.say("a-1", "hello from ann")
	ann.say("a-2", "second from ann")
	e.connect("annette").say("b-1", "hi")
	e.turn("telegram", "telegram:dm:7", "7", "hello from telegram")

	var all listAnswer
	e.call("GET", "/admin/api/sessions", 200, &all)
	if all.Total != 3 || len(all.Conversations) != 3 || all.NextOffset != nil {
		t.Fatalf("all: total %d, %d conversations, next %v", all.Total, len(all.Conversations), all.NextOffset)
	}
	search := func(query string) []string {
		var l listAnswer
		e.call("GET", "/admin/api/sessions?"+query, 200, &l)
		var keys []string
		for _, c := range l.Conversations {
			keys = append(keys, c.SessionKey)
		}
		return keys
	}
	for query, want := range map[string]string{
		"q=ann":               "[websocket:annette websocket:ann]",
		"key=websocket:ann":   "[websocket:ann]",
		"channel=telegram":    "[telegram:dm:7]",
		"user=7":              "[telegram:dm:7]",
		"q=%25":               "[]", // % is matched literally
		"status=archived":     "[]",
		"q=ann&channel=teleg": "[]",
	} {
		if got := fmt.Sprint(search(query)); got != want {
			t.Errorf("%s: %s, want %s", query, got, want)
		}
	}
	// Paging.
	var p1, p2 listAnswer
	e.call("GET", "/admin/api/sessions?limit=2", 200, &p1)
	if len(p1.Conversations) != 2 || p1.Total != 3 || p1.NextOffset == nil || *p1.NextOffset != 2 {
		t.Fatalf("page 1: %+v", p1)
	}
	e.call("GET", "/admin/api/sessions?limit=2&offset=2", 200, &p2)
	if len(p2.Conversations) != 1 || p2.NextOffset != nil || p2.Conversations[0].ID == p1.Conversations[0].ID || p2.Conversations[0].ID == p1.Conversations[1].ID {
		t.Fatalf("page 2: %+v", p2)
	}
	for _, bad := range []string{"limit=0", "limit=-1", "limit=x", "limit=100000", "offset=-3", "status=gone"} {
		code, _, body := e.do("GET", "/admin/api/sessions?"+bad, aliceToken)
		if code != http.StatusBadRequest || !strings.Contains(string(body), `"error"`) {
			t.Errorf("%s: %d %s, want 400", bad, code, body)
		}
	}

	// The transcript, with each user message's turn.
	var l listAnswer
	e.call("GET", "/admin/api/sessions?key=websocket:ann", 200, &l)
	old := l.Conversations[0].ID
	var tr store.Export
	e.call("GET", "/admin/api/conversations/"+old, 200, &tr)
	if tr.Conversation.SessionKey != "websocket:ann" || len(tr.Messages) != 4 {
		t.Fatalf("transcript: %+v", tr)
	}
	for _, m := range tr.Messages {
		switch m.Role {
		case "user":
			if m.TurnState != sessions.TurnAnswered && m.TurnState != sessions.TurnDelivered || m.TurnOwner == "" || m.TurnAttempt < 1 {
				t.Errorf("user message %d: turn %q owner %q attempt %d", m.Seq, m.TurnState, m.TurnOwner, m.TurnAttempt)
			}
		case "assistant":
			if m.TurnState != "" {
				t.Errorf("reply %d has a turn state %q", m.Seq, m.TurnState)
			}
		}
	}
	if tr.Messages[0].Content != "hello from ann" || !strings.Contains(tr.Messages[1].Content, "hello from ann") {
		t.Fatalf("transcript messages: %+v", tr.Messages)
	}
	if code, _, _ := e.do("GET", "/admin/api/conversations/no-such-id", aliceToken); code != http.StatusNotFound {
		t.Fatalf("unknown conversation: %d", code)
	}

	// Reset through the running manager: the connected client is told,
	// and its next message lands in a new conversation.
	var reset map[string]string
	e.call("POST", "/admin/api/sessions/"+url.PathEscape("websocket:ann")+"/reset", 200, &reset)
	if reset["archived"] != old || reset["conversation"] == "" || reset["conversation"] == old {
		t.Fatalf("reset: %v", reset)
	}
	if f := ann.expect("reset"); f["conversation"] != reset["conversation"] || f["reason"] != "manual" {
		t.Fatalf("reset frame: %v", f)
	}
	ann.say("a-3", "after the reset")
	var now listAnswer
	e.call("GET", "/admin/api/sessions?key=websocket:ann&status=active", 200, &now)
	if len(now.Conversations) != 1 || now.Conversations[0].ID != reset["conversation"] || now.Conversations[0].LastSeq != 2 {
		t.Fatalf("after the reset: %+v", now.Conversations)
	}
	e.call("GET", "/admin/api/conversations/"+old, 200, &tr)
	if tr.Conversation.Status != sessions.StatusArchived || tr.Conversation.ResetReason != sessions.ReasonManual || len(tr.Messages) != 4 {
		t.Fatalf("the archived conversation: %+v", tr.Conversation)
	}
	if code, _, _ := e.do("POST", "/admin/api/sessions/websocket:nobody/reset", aliceToken); code != http.StatusNotFound {
		t.Fatalf("reset of an unknown key: %d", code)
	}
}

func TestExport(t *testing.T) {
	e := newEnv(t, agent.Echo{})
	out := e.turn("telegram", "telegram:dm:7", "7", "# not a heading\nsecond line")
	id := out.ConversationID

	code, h, body := e.do("GET", "/admin/api/conversations/"+id+"/export?format=json", aliceToken)
	var ex store.Export
	if code != 200 || !strings.HasPrefix(h.Get("Content-Type"), "application/json") || json.Unmarshal(body, &ex) != nil {
		t.Fatalf("json export: %d %s %s", code, h.Get("Content-Type"), body)
	}
	if ex.Conversation.ID != id || len(ex.Messages) != 2 || ex.Messages[0].Content != "# not a heading\nsecond line" || ex.Messages[0].TurnState == "" {
		t.Fatalf("json export: %+v", ex)
	}
	if !strings.Contains(h.Get("Content-Disposition"), "conversation-"+id+".json") {
		t.Fatalf("json export disposition: %q", h.Get("Content-Disposition"))
	}

	code, h, body = e.do("GET", "/admin/api/conversations/"+id+"/export?format=markdown", aliceToken)
	md := string(body)
	if code != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/markdown") {
		t.Fatalf("markdown export: %d %s", code, h.Get("Content-Type"))
	}
	for _, want := range []string{"# Conversation " + id, "- Session key: `telegram:dm:7`", "## 1 · user · turn answered",
		"> # not a heading\n> second line\n", "## 2 · assistant"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown export lacks %q:\n%s", want, md)
		}
	}
	if code, _, _ := e.do("GET", "/admin/api/conversations/"+id+"/export?format=pdf", aliceToken); code != http.StatusBadRequest {
		t.Fatalf("format pdf: %d", code)
	}
	if code, _, _ := e.do("GET", "/admin/api/conversations/nope/export?format=json", aliceToken); code != http.StatusNotFound {
		t.Fatalf("unknown conversation: %d", code)
	}
}

func TestPurge(t *testing.T) {
	e := newEnv(t, agent.Echo{})
	first := e.turn("telegram", "telegram:dm:7", "7", "one").ConversationID
	e.call("POST", "/admin/api/sessions/telegram:dm:7/reset", 200, nil)
	second := e.turn("telegram", "telegram:dm:7", "7", "two").ConversationID
	if first == second {
		t.Fatal("no new conversation after the reset")
	}
	other := e.turn("telegram", "telegram:dm:8", "8", "three").ConversationID
	e.call("POST", "/admin/api/sessions/telegram:dm:8/reset", 200, nil)

	// An active conversation is never purged.
	if code, _, body := e.do("DELETE", "/admin/api/conversations/"+second, aliceToken); code != http.StatusConflict {
		t.Fatalf("purge of an active conversation: %d %s", code, body)
	}
	e.call("DELETE", "/admin/api/conversations/"+first, 200, nil)
	e.call("GET", "/admin/api/conversations/"+first, 404, nil)
	e.call("DELETE", "/admin/api/conversations/"+first, 404, nil)
	if msgs, err := e.db.MessagesAfter(context.Background(), first, 0, 0); err != nil || len(msgs) != 0 {
		t.Fatalf("messages of the purged conversation: %v %v", msgs, err)
	}
	var tr store.Export
	e.call("GET", "/admin/api/conversations/"+second, 200, &tr)
	if len(tr.Messages) != 2 {
		t.Fatalf("the active conversation lost messages: %+v", tr.Messages)
	}

	// The retention purge's semantics: archived before a time.
	for _, bad := range []string{"", "?older_than_days=x", "?before=yesterday", "?older_than_days=1&before=2026-01-01T00:00:00Z"} {
		if code, _, _ := e.do("POST", "/admin/api/purge"+bad, aliceToken); code != http.StatusBadRequest {
			t.Errorf("purge%s: %d, want 400", bad, code)
		}
	}
	var res map[string]any
	e.call("POST", "/admin/api/purge?before=2000-01-01T00:00:00Z", 200, &res)
	if res["purged"] != 0.0 {
		t.Fatalf("purge before 2000: %v", res)
	}
	e.call("GET", "/admin/api/conversations/"+other, 200, nil)
	e.call("POST", "/admin/api/purge?before="+url.QueryEscape(time.Now().Add(time.Minute).UTC().Format(time.RFC3339)), 200, &res)
	if res["purged"] != 1.0 {
		t.Fatalf("purge: %v", res)
	}
	e.call("GET", "/admin/api/conversations/"+other, 404, nil)
	e.call("GET", "/admin/api/conversations/"+second, 200, nil)
}

// gateAgent holds every reply until released.
type gateAgent struct {
	started chan struct{}
	release chan struct{}
}

func (g *gateAgent) Name() string  { return "gate" }
func (g *gateAgent) Model() string { return "gate" }
func (g *gateAgent) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	g.started <- struct{}{}
	select {
	case <-ctx.Done():
		return agent.Reply{}, ctx.Err()
	case <-g.release:
	}
	return agent.Echo{}.Reply(ctx, req, nil)
}

func TestStats(t *testing.T) {
	g := &gateAgent{started: make(chan struct{}, 4), release: make(chan struct{})}
	e := newEnv(t, g)
	stats := func() Stats {
		var s Stats
		e.call("GET", "/admin/api/stats", 200, &s)
		return s
	}
	s := stats()
	if s.Replica != e.mgr.ReplicaID() || s.TurnsLastMinute != 0 || s.RunningTurns != 0 || s.WebSocketConnections != 0 || s.Draining {
		t.Fatalf("idle stats: %+v", s)
	}

	c := e.connect("ann")
	c.send(map[string]any{"type": "message", "id": "m-1", "text": "one"})
	<-g.started
	s = stats()
	if s.RunningTurns != 1 || s.WebSocketConnections != 1 || len(s.ReplicasAlive) != 1 || s.ReplicasAlive[0] != e.mgr.ReplicaID() {
		t.Fatalf("stats with a turn running: %+v", s)
	}
	// A message stored while the turn runs waits for the next one (Submit
	// returns once it is queued).
	second, err := e.mgr.Submit(context.Background(), sessions.Inbound{Channel: "websocket", SessionKey: "websocket:ann", UserID: "ann", Text: "two"}, sessions.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	if s = stats(); s.WaitingMessages != 1 || s.WaitingSessions != 1 || s.RunningTurns != 1 {
		t.Fatalf("stats with a message waiting: %+v", s)
	}
	g.release <- struct{}{}
	c.expect("reply")
	<-g.started
	g.release <- struct{}{}
	if _, err := second.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}

	e.clock.Advance(30 * time.Second)
	for i := range 4 {
		go func() { g.release <- struct{}{} }()
		e.turn("telegram", "telegram:dm:7", "7", fmt.Sprint("t", i))
		<-g.started
	}
	s = stats()
	if s.TurnsLastMinute != 6 || s.TurnsPerSecond != 0.1 || s.WaitingMessages != 0 {
		t.Fatalf("stats after six turns: %+v", s)
	}
	// The first two turns leave the minute.
	e.clock.Advance(45 * time.Second)
	if s = stats(); s.TurnsLastMinute != 4 {
		t.Fatalf("stats 75 s after the first turns: %+v", s)
	}
	e.clock.Advance(time.Hour)
	if s = stats(); s.TurnsLastMinute != 0 {
		t.Fatalf("stats an hour later: %+v", s)
	}
}

func TestDrain(t *testing.T) {
	e := newEnv(t, agent.Echo{})
	ready := func() (int, string) {
		resp, err := http.Get(e.url + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := ready(); code != 200 {
		t.Fatalf("readyz before: %d %s", code, body)
	}
	open := e.connect("ann")

	var res map[string]any
	e.call("POST", "/admin/api/drain", 200, &res)
	if code, body := ready(); code != 503 || !strings.Contains(body, "admin: drained by alice") {
		t.Fatalf("readyz drained: %d %q", code, body)
	}
	// New connections are refused; the open one still works.
	if _, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(e.url, "http")+"/ws", nil); err == nil || resp == nil || resp.StatusCode != 503 {
		t.Fatalf("WebSocket upgrade while drained: %v %v", err, resp)
	}
	open.say("m-1", "still here")
	var s Stats
	e.call("GET", "/admin/api/stats", 200, &s)
	if !s.Draining || s.DrainedBy != "alice" {
		t.Fatalf("stats drained: %+v", s)
	}

	code, _, _ := e.do("POST", "/admin/api/undrain", bobToken)
	if code != 200 {
		t.Fatalf("undrain: %d", code)
	}
	if code, body := ready(); code != 200 {
		t.Fatalf("readyz undrained: %d %s", code, body)
	}
	e.connect("bob").say("m-1", "new connection")
}

func TestEveryActionLogsWho(t *testing.T) {
	e := newEnv(t, agent.Echo{})
	id := e.turn("telegram", "telegram:dm:7", "7", "one").ConversationID
	calls := []struct{ method, path, token, action, target string }{
		{"GET", "/admin/api/sessions?q=dm", aliceToken, "list", "q=dm"},
		{"GET", "/admin/api/conversations/" + id, bobToken, "transcript", id},
		{"GET", "/admin/api/conversations/" + id + "/export?format=markdown", aliceToken, "export", id},
		{"POST", "/admin/api/sessions/telegram:dm:7/reset", bobToken, "reset", "telegram:dm:7"},
		{"DELETE", "/admin/api/conversations/" + id, aliceToken, "purge", id},
		{"POST", "/admin/api/purge?older_than_days=30", bobToken, "purge", "archived before 2026-01-30T12:00:00Z"},
		{"GET", "/admin/api/stats", aliceToken, "stats", ""},
		{"GET", "/admin/api/usage?by=user&format=csv", bobToken, "usage", "by=user&format=csv"},
		{"POST", "/admin/api/drain", bobToken, "drain", e.mgr.ReplicaID()},
		{"POST", "/admin/api/undrain", aliceToken, "undrain", e.mgr.ReplicaID()},
	}
	for _, c := range calls {
		if code, _, body := e.do(c.method, c.path, c.token); code != 200 {
			t.Fatalf("%s %s: %d %s", c.method, c.path, code, body)
		}
	}
	var got []string
	for _, rec := range e.logs.records(t) {
		if rec["msg"] == "admin action" {
			got = append(got, fmt.Sprintf("%v %v %v", rec["who"], rec["action"], rec["target"]))
		}
	}
	var want []string
	for _, c := range calls {
		who := map[string]string{aliceToken: "alice", bobToken: "bob"}[c.token]
		want = append(want, fmt.Sprintf("%s %s %s", who, c.action, c.target))
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("logged actions:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestTurnCounter(t *testing.T) {
	clock := clocktest.New(time.Unix(1_000_000, 0))
	c := CountTurns(gateway.NewMetrics(), clock.Now)
	c.TurnDone("websocket", "ok", time.Millisecond)
	c.TurnDone("websocket", "failed", time.Millisecond)
	c.TurnDone("websocket", "duplicate", 0)
	c.TurnDone("websocket", "error", 0)
	c.TurnDone("websocket", "merged", 0)
	c.TurnDone("websocket", "pending", 0)
	clock.Advance(59 * time.Second)
	c.TurnDone("telegram", "interrupted", time.Millisecond)
	if n := c.LastMinute(); n != 3 {
		t.Fatalf("last minute: %d, want 3", n)
	}
	clock.Advance(time.Second)
	if n := c.LastMinute(); n != 1 {
		t.Fatalf("a minute after the first two: %d, want 1", n)
	}
	// A second 60 s later reuses the bucket, starting from zero.
	c.TurnDone("telegram", "ok", time.Millisecond)
	if n := c.LastMinute(); n != 2 {
		t.Fatalf("after the bucket is reused: %d, want 2", n)
	}
}

func TestPageServedWithStrictCSP(t *testing.T) {
	e := newEnv(t, agent.Echo{})
	for path, want := range map[string]string{"/admin/": "<script src=\"admin.js\"></script>", "/admin/admin.js": "sessionStorage", "/admin/admin.css": "#transcript"} {
		resp, err := http.Get(e.url + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		csp := resp.Header.Get("Content-Security-Policy")
		if resp.StatusCode != 200 || !strings.Contains(string(body), want) || !strings.Contains(csp, "default-src 'self'") ||
			!strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") || !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("%s: %d, CSP %q", path, resp.StatusCode, csp)
		}
	}
	// Nothing in the page loads from elsewhere.
	for _, name := range []string{"index.html", "admin.js", "admin.css"} {
		data, err := webFiles.ReadFile("web/" + name)
		if err != nil {
			t.Fatal(err)
		}
		if s := string(data); strings.Contains(s, "http://") || strings.Contains(s, "https://") || strings.Contains(s, "//cdn") {
			t.Errorf("%s refers to another host", name)
		}
	}
}
