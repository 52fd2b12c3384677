package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/gorilla/websocket"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/clocktest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
)

// Tests of who may use the channel and how fast: auth tokens, origins,
// rate limits, expired resume tokens, and the metrics endpoint's token.

// With allow_anonymous a client that names itself alice is a guest: it
// neither sees alice's history nor writes into her conversation.
func TestAnonymousHelloUserCannotReadAnotherUsersHistory(t *testing.T) {
	e := newEnv(t, agent.Echo{}, WSOptions{Anonymous: true}, nil, nil)
	ctx := context.Background()
	alice := sessions.Inbound{Channel: Channel, SessionKey: sessions.WebSocketKey("alice"), UserID: "alice", Text: "my secret plan"}
	if _, err := e.mgr.Handle(ctx, alice, sessions.Hooks{}); err != nil {
		t.Fatal(err)
	}
	c, ready := e.connect(map[string]any{"user": "alice"})
	user, _ := ready["user"].(string)
	if user == "alice" || !strings.HasPrefix(user, sessions.GuestPrefix) {
		t.Fatalf("hello.user alice became %q, want a generated guest", user)
	}
	if h := ready["history"].([]any); len(h) != 0 {
		t.Fatalf("the guest was shown history %v", h)
	}
	c.send(map[string]any{"type": "message", "id": "m1", "text": "hello"})
	if r := c.expect("reply"); strings.Contains(r["text"].(string), "secret") {
		t.Fatalf("reply %v", r)
	}
	convs, _ := e.db.ListConversations(ctx, store.ListFilter{SessionKey: sessions.WebSocketKey("alice")})
	if len(convs) != 1 || convs[0].LastSeq != 2 {
		t.Fatalf("alice's conversations = %+v, want hers alone, untouched", convs)
	}
}

// Ten connections of one principal share one bucket: with burst 5 and a
// clock that does not move, exactly 5 of their frames are taken and 5 get
// rate_limited, each refusal counted with the limit that refused it.
func TestRateLimitSharedByAPrincipalsConnections(t *testing.T) {
	m := NewMetrics()
	fixed := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	e := newEnv(t, agent.Echo{}, WSOptions{RatePerSecond: 1, RateBurst: 5, Now: func() time.Time { return fixed },
		RateLimited: m.RateLimited(Channel)}, nil, nil)
	conns := make([]*client, 10)
	for i := range conns {
		conns[i], _ = e.connect(map[string]any{"user": "ann"})
	}
	other, _ := e.connect(map[string]any{"user": "bob"})
	codes := map[string]int{}
	for _, c := range conns {
		c.send(map[string]any{"type": "stop"})
		codes[c.expect("error")["code"].(string)]++ // not_found: taken, nothing runs
	}
	if codes["not_found"] != 5 || codes["rate_limited"] != 5 {
		t.Fatalf("ten connections of ann: %v, want 5 not_found and 5 rate_limited", codes)
	}
	other.send(map[string]any{"type": "stop"})
	if f := other.expect("error"); f["code"] != "not_found" {
		t.Fatalf("bob, with his own bucket, got %v", f)
	}
	if text := scrape(t, m); !strings.Contains(text, `chatgate_rate_limited_total{channel="websocket",limit="principal"} 5`+"\n") {
		t.Fatalf("/metrics:\n%s", text)
	}
}

// The channel's ceiling holds across principals.
func TestRateLimitGlobalCeiling(t *testing.T) {
	m := NewMetrics()
	fixed := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	e := newEnv(t, agent.Echo{}, WSOptions{RatePerSecond: 1, RateBurst: 5, RateGlobalPerSecond: 1, RateGlobalBurst: 3,
		Now: func() time.Time { return fixed }, RateLimited: m.RateLimited(Channel)}, nil, nil)
	codes := map[string]int{}
	for _, u := range []string{"a", "b", "c", "d", "e"} {
		c, _ := e.connect(map[string]any{"user": u})
		c.send(map[string]any{"type": "stop"})
		codes[c.expect("error")["code"].(string)]++
	}
	if codes["not_found"] != 3 || codes["rate_limited"] != 2 {
		t.Fatalf("five principals under a ceiling of 3: %v", codes)
	}
	if text := scrape(t, m); !strings.Contains(text, `chatgate_rate_limited_total{channel="websocket",limit="global"} 2`+"\n") {
		t.Fatalf("/metrics:\n%s", text)
	}
}

// resumeTTLEnv serves anonymous WebSocket clients on a fake clock, with
// resume tokens that expire after an hour.
func resumeTTLEnv(t *testing.T) (*env, *clocktest.Clock) {
	t.Helper()
	db, err := store.Open(context.Background(), store.DriverSQLite, filepath.Join(t.TempDir(), "g.db"), store.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktest.New(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))
	mgr := sessions.New(db, agent.Echo{}, sessions.Options{Logger: quiet, Now: clk.Now, ResumeTTL: time.Hour})
	return serveEnv(t, db, mgr, WSOptions{Anonymous: true}, false), clk
}

// A resume token older than resume_ttl gets not_found; nothing is opened
// or issued from it, and the client may then say hello without it.
func TestExpiredResumeTokenGetsNotFound(t *testing.T) {
	e, clk := resumeTTLEnv(t)
	c, ready := e.connect(nil)
	token, guest := ready["session"].(string), ready["user"].(string)
	c.send(map[string]any{"type": "message", "id": "m1", "text": "hi"})
	c.expect("reply")
	c.c.Close()

	// Within the TTL the token resumes.
	_, again := e.connect(map[string]any{"session": token})
	if again["resumed"] != true || again["user"] != guest {
		t.Fatalf("resume within the TTL: %v", again)
	}
	clk.Advance(time.Hour + time.Second)
	count := func() (convs, states int64) {
		e.db.Gorm().Model(&sessions.Conversation{}).Count(&convs)
		e.db.Gorm().Model(&sessions.ChannelState{}).Count(&states)
		return
	}
	convs, states := count()
	d, _, err := e.dial(nil, "")
	if err != nil {
		t.Fatal(err)
	}
	d.send(map[string]any{"type": "hello", "session": token})
	if f := d.expect("error"); f["code"] != "not_found" {
		t.Fatalf("expired token: %v", f)
	}
	// Proof the hello was handled: a second hello, without the token, is
	// answered on the same connection.
	d.send(map[string]any{"type": "hello"})
	fresh := d.expect("ready")
	if fresh["resumed"] != false || fresh["user"] == guest || fresh["session"] == token {
		t.Fatalf("hello after not_found: %v", fresh)
	}
	c2, s2 := count()
	if c2 != convs+1 || s2 != states+1 {
		t.Fatalf("conversations %d→%d, states %d→%d: only the second hello may open one and issue one", convs, c2, states, s2)
	}
}

// metrics.token: a scrape without the token, or with a wrong one, gets
// 401; with it, the metrics.
func TestMetricsToken(t *testing.T) {
	m := NewMetrics()
	srv := httptest.NewServer(MetricsOnly(m.ProtectedHandler("scrape-token-0123456789")))
	defer srv.Close()
	get := func(auth string) int {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/metrics", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for auth, want := range map[string]int{
		"": 401, "Bearer wrong": 401, "Bearer scrape-token-012345678": 401, "Basic scrape-token-0123456789": 401,
		"Bearer scrape-token-0123456789": 200,
	} {
		if got := get(auth); got != want {
			t.Errorf("Authorization %q: %d, want %d", auth, got, want)
		}
	}
	resp, err := http.Get(srv.URL + "/ws")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("the metrics listener served /ws: %d", resp.StatusCode)
	}
}

// The web page whose stored resume token has expired gets not_found, drops
// the token and says hello again: it comes back online as a new guest
// instead of retrying the dead token.
func TestWebPageExpiredResumeToken(t *testing.T) {
	e, clk := resumeTTLEnv(t)
	bctx := browser(t)
	status := func() string {
		s, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.getElementById('status').textContent`))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if err := chromedp.Do(bctx,
		chromedp.Navigate(e.srv.URL+"/"),
		waitText("#status", "online as guest-"),
		sendText("hi"),
		waitText(".msg.assistant", "echo: hi (history: 0)"),
	); err != nil {
		t.Fatal(err)
	}
	first := status()
	clk.Advance(2 * time.Hour)
	if err := chromedp.Do(bctx,
		chromedp.Reload(),
		waitJS(`document.getElementById('status').textContent.startsWith('online as guest-') && document.getElementById('status').textContent !== `+jsString(first)),
	); err != nil {
		t.Fatalf("after the token expired the page did not come back as a new guest (was %q, now %q): %v", first, status(), err)
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
