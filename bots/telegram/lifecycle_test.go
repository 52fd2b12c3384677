package telegram

// Tests of starting and stopping: connecting in the background, and a
// restart in the middle of a batch of updates.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/telegramtest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
)

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
	bot, err := New(SessionsOf(mgr), Options{Token: telegramtest.Token, APIURL: srv.URL, Logger: quiet, PollTimeout: time.Second,
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
	if ran, _, err := h2.mgr.Rescuer().Recover(context.Background(), time.Hour); ran != 1 || err != nil {
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
