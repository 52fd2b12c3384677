package telegram

import (
	"context"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/clocktest"
	"github.com/chatgate/chatgate/internal/faults"
	"github.com/chatgate/chatgate/internal/telegramtest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
)

// A message the database cannot store yet: after session.delay_notice its
// user is told once, in a plain reply to it, that it is kept; once storage
// takes it, it is answered once, and the notice is not repeated.
func TestDelayNoticeForAnUnstoredMessage(t *testing.T) {
	api := telegramtest.New(t)
	// Each retry wait moves the clock by what the bot asked, and really
	// waits a hundredth of it.
	clock, sleep := movingClock(scaled)
	h := start(t, api, t.TempDir(), setup{
		opts:    Options{Now: clock},
		sleep:   sleep,
		manager: func(o *sessions.Options) { o.DelayNotice = 20 * time.Second },
		beforeStart: func(h *harness) {
			if err := h.db.Gorm().Exec(poison).Error; err != nil {
				t.Fatal(err)
			}
		},
	})
	poisoned := api.Push(telegramtest.DM(7, "poison"))
	sent := api.WaitSent(t, 1)
	if sent[0].Text != sessions.DelayText || sent[0].ReplyTo != poisoned {
		t.Fatalf("first sent %+v, want the delay notice answering the message", sent[0])
	}
	if err := h.db.Gorm().Exec("DROP TRIGGER poison").Error; err != nil {
		t.Fatal(err)
	}
	sent = api.WaitSent(t, 2)
	if sent[1].Text != "echo: poison (history: 0)" || sent[1].ReplyTo != poisoned {
		t.Fatalf("then sent %+v", sent[1])
	}
	// The next message's answer proves nothing else was on its way.
	next := api.Push(telegramtest.DM(7, "hello"))
	sent = api.WaitSent(t, 3)
	if len(sent) != 3 || sent[2].ReplyTo != next {
		t.Fatalf("sent %+v", sent)
	}
}

// gate holds the agent's reply until the test opens it.
type gate struct {
	agent.Echo
	started chan struct{}
	open    chan struct{}
}

func (g *gate) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	g.started <- struct{}{}
	<-g.open
	return g.Echo.Reply(ctx, req, onDelta)
}

// A stored message whose reply cannot be stored: after
// session.delay_notice its user is told once; once storage is back the
// kept reply is stored and sent, once, and the model ran once.
func TestDelayNoticeForAReplyWaitingOnStorage(t *testing.T) {
	api := telegramtest.New(t)
	clock := clocktest.New(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	var fs *faults.Injector
	ag := &gate{started: make(chan struct{}, 4), open: make(chan struct{})}
	stored := make(chan string, 4)
	start(t, api, t.TempDir(), setup{
		sess:     noteStored(stored),
		agent:    ag,
		now:      clock.Now,
		policies: map[string]sessions.Policy{Channel: {MaxHistory: 100, Busy: sessions.BusyPolicy{Mode: sessions.BusyCollect}}},
		manager: func(o *sessions.Options) {
			o.DelayNotice, o.RetryPause = 20*time.Second, 5*time.Millisecond
		},
		hook: func(db *store.DB) { fs = faults.New(db) },
		opts: Options{Streaming: StreamOff},
	})
	id := api.Push(telegramtest.DM(8, "hi"))
	<-ag.started
	waitStored(t, stored, "hi") // (the call may start before the message's commit lands)
	fs.Outage(fs.Calls()+1, faults.Before)
	defer fs.Heal()
	close(ag.open)                     // the reply's store fails, and is retried
	fs.WaitFailures(2, 10*time.Second) // retried: the wait is counted from the first
	clock.Advance(21 * time.Second)
	sent := api.WaitSent(t, 1)
	if sent[0].Text != sessions.DelayText || sent[0].ReplyTo != id {
		t.Fatalf("sent %+v, want the delay notice answering the message", sent[0])
	}
	clock.Advance(30 * time.Second)
	fs.WaitFailures(fs.Failures()+2, 10*time.Second)
	fs.Heal()
	sent = api.WaitSent(t, 2)
	if sent[1].Text != "echo: hi (history: 0)" || sent[1].ReplyTo != id {
		t.Fatalf("then sent %+v", sent[1])
	}
	next := api.Push(telegramtest.DM(8, "again"))
	<-ag.started
	sent = api.WaitSent(t, 3)
	if len(sent) != 3 || sent[2].ReplyTo != next {
		t.Fatalf("sent %+v", sent)
	}
}

// A message the database cannot store, whose tries back off past the
// delay notice: its user is told when the notice falls due, with the
// database still away, not at the next failed try — which may never
// come, when the database is back before it.
func TestDelayNoticeDueBetweenTries(t *testing.T) {
	api := telegramtest.New(t)
	clock := clocktest.New(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	asleep := make(chan time.Duration, 64) // what the bot waits for on the clock
	var fs *faults.Injector
	start(t, api, t.TempDir(), setup{
		now:  clock.Now,
		opts: Options{Now: clock.Now, Streaming: StreamOff},
		sleep: func(ctx context.Context, d time.Duration) error {
			at := clock.After(d)
			asleep <- d
			select {
			case <-at:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
		manager: func(o *sessions.Options) { o.DelayNotice = 20 * time.Second },
		hook:    func(db *store.DB) { fs = faults.New(db) },
	})
	fs.Outage(fs.Calls()+1, faults.Before)
	defer fs.Heal()
	id := api.Push(telegramtest.DM(9, "hello"))
	sleeping := func(d time.Duration) {
		t.Helper()
		guard := time.After(10 * time.Second) // a hang guard, not a wait for the bot
		for {
			select {
			case got := <-asleep:
				if got == d {
					return
				}
			case <-guard:
				t.Fatalf("the bot never waited %v", d)
			}
		}
	}
	// The tries back off 0.5, 1, 2, 4 and 8 s: the sixth fails 15.5 s
	// after the first, and the seventh is due 16 s later, at 31.5 s.
	for _, d := range []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second} {
		sleeping(d)
		clock.Advance(d)
	}
	sleeping(16 * time.Second)
	clock.Advance(5 * time.Second) // 20.5 s since the first failure
	sent := api.WaitSent(t, 1)
	if sent[0].Text != sessions.DelayText || sent[0].ReplyTo != id {
		t.Fatalf("sent %+v, want the delay notice answering the message", sent[0])
	}
	fs.Heal() // back before the next try
	clock.Advance(11 * time.Second)
	sent = api.WaitSent(t, 2)
	if sent[1].Text != "echo: hello (history: 0)" || sent[1].ReplyTo != id {
		t.Fatalf("then sent %+v", sent[1])
	}
	next := api.Push(telegramtest.DM(9, "again"))
	sent = api.WaitSent(t, 3)
	if len(sent) != 3 || sent[2].ReplyTo != next {
		t.Fatalf("sent %+v", sent)
	}
}
