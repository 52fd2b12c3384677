package telegram

// Tests of polling: backing off a 409 conflict and an early empty poll, no
// gap after a full long poll, and the updates that are not messages.

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatgate/chatgate/internal/clocktest"
	"github.com/chatgate/chatgate/internal/telegramtest"
	"github.com/chatgate/chatgate/sessions/store"
)

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

// A long poll that ran its full timeout empty is followed by the next one
// at once: a message that arrives then is fetched by that poll, with no
// sleep between (the bot's sleeps here never return, so a backoff would
// leave the message waiting and the test failing).
func TestAFullLongPollIsFollowedAtOnce(t *testing.T) {
	clock := clocktest.New(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	api := telegramtest.New(t)
	api.SetClock(clock.Now)
	never := func(ctx context.Context, d time.Duration) error { <-ctx.Done(); return ctx.Err() }
	h := start(t, api, t.TempDir(), setup{opts: Options{Now: clock.Now}, sleep: never})
	api.WaitPolling(t, 1)
	clock.Advance(time.Second) // the poll timeout (1 s here) passes, nothing came
	api.Poke()
	api.WaitPolling(t, 2)
	api.Push(telegramtest.DM(7, "hi"))
	if sent := api.WaitSent(t, 1); sent[0].Text != "echo: hi (history: 0)" {
		t.Fatalf("sent = %+v", sent)
	}
	if w := h.waitsOf(); len(w) != 0 {
		t.Fatalf("the poller slept %v after a full long poll", w)
	}
}

// A poll that comes back empty before its timeout backs off before the
// next one, so that a server answering at once is never asked in a loop.
func TestAnEarlyEmptyPollBacksOff(t *testing.T) {
	clock := clocktest.New(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	api := telegramtest.New(t)
	api.SetClock(clock.Now)
	h := start(t, api, t.TempDir(), setup{opts: Options{Now: clock.Now}})
	api.WaitPolling(t, 1)
	api.EndPoll()
	api.WaitPolling(t, 2)
	api.EndPoll()
	api.WaitPolling(t, 3)
	if w := h.waitsOf(); len(w) != 2 || w[0] != 200*time.Millisecond || w[1] != 400*time.Millisecond {
		t.Fatalf("waits after two early empty polls = %v, want 200ms then 400ms", w)
	}
}

// A Bot API failure without a description is logged with its method and
// HTTP status, not as error="".
func TestAFailureWithoutADescriptionIsLoggedWithItsMethodAndStatus(t *testing.T) {
	api := telegramtest.New(t)
	api.FailBare("getUpdates", 502, 1)
	var logged strings.Builder
	var mu sync.Mutex
	h := start(t, api, t.TempDir(), setup{beforeStart: func(h *harness) {
		h.bot.log = slog.New(slog.NewTextHandler(lockedWriter{&mu, &logged}, nil))
	}})
	api.Push(telegramtest.DM(7, "hi"))
	if sent := api.WaitSent(t, 1); sent[0].Text != "echo: hi (history: 0)" {
		t.Fatalf("sent = %+v", sent)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := `msg="telegram: getUpdates failed" error="getUpdates: HTTP 502 Bad Gateway with no description"`; !strings.Contains(logged.String(), want) {
		t.Fatalf("log = %s\nwant a line with %s", logged.String(), want)
	}
	if w := h.waitsOf(); len(w) == 0 || w[0] != time.Second {
		t.Fatalf("waits = %v, want a 1s backoff after the failure", w)
	}
}
