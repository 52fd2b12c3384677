package telegram

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/pgtest"
	"github.com/chatgate/chatgate/internal/telegramtest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
)

// poison makes the database refuse to store any message whose text is
// "poison" — a real storage fault, raised by SQLite itself.
const poison = `CREATE TRIGGER poison BEFORE INSERT ON messages WHEN NEW.content = 'poison'
	BEGIN SELECT RAISE(ABORT, 'injected'); END`

// scaled is a bot Sleep that really waits, a hundredth of what the bot
// asks, so that retries keep their shape without slowing the test.
func scaled(ctx context.Context, d time.Duration) error { return sleep(ctx, d/100) }

// movingClock is a clock that moves on by each wait the bot asks for;
// real is what the wait does besides (returns at once, or waits a part).
func movingClock(real func(ctx context.Context, d time.Duration) error) (now func() time.Time, sleep func(ctx context.Context, d time.Duration) error) {
	var mu sync.Mutex
	at := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	now = func() time.Time { mu.Lock(); defer mu.Unlock(); return at }
	sleep = func(ctx context.Context, d time.Duration) error {
		mu.Lock()
		at = at.Add(d)
		mu.Unlock()
		return real(ctx, d)
	}
	return now, sleep
}

// isSubsequence reports whether want appears, in order, within got.
func isSubsequence(want, got []time.Duration) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}

// TestUnstoredMessageNeverMakesPollingDeaf: a message the database refuses
// is retried from memory with backoff while 150 later updates from other
// users — more than one getUpdates answer holds — are all answered; once
// the fault is gone it is answered too, and every message exactly once.
func TestUnstoredMessageNeverMakesPollingDeaf(t *testing.T) {
	api := telegramtest.New(t)
	fixed := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	h := start(t, api, t.TempDir(), setup{
		opts:  Options{Now: func() time.Time { return fixed }}, // never long enough to give up
		sleep: scaled,
		beforeStart: func(h *harness) {
			if err := h.db.Gorm().Exec(poison).Error; err != nil {
				t.Fatal(err)
			}
		},
	})
	poisoned := api.Push(telegramtest.DM(1000, "poison"))
	var ids []int
	for i := 1; i <= 150; i++ {
		ids = append(ids, api.Push(telegramtest.DM(int64(i), fmt.Sprintf("m%d", i))))
	}
	sent := api.WaitSent(t, 150)
	for _, m := range sent {
		if m.ReplyTo == poisoned {
			t.Fatalf("the poisoned message was answered while it could not be stored: %q", m.Text)
		}
	}
	if err := h.db.Gorm().Exec("DROP TRIGGER poison").Error; err != nil {
		t.Fatal(err)
	}
	api.WaitSent(t, 151)
	// The user's next message queues behind the retried one.
	after := api.Push(telegramtest.DM(1000, "after"))
	sent = api.WaitSent(t, 152)
	answers := answersByMessage(sent)
	if got := answers[poisoned]; len(got) != 1 || got[0] != "echo: poison (history: 0)" {
		t.Errorf("poisoned message answered %q, want once", got)
	}
	if got := answers[after]; len(got) != 1 || got[0] != "echo: after (history: 2)" {
		t.Errorf("the next message answered %q, want once, after the retried one", got)
	}
	for i, id := range ids {
		if got := answers[id]; len(got) != 1 || got[0] != fmt.Sprintf("echo: m%d (history: 0)", i+1) {
			t.Errorf("m%d answered %q, want once", i+1, got)
		}
	}
	if n := len(api.Calls("sendMessage")); n != 152 {
		t.Errorf("%d sendMessage calls, want 152", n)
	}
	// However many retries the 150 answers took, they began at 0.5 s and
	// doubled (the cap is TestRetryWaitsDoubleToTheCap's).
	want := []time.Duration{500 * time.Millisecond, time.Second}
	if waits := h.waitsOf(); !isSubsequence(want[:1], waits) || (len(waits) > 1 && waits[len(waits)-1] > 30*time.Second) {
		t.Errorf("retry waits %v do not start at 0.5 s", waits)
	}
	if api.Conflicts() != 0 {
		t.Errorf("%d getUpdates overlapped", api.Conflicts())
	}
}

// TestUnstoredMessageIsGivenUpAfterTenMinutes: with a clock that moves on
// with each wait, a message that can never be stored gets one plain
// answer after ten minutes and is confirmed; the user's next message is
// answered as usual.
func TestUnstoredMessageIsGivenUpAfterTenMinutes(t *testing.T) {
	api := telegramtest.New(t)
	clock, sleep := movingClock(func(ctx context.Context, _ time.Duration) error { return ctx.Err() })
	h := start(t, api, t.TempDir(), setup{
		opts:  Options{Now: clock},
		sleep: sleep,
		beforeStart: func(h *harness) {
			if err := h.db.Gorm().Exec(poison).Error; err != nil {
				t.Fatal(err)
			}
		},
	})
	poisoned := api.Push(telegramtest.DM(7, "poison"))
	update := api.LastUpdateID()
	sent := api.WaitSent(t, 1)
	if sent[0].Text != unstoredText || sent[0].ReplyTo != poisoned {
		t.Fatalf("after giving up: %+v", sent[0])
	}
	api.WaitConfirmed(t, update)
	next := api.Push(telegramtest.DM(7, "hello"))
	sent = api.WaitSent(t, 2)
	if sent[1].Text != "echo: hello (history: 0)" || sent[1].ReplyTo != next || len(sent) != 2 {
		t.Fatalf("sent = %+v", sent)
	}
	var total time.Duration
	for _, w := range h.waitsOf() {
		total += w
	}
	if total < giveUpAfter {
		t.Fatalf("gave up after %v of waiting, want at least %v", total, giveUpAfter)
	}
}

// TestHeldMessageSurvivesRestart: a message that could not be stored is
// held in the stored offset state, so once polling moved past it (Telegram
// forgot it) a restart still retries it and answers it once.
func TestHeldMessageSurvivesRestart(t *testing.T) {
	api := telegramtest.New(t)
	dir := t.TempDir()
	fixed := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	h1 := start(t, api, dir, setup{
		opts: Options{Now: func() time.Time { return fixed }}, sleep: scaled,
		beforeStart: func(h *harness) {
			if err := h.db.Gorm().Exec(poison).Error; err != nil {
				t.Fatal(err)
			}
		},
	})
	poisoned := api.Push(telegramtest.DM(7, "poison"))
	held := api.LastUpdateID()
	api.Push(telegramtest.DM(8, "other"))
	api.WaitSent(t, 1)
	api.WaitConfirmed(t, held) // Telegram has forgotten it: only the stored state has it
	h1.shutdown(time.Second)

	start(t, api, dir, setup{beforeStart: func(h *harness) {
		if err := h.db.Gorm().Exec("DROP TRIGGER poison").Error; err != nil {
			t.Fatal(err)
		}
	}})
	api.WaitSent(t, 2)
	after := api.Push(telegramtest.DM(7, "after"))
	sent := api.WaitSent(t, 3)
	answers := answersByMessage(sent)
	if got := answers[poisoned]; len(got) != 1 || got[0] != "echo: poison (history: 0)" {
		t.Fatalf("held message answered %q after the restart, want once", got)
	}
	if got := answers[after]; len(got) != 1 || len(sent) != 3 {
		t.Fatalf("sent = %+v", sent)
	}
}

// TestWebhookRepeatsSendOnce: Telegram repeats a webhook delivery whose
// answer it did not get. Three deliveries of one message — at once, and
// again after — send one reply; three of /new reset once; and a repeat
// after a restart (the memory of taken updates is gone) is recognised by
// the ledger and sends nothing.
func TestWebhookRepeatsSendOnce(t *testing.T) {
	api := telegramtest.New(t)
	dir := t.TempDir()
	opts := Options{Mode: "webhook", WebhookURL: "https://bot.example.com/hook", WebhookSecret: "s"}
	h := start(t, api, dir, setup{opts: opts})
	<-h.done
	srv := httptest.NewServer(h.bot.WebhookHandler())
	defer srv.Close()
	post := func(srv *httptest.Server, update, message int, text string) int {
		body := fmt.Sprintf(`{"update_id":%d,"message":{"message_id":%d,"date":1,"from":{"id":7,"is_bot":false,"first_name":"U"},"chat":{"id":7,"type":"private"},"text":%q`, update, message, text)
		if strings.HasPrefix(text, "/") {
			body += fmt.Sprintf(`,"entities":[{"type":"bot_command","offset":0,"length":%d}]`, len(text))
		}
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body+"}}"))
		req.Header.Set("X-Telegram-Bot-Api-Secret-Token", "s")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	var wg sync.WaitGroup
	var codes [3]int
	for i := range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); codes[i] = post(srv, 10, 100, "hello") }()
	}
	wg.Wait()
	if codes != [3]int{200, 200, 200} {
		t.Fatalf("concurrent repeats answered %v", codes)
	}
	for range 3 {
		if code := post(srv, 11, 101, "/new"); code != http.StatusOK {
			t.Fatalf("/new delivery answered %d", code)
		}
	}
	if code := post(srv, 10, 100, "hello"); code != http.StatusOK {
		t.Fatalf("late repeat answered %d", code)
	}
	// The chat's next message runs after everything before it.
	post(srv, 12, 102, "next")
	sent := api.WaitSent(t, 3)
	want := []string{"echo: hello (history: 0)", resetText, "echo: next (history: 0)"}
	if got := texts(sent); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("sent %q, want %q", got, want)
	}
	archived, _ := h.db.ListConversations(context.Background(), store.ListFilter{SessionKey: "telegram:dm:7", Status: sessions.StatusArchived})
	if len(archived) != 1 {
		t.Fatalf("%d conversations archived, want 1: /new ran more than once", len(archived))
	}
	h.shutdown(time.Second)

	h2 := start(t, api, dir, setup{opts: opts})
	<-h2.done
	srv2 := httptest.NewServer(h2.bot.WebhookHandler())
	defer srv2.Close()
	if code := post(srv2, 12, 102, "next"); code != http.StatusOK {
		t.Fatalf("repeat after restart answered %d", code)
	}
	post(srv2, 13, 103, "last")
	sent = api.WaitSent(t, 4)
	if len(sent) != 4 || sent[3].Text != "echo: last (history: 2)" {
		t.Fatalf("after the restart sent %q: the repeat was answered again", texts(sent))
	}
	if n := len(api.Calls("sendMessage")); n != 4 {
		t.Fatalf("%d sendMessage calls, want 4", n)
	}
}

// leadCounter lets the test see a bot being refused the poller role.
type leadCounter struct {
	*sessions.Elector
	refused atomic.Int64
	notify  chan struct{} // a token after each refusal, when made
}

func (l *leadCounter) Lead(ctx context.Context, name string, ttl time.Duration) (bool, error) {
	ok, err := l.Elector.Lead(ctx, name, ttl)
	if err == nil && !ok {
		l.refused.Add(1)
		if l.notify != nil {
			select {
			case l.notify <- struct{}{}:
			default:
			}
		}
	}
	return ok, err
}

// waitRefused waits until the bot has been refused the role n times.
func (l *leadCounter) waitRefused(t *testing.T, n int64) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for l.refused.Load() < n {
		select {
		case <-l.notify:
		case <-timeout:
			t.Fatalf("refused the role %d times, want %d", l.refused.Load(), n)
		}
	}
}

// TestOnePollerAcrossReplicas: two gateways on one PostgreSQL database and
// one bot token. Only the one holding the poller role polls; when it dies
// without resigning (kill -9), the other takes over once the role expires,
// re-reads the stored offset, and every message is answered exactly once.
func TestOnePollerAcrossReplicas(t *testing.T) {
	dsn := pgtest.DSN(t)
	api := telegramtest.New(t)
	// Short role times keep the test quick; production uses 15 s / 5 s / 3 s.
	fast := func(h *harness) {
		h.bot.leadTTL, h.bot.leadEvery, h.bot.leadRetry = 2*time.Second, 500*time.Millisecond, 200*time.Millisecond
	}
	var lc1, lc2 *leadCounter
	// Busy mode queue: the test is about each message's own turn.
	h1 := start(t, api, t.TempDir(), setup{dsn: dsn, sleep: scaled, policies: queued, beforeStart: func(h *harness) { fast(h); h.bot.skipResign = true },
		elector: func(e *sessions.Elector) Elector { lc1 = &leadCounter{Elector: e}; return lc1 }})
	first := api.Push(telegramtest.DM(1, "first"))
	api.WaitSent(t, 1)
	h2 := start(t, api, t.TempDir(), setup{dsn: dsn, sleep: scaled, policies: queued, beforeStart: fast,
		elector: func(e *sessions.Elector) Elector { lc2 = &leadCounter{Elector: e}; return lc2 }})
	// Wait until the second replica has been refused the role twice.
	for lc2.refused.Load() < 2 {
		api.Push(telegramtest.DM(2, "ping"))
		api.WaitSent(t, len(api.Messages())+1)
	}
	if n := h2.polls.Load(); n != 0 {
		t.Fatalf("the standby replica polled %d times", n)
	}
	if lc1.refused.Load() != 0 {
		t.Fatal("the first replica was refused its own role")
	}

	// A burst, and the first replica dies in the middle of it.
	var ids []int
	for i := range 20 {
		ids = append(ids, api.Push(telegramtest.DM(int64(10+i%4), fmt.Sprintf("burst %d", i))))
	}
	h1.stop()
	<-h1.done
	wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	h1.bot.Wait(wctx) // what it had taken has run its course
	cancel()

	// Each user's next message is answered after everything before it.
	for u := range 4 {
		ids = append(ids, api.Push(telegramtest.DM(int64(10+u), "after")))
	}
	pings := 0
	for _, m := range api.Messages() {
		if m.ChatID == 2 {
			pings++
		}
	}
	sent := api.WaitSent(t, 1+pings+24)
	answers := answersByMessage(sent)
	for i, id := range append([]int{first}, ids...) {
		if got := answers[id]; len(got) != 1 {
			t.Errorf("message %d answered %d times: %q", i, len(got), got)
		}
	}
	if len(sent) != 1+pings+24 {
		t.Errorf("%d messages sent, want %d", len(sent), 1+pings+24)
	}
	if h2.polls.Load() == 0 {
		t.Fatal("the second replica never polled")
	}
	if api.Conflicts() != 0 {
		t.Fatalf("%d getUpdates overlapped: two replicas polled at once", api.Conflicts())
	}
}

// TestLosingThePollerRoleStopsPolling: when a renewal finds the role taken,
// the bot stops polling at once and stands by (a message sent meanwhile is
// not taken); once the role is free again it polls from the stored offset
// and answers that message once.
func TestLosingThePollerRoleStopsPolling(t *testing.T) {
	dsn := pgtest.DSN(t)
	api := telegramtest.New(t)
	var lc *leadCounter
	h := start(t, api, t.TempDir(), setup{dsn: dsn, sleep: scaled,
		beforeStart: func(h *harness) {
			h.bot.leadTTL, h.bot.leadEvery, h.bot.leadRetry = 2*time.Second, 200*time.Millisecond, 100*time.Millisecond
		},
		elector: func(e *sessions.Elector) Elector {
			lc = &leadCounter{Elector: e, notify: make(chan struct{}, 1)}
			return lc
		}})
	api.Push(telegramtest.DM(1, "one"))
	api.WaitSent(t, 1)
	steal := `UPDATE leaders SET holder = 'another-replica', expires_at = now() + interval '1 hour'`
	if err := h.db.Gorm().Exec(steal).Error; err != nil {
		t.Fatal(err)
	}
	// A renewal is refused, then the stand-by loop asks again: by then the
	// polling term has ended.
	lc.waitRefused(t, 2)
	two := api.Push(telegramtest.DM(1, "two"))
	// Two more refusals: a bot still polling would have answered by now.
	lc.waitRefused(t, 4)
	if n := len(api.Messages()); n != 1 {
		t.Fatalf("%d messages sent while another replica held the role", n)
	}
	if err := h.db.Gorm().Exec(`DELETE FROM leaders`).Error; err != nil {
		t.Fatal(err)
	}
	sent := api.WaitSent(t, 2)
	if sent[1].ReplyTo != two || sent[1].Text != "echo: two (history: 2)" {
		t.Fatalf("after regaining the role: %+v", sent[1])
	}
	if api.Conflicts() != 0 {
		t.Fatalf("%d getUpdates overlapped", api.Conflicts())
	}
}

func TestRetryWaitsDoubleToTheCap(t *testing.T) {
	var got []time.Duration
	for d := time.Duration(0); len(got) < 9; {
		d = grow(d, retryFirst, retryMax)
		got = append(got, d)
	}
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second,
		16 * time.Second, 30 * time.Second, 30 * time.Second, 30 * time.Second}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("waits %v, want %v", got, want)
	}
}

// held is an agent whose "slow" messages wait until release is closed.
type held struct {
	started chan struct{}
	release chan struct{}
}

func (held) Name() string  { return "held" }
func (held) Model() string { return "held" }
func (a held) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	if strings.HasPrefix(req.Input, "slow") {
		a.started <- struct{}{}
		select {
		case <-a.release:
		case <-ctx.Done():
			return agent.Reply{}, ctx.Err()
		}
	}
	return agent.Echo{}.Reply(ctx, req, onDelta)
}

// TestSlowTurnNeverMakesPollingDeaf: a chat's message sent while that
// chat's turn runs is stored at once and waits for the turn in the ledger,
// not in the chat's update queue, so it never holds the offset: with more
// than one getUpdates answer of later updates behind it, every other chat
// is answered meanwhile, and the waiting one once the turn ahead of it
// ends — each exactly once.
func TestSlowTurnNeverMakesPollingDeaf(t *testing.T) {
	api := telegramtest.New(t)
	ag := held{started: make(chan struct{}, 1), release: make(chan struct{})}
	start(t, api, t.TempDir(), setup{agent: ag})
	slow := api.Push(telegramtest.DM(1, "slow a"))
	<-ag.started
	waiting := api.Push(telegramtest.DM(1, "b")) // behind "slow a" in chat 1
	var ids []int
	for i := range 150 {
		ids = append(ids, api.Push(telegramtest.DM(int64(100+i), fmt.Sprintf("m%d", i))))
	}
	api.WaitSent(t, 150)
	late := api.Push(telegramtest.DM(999, "anyone there?"))
	api.WaitSent(t, 151)
	close(ag.release)
	sent := api.WaitSent(t, 153)
	answers := answersByMessage(sent)
	for i, id := range append(ids, late, slow, waiting) {
		if got := answers[id]; len(got) != 1 {
			t.Errorf("update %d (%d) answered %q, want once", id, i, got)
		}
	}
	if got := answers[waiting]; len(got) != 1 || got[0] != "echo: b (history: 2)" {
		t.Errorf("the waiting message answered %q, want after the slow one", got)
	}
}

// TestMessageBehindAnUnstoredOneNeverMakesPollingDeaf: a chat's message
// queued behind one of its own that the database refuses is not stored
// yet either, so it would hold the offset; with more than one getUpdates
// answer of later updates behind it, polling would hear nothing new.
// Updates not yet stored are held in the stored state instead: 150 later
// updates from other users are answered meanwhile, and once the fault is
// gone both messages are, in order, each once.
func TestMessageBehindAnUnstoredOneNeverMakesPollingDeaf(t *testing.T) {
	api := telegramtest.New(t)
	fixed := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	h := start(t, api, t.TempDir(), setup{
		opts:  Options{Now: func() time.Time { return fixed }}, // never long enough to give up
		sleep: scaled,
		beforeStart: func(h *harness) {
			if err := h.db.Gorm().Exec(poison).Error; err != nil {
				t.Fatal(err)
			}
		},
	})
	poisoned := api.Push(telegramtest.DM(1000, "poison"))
	behind := api.Push(telegramtest.DM(1000, "behind"))
	var ids []int
	for i := range 150 {
		ids = append(ids, api.Push(telegramtest.DM(int64(i+1), fmt.Sprintf("m%d", i))))
	}
	sent := api.WaitSent(t, 150)
	for _, m := range sent {
		if m.ReplyTo == poisoned || m.ReplyTo == behind {
			t.Fatalf("chat 1000 was answered while its first message could not be stored: %+v", m)
		}
	}
	if err := h.db.Gorm().Exec("DROP TRIGGER poison").Error; err != nil {
		t.Fatal(err)
	}
	sent = api.WaitSent(t, 152)
	answers := answersByMessage(sent)
	if got := answers[poisoned]; len(got) != 1 || got[0] != "echo: poison (history: 0)" {
		t.Errorf("the refused message answered %q, want once", got)
	}
	if got := answers[behind]; len(got) != 1 || got[0] != "echo: behind (history: 2)" {
		t.Errorf("the message behind it answered %q, want once, after it", got)
	}
	for i, id := range ids {
		if got := answers[id]; len(got) != 1 {
			t.Errorf("m%d answered %q, want once", i, got)
		}
	}
	// The chat's next message is answered after both: nothing more came.
	next := api.Push(telegramtest.DM(1000, "next"))
	sent = api.WaitSent(t, 153)
	if len(sent) != 153 || sent[152].ReplyTo != next {
		t.Fatalf("sent %d messages, the last %+v; want 153, the last answering the next message", len(sent), sent[len(sent)-1])
	}
}
