package telegram

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/chatgate/chatgate/internal/clocktest"
	"github.com/chatgate/chatgate/internal/telegramtest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
)

// A user over the rate limit gets one polite reply per burst and the
// messages are not run; another user has a bucket of their own; each
// refusal is counted with its limit.
func TestRateLimitPerUser(t *testing.T) {
	api := telegramtest.New(t)
	clk := clocktest.New(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))
	var mu sync.Mutex
	refusals := map[string]int{}
	h := start(t, api, t.TempDir(), setup{policies: queued, opts: Options{
		RatePerSecond: 1, RateBurst: 2, Now: clk.Now,
		RateLimited: func(limit string) { mu.Lock(); refusals[limit]++; mu.Unlock() },
	}})
	for i := 1; i <= 5; i++ {
		api.Push(telegramtest.DM(7, fmt.Sprintf("m%d", i)))
	}
	api.Push(telegramtest.DM(8, "me too"))
	api.WaitConfirmed(t, api.LastUpdateID())
	sent := api.WaitSent(t, 4)
	byChat := map[int64][]string{}
	for _, m := range sent {
		byChat[m.ChatID] = append(byChat[m.ChatID], m.Text)
	}
	if got, want := fmt.Sprint(byChat[7]), fmt.Sprint([]string{"echo: m1 (history: 0)", "echo: m2 (history: 2)", slowDownText}); got != want {
		t.Fatalf("user 7 got %s, want %s", got, want)
	}
	if got := fmt.Sprint(byChat[8]); got != "[echo: me too (history: 0)]" {
		t.Fatalf("user 8 got %s", got)
	}
	mu.Lock()
	if refusals[LimitUser] != 3 || len(refusals) != 1 {
		t.Fatalf("refusals counted: %v", refusals)
	}
	mu.Unlock()
	convs, _ := h.db.ListConversations(context.Background(), store.ListFilter{SessionKey: sessions.TelegramDMKey(7)})
	if len(convs) != 1 || convs[0].LastSeq != 4 {
		t.Fatalf("user 7's conversation: %+v, want two messages and two replies", convs)
	}

	// A second later one token is back: one message runs, the next starts
	// a new burst and is told again.
	clk.Advance(time.Second)
	api.Push(telegramtest.DM(7, "m6"))
	api.Push(telegramtest.DM(7, "m7"))
	api.WaitConfirmed(t, api.LastUpdateID())
	sent = api.WaitSent(t, 6)
	if sent[4].Text != "echo: m6 (history: 4)" || sent[5].Text != slowDownText {
		t.Fatalf("after a second: %q, %q", sent[4].Text, sent[5].Text)
	}
	// The bot's own text goes as plain text, as its other texts do.
	for i, mode := range api.ParseModes() {
		if sent[i].Text == slowDownText && mode != "" {
			t.Fatalf("the slow-down reply went with parse mode %q", mode)
		}
	}
}

// The refused set is bounded: it forgets the least recently refused chats.
func TestRefusedSetIsBounded(t *testing.T) {
	r := newRefused()
	for i := int64(0); i < 3*maxTracked; i++ {
		r.Add(i, struct{}{})
	}
	if r.Len() != maxTracked || !r.Contains(3*maxTracked-1) || r.Contains(0) {
		t.Fatalf("refused set holds %d chats", r.Len())
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
