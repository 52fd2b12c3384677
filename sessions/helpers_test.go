package sessions

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/clocktest"
	"github.com/chatgate/chatgate/internal/pgtest"
	"github.com/chatgate/chatgate/sessions/store"
	"github.com/chatgate/chatgate/sessions/storetest"
)

// clock is a fake clock tests move by hand.
type clock = clocktest.Clock

func newClock(t time.Time) *clock { return clocktest.New(t) }

// drivers runs fn once per database: SQLite always, PostgreSQL when
// CHATGATE_TEST_POSTGRES_DSN is set.
func drivers(t *testing.T, fn func(t *testing.T, open func() *store.DB)) { storetest.Drivers(t, fn) }

func openStore(t testing.TB, driver, dsn string) *store.DB {
	t.Helper()
	return storetest.Open(t, driver, dsn, store.OpenOptions{})
}

// postgresDSN returns a DSN on a fresh schema of the test server, or skips.
func postgresDSN(t testing.TB) string { return pgtest.DSN(t) }

// recorder is an agent that echoes like agent.Echo and records requests.
// block, when set, makes Reply stream "partial " and wait until its ctx ends
// or the channel is closed.
type recorder struct {
	mu       sync.Mutex
	requests []agent.Request
	calls    atomic.Int32
	block    chan struct{}
	started  chan struct{}
}

func (r *recorder) Name() string  { return "recorder" }
func (r *recorder) Model() string { return "echo" }
func (r *recorder) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	r.calls.Add(1)
	r.mu.Lock()
	r.requests = append(r.requests, req)
	r.mu.Unlock()
	if r.block != nil {
		onDelta("partial ")
		if r.started != nil {
			r.started <- struct{}{}
		}
		select {
		case <-ctx.Done():
			return agent.Reply{}, ctx.Err()
		case <-r.block:
		}
	}
	return agent.Echo{}.Reply(ctx, req, onDelta)
}

func (r *recorder) last() agent.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests[len(r.requests)-1]
}

// since returns the requests after the first n.
func (r *recorder) since(n int) []agent.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.requests[n:])
}

func newManager(t testing.TB, db Store, ag agent.Agent, c *clock, policies map[string]Policy) *Manager {
	t.Helper()
	m := New(db, ag, Options{Policies: policies, Now: c.Now, Logger: quiet, Events: events(db)})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		m.Shutdown(ctx)
	})
	return m
}

func msg(key, text string) Inbound {
	return Inbound{Channel: "websocket", SessionKey: key, UserID: strings.TrimPrefix(key, "websocket:"), Text: text}
}

func handle(t testing.TB, m *Manager, in Inbound) Outcome {
	t.Helper()
	out, err := m.Handle(context.Background(), in, Hooks{})
	if err != nil {
		t.Fatalf("Handle(%q): %v", in.Text, err)
	}
	return out
}

// transcript returns every message row of a conversation, by seq.
func transcript(t testing.TB, db *store.DB, convID string) []Message {
	t.Helper()
	return storetest.Transcript(t, db, convID)
}

func conversations(t testing.TB, db *store.DB, key string) []Conversation {
	t.Helper()
	return storetest.Conversations(t, db, key)
}

var quiet = slog.New(slog.DiscardHandler)

// waitQueue yields while goroutines line up in the commit queue.
func waitQueue() { runtime.Gosched() }

// expectPairedTurns checks that key has one conversation of n turns whose
// rows are gap-free and alternate user message, echo reply to it: turns
// never interleaved.
func expectPairedTurns(t testing.TB, db *store.DB, key string, turns int) {
	t.Helper()
	convs := conversations(t, db, key)
	if len(convs) != 1 {
		t.Fatalf("%d conversations, want 1", len(convs))
	}
	rows := transcript(t, db, convs[0].ID)
	if len(rows) != 2*turns {
		t.Fatalf("%d rows, want %d", len(rows), 2*turns)
	}
	// Each message is stored when it arrives, so a user's later messages
	// may come before an earlier one's reply; but each turn answers one
	// message, after the turn before it, seeing every earlier turn.
	var users []Message
	answered := map[int64]int{}
	lastReply := int64(0)
	for i, r := range rows {
		if r.Seq != int64(i+1) {
			t.Fatalf("seq %d at position %d: a gap or a duplicate", r.Seq, i)
		}
		if r.Role == "user" {
			users = append(users, r)
			continue
		}
		k := slices.IndexFunc(users, func(u Message) bool { return u.Seq == r.ReplyTo })
		if k < 0 || r.ReplyTo <= lastReply {
			t.Fatalf("row %d (%q) answers %d: not a stored message after the last answered one (%d)", i, r.Content, r.ReplyTo, lastReply)
		}
		if want := fmt.Sprintf("echo: %s (history: %d)", users[k].Content, 2*k); r.Content != want {
			t.Fatalf("row %d = %q, want %q: turns interleaved", i, r.Content, want)
		}
		answered[r.ReplyTo]++
		lastReply = r.ReplyTo
	}
	if len(answered) != turns {
		t.Fatalf("%d messages answered, want %d", len(answered), turns)
	}
}

// events are db's events, when it is a store that has them.
func events(db Store) Events {
	if s, ok := db.(*store.DB); ok {
		return s.Events()
	}
	return nil
}

// startRescuer listens to other replicas' events and starts m's Rescuer,
// as the gateway's wiring does; it stops with the test.
func startRescuer(t testing.TB, m *Manager) {
	t.Helper()
	r := m.Rescuer()
	r.Listen()
	r.Start()
	t.Cleanup(r.Stop)
}
