package sessions

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
)

// slowEcho answers like agent.Echo after a pause, so that two replicas'
// turns would overlap if nothing kept them apart.
type slowEcho struct{}

func (slowEcho) Name() string  { return "echo" }
func (slowEcho) Model() string { return "echo" }
func (slowEcho) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	time.Sleep(3 * time.Millisecond)
	return agent.Echo{}.Reply(ctx, req, onDelta)
}

func TestTwoReplicasNeverInterleaveOneUser(t *testing.T) {
	dsn := postgresDSN(t)
	c := newClock(t0)
	replicas := []*Manager{
		newManager(t, openStore(t, store.DriverPostgres, dsn), slowEcho{}, c, queued),
		newManager(t, openStore(t, store.DriverPostgres, dsn), slowEcho{}, c, queued),
	}
	var wg sync.WaitGroup
	for r, m := range replicas {
		for i := 0; i < 10; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				in := msg("websocket:ann", fmt.Sprintf("r%d-%d", r, i))
				in.ClientMsgID = in.Text
				if _, err := m.Handle(context.Background(), in, Hooks{}); err != nil {
					t.Error(err)
				}
			}()
		}
	}
	wg.Wait()
	expectPairedTurns(t, openStore(t, store.DriverPostgres, dsn), "websocket:ann", 20)
}

func TestSweepOnTwoReplicasArchivesOnce(t *testing.T) {
	dsn := postgresDSN(t)
	c := newClock(t0)
	policies := map[string]Policy{"websocket": {MaxHistory: 10, Reset: ResetPolicy{Mode: ResetIdle, IdleFor: time.Hour}}}
	a := newManager(t, openStore(t, store.DriverPostgres, dsn), agent.Echo{}, c, policies)
	b := newManager(t, openStore(t, store.DriverPostgres, dsn), agent.Echo{}, c, policies)
	for i := 0; i < 5; i++ {
		handle(t, a, msg(fmt.Sprint("websocket:u", i), "hi"))
	}
	c.Advance(2 * time.Hour)
	var mu sync.Mutex
	events := 0
	count := func(ResetEvent) { mu.Lock(); events++; mu.Unlock() }
	a.Routes().Register("websocket", Route{Reset: count})
	b.Routes().Register("websocket", Route{Reset: count})
	var wg sync.WaitGroup
	for _, m := range []*Manager{a, b} {
		wg.Add(1)
		go func() { defer wg.Done(); NewSweeper(m, nil).RunSweep("idle") }()
	}
	wg.Wait()
	if events != 5 {
		t.Fatalf("%d reset events from two replicas sweeping, want 5 (each conversation once)", events)
	}
}

// leaseGate is a store hook that slows one replica's session leases: an
// acquisition bounded in time (an early call's) waits out its bound, as
// a lease statement does on a loaded database, and an unbounded one (a
// runner's) says so on waiting and waits for open.
type leaseGate struct {
	waiting chan struct{}
	open    chan struct{}
	once    sync.Once
}

func (g *leaseGate) Before(ctx context.Context, c ledger.Call) error {
	if c.Op != "Lease" {
		return nil
	}
	if _, bounded := ctx.Deadline(); bounded {
		<-ctx.Done()
		return ctx.Err()
	}
	g.once.Do(func() { close(g.waiting) })
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *leaseGate) After(_ context.Context, _ ledger.Call, err error) error { return err }

// A message whose replica could not take the key's lease at once is
// stored waiting, not already claimed: the replica that holds the lease
// next answers the user's messages oldest first, whichever replica
// stored them. (Stored claimed, it was skipped as another replica's
// running turn, and a later message was answered before it.)
func TestTwoReplicasAnswerInOrderWhenTheLeaseIsLate(t *testing.T) {
	dsn := postgresDSN(t)
	c := newClock(t0)
	dbA := openStore(t, store.DriverPostgres, dsn)
	a := newManager(t, dbA, agent.Echo{}, c, queued)
	b := newManager(t, openStore(t, store.DriverPostgres, dsn), agent.Echo{}, c, queued)
	gate := &leaseGate{waiting: make(chan struct{}), open: make(chan struct{})}
	defer dbA.Observe(gate)()
	first := make(chan error, 1)
	go func() {
		_, err := a.Handle(context.Background(), msg("websocket:ann", "a0"), Hooks{})
		first <- err
	}()
	<-gate.waiting // a0 is stored, and A's runner waits for the lease
	handle(t, b, msg("websocket:ann", "b0"))
	close(gate.open)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	expectPairedTurns(t, openStore(t, store.DriverPostgres, dsn), "websocket:ann", 2)
}
