package telegram

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/telegramtest"
	"github.com/chatgate/chatgate/sessions"
)

var quiet = slog.New(slog.DiscardHandler)

type harness struct {
	t     *testing.T
	api   *telegramtest.Server
	srv   *httptest.Server
	db    *sessions.DB
	dbDir string
	mgr   *sessions.Manager
	bot   *Bot
	stop  context.CancelFunc
	done  chan struct{}
	mu    sync.Mutex
	waits []time.Duration
}

type setup struct {
	opts     Options
	agent    agent.Agent
	policies map[string]sessions.Policy
	now      func() time.Time
}

func start(t *testing.T, api *telegramtest.Server, dir string, s setup) *harness {
	t.Helper()
	h := &harness{t: t, api: api, dbDir: dir}
	if h.srv = httptest.NewServer(api); true {
		t.Cleanup(h.srv.Close)
	}
	db, err := sessions.Open(context.Background(), sessions.DriverSQLite, filepath.Join(dir, "g.db"), sessions.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.db = db
	if s.agent == nil {
		s.agent = agent.Echo{}
	}
	h.mgr = sessions.New(db, s.agent, sessions.Options{Logger: quiet, Policies: s.policies, Now: s.now})
	opts := s.opts
	opts.Token = telegramtest.Token
	opts.APIURL = h.srv.URL
	opts.Logger = quiet
	opts.PollTimeout = time.Second
	opts.TypingEvery = time.Hour
	if opts.Mode == "" {
		opts.Mode = "polling"
	}
	opts.Sleep = func(ctx context.Context, d time.Duration) error {
		h.mu.Lock()
		h.waits = append(h.waits, d)
		h.mu.Unlock()
		return ctx.Err()
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.stop = cancel
	bot, err := New(ctx, h.mgr, opts)
	if err != nil {
		t.Fatal(err)
	}
	h.bot = bot
	h.done = make(chan struct{})
	go func() {
		defer close(h.done)
		if err := bot.Start(ctx); err != nil {
			t.Error(err)
		}
	}()
	t.Cleanup(func() { h.shutdown(5 * time.Second) })
	return h
}

// shutdown stops the bot as the gateway does on SIGTERM: stop polling, stop
// taking updates, drain the manager for drain, wait for the queues.
func (h *harness) shutdown(drain time.Duration) {
	h.stop()
	<-h.done
	h.bot.StopTaking()
	ctx, cancel := context.WithTimeout(context.Background(), drain)
	h.mgr.Shutdown(ctx)
	cancel()
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	h.bot.Wait(wctx)
	wcancel()
	h.db.Close()
}

func texts(msgs []telegramtest.Sent) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.Text
	}
	return out
}

func TestDMConversation(t *testing.T) {
	api := telegramtest.New(t)
	h := start(t, api, t.TempDir(), setup{})
	id := api.Push(telegramtest.DM(7, "hi"))
	sent := api.WaitSent(t, 1)
	if sent[0] != (telegramtest.Sent{ChatID: 7, Text: "echo: hi (history: 0)", ReplyTo: id}) {
		t.Fatalf("sent = %+v", sent[0])
	}
	api.Push(telegramtest.DM(7, "again"))
	if got := api.WaitSent(t, 2)[1].Text; got != "echo: again (history: 2)" {
		t.Fatalf("second reply = %q", got)
	}
	commands, actions := api.Commands(), api.Actions()
	for _, c := range []string{"new", "reset", "stop", "help", "start"} {
		if !strings.Contains(commands, `"command":"`+c+`"`) {
			t.Fatalf("setMyCommands lacks /%s: %s", c, commands)
		}
	}
	if actions < 2 {
		t.Fatalf("%d typing actions, want one per turn", actions)
	}
	// Edits, stickers and other non-text updates: no crash, nothing stored.
	sticker := telegramtest.DM(7, "")
	delete(sticker, "text")
	sticker["sticker"] = map[string]any{"file_id": "x", "file_unique_id": "y", "width": 1, "height": 1, "is_animated": false}
	api.Push(sticker)
	if got := api.WaitSent(t, 3)[2].Text; got != nonTextText {
		t.Fatalf("sticker answer = %q", got)
	}
	convs, _ := h.db.ListConversations(context.Background(), sessions.ListFilter{SessionKey: "telegram:dm:7"})
	if len(convs) != 1 || convs[0].LastSeq != 4 || convs[0].ChatID != "7" {
		t.Fatalf("conversations = %+v", convs)
	}
}

func TestNewCommandAndHelp(t *testing.T) {
	api := telegramtest.New(t)
	start(t, api, t.TempDir(), setup{})
	api.Push(telegramtest.DM(7, "one"))
	api.WaitSent(t, 1)
	api.Push(telegramtest.DM(7, "/new"))
	if got := api.WaitSent(t, 2)[1].Text; got != resetText {
		t.Fatalf("/new answer = %q", got)
	}
	api.Push(telegramtest.DM(7, "two"))
	if got := api.WaitSent(t, 3)[2].Text; got != "echo: two (history: 0)" {
		t.Fatalf("after /new = %q", got)
	}
	api.Push(telegramtest.DM(7, "/frobnicate"))
	if got := api.WaitSent(t, 4)[3].Text; got != helpText {
		t.Fatalf("unknown command answer = %q", got)
	}
	api.Push(telegramtest.DM(7, "/start"))
	if got := api.WaitSent(t, 5)[4].Text; !strings.HasPrefix(got, "Hello!") {
		t.Fatalf("/start answer = %q", got)
	}
}

func TestIdleResetWithFakeClock(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	api := telegramtest.New(t)
	start(t, api, t.TempDir(), setup{now: clock, policies: map[string]sessions.Policy{
		Channel: {MaxHistory: 100, Reset: sessions.ResetPolicy{Mode: sessions.ResetIdle, IdleFor: 30 * time.Minute}},
	}})
	api.Push(telegramtest.DM(7, "before"))
	api.WaitSent(t, 1)
	mu.Lock()
	now = now.Add(31 * time.Minute)
	mu.Unlock()
	api.Push(telegramtest.DM(7, "after"))
	sent := api.WaitSent(t, 3)
	if sent[1].Text != "(A new conversation started: the last one was idle.)" || sent[2].Text != "echo: after (history: 0)" {
		t.Fatalf("after idle period: %q", texts(sent))
	}
}

// longAgent is an LLM stand-in that answers with a long text.
type longAgent struct{ text string }

func (l longAgent) Name() string  { return "long" }
func (l longAgent) Model() string { return "long" }
func (l longAgent) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	return agent.Reply{Messages: []agent.Message{{Role: agent.RoleAssistant, Content: l.text}}}, nil
}

func TestLongReplyIsSplit(t *testing.T) {
	var b strings.Builder
	for i := 0; utf16Len(b.String()) < 9000; i++ {
		fmt.Fprintf(&b, "Line %d: emoji 🦀🚀 and 漢字 keep their shape.", i)
		if i%5 == 4 {
			b.WriteString("\n")
		} else {
			b.WriteString(" ")
		}
	}
	long := strings.TrimSpace(b.String())
	api := telegramtest.New(t)
	start(t, api, t.TempDir(), setup{agent: longAgent{text: long}})
	api.Push(telegramtest.DM(7, "tell me everything"))
	sent := api.WaitSent(t, 3)
	time.Sleep(50 * time.Millisecond) // let a wrongly extra part arrive before counting
	sent = api.Messages()
	if len(sent) != 3 {
		t.Fatalf("%d parts for %d UTF-16 units, want 3", len(sent), utf16Len(long))
	}
	var joined []string
	for i, m := range sent {
		if n := utf16Len(m.Text); n > MaxMessageUnits {
			t.Fatalf("part %d has %d UTF-16 units", i, n)
		}
		if i > 0 && m.ReplyTo != 0 {
			t.Fatal("only the first part replies to the message")
		}
		joined = append(joined, m.Text)
	}
	strip := strings.NewReplacer(" ", "", "\n", "")
	if strip.Replace(strings.Join(joined, "")) != strip.Replace(long) {
		t.Fatal("the parts do not add up to the reply")
	}
}

func TestTooManyRequestsIsWaitedOut(t *testing.T) {
	api := telegramtest.New(t)
	api.Fail429(1)
	h := start(t, api, t.TempDir(), setup{})
	api.Push(telegramtest.DM(7, "hi"))
	if got := api.WaitSent(t, 1); len(got) != 1 || got[0].Text != "echo: hi (history: 0)" {
		t.Fatalf("sent = %+v", got)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	found := false
	for _, w := range h.waits {
		found = found || w == 3*time.Second
	}
	if !found {
		t.Fatalf("waits %v do not include retry_after 3s", h.waits)
	}
}

func TestAllowlist(t *testing.T) {
	api := telegramtest.New(t)
	h := start(t, api, t.TempDir(), setup{opts: Options{AllowedUsers: []int64{7}}})
	api.Push(telegramtest.DM(8, "let me in"))
	api.Push(telegramtest.DM(8, "please"))
	api.Push(telegramtest.DM(7, "hi"))
	sent := api.WaitSent(t, 2)
	time.Sleep(50 * time.Millisecond)
	sent = api.Messages()
	var refusals int
	for _, m := range sent {
		if m.ChatID == 8 {
			refusals++
			if m.Text != refusalText {
				t.Fatalf("stranger got %q", m.Text)
			}
		}
	}
	if refusals != 1 {
		t.Fatalf("%d refusals, want exactly one per chat: %+v", refusals, sent)
	}
	convs, _ := h.db.ListConversations(context.Background(), sessions.ListFilter{SessionKey: "telegram:dm:8"})
	if len(convs) != 0 {
		t.Fatal("something was stored for a user outside allowed_users")
	}
}

func TestGroupRules(t *testing.T) {
	api := telegramtest.New(t)
	start(t, api, t.TempDir(), setup{})
	const chat = -1001
	api.Push(telegramtest.Group(chat, 7, "just chatting"))
	api.Push(telegramtest.Group(chat, 7, "/help@other_bot"))
	m := api.Push(telegramtest.Group(chat, 7, "@"+telegramtest.BotName+" what time is it"))
	sent := api.WaitSent(t, 1)
	if sent[0].Text != "echo: what time is it (history: 0)" || sent[0].ReplyTo != m || sent[0].ChatID != chat {
		t.Fatalf("mention answer = %+v", sent[0])
	}
	reply := telegramtest.Group(chat, 7, "and tomorrow?")
	reply["reply_to_message"] = map[string]any{"message_id": 1, "date": 1, "chat": map[string]any{"id": chat, "type": "supergroup"},
		"from": map[string]any{"id": telegramtest.BotID, "is_bot": true, "first_name": "Gate"}, "text": "earlier"}
	api.Push(reply)
	if got := api.WaitSent(t, 2)[1].Text; got != "echo: and tomorrow? (history: 2)" {
		t.Fatalf("reply-to-bot answer = %q", got)
	}
	api.Push(telegramtest.Group(chat, 7, "/help@"+telegramtest.BotName))
	if got := api.WaitSent(t, 3)[2].Text; got != helpText {
		t.Fatalf("/help@bot answer = %q", got)
	}
	// Per-user scope: another member has a conversation of their own.
	api.Push(telegramtest.Group(chat, 8, "@"+telegramtest.BotName+" hello"))
	if got := api.WaitSent(t, 4)[3].Text; got != "echo: hello (history: 0)" {
		t.Fatalf("second member = %q", got)
	}
	time.Sleep(50 * time.Millisecond)
	if n := len(api.Messages()); n != 4 {
		t.Fatalf("%d messages sent; unaddressed group messages were answered", n)
	}
}

func TestGroupPolicyAllAndChatScope(t *testing.T) {
	api := telegramtest.New(t)
	start(t, api, t.TempDir(), setup{opts: Options{GroupPolicy: "all", GroupScope: "chat"}})
	api.Push(telegramtest.Group(-5, 7, "first"))
	api.WaitSent(t, 1)
	api.Push(telegramtest.Group(-5, 8, "second"))
	if got := api.WaitSent(t, 2)[1].Text; got != "echo: second (history: 2)" {
		t.Fatalf("shared group conversation = %q", got)
	}
}

func TestWebhook(t *testing.T) {
	api := telegramtest.New(t)
	h := start(t, api, t.TempDir(), setup{opts: Options{Mode: "webhook", WebhookURL: "https://bot.example.com/telegram/webhook", WebhookSecret: "s3cret-Value_1"}})
	<-h.done // Start returns after registering the webhook
	hook := api.Webhook()
	if hook["url"] != "https://bot.example.com/telegram/webhook" || hook["secret_token"] != "s3cret-Value_1" {
		t.Fatalf("setWebhook = %v", hook)
	}
	srv := httptest.NewServer(h.bot.WebhookHandler())
	defer srv.Close()
	post := func(secret, body string) int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
		if secret != "" {
			req.Header.Set("X-Telegram-Bot-Api-Secret-Token", secret)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	update := `{"update_id":41,"message":{"message_id":5,"date":1,"from":{"id":7,"is_bot":false,"first_name":"U"},"chat":{"id":7,"type":"private"},"text":"via webhook"}}`
	if code := post("", update); code != http.StatusUnauthorized {
		t.Fatalf("no secret: %d", code)
	}
	if code := post("wrong", update); code != http.StatusUnauthorized {
		t.Fatalf("wrong secret: %d", code)
	}
	if code := post("s3cret-Value_1", `{"update_id":`); code != http.StatusBadRequest {
		t.Fatalf("malformed body: %d", code)
	}
	if code := post("s3cret-Value_1", update); code != http.StatusOK {
		t.Fatalf("valid update: %d", code)
	}
	if got := api.WaitSent(t, 1)[0]; got.Text != "echo: via webhook (history: 0)" || got.ReplyTo != 5 {
		t.Fatalf("webhook reply = %+v", got)
	}
	h.bot.StopTaking()
	if code := post("s3cret-Value_1", update); code != http.StatusServiceUnavailable {
		t.Fatalf("while draining: %d", code)
	}
}

func TestBadTokenIsOneClearLine(t *testing.T) {
	api := telegramtest.New(t)
	srv := httptest.NewServer(api)
	defer srv.Close()
	db, _ := sessions.Open(context.Background(), sessions.DriverSQLite, filepath.Join(t.TempDir(), "g.db"), sessions.OpenOptions{})
	defer db.Close()
	mgr := sessions.New(db, agent.Echo{}, sessions.Options{Logger: quiet})
	_, err := New(context.Background(), mgr, Options{Token: "999:wrong-token", APIURL: srv.URL, Logger: quiet})
	if err == nil || !strings.HasPrefix(err.Error(), "telegram: ") || strings.Contains(err.Error(), "wrong-token") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("err = %v", err)
	}
	// Unreachable server: the transport error carries the URL; the token
	// must still not show.
	srv.Close()
	_, err = New(context.Background(), mgr, Options{Token: "999:wrong-token", APIURL: srv.URL, Logger: quiet})
	if err == nil || strings.Contains(err.Error(), "wrong-token") {
		t.Fatalf("err = %v", err)
	}
}

// gated answers at once except for texts in block, which wait for ctx.
type gated struct {
	block   map[string]bool
	started chan string
}

func (g gated) Name() string  { return "gated" }
func (g gated) Model() string { return "gated" }
func (g gated) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	if g.block[req.Input] {
		g.started <- req.Input
		<-ctx.Done()
		return agent.Reply{}, ctx.Err()
	}
	return agent.Echo{}.Reply(ctx, req, onDelta)
}

// TestRestartMidBatch stops the gateway while a batch of updates is being
// processed — one turn running, one waiting behind it, others done — and
// starts it again: every message is answered exactly once.
func TestRestartMidBatch(t *testing.T) {
	api := telegramtest.New(t)
	dir := t.TempDir()
	var ids []int
	for _, u := range []struct {
		user int64
		text string
	}{{1, "a1"}, {2, "b1"}, {1, "a2"}, {2, "b2"}, {1, "a3"}, {2, "b3"}} {
		ids = append(ids, api.Push(telegramtest.DM(u.user, u.text)))
	}
	g := gated{block: map[string]bool{"a2": true}, started: make(chan string, 1)}
	h1 := start(t, api, dir, setup{agent: g})
	<-g.started
	api.WaitSent(t, 4) // a1, b1, b2, b3 answered; a2 running; a3 queued
	h1.shutdown(0)     // drain_timeout 0: a2 is interrupted at once

	h2 := start(t, api, dir, setup{})
	if ran, _, err := h2.mgr.Recover(context.Background(), time.Hour); ran != 1 || err != nil {
		t.Fatalf("recovery ran %d (%v), want the interrupted a2", ran, err)
	}
	api.WaitSent(t, 6)
	time.Sleep(100 * time.Millisecond) // a duplicate would arrive now
	sent := api.Messages()
	replies := map[int][]string{}
	for _, m := range sent {
		replies[m.ReplyTo] = append(replies[m.ReplyTo], m.Text)
	}
	// a2's rerun and a3 may run in either order after the restart, so
	// their history counts vary; each message gets exactly one answer.
	for i, text := range []string{"a1", "b1", "a2", "b2", "a3", "b3"} {
		if got := replies[ids[i]]; len(got) != 1 || !strings.HasPrefix(got[0], "echo: "+text+" (history: ") {
			t.Errorf("message %s: sent %q, want exactly one echo", text, got)
		}
	}
	if len(sent) != 6 {
		t.Fatalf("%d messages sent, want 6: %q", len(sent), texts(sent))
	}
}

func TestConflictBacksOffAndOtherUpdatesAreIgnored(t *testing.T) {
	api := telegramtest.New(t)
	api.Conflict(2)
	h := start(t, api, t.TempDir(), setup{})
	api.PushUpdate("edited_message", telegramtest.DM(7, "edited text"))
	api.PushUpdate("channel_post", map[string]any{"chat": map[string]any{"id": -9, "type": "channel"}, "text": "post"})
	api.Push(telegramtest.DM(7, "hi"))
	sent := api.WaitSent(t, 1)
	time.Sleep(50 * time.Millisecond)
	if sent = api.Messages(); len(sent) != 1 || sent[0].Text != "echo: hi (history: 0)" {
		t.Fatalf("sent = %+v", sent)
	}
	h.mu.Lock()
	waits := append([]time.Duration(nil), h.waits...)
	h.mu.Unlock()
	if len(waits) < 2 || waits[0] != 5*time.Second || waits[1] != 10*time.Second {
		t.Fatalf("backoff after two conflicts = %v, want 5s then 10s", waits)
	}
	convs, _ := h.db.ListConversations(context.Background(), sessions.ListFilter{})
	if len(convs) != 1 || convs[0].LastSeq != 2 {
		t.Fatalf("conversations = %+v: edits or channel posts were stored", convs)
	}
}
