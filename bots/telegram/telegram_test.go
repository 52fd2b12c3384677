package telegram

// The package's test harness (start: a bot on telegramtest's Bot API and a
// real session manager, and its helpers), and tests of a private chat's
// conversation.

import (
	"context"
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
	// tt is the timetable of setup.schedules (nil without).
	tt *sessions.Timetable
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
	// elector wraps the replica's Elector as the bot sees it.
	elector func(*sessions.Elector) Elector
	// beforeStart runs once the store exists, before the bot starts.
	beforeStart func(h *harness)
	// manager changes the manager's options (a tracer, a logger).
	manager func(*sessions.Options)
	// hook runs on the database before the manager is built on it (a
	// fault injector installs itself).
	hook func(*store.DB)
	// schedules, when set, are the operator's schedules of a timetable
	// on the database: the bot's Schedules door and /status's.
	schedules []sessions.OperatorSchedule
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
	if e := sessions.NewElector(db, h.mgr.ReplicaID()); s.elector != nil {
		opts.Elector = s.elector(e)
	} else {
		opts.Elector = e
	}
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
	sess := SessionsOf(h.mgr)
	if s.sess != nil {
		sess = s.sess(h.mgr)
	}
	if s.schedules != nil {
		h.tt = sessions.NewTimetable(db, s.now)
		h.tt.Set(s.schedules)
		h.mgr.Standing().UseTimetable(h.tt)
		sess.Schedules = h.tt
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
	return func(m *sessions.Manager) Sessions { return allDoors(storedNotes{Manager: m, stored: ch}) }
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

// allDoors opens every door of the bot on x: a session manager, or a
// test's wrapper of one that changes what one of its methods does;
// Transcripts and ChannelStates open on its Conversations.
func allDoors(x interface {
	Turns
	Policies
	Deliveries
	Standing() *sessions.Standing
	Health() *sessions.StorageHealth
	Conversations() *sessions.Conversations
	Routes() *sessions.Routes
	Approvals() *sessions.Approvals
}) Sessions {
	c := x.Conversations()
	return Sessions{Turns: x, Transcripts: c, Policies: x, Deliveries: x, ChannelStates: c, Standing: x.Standing(), Storage: x.Health(), Registry: x.Routes(),
		ToolApprovals: x.Approvals()}
}
