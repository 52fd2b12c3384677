package sessions

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chatgate/chatgate/sessions/store"
)

// Filling the hot cache past CacheBytes keeps its estimated size within the
// bound, and a conversation dropped from it answers as before: its history
// is read again from the store.
func TestHotCacheBoundedByBytes(t *testing.T) {
	ctx := context.Background()
	db := openStore(t, store.DriverSQLite, t.TempDir()+"/gateway.db")
	c := newClock(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))
	rec := &recorder{}
	const bound = 16 << 10
	m := New(db, rec, Options{Now: c.Now, Logger: quiet, CacheBytes: bound,
		Policies: map[string]Policy{"websocket": {MaxHistory: 50, Reset: ResetPolicy{Mode: ResetNone}}}})
	t.Cleanup(func() { m.Shutdown(ctx) })
	text := func(key, round int) string {
		return fmt.Sprintf("k%d r%d %s", key, round, strings.Repeat("x", 1000))
	}
	const keys, rounds = 8, 3
	for r := 0; r < rounds; r++ {
		for k := 0; k < keys; k++ {
			handle(t, m, msg(fmt.Sprintf("websocket:u%d", k), text(k, r)))
			if b := m.hot.Bytes(); b > bound {
				t.Fatalf("after key %d round %d the cache holds an estimated %d bytes, bound %d", k, r, b, bound)
			}
		}
	}
	if n := m.hot.Len(); n == 0 || n >= keys {
		t.Fatalf("%d of %d conversations cached: the bound evicted nothing (or everything)", n, keys)
	}
	// Every conversation, cached or not, sees its whole history.
	for k := 0; k < keys; k++ {
		handle(t, m, msg(fmt.Sprintf("websocket:u%d", k), "and now?"))
		h := rec.last().History
		if len(h) != 2*rounds {
			t.Fatalf("key %d: history of %d messages, want %d", k, len(h), 2*rounds)
		}
		for r := 0; r < rounds; r++ {
			if h[2*r].Content != text(k, r) || !strings.HasPrefix(h[2*r+1].Content, "echo: "+text(k, r)) {
				t.Fatalf("key %d: history %d = %.20q / %.20q", k, r, h[2*r].Content, h[2*r+1].Content)
			}
		}
	}
	if b := m.hot.Bytes(); b > bound {
		t.Fatalf("estimated %d bytes, bound %d", b, bound)
	}
}

// The estimate counts message text: a conversation grows in it as its
// window does, and Remove gives its bytes back.
func TestHotCacheAccounting(t *testing.T) {
	hc := &hotConv{conv: Conversation{ID: "c", SessionKey: "websocket:a"}, cap: 10}
	cache := newHotCache(10, 1<<20)
	cache.Add("websocket:a", hc)
	before := cache.Bytes()
	hc.push(Message{Content: strings.Repeat("y", 5000)})
	cache.Update("websocket:a", hc)
	if grown := cache.Bytes() - before; grown < 5000 {
		t.Fatalf("a 5000-byte message grew the estimate by %d", grown)
	}
	other := &hotConv{conv: Conversation{ID: "d", SessionKey: "websocket:a"}, cap: 10}
	other.push(Message{Content: strings.Repeat("z", 9000)})
	cache.Update("websocket:a", other) // not the cached one: ignored
	if cache.Bytes() > before+6000 {
		t.Fatalf("an entry no longer cached was counted: %d", cache.Bytes())
	}
	cache.Remove("websocket:a")
	if cache.Bytes() != 0 || cache.Len() != 0 {
		t.Fatalf("after Remove: %d bytes, %d entries", cache.Bytes(), cache.Len())
	}
}

// The estimate counts each message's text once, as pushed, and is the
// estimate of the whole window counted afresh after every push — across
// the window moving to its front, and after a reset.
func TestHotConvEstimateFollowsTheWindow(t *testing.T) {
	hc := &hotConv{conv: Conversation{ID: "c", SessionKey: "websocket:a"}, cap: 5}
	fresh := func() int64 {
		again := &hotConv{conv: hc.conv, window: hc.window, cap: hc.cap}
		return again.estimate()
	}
	for i := 0; i < 40; i++ {
		id := fmt.Sprint("m", i)
		msgs := []Message{{Content: strings.Repeat("x", i*7), ClientMsgID: &id}}
		if i%3 == 0 {
			msgs = append(msgs, Message{Role: "assistant", Content: strings.Repeat("y", i)})
		}
		hc.push(msgs...)
		if got, want := hc.estimate(), fresh(); got != want {
			t.Fatalf("after push %d (window %d): estimate %d, counted afresh %d", i, len(hc.window), got, want)
		}
		if i == 25 {
			hc.reset(hc.conv, []Message{{Content: "short"}})
			if got, want := hc.estimate(), fresh(); got != want {
				t.Fatalf("after reset: estimate %d, counted afresh %d", got, want)
			}
		}
	}
}
