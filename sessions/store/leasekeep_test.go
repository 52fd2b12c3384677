package store

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// leaseHolder is the holder of a key's lease row ("" when none).
func leaseHolder(t *testing.T, db *DB, key string) (holder, replica string) {
	t.Helper()
	row := db.leases.pool.QueryRow(`SELECT holder, replica FROM session_leases WHERE session_key = $1`, key)
	if err := row.Scan(&holder, &replica); err != nil && err.Error() != "sql: no rows in result set" {
		t.Fatal(err)
	}
	return holder, replica
}

// A replica keeps a session lease across its turns of the key: the next
// turn reuses the row without writing it; another replica that asks gets
// it as soon as the turn holding it ends, and an unused one goes back by
// itself.
func TestKeptLeaseGoesToTheReplicaThatAsks(t *testing.T) {
	dsn := postgresDSN(t)
	gaveBack := giveBackNotes{done: make(chan struct{}, 16)}
	a := openStore(t, DriverPostgres, dsn)
	b, err := Open(context.Background(), DriverPostgres, dsn, OpenOptions{Tracer: gaveBack})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range []struct {
		db *DB
		id string
	}{{a, "replica-a"}, {b, "replica-b"}} {
		if err := s.db.events.Listen(ctx, func(ledger.Event) {}); err != nil {
			t.Fatal(err)
		}
		if err := s.db.Heartbeat(ctx, s.id, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	const key = "websocket:ann"
	release, err := a.Lease(ctx, key, "replica-a", ledger.LeaseTTL)
	if err != nil {
		t.Fatal(err)
	}
	first, _ := leaseHolder(t, a, key)
	release()
	if h, _ := leaseHolder(t, a, key); h != first {
		t.Fatalf("the lease after its turn: holder %q, want it kept (%q)", h, first)
	}
	again, err := a.Lease(ctx, key, "replica-a", ledger.LeaseTTL)
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := leaseHolder(t, a, key); h != first {
		t.Fatalf("the next turn wrote the lease anew (holder %q, was %q)", h, first)
	}

	// Replica b asks while a's turn holds it: a gives it back when that
	// turn ends, not later.
	got := make(chan func(), 1)
	go func() {
		r, err := b.Lease(ctx, key, "replica-b", ledger.LeaseTTL)
		if err != nil {
			t.Error(err)
			r = func() {}
		}
		got <- r
	}()
	for !a.leases.kept.isWanted(leaseID{"replica-a", key}) {
		select {
		case <-ctx.Done():
			t.Fatal("replica b's request never reached replica a")
		case <-time.After(5 * time.Millisecond): // waiting on another goroutine's event
		}
	}
	again()
	if _, r := leaseHolder(t, a, key); r == "replica-a" {
		t.Fatal("a lease another replica asked for was kept after its turn")
	}
	releaseB := <-got
	if _, r := leaseHolder(t, b, key); r != "replica-b" {
		t.Fatalf("the lease is %q's, want replica-b's", r)
	}

	// Kept by b, unused: it goes back by itself.
	releaseB()
	select {
	case <-gaveBack.done:
	case <-time.After(5 * time.Second):
		t.Fatalf("an unused kept lease was not given back within %v", 5*time.Second)
	}
	if h, _ := leaseHolder(t, b, key); h != "" {
		t.Fatalf("the lease given back is still held by %q", h)
	}
}

// giveBackNotes is a pgx tracer telling of each give-back of kept leases
// the store's lease pool completed.
type giveBackNotes struct{ done chan struct{} }

type giveBackSQL struct{}

func (n giveBackNotes) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, giveBackSQL{}, d.SQL == pgGiveBackLeases)
}

func (n giveBackNotes) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	if give, _ := ctx.Value(giveBackSQL{}).(bool); give && d.Err == nil {
		n.done <- struct{}{}
	}
}

// A kept lease is reused only while this replica's heartbeat is known to
// have landed lately, and only while young: otherwise the others may have
// taken it, or have waited long enough.
func TestKeptLeaseIsReusedOnlyWhileSafe(t *testing.T) {
	k := keptLeases{}
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	id := leaseID{"replica-a", "websocket:ann"}
	k.beat("replica-a", t0)
	k.leases = map[leaseID]*keptLease{id: {holder: "h", taken: t0, idle: t0}}
	if _, ok := k.reuse(id, 30*time.Second, t0.Add(time.Second)); !ok {
		t.Fatal("a young lease with a fresh heartbeat was not reused")
	}
	k.leases[id].busy = false
	if _, ok := k.reuse(id, 3*time.Second, t0.Add(2*time.Second)); ok {
		t.Fatal("a lease was reused with the heartbeat two thirds of the TTL old")
	}
	k.beat("replica-a", t0.Add(5*time.Second))
	if _, ok := k.reuse(id, 30*time.Second, t0.Add(leaseKeep)); ok {
		t.Fatal("a lease was reused at leaseKeep old")
	}
	k.leases[id].wanted = true
	if _, ok := k.reuse(id, 30*time.Second, t0.Add(time.Second)); ok {
		t.Fatal("a lease another replica asked for was reused")
	}
	if _, ok := k.reuse(leaseID{"replica-b", "websocket:ann"}, 30*time.Second, t0.Add(time.Second)); ok {
		t.Fatal("another replica's lease was reused")
	}
}

// isWanted reports whether another replica asked for a lease kept here.
func (k *keptLeases) isWanted(id leaseID) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	l := k.leases[id]
	return l != nil && l.wanted
}
