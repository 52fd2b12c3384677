package sessions_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/clocktest"
	"github.com/chatgate/chatgate/internal/faults"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
)

// gatedAgent echoes once its gate is opened.
type gatedAgent struct {
	agent.Echo
	gate    chan struct{}
	started chan struct{}
}

func (a *gatedAgent) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	a.started <- struct{}{}
	<-a.gate
	return a.Echo.Reply(ctx, req, onDelta)
}

// A user whose stored message waits on the database longer than
// DelayNotice is told once — whether the turn cannot start or its reply
// cannot be stored — and answered once storage is back; not before the
// notice's time has passed.
func TestDelayNoticeOnceWhileStorageIsDown(t *testing.T) {
	for _, where := range []string{"turn start", "reply store"} {
		t.Run(where, func(t *testing.T) {
			db, err := store.Open(context.Background(), store.DriverSQLite, filepath.Join(t.TempDir(), "gateway.db"),
				store.OpenOptions{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			fs := faults.New(db)
			clock := clocktest.New(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))
			ag := &gatedAgent{gate: make(chan struct{}), started: make(chan struct{}, 4)}
			busy := sessions.BusyPolicy{Mode: sessions.BusyCollect}
			if where == "turn start" {
				busy.Debounce = time.Second // stored pending: the turn starts after the debounce
			}
			m := sessions.New(db, ag, sessions.Options{
				Policies: map[string]sessions.Policy{"websocket": {MaxHistory: 20, Reset: sessions.ResetPolicy{Mode: sessions.ResetNone}, Busy: busy}},
				Logger:   slog.New(slog.DiscardHandler), Now: clock.Now, After: clock.After,
				RetryPause: 5 * time.Millisecond, DelayNotice: 20 * time.Second,
			})
			defer m.Shutdown(context.Background())
			defer fs.Heal() // (before the shutdown, when the test fails early)
			var delays atomic.Int32
			told := make(chan sessions.Delay, 4)
			tk, err := m.Submit(context.Background(), sessions.Inbound{Channel: "websocket", SessionKey: sessions.WebSocketKey("u"), UserID: "u",
				ClientMsgID: "m1", Text: "hello"}, sessions.Hooks{OnDelay: func(d sessions.Delay) { delays.Add(1); told <- d }})
			if err != nil {
				t.Fatal(err)
			}
			fs.Outage(fs.Calls()+1, faults.Before)
			if where == "turn start" {
				// The runner waits out the debounce on the clock; moved
				// before its timer is set, the clock would leave the
				// timer a second ahead, and the failures, counted from
				// the first, would start 19 s late.
				if !clock.WaitTimers(1, 10*time.Second) {
					t.Fatal("the debounce never waited on the clock")
				}
				clock.Advance(time.Second) // the debounce ends; claiming fails
				close(ag.gate)
			} else {
				<-ag.started
				close(ag.gate) // the reply's store fails
			}
			// Failing for 19 s: a few more failed tries, no notice yet.
			if !fs.WaitFailures(2, 10*time.Second) { // retried: the wait is counted from the first
				t.Fatal("storage was not tried again")
			}
			clock.Advance(19 * time.Second)
			n := fs.Failures()
			if !fs.WaitFailures(n+2, 10*time.Second) {
				t.Fatal("no retry while storage failed")
			}
			if got := delays.Load(); got != 0 {
				t.Fatalf("told %d times after 19 s, want 0", got)
			}
			clock.Advance(2 * time.Second)
			select {
			case d := <-told:
				if d.ConversationID != tk.ConversationID() || d.Seq != tk.Seq() {
					t.Fatalf("told of %s/%d, want %s/%d", d.ConversationID, d.Seq, tk.ConversationID(), tk.Seq())
				}
			case <-time.After(10 * time.Second):
				t.Fatal("not told after 21 s of waiting on storage")
			}
			// Still failing, 10 s more: not told again.
			clock.Advance(10 * time.Second)
			n = fs.Failures()
			fs.WaitFailures(n+2, 10*time.Second)
			fs.Heal()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			out, err := tk.Wait(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if out.Reply.Text != "echo: hello (history: 0)" {
				t.Fatalf("answered %q", out.Reply.Text)
			}
			if got := delays.Load(); got != 1 {
				t.Fatalf("told %d times, want once", got)
			}
		})
	}
}
