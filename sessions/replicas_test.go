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
		go func() { defer wg.Done(); m.runSchedule("idle") }()
	}
	wg.Wait()
	if events != 5 {
		t.Fatalf("%d reset events from two replicas sweeping, want 5 (each conversation once)", events)
	}
}

func TestLeaseFollowsTheHeartbeat(t *testing.T) {
	dsn := postgresDSN(t)
	db := openStore(t, store.DriverPostgres, dsn)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// A replica died holding the lease: its row stays, its heartbeat ages.
	if err := db.Gorm().Exec(`INSERT INTO session_leases (session_key, holder, replica, expires_at) VALUES ('websocket:ann', 'h', 'dead', now())`).Error; err != nil {
		t.Fatal(err)
	}
	if err := db.Heartbeat(ctx, "replica-a", time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := db.Heartbeat(ctx, "replica-b", time.Now()); err != nil {
		t.Fatal(err)
	}
	release, err := db.Lease(ctx, "websocket:ann", "replica-a", store.LeaseTTL)
	if err != nil {
		t.Fatalf("the lease of a replica without a heartbeat blocked the key: %v", err)
	}
	// While a live replica holds it, another waits; the holder may retake
	// it (its own lock keeps its turns apart).
	short, cancelShort := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancelShort()
	if _, err := openStore(t, store.DriverPostgres, dsn).Lease(short, "websocket:ann", "replica-b", store.LeaseTTL); err == nil {
		t.Fatal("a held lease was taken by another replica")
	}
	if again, err := db.Lease(ctx, "websocket:ann", "replica-a", store.LeaseTTL); err != nil {
		t.Fatalf("the holder could not retake its own lease: %v", err)
	} else {
		again()
	}
	release()
	if r2, err := db.Lease(ctx, "websocket:ann", "replica-b", store.LeaseTTL); err != nil {
		t.Fatalf("after release: %v", err)
	} else {
		r2()
	}
	// A holder whose heartbeat stopped loses it.
	if r3, err := db.Lease(ctx, "websocket:ann", "replica-a", store.LeaseTTL); err != nil {
		t.Fatal(err)
	} else {
		_ = r3 // never released: replica-a dies holding it
	}
	if err := db.Gorm().Exec(`UPDATE replicas SET heartbeat_at = now() - interval '1 minute' WHERE id = 'replica-a'`).Error; err != nil {
		t.Fatal(err)
	}
	if r4, err := db.Lease(ctx, "websocket:ann", "replica-b", store.LeaseTTL); err != nil {
		t.Fatalf("the lease of a replica whose heartbeat stopped blocked the key: %v", err)
	} else {
		r4()
	}
}
