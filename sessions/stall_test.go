package sessions

import (
	"context"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/pgtest"
	"github.com/chatgate/chatgate/sessions/store"
)

// stallTimeout is the stores' request timeout in these tests.
const stallTimeout = 300 * time.Millisecond

// hangBound is how long a call may take on a stalled database before the
// test calls it hung: many times the timeout, so that only a call that
// waits for an answer that never comes can reach it.
const hangBound = 60 * time.Second

// openThrough opens a PostgreSQL store that reaches its server through
// proxy, its requests bounded by stallTimeout.
func openThrough(t *testing.T, proxy *pgtest.Proxy) *store.DB {
	t.Helper()
	db, err := store.Open(context.Background(), store.DriverPostgres, proxy.DSN, store.OpenOptions{Logger: quiet, Timeout: stallTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// A replica whose listen connection stalls (nothing closed, nothing
// answered) finds out by itself: the connection is pinged after a silence
// and replaced when the ping goes unanswered, and once the database
// answers the replica is told that events may have been missed — one was,
// sent while it stalled — and hears the next ones. Without the ping the
// connection would look alive and the lost event would never be noticed.
func TestStalledListenerIsReplaced(t *testing.T) {
	dsn := postgresDSN(t)
	c := newClock(t0)
	a, _ := replica(t, dsn, agent.Echo{}, c, Options{})
	proxy := pgtest.StartProxy(t, dsn)
	dbB := openThrough(t, proxy)
	b := New(dbB, agent.Echo{}, Options{Now: c.Now, Logger: quiet, Events: dbB.Events()})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		b.Shutdown(ctx)
	})
	lb := watch(b)
	startRescuer(t, a)
	startRescuer(t, b)
	knowPeers(t, a, b)
	pid := dbB.Events().ListenPID()
	if pid == 0 {
		t.Fatal("B has no listen connection after Listen")
	}

	proxy.Stall(t)
	handle(t, a, msg("websocket:ann", "while B stalls")) // its reply event is lost on the way to B
	deadline := time.Now().Add(hangBound)
	for dbB.Events().ListenPID() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("B's listen connection still looks alive %s into the stall", hangBound)
		}
		time.Sleep(10 * time.Millisecond) // polling the listener's state; it changes on its own goroutine
	}
	proxy.Heal(t)

	if ev := lb.reply(t); !ev.Missed {
		t.Fatalf("first event after the stall = %+v, want Missed", ev)
	}
	out := handle(t, a, msg("websocket:ann", "after the stall"))
	if ev := lb.reply(t); ev.ReplySeq != out.Reply.Seq || ev.ConversationID != out.ConversationID {
		t.Fatalf("reply event after the stall = %+v, outcome %+v", ev, out)
	}
}
