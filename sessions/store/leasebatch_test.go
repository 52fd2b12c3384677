package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// leaseGate is a pgx tracer that holds the first hold lease acquisitions
// the store sends until open is closed, and counts them.
type leaseGate struct {
	hold    int32
	held    atomic.Int32
	sent    atomic.Int32
	waiting chan struct{} // one value per held statement
	open    chan struct{}
}

func newLeaseGate(hold int32) *leaseGate {
	return &leaseGate{hold: hold, waiting: make(chan struct{}, hold), open: make(chan struct{})}
}

func (g *leaseGate) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "INSERT INTO session_leases") {
		g.sent.Add(1)
		if g.held.Add(1) <= g.hold {
			g.waiting <- struct{}{}
			<-g.open
		}
	}
	return ctx
}
func (g *leaseGate) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestLeasesTakenTogetherShareAStatement: acquisitions waiting while the
// lease statements are busy go out together, a few statements for a
// hundred keys, and each caller holds its key.
func TestLeasesTakenTogetherShareAStatement(t *testing.T) {
	gate := newLeaseGate(leaseWorkers)
	db, err := Open(context.Background(), DriverPostgres, postgresDSN(t), OpenOptions{Tracer: gate})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	const n = 100
	releases := make([]func(), n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			releases[i], errs[i] = db.Lease(ctx, fmt.Sprint("websocket:u", i), "r1", ledger.LeaseTTL)
		}()
		if i < leaseWorkers {
			<-gate.waiting // each worker holds a statement of one
		}
	}
	for len(db.leases.queue) < n-leaseWorkers {
		waitQueue()
	}
	close(gate.open)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("lease %d: %v", i, err)
		}
		if holder, replica := leaseHolder(t, db, fmt.Sprint("websocket:u", i)); holder == "" || replica != "r1" {
			t.Fatalf("key %d: lease row %q of %q", i, holder, replica)
		}
	}
	if sent := gate.sent.Load(); sent > leaseWorkers+2 {
		t.Errorf("%d acquisitions sent %d statements, want at most %d", n, sent, leaseWorkers+2)
	}
	for _, release := range releases {
		release()
	}
}

// TestAbandonedLeaseIsGivenBack: a caller that stops waiting after its
// acquisition was sent gets its context's error, and the row the
// statement wrote is given back, so another replica takes the key.
func TestAbandonedLeaseIsGivenBack(t *testing.T) {
	gate := newLeaseGate(1)
	dsn := postgresDSN(t)
	db, err := Open(context.Background(), DriverPostgres, dsn, OpenOptions{Tracer: gate})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	other := openStore(t, DriverPostgres, dsn)
	const key = "websocket:gone"
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := db.Lease(ctx, key, "r1", ledger.LeaseTTL)
		done <- err
	}()
	<-gate.waiting // the statement is on its way, held
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned lease: %v, want context.Canceled", err)
	}
	close(gate.open) // the statement writes the row now
	// r1 is alive (it beat just now), so only the give-back frees the key.
	if err := db.Heartbeat(context.Background(), "r1", time.Now()); err != nil {
		t.Fatal(err)
	}
	lctx, lcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer lcancel()
	release, err := other.Lease(lctx, key, "r2", ledger.LeaseTTL)
	if err != nil {
		t.Fatalf("another replica's lease after the give-back: %v", err)
	}
	release()
}

// Lease writes skip the wait for the log flush; every other write keeps it.
func TestLeasesCommitWithoutWaitingForTheFlush(t *testing.T) {
	db := openStore(t, DriverPostgres, postgresDSN(t))
	var lease, write string
	if err := db.leases.pool.QueryRow("SHOW synchronous_commit").Scan(&lease); err != nil {
		t.Fatal(err)
	}
	if err := db.Gorm().Raw("SHOW synchronous_commit").Scan(&write).Error; err != nil {
		t.Fatal(err)
	}
	if lease != "off" || write != "on" {
		t.Fatalf("synchronous_commit: leases %q, writes %q; want off, on", lease, write)
	}
}

func TestLeaseFollowsTheHeartbeat(t *testing.T) {
	dsn := postgresDSN(t)
	db := openStore(t, DriverPostgres, dsn)
	other := openStore(t, DriverPostgres, dsn) // another replica's process, opened before the clock starts
	// Listening, as a replica's manager does: a lease kept here is given
	// back as soon as another replica asks for it.
	if err := db.events.Listen(context.Background(), func(ledger.Event) {}); err != nil {
		t.Fatal(err)
	}
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
	release, err := db.Lease(ctx, "websocket:ann", "replica-a", ledger.LeaseTTL)
	if err != nil {
		t.Fatalf("the lease of a replica without a heartbeat blocked the key: %v", err)
	}
	// While a live replica holds it, another waits; the holder may retake
	// it (its own lock keeps its turns apart).
	short, cancelShort := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancelShort()
	if _, err := other.Lease(short, "websocket:ann", "replica-b", ledger.LeaseTTL); err == nil {
		t.Fatal("a held lease was taken by another replica")
	}
	if again, err := db.Lease(ctx, "websocket:ann", "replica-a", ledger.LeaseTTL); err != nil {
		t.Fatalf("the holder could not retake its own lease: %v", err)
	} else {
		again()
	}
	release()
	if r2, err := db.Lease(ctx, "websocket:ann", "replica-b", ledger.LeaseTTL); err != nil {
		t.Fatalf("after release: %v", err)
	} else {
		r2()
	}
	// A holder whose heartbeat stopped loses it.
	if r3, err := db.Lease(ctx, "websocket:ann", "replica-a", ledger.LeaseTTL); err != nil {
		t.Fatal(err)
	} else {
		_ = r3 // never released: replica-a dies holding it
	}
	if err := db.Gorm().Exec(`UPDATE replicas SET heartbeat_at = now() - interval '1 minute' WHERE id = 'replica-a'`).Error; err != nil {
		t.Fatal(err)
	}
	if r4, err := db.Lease(ctx, "websocket:ann", "replica-b", ledger.LeaseTTL); err != nil {
		t.Fatalf("the lease of a replica whose heartbeat stopped blocked the key: %v", err)
	} else {
		r4()
	}
}

// giveBackGate counts the give-backs of lease rows that ended.
type giveBackGate struct {
	*leaseGate
	gaveBack atomic.Int32
}

func (g *giveBackGate) TraceQueryEnd(_ context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	if strings.Contains(d.CommandTag.String(), "DELETE") {
		g.gaveBack.Add(1)
	}
}

// An acquisition whose caller stopped waiting (an early call waits one
// statement's time) may still be in flight when the replica's next turn
// of the key asks for the lease. The older statement must not land after
// the newer one and then be given back: that would delete the row the
// newer turn holds, and another replica could take the key mid-turn and
// interleave its turns with this one's. The newer acquisition waits for
// the older one to settle, and holds the row after it.
func TestAnAbandonedAcquisitionNeverFreesTheNextOne(t *testing.T) {
	gate := &giveBackGate{leaseGate: newLeaseGate(1)}
	db, err := Open(context.Background(), DriverPostgres, postgresDSN(t), OpenOptions{Tracer: gate})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var opened sync.Once
	openGate := func() { opened.Do(func() { close(gate.open) }) }
	t.Cleanup(openGate) // before Close: a held statement keeps a worker
	if err := db.Heartbeat(context.Background(), "r1", time.Now()); err != nil {
		t.Fatal(err)
	}
	const key = "websocket:ann"
	// The first acquisition's statement is held; its caller gives up.
	early, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, err := db.Lease(early, key, "r1", ledger.LeaseTTL)
		first <- err
	}()
	<-gate.waiting
	cancel()
	if err := <-first; err == nil {
		t.Fatal("the abandoned acquisition reported the lease taken")
	}
	// The next turn of the key asks, while the older statement is still
	// held: it may not be given the lease before that one has settled.
	// (Were it given the lease, the older statement could land after it,
	// replace its row, and the row then be given back.)
	waiting, stopWaiting := context.WithTimeout(context.Background(), 2*time.Second)
	defer stopWaiting()
	if release, err := db.Lease(waiting, key, "r1", ledger.LeaseTTL); err == nil {
		release()
		t.Fatal("the next acquisition took the lease while an abandoned one of the same key was in flight")
	}
	openGate()
	// The held statement lands and its row is given back (the event that
	// proves the older acquisition is done with); the next one holds the
	// key after it.
	release, err := db.Lease(context.Background(), key, "r1", ledger.LeaseTTL)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if gate.gaveBack.Load() == 0 {
		t.Fatal("the abandoned acquisition's row was not given back before the next acquisition")
	}
	holder, replica := leaseHolder(t, db, key)
	db.leases.kept.mu.Lock()
	kept := db.leases.kept.leases[leaseID{replica: "r1", key: key}]
	db.leases.kept.mu.Unlock()
	if holder == "" || replica != "r1" || kept == nil || kept.holder != holder {
		t.Fatalf("lease row %q of %q; the turn holds %+v: the key is free for another replica mid-turn", holder, replica, kept)
	}
	// Another replica cannot take it while the turn runs.
	if err := db.Heartbeat(context.Background(), "r2", time.Now()); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer stop()
	if _, err := db.Lease(ctx, key, "r2", ledger.LeaseTTL); err == nil {
		t.Fatal("another replica took the lease the turn holds")
	}
}
