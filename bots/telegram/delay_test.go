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
	var fs *faults.Store
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
		store: func(db *sessions.DB) sessions.Store { fs = faults.New(db); return fs },
		opts:  Options{Streaming: StreamOff},
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
