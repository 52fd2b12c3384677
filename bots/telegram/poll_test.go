package telegram

// Tests of polling: backing off a 409 conflict, and the updates that are
// not messages (poll.go, route.go).

import (
	"context"
	"testing"
	"time"

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
