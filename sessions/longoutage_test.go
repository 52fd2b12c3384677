package sessions_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/faults"
	"github.com/chatgate/chatgate/internal/pgtest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
)

// countedGate counts its calls and holds each until its gate opens.
type countedGate struct {
	agent.Echo
	calls   atomic.Int32
	started chan struct{}
	gate    chan struct{}
}

func (a *countedGate) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	a.calls.Add(1)
	a.started <- struct{}{}
	<-a.gate
	return a.Echo.Reply(ctx, req, onDelta)
}

// An outage longer than the lease, on two replicas sharing PostgreSQL.
// Replica A's model has written its reply, which A keeps in memory while
// the database is gone. The outage lasts three lease TTLs, so when the
// database answers again A's heartbeat is stale. B, back first, must not
// take that for A being gone: nobody could write a heartbeat during the
// outage. B judges other replicas only once it has reached the database
// for a whole lease TTL itself; by then A has written its heartbeat and
// stored its kept reply. The model ran once, and the message has one
// reply.
func TestOutageLongerThanTheLeaseRunsEachTurnOnce(t *testing.T) {
	dsn := pgtest.DSN(t)
	const ttl = time.Second
	type faulty struct {
		db *store.DB
		*faults.Injector
	}
	open := func() faulty {
		db, err := store.Open(context.Background(), store.DriverPostgres, dsn, store.OpenOptions{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return faulty{db, faults.New(db)}
	}
	fa, fb := open(), open()
	agA := &countedGate{started: make(chan struct{}, 4), gate: make(chan struct{})}
	agB := &countedGate{started: make(chan struct{}, 4), gate: make(chan struct{})}
	close(agB.gate)
	policy := map[string]sessions.Policy{"websocket": {MaxHistory: 20, Reset: sessions.ResetPolicy{Mode: sessions.ResetNone},
		Busy: sessions.BusyPolicy{Mode: sessions.BusyCollect}}}
	manager := func(f faulty, ag agent.Agent) *sessions.Manager {
		fs := f.Injector
		m := sessions.New(f.db, ag, sessions.Options{Policies: policy, Logger: slog.New(slog.DiscardHandler), Events: f.db.Events(),
			LeaseTTL: ttl, RescueEvery: 20 * time.Millisecond, RetryPause: 10 * time.Millisecond})
		// Both serve the channel: either could deliver the turn.
		m.Routes().Register("websocket", sessions.Route{Deliver: func(context.Context, sessions.Delivery) (string, error) { return "", nil }})
		startRescuer(t, m)
		t.Cleanup(func() { fs.Heal(); m.Shutdown(context.Background()) })
		return m
	}
	a, _ := manager(fa, agA), manager(fb, agB)
	tk, err := a.Submit(context.Background(), sessions.Inbound{Channel: "websocket", SessionKey: sessions.WebSocketKey("u"), UserID: "u",
		ClientMsgID: "m1", Text: "hello"}, sessions.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	<-agA.started
	fa.Down(faults.Before)
	fb.Down(faults.Before)
	close(agA.gate)     // the reply is written; its store fails, and it is kept
	time.Sleep(3 * ttl) // the outage: longer than the lease
	fb.Heal()
	time.Sleep(ttl / 5) // A is cut off a little longer than B
	fa.Heal()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := tk.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if out.Reply.Text != "echo: hello (history: 0)" {
		t.Fatalf("answered %q", out.Reply.Text)
	}
	// B has been steady for a lease TTL and has looked several times since.
	steady := time.Now().Add(ttl)
	for seen := -1; ; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(steady) {
			if seen < 0 {
				seen = fb.Count("Replicas")
			} else if fb.Count("Replicas") >= seen+3 {
				break
			}
		}
		if time.Now().After(steady.Add(10 * time.Second)) {
			t.Fatal("replica B's rescuer stopped looking")
		}
	}
	t.Logf("B: Replicas %d OrphanTurns %d ClaimBatch %d TurnAt %d Lease %d", fb.Count("Replicas"), fb.Count("OrphanTurns"), fb.Count("ClaimBatch"), fb.Count("TurnAt"), fb.Count("Lease"))
	if na, nb := agA.calls.Load(), agB.calls.Load(); na != 1 || nb != 0 {
		t.Fatalf("model calls: A %d, B %d; want the turn run once, by A", na, nb)
	}
	for _, line := range finalRepliesPerTurn(t, mustOpen(t, dsn)) {
		t.Error(line)
	}
}

func mustOpen(t *testing.T, dsn string) *store.DB {
	t.Helper()
	db, err := store.Open(context.Background(), store.DriverPostgres, dsn, store.OpenOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
