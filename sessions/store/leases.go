package store

// The leaser: the PostgreSQL store's session leases and leader row as one
// service, built by newLeaser from what it needs and closed by close. It
// owns the lease pool, the queue of acquisitions and the workers that
// batch them (leaseWorker), the leases kept across turns (keptLeases)
// and the leader row (lead, resign); DB's Lease, Lead, Resign, Heartbeat and
// Retire reach it. SQLite has none: one gateway per file needs no lease.

import (
	"context"
	"database/sql"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store/notifier"
)

// leaser is one store's side of the session leases and the leader role.
type leaser struct {
	// pool is what leases, heartbeats and the leader row are written
	// through, without waiting for their commit to reach disk.
	pool *sql.DB
	// events carries the requests for leases between replicas: asked
	// of others by lease, answered by kept.wanted.
	events *notifier.Notifier
	// closed is closed by the store's Close, ending the workers, the
	// sweep of kept leases and background retries.
	closed <-chan struct{}
	// kept is the session leases kept across turns.
	kept keptLeases
	// queue feeds lease acquisitions to the workers that batch them
	// (leaseWorker); workers waits for those workers.
	queue   chan *leaseReq
	workers sync.WaitGroup
	// inFlight is the acquisition of each replica's key being made
	// (leaser.acquire): one at a time.
	flightMu sync.Mutex
	inFlight map[leaseID]*leaseReq
}

// newLeaser builds the leaser over pool (opened by openLeasePool; the
// leaser uses it from now on, and the store closes it after close) and
// starts its workers. It hears other replicas' requests for the leases it
// keeps on events.
func newLeaser(pool *sql.DB, events *notifier.Notifier, closed <-chan struct{}) *leaser {
	l := &leaser{pool: pool, events: events, closed: closed, queue: make(chan *leaseReq, leaseBatchMax)}
	l.kept.leaser = l
	for i := 0; i < leaseWorkers; i++ {
		l.workers.Add(1)
		go l.leaseWorker()
	}
	events.Subscribe(l.kept.wanted)
	return l
}

// close, once closed is closed, waits for the workers and gives back
// every kept lease. The pool stays open: the notifier publishes on it
// until it closes.
func (l *leaser) close() {
	l.workers.Wait()
	l.closeLeases()
}

// openLeasePool opens the connections session leases and heartbeats are
// written through. A lease lives for one turn and a heartbeat for a third
// of the lease, so their writes commit without waiting for the log flush
// (synchronous_commit off): they are as atomic and as visible to other
// replicas as any, and only a PostgreSQL crash could forget one — after
// which the turns' seq guards and claims still keep one user's messages
// from interleaving and each turn to one runner.
func openLeasePool(dsn string, timeout time.Duration, tracer pgx.QueryTracer) (*sql.DB, error) {
	cfg, err := pgConfig(dsn, timeout, tracer)
	if err != nil {
		return nil, err
	}
	cfg.RuntimeParams["synchronous_commit"] = "off"
	db := openPGPool(cfg, timeout)
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	return db, nil
}

// heartbeat writes replica's heartbeat, and notes it landed: the kept
// leases are reused only while it lands lately.
func (l *leaser) heartbeat(ctx context.Context, replica string, started time.Time) error {
	sent := time.Now()
	_, err := l.pool.ExecContext(ctx, `INSERT INTO replicas (id, started_at, heartbeat_at) VALUES ($1, $2, now())
			ON CONFLICT (id) DO UPDATE SET heartbeat_at = now()`, replica, started)
	if err == nil {
		l.kept.beat(replica, sent)
	}
	return err
}

// retire gives back every lease replica keeps, and keeps none of its from
// now on (a clean stop: its turns ended).
func (l *leaser) retire(replica string) {
	if rows := l.kept.retire(replica); len(rows) > 0 {
		l.giveBack(rows, ledger.LeaseTTL)
	}
}
