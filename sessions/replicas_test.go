package sessions

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
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
	a.OnReset(count)
	b.OnReset(count)
	var wg sync.WaitGroup
	for _, m := range []*Manager{a, b} {
		wg.Add(1)
		go func() { defer wg.Done(); m.RunSweep("idle") }()
	}
	wg.Wait()
	if events != 5 {
		t.Fatalf("%d reset events from two replicas sweeping, want 5 (each conversation once)", events)
	}
}
