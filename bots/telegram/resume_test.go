package telegram

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatgate/chatgate/internal/clocktest"
	"github.com/chatgate/chatgate/internal/telegramtest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
)

// countNotices is a setup.beforeStart that makes done receive once per
// notice the bot is done with (sent or failed).
func countNotices(done chan<- struct{}) func(*harness) {
	return func(h *harness) { h.bot.notices.handled = func() { done <- struct{}{} } }
}

// waitNotices waits until the bot is done with n more notices, bounded.
func waitNotices(t *testing.T, done <-chan struct{}, n int) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for i := 0; i < n; i++ {
		select {
		case <-done:
		case <-timeout:
			t.Fatalf("only %d of %d notices done", i, n)
		}
	}
}

var idle30 = map[string]sessions.Policy{
	Channel: {MaxHistory: 100, Reset: sessions.ResetPolicy{Mode: sessions.ResetIdle, IdleFor: 30 * time.Minute}},
}

// store stores a private-chat message of user through the manager, as
// the bot would, and waits for its turn.
func (h *harness) store(user int64, text string) {
	h.t.Helper()
	id := strconv.FormatInt(user, 10)
	in := sessions.Inbound{Channel: Channel, SessionKey: sessions.TelegramDMKey(user), UserID: id, ChatID: id, Text: text}
	if _, err := h.mgr.Handle(context.Background(), in, sessions.Hooks{}); err != nil {
		h.t.Fatal(err)
	}
}

// With notify_resets, an idle sweep sends one notice to each private chat
// whose conversation it archived, at the notifier's pace, and none to a
// group or for an empty conversation; a user told at once is not told
// again when they next write.
func TestSweepNoticesGoToPrivateChatsOnly(t *testing.T) {
	clock := clocktest.New(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	api := telegramtest.New(t)
	done := make(chan struct{}, 16)
	h := start(t, api, t.TempDir(), setup{now: clock.Now, policies: idle30, beforeStart: countNotices(done),
		opts: Options{NotifyResets: true, NoticesPerSecond: 5, Now: clock.Now}})
	const group = -1001
	api.Push(telegramtest.DM(7, "hi from 7"))
	api.Push(telegramtest.DM(8, "hi from 8"))
	api.Push(telegramtest.Group(group, 9, "@"+telegramtest.BotName+" hi from the group"))
	api.Push(telegramtest.DM(11, "/new")) // an empty conversation
	api.WaitSent(t, 4)
	clock.Advance(31 * time.Minute)
	if n, err := sessions.NewSweeper(h.mgr, nil).SweepIdle(context.Background()); n != 4 || err != nil {
		t.Fatalf("sweep archived %d, %v; want 4", n, err)
	}
	// The sweep queued its notices before it returned, in one go; once two
	// are done, the group's and the empty conversation's would have been
	// among them.
	waitNotices(t, done, 2)
	sent := api.WaitSent(t, 6)
	if st := h.bot.NoticeStats(); st != (NoticeStats{Sent: 2}) {
		t.Fatalf("notice stats = %+v, want 2 sent", st)
	}
	notices := map[int64]string{}
	for _, m := range sent[4:] {
		notices[m.ChatID] = m.Text
	}
	want := "Your conversation was idle for 30 minutes, so I closed it: your next message starts a new one. Send /resume to go back to it."
	if len(notices) != 2 || notices[7] != want || notices[8] != want {
		t.Fatalf("notices = %v, want one to each of chats 7 and 8", notices)
	}
	for _, m := range api.Messages() {
		if m.ChatID == group && m.Text != "echo: hi from the group (history: 0)" {
			t.Fatalf("a group was sent %q", m.Text)
		}
	}
	// The pace: the second notice waited its turn (5 a second).
	if !slices.Contains(h.waitsOf(), 200*time.Millisecond) {
		t.Fatalf("waits = %v, want one of 200ms between notices", h.waitsOf())
	}
	// Told already: the next message is just answered.
	api.Push(telegramtest.DM(7, "back"))
	if got := api.WaitSent(t, 7)[6]; got.Text != "echo: back (history: 0)" {
		t.Fatalf("after the notice: %+v", got)
	}
}

// Notices past the queue's bound are dropped and counted, never blocking
// the sweep; those users are told when they next write.
func TestSweepNoticesOverTheQueueAreDroppedAndToldLater(t *testing.T) {
	clock := clocktest.New(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	api := telegramtest.New(t)
	users := []int64{21, 22, 23, 24, 25}
	done := make(chan struct{}, 16)
	h := start(t, api, t.TempDir(), setup{now: clock.Now, policies: idle30,
		opts: Options{NotifyResets: true, NoticeQueue: 2, Now: clock.Now},
		// Before the bot connects its sender waits, so the queue fills.
		beforeStart: func(h *harness) {
			countNotices(done)(h)
			for _, u := range users {
				h.store(u, "hello")
			}
			clock.Advance(time.Hour)
			if n, err := sessions.NewSweeper(h.mgr, nil).SweepIdle(context.Background()); n != len(users) || err != nil {
				t.Fatalf("sweep archived %d, %v", n, err)
			}
		}})
	waitNotices(t, done, 2)
	sent := api.WaitSent(t, 2)
	if st := h.bot.NoticeStats(); st != (NoticeStats{Sent: 2, Dropped: 3}) {
		t.Fatalf("notice stats = %+v, want 2 sent, 3 dropped", st)
	}
	var dropped int64
	for _, u := range users {
		if !slices.ContainsFunc(sent, func(s telegramtest.Sent) bool { return s.ChatID == u }) {
			dropped = u
		}
	}
	api.Push(telegramtest.DM(dropped, "still there?"))
	got := api.WaitSent(t, 4)[2:]
	if got[0].Text != "(A new conversation started: the last one was idle for 30 minutes. Send /resume to go back to it.)" ||
		got[1].Text != "echo: still there? (history: 0)" || got[0].ChatID != dropped {
		t.Fatalf("a user whose notice was dropped got %+v", got)
	}
}

// Without notify_resets a sweep tells no one at once; the next message
// is told why, before its answer.
func TestSweptConversationIsToldOnTheNextMessage(t *testing.T) {
	clock := clocktest.New(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	api := telegramtest.New(t)
	h := start(t, api, t.TempDir(), setup{now: clock.Now, policies: idle30})
	api.Push(telegramtest.DM(7, "before"))
	api.WaitSent(t, 1)
	clock.Advance(45 * time.Minute)
	if n, _ := sessions.NewSweeper(h.mgr, nil).SweepIdle(context.Background()); n != 1 {
		t.Fatalf("sweep archived %d", n)
	}
	api.Push(telegramtest.DM(7, "after"))
	sent := api.WaitSent(t, 3)
	if sent[1].Text != "(A new conversation started: the last one was idle for 30 minutes. Send /resume to go back to it.)" ||
		sent[2].Text != "echo: after (history: 0)" {
		t.Fatalf("after the sweep: %q", texts(sent))
	}
}

// /resume brings the previous conversation back: the echo agent's
// history count shows it; with nothing to go back to, the user is told.
func TestResumeCommand(t *testing.T) {
	api := telegramtest.New(t)
	start(t, api, t.TempDir(), setup{})
	api.Push(telegramtest.DM(7, "/resume"))
	if got := api.WaitSent(t, 1)[0].Text; got != noResumeText {
		t.Fatalf("/resume with nothing archived = %q", got)
	}
	api.Push(telegramtest.DM(7, "one"))
	api.Push(telegramtest.DM(7, "two"))
	api.WaitSent(t, 3)
	api.Push(telegramtest.DM(7, "/new"))
	api.Push(telegramtest.DM(7, "fresh"))
	if got := api.WaitSent(t, 5)[4].Text; got != "echo: fresh (history: 0)" {
		t.Fatalf("after /new = %q", got)
	}
	api.Push(telegramtest.DM(7, "/resume"))
	if got := api.WaitSent(t, 6)[5].Text; got != "Back to your previous conversation (4 messages)." {
		t.Fatalf("/resume = %q", got)
	}
	api.Push(telegramtest.DM(7, "three"))
	if got := api.WaitSent(t, 7)[6].Text; got != "echo: three (history: 4)" {
		t.Fatalf("after /resume = %q", got)
	}
	// And back again to the one left.
	api.Push(telegramtest.DM(7, "/resume"))
	api.Push(telegramtest.DM(7, "again"))
	sent := api.WaitSent(t, 9)
	if sent[7].Text != "Back to your previous conversation (2 messages)." || sent[8].Text != "echo: again (history: 2)" {
		t.Fatalf("second /resume: %q", texts(sent[7:]))
	}
}

// /history sends the last exchanges of the active conversation as one
// message, long lines cut, the first exchange whole.
func TestHistoryCommand(t *testing.T) {
	api := telegramtest.New(t)
	start(t, api, t.TempDir(), setup{})
	api.Push(telegramtest.DM(7, "/history"))
	if got := api.WaitSent(t, 1)[0].Text; got != emptyHistory {
		t.Fatalf("/history of an empty conversation = %q", got)
	}
	long := strings.Repeat("long ", 100)
	for i := 1; i <= 6; i++ {
		text := fmt.Sprintf("m%d", i)
		if i == 6 {
			text = long
		}
		api.Push(telegramtest.DM(7, text))
		api.WaitSent(t, 1+i)
	}
	api.Push(telegramtest.DM(7, "/history"))
	got := api.WaitSent(t, 8)[7].Text
	var want strings.Builder
	want.WriteString(historyHeader)
	for i := 2; i <= 5; i++ {
		fmt.Fprintf(&want, "\n\nYou: m%d\n\nBot: echo: m%d (history: %d)", i, i, 2*(i-1))
	}
	cutLong := cut(long, historyLineRunes)
	fmt.Fprintf(&want, "\n\nYou: %s\n\nBot: %s", cutLong, cut("echo: "+long+" (history: 10)", historyLineRunes))
	if got != want.String() {
		t.Fatalf("/history =\n%s\nwant\n%s", got, want.String())
	}
	if !strings.HasSuffix(cutLong, "…") || len([]rune(cutLong)) != historyLineRunes {
		t.Fatalf("a long line is cut to %d runes: %q", len([]rune(cutLong)), cutLong)
	}
}

func TestIdleFor(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Minute: "1 minute", 30 * time.Minute: "30 minutes", time.Hour: "1 hour",
		90 * time.Minute: "1 hour 30 minutes", 26 * time.Hour: "26 hours", 0: "a while",
	} {
		if got := idleFor(d); got != want {
			t.Errorf("idleFor(%s) = %q, want %q", d, got, want)
		}
	}
}

// Only this replica's sweeps are noticed: a reset forwarded from another
// replica (whose own bot sends that notice), a lazy reset (told with the
// answer), a manual one and a group's are not queued.
func TestOnlyThisReplicasSweepsAreNoticed(t *testing.T) {
	api := telegramtest.New(t)
	done := make(chan struct{}, 16)
	h := start(t, api, t.TempDir(), setup{policies: idle30, beforeStart: countNotices(done), opts: Options{NotifyResets: true}})
	dm := sessions.TelegramDMKey(31)
	for _, ev := range []sessions.ResetEvent{
		{Channel: Channel, SessionKey: dm, OldConversation: "a", Reason: sessions.ReasonIdle, OldMessages: 2, Remote: true},
		{Channel: Channel, SessionKey: dm, OldConversation: "b", NewConversation: "c", Reason: sessions.ReasonIdle, OldMessages: 2},
		{Channel: Channel, SessionKey: dm, OldConversation: "d", Reason: sessions.ReasonManual, OldMessages: 2},
		{Channel: Channel, SessionKey: sessions.TelegramGroupKey(-5, 31, true), OldConversation: "e", Reason: sessions.ReasonIdle, OldMessages: 2},
		{Channel: Channel, SessionKey: sessions.TelegramGroupKey(-5, 31, false), OldConversation: "f", Reason: sessions.ReasonDaily, OldMessages: 2},
		{Channel: "websocket", SessionKey: "websocket:31", OldConversation: "g", Reason: sessions.ReasonIdle, OldMessages: 2},
		{Channel: Channel, SessionKey: dm, OldConversation: "h", Reason: sessions.ReasonDaily, OldMessages: 2},
	} {
		h.bot.onSweep(ev)
	}
	// The queue is first in, first out: once the last one is done, any
	// before it would have been too.
	waitNotices(t, done, 1)
	sent := api.WaitSent(t, 1)
	if len(sent) != 1 || sent[0].ChatID != 31 || sent[0].Text != dailySweepText {
		t.Fatalf("sent %+v, want only the daily notice to chat 31", sent)
	}
	if st := h.bot.NoticeStats(); st != (NoticeStats{Sent: 1}) {
		t.Fatalf("stats = %+v", st)
	}
}

// Notices still queued when the bot stops are not sent; the stop logs how
// many (those users are told when they next write).
func TestQueuedNoticesAreCountedAtTheStop(t *testing.T) {
	db, err := store.Open(context.Background(), store.DriverSQLite, t.TempDir()+"/g.db", store.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	mgr := sessions.New(db, nil, sessions.Options{Logger: quiet})
	var logged strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logged}, nil))
	bot, err := New(SessionsOf(mgr), Options{Token: telegramtest.Token, Logger: log, NotifyResets: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 { // the bot never connected: its sender waits
		bot.onSweep(sessions.ResetEvent{Channel: Channel, SessionKey: sessions.TelegramDMKey(int64(40 + i)), OldConversation: "x",
			Reason: sessions.ReasonIdle, OldMessages: 1})
	}
	bot.StopTaking()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bot.Wait(ctx)
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logged.String(), `reset notices not sent before the stop; those users are told when they next write" channel=telegram notices=3`) {
		t.Fatalf("log = %s", logged.String())
	}
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
