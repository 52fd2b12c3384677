package telegram

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/telegramtest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
)

var quiet = slog.New(slog.DiscardHandler)

var queued = map[string]sessions.Policy{Channel: {MaxHistory: 100, Busy: sessions.BusyPolicy{Mode: sessions.BusyQueue}}}

type harness struct {
	t     *testing.T
	api   *telegramtest.Server
	srv   *httptest.Server
	db    *store.DB
	dbDir string
	mgr   *sessions.Manager
	bot   *Bot
	stop  context.CancelFunc
	done  chan struct{}
	mu    sync.Mutex
	waits []time.Duration
	polls atomic.Int64 // this bot's getUpdates requests
}

type setup struct {
	opts     Options
	agent    agent.Agent
	policies map[string]sessions.Policy
	now      func() time.Time
	// dsn, when set, is a PostgreSQL database to use instead of SQLite.
	dsn string
	// sleep replaces the recording sleep that returns at once.
	sleep func(ctx context.Context, d time.Duration) error
	// sess wraps the manager as the bot sees it.
	sess func(*sessions.Manager) Sessions
	// beforeStart runs once the store exists, before the bot starts.
	beforeStart func(h *harness)
	// manager changes the manager's options (a tracer, a logger).
	manager func(*sessions.Options)
	// hook runs on the database before the manager is built on it (a
	// fault injector installs itself).
	hook func(*store.DB)
}

// countPolls counts a bot's getUpdates requests on their way out.
type countPolls struct {
	next  http.RoundTripper
	polls *atomic.Int64
}

func (c countPolls) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/getUpdates") {
		c.polls.Add(1)
	}
	return c.next.RoundTrip(r)
}

func start(t *testing.T, api *telegramtest.Server, dir string, s setup) *harness {
	t.Helper()
	h := &harness{t: t, api: api, dbDir: dir}
	h.srv = httptest.NewServer(api)
	t.Cleanup(h.srv.Close)
	driver, dsn := store.DriverSQLite, filepath.Join(dir, "g.db")
	if s.dsn != "" {
		driver, dsn = store.DriverPostgres, s.dsn
	}
	db, err := store.Open(context.Background(), driver, dsn, store.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.db = db
	if s.agent == nil {
		s.agent = agent.Echo{}
	}
	mopts := sessions.Options{Logger: quiet, Policies: s.policies, Now: s.now, Events: db.Events()}
	if s.manager != nil {
		s.manager(&mopts)
	}
	if s.hook != nil {
		s.hook(db)
	}
	h.mgr = sessions.New(db, s.agent, mopts)
	opts := s.opts
	opts.Token = telegramtest.Token
	opts.APIURL = h.srv.URL
	opts.Logger = quiet
	opts.PollTimeout = time.Second
	opts.TypingEvery = time.Hour
	opts.HTTPClient = &http.Client{Transport: countPolls{next: http.DefaultTransport, polls: &h.polls}}
	if opts.Mode == "" {
		opts.Mode = "polling"
	}
	if opts.Streaming == "" {
		// Drafts in private chats, nothing in groups: a test that waits for
		// a group's message waits for the reply, not for a preview.
		opts.Streaming = StreamDraft
	}
	opts.Sleep = func(ctx context.Context, d time.Duration) error {
		h.mu.Lock()
		h.waits = append(h.waits, d)
		h.mu.Unlock()
		if s.sleep != nil {
			return s.sleep(ctx, d)
		}
		return ctx.Err()
	}
	var sess Sessions = h.mgr
	if s.sess != nil {
		sess = s.sess(h.mgr)
	}
	bot, err := New(sess, opts)
	if err != nil {
		t.Fatal(err)
	}
	h.bot = bot
	if s.beforeStart != nil {
		s.beforeStart(h)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.stop = cancel
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
// taking updates, drain the manager for drain, wait for the queues. A
// second call does nothing.
func (h *harness) shutdown(drain time.Duration) {
	h.mu.Lock()
	if h.done == nil {
		h.mu.Unlock()
		return
	}
	done := h.done
	h.done = nil
	h.mu.Unlock()
	h.stop()
	<-done
	h.bot.StopTaking()
	ctx, cancel := context.WithTimeout(context.Background(), drain)
	h.mgr.Shutdown(ctx)
	cancel()
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	h.bot.Wait(wctx)
	wcancel()
	h.db.Close()
}

// storedNotes tells the test the text of each message the bot has stored.
type storedNotes struct {
	*sessions.Manager
	stored chan<- string
}

func (s storedNotes) Submit(ctx context.Context, in sessions.Inbound, h sessions.Hooks) (*sessions.Ticket, error) {
	t, err := s.Manager.Submit(ctx, in, h)
	if err == nil {
		s.stored <- in.Text
	}
	return t, err
}

// noteStored is a setup.sess that sends each stored message's text to ch,
// which must have room for every message of the test.
func noteStored(ch chan<- string) func(*sessions.Manager) Sessions {
	return func(m *sessions.Manager) Sessions { return storedNotes{Manager: m, stored: ch} }
}

// waitStored waits until the bot has stored a message with each of these
// texts (and maybe others), bounded.
func waitStored(t *testing.T, ch <-chan string, texts ...string) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	missing := map[string]bool{}
	for _, text := range texts {
		missing[text] = true
	}
	for len(missing) > 0 {
		select {
		case got := <-ch:
			delete(missing, got)
		case <-timeout:
			t.Fatalf("never stored: %v", missing)
		}
	}
}

// waitsOf returns the waits the bot asked for so far.
func (h *harness) waitsOf() []time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]time.Duration(nil), h.waits...)
}

// answersByMessage groups the sent texts by the message they reply to.
func answersByMessage(sent []telegramtest.Sent) map[int][]string {
	out := map[int][]string{}
	for _, m := range sent {
		out[m.ReplyTo] = append(out[m.ReplyTo], m.Text)
	}
	return out
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
	for _, c := range []string{"new", "reset", "resume", "history", "stop", "help", "start"} {
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
	if got := api.WaitSent(t, 3)[2].Text; got != unsupportedTexts["sticker"] {
		t.Fatalf("sticker answer = %q", got)
	}
	convs, _ := h.db.ListConversations(context.Background(), store.ListFilter{SessionKey: "telegram:dm:7"})
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
	if sent[1].Text != "(A new conversation started: the last one was idle for 30 minutes. Send /resume to go back to it.)" || sent[2].Text != "echo: after (history: 0)" {
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
	// Plain text, split as written (TestLongMarkdownReplyIsSplitValid
	// splits HTML).
	start(t, api, t.TempDir(), setup{agent: longAgent{text: long}, opts: Options{Format: FormatPlain}})
	api.Push(telegramtest.DM(7, "tell me everything"))
	api.WaitSent(t, 3)
	// The chat's next message runs after the long reply's every part went
	// out: its answer closes the count.
	next := api.Push(telegramtest.DM(7, "thanks"))
	sent := api.WaitSent(t, 4)
	if sent[3].ReplyTo != next {
		t.Fatalf("message 4 is %q, not the next reply's first part: the long reply was not 3 parts", sent[3].Text)
	}
	sent = sent[:3]
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
	checkParts(t, long, joined)
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
	last := api.LastUpdateID()
	api.WaitSent(t, 2)
	api.WaitConfirmed(t, last) // every update processed, refusals included
	sent := api.Messages()
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
	convs, _ := h.db.ListConversations(context.Background(), store.ListFilter{SessionKey: "telegram:dm:8"})
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
	api.WaitConfirmed(t, api.LastUpdateID())
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

// TestStartConnectsInBackground: the bot is built without the network;
// Start retries getMe while the Bot API is unreachable, then while it
// refuses the token — each failure one line without the token, Ready
// false, stored replies not delivered yet — and serves once it answers.
func TestStartConnectsInBackground(t *testing.T) {
	api := telegramtest.New(t)
	var stage atomic.Int32 // 0: unreachable, 1: token refused, 2: up
	front := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch stage.Load() {
		case 0:
			panic(http.ErrAbortHandler) // the connection drops: a transport error naming the URL
		case 1:
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"ok":false,"error_code":401,"description":"Unauthorized"}`)
		default:
			api.ServeHTTP(w, r)
		}
	})
	srv := httptest.NewServer(front)
	defer srv.Close()
	db, err := store.Open(context.Background(), store.DriverSQLite, filepath.Join(t.TempDir(), "g.db"), store.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	mgr := sessions.New(db, agent.Echo{}, sessions.Options{Logger: quiet})
	// Each pause between attempts waits for the test: it looks at the
	// failure, changes the server, then lets the bot go on.
	retried, resume := make(chan struct{}), make(chan struct{})
	bot, err := New(mgr, Options{Token: telegramtest.Token, APIURL: srv.URL, Logger: quiet, PollTimeout: time.Second,
		Sleep: func(ctx context.Context, d time.Duration) error {
			select {
			case retried <- struct{}{}:
			case <-ctx.Done():
				return ctx.Err()
			}
			select {
			case <-resume:
			case <-ctx.Done():
			}
			return ctx.Err()
		}})
	if err != nil {
		t.Fatal(err)
	}
	if bot.Ready() || bot.Err() != nil {
		t.Fatal("a bot that has not started reports ready or failed")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); bot.Start(ctx) }()
	defer func() { cancel(); <-done }()

	for _, want := range []string{"EOF", "Unauthorized"} {
		// Wait for the retry's pause: the failure is recorded by then.
		<-retried
		err := bot.Err()
		if err == nil || !strings.HasPrefix(err.Error(), "telegram: cannot start the bot: ") || !strings.Contains(err.Error(), want) ||
			strings.Contains(err.Error(), "TEST-token") || strings.Contains(err.Error(), "\n") {
			t.Fatalf("start-up error = %v, want one line naming %q without the token", err, want)
		}
		if bot.Ready() {
			t.Fatal("ready before getMe succeeded")
		}
		if _, err := bot.deliverStored(ctx, sessions.Delivery{ChatID: "7", Reply: sessions.Reply{Text: "x"}}); err == nil || errors.Is(err, sessions.ErrUndeliverable) {
			t.Fatalf("delivery before connecting: %v, want a retryable error", err)
		}
		stage.Add(1)
		resume <- struct{}{}
	}
	api.Push(telegramtest.DM(7, "hi"))
	if got := api.WaitSent(t, 1)[0].Text; got != "echo: hi (history: 0)" {
		t.Fatalf("reply after connecting = %q", got)
	}
	if !bot.Ready() || bot.Err() != nil || bot.Username() != telegramtest.BotName {
		t.Fatalf("after connecting: ready %v, err %v, username %q", bot.Ready(), bot.Err(), bot.Username())
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
// processed — one turn running, a message stored and waiting behind it,
// other chats done — and starts it again: the interrupted message and the
// one behind it are answered together, once, and nothing is sent twice.
func TestRestartMidBatch(t *testing.T) {
	api := telegramtest.New(t)
	dir := t.TempDir()
	ids := map[string]int{}
	for _, u := range []struct {
		user int64
		text string
	}{{1, "a1"}, {2, "b1"}, {1, "a2"}, {3, "c1"}} {
		ids[u.text] = api.Push(telegramtest.DM(u.user, u.text))
	}
	g := gated{block: map[string]bool{"a2": true}, started: make(chan string, 1)}
	stored := make(chan string, 16)
	h1 := start(t, api, dir, setup{agent: g, sess: noteStored(stored)})
	<-g.started
	ids["a3"] = api.Push(telegramtest.DM(1, "a3"))
	waitStored(t, stored, "a3") // it waits behind the running a2
	api.WaitSent(t, 3)          // a1, b1, c1 answered
	h1.shutdown(0)              // drain_timeout 0: a2 is interrupted at once, a3 not started

	h2 := start(t, api, dir, setup{})
	waitConnected(t, h2.bot) // the rescuer leaves Telegram's turns until the bot can deliver
	if ran, _, err := h2.mgr.Recover(context.Background(), time.Hour); ran != 1 || err != nil {
		t.Fatalf("recovery ran %d (%v), want a2 and a3 as one turn", ran, err)
	}
	api.WaitSent(t, 4)
	// Each user's next message runs behind everything stored before it:
	// once both are answered, a duplicate would have been sent already.
	ids["a4"], ids["b2"] = api.Push(telegramtest.DM(1, "a4")), api.Push(telegramtest.DM(2, "b2"))
	sent := api.WaitSent(t, 6)
	replies := answersByMessage(sent)
	for text, want := range map[string]string{"a1": "echo: a1 (history: 0)", "b1": "echo: b1 (history: 0)", "c1": "echo: c1 (history: 0)",
		"a3": "echo: a2\na3 (history: 2)", "a4": "echo: a4 (history: ", "b2": "echo: b2 (history: 2)"} {
		if got := replies[ids[text]]; len(got) != 1 || !strings.HasPrefix(got[0], want) {
			t.Errorf("message %s: sent %q, want exactly one %q", text, got, want)
		}
	}
	if got := replies[ids["a2"]]; len(got) != 0 {
		t.Errorf("a2 answered on its own: %q", got)
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
	api.WaitSent(t, 1)
	api.Push(telegramtest.DM(7, "bye"))
	if sent := api.WaitSent(t, 2); len(sent) != 2 || sent[0].Text != "echo: hi (history: 0)" || sent[1].Text != "echo: bye (history: 2)" {
		t.Fatalf("sent = %+v", sent)
	}
	h.mu.Lock()
	waits := append([]time.Duration(nil), h.waits...)
	h.mu.Unlock()
	if len(waits) < 2 || waits[0] != 5*time.Second || waits[1] != 10*time.Second {
		t.Fatalf("backoff after two conflicts = %v, want 5s then 10s", waits)
	}
	convs, _ := h.db.ListConversations(context.Background(), store.ListFilter{})
	if len(convs) != 1 || convs[0].LastSeq != 4 {
		t.Fatalf("conversations = %+v: edits or channel posts were stored", convs)
	}
}

// waitConnected waits until the bot has reached the Bot API.
func waitConnected(t *testing.T, b *Bot) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !b.Ready() {
		if time.Now().After(deadline) {
			t.Fatalf("the bot did not connect: %v", b.Err())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
