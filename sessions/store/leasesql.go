package store

// Session leases: one turn at a time per session key across replicas
// sharing PostgreSQL (sessions.Manager.lockTurn takes them),
// acquired by the leaser in batches on a pool of their own.

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// Lease takes the cross-replica lease of a session key for replica,
// waiting while another replica holds it (until ctx ends). SQLite serves
// one gateway per file, where the in-process lock suffices: the lease is
// then free. A lease lives as long as its replica heartbeats (the turn
// ledger's liveness, DB.Heartbeat): a replica that stopped for ttl no longer
// holds its leases, and one that stops cleanly releases them.
//
// A replica keeps a lease across its turns of the key (keptLeases): the
// next turn reuses it without a statement, and it is given back when no
// turn used it for a moment, when it is a few seconds old, or at once when
// another replica asks for it.
//
// A replica may always retake its own lease: its in-process lock already
// keeps its own turns of a key apart, so a release that failed (the
// database was unreachable for a moment) never locks out that replica's
// users; it is retried in the background.
//
// A lease taken whose answer a hook turned into a failure is given back:
// its caller never learns it holds it.
func (s *DB) Lease(ctx context.Context, key, replica string, ttl time.Duration) (func(), error) {
	var took func()
	release, err := observe(ctx, s, ledger.Call{Op: "Lease"}, func() (func(), error) {
		var err error
		took, err = s.lease(ctx, key, replica, ttl)
		return took, err
	})
	if err != nil && took != nil {
		took()
	}
	return release, err
}

func (s *DB) lease(ctx context.Context, key, replica string, ttl time.Duration) (func(), error) {
	if s.driver != DriverPostgres {
		return func() {}, nil
	}
	return s.leases.lease(ctx, key, replica, ttl)
}

// lease is Lease on PostgreSQL, past the hooks.
func (l *leaser) lease(ctx context.Context, key, replica string, ttl time.Duration) (func(), error) {
	id := leaseID{replica: replica, key: key}
	if release, ok := l.kept.reuse(id, ttl, time.Now()); ok {
		return release, nil
	}
	holder := uuid.NewString()
	wait := 5 * time.Millisecond
	var asked time.Time
	for {
		got, err := l.acquire(ctx, key, holder, replica, ttl)
		if err != nil {
			return nil, fmt.Errorf("lease %s: %w", key, err)
		}
		if got {
			break
		}
		// A live replica holds it: ask it to give the lease back (it
		// keeps leases across its turns), again every second.
		if now := time.Now(); now.Sub(asked) >= time.Second {
			asked = now
			l.events.Publish(ledger.Event{Kind: ledger.EventWant, Origin: replica, Key: key})
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		wait = min(wait*2, 200*time.Millisecond)
	}
	return l.kept.took(id, holder, ttl, time.Now()), nil
}

// Lease acquisitions are batched: the ones waiting when a statement goes
// out share it, so that many users arriving at once (each first turn takes
// its key's lease) cost a few statements, not one each queued behind the
// lease pool's connections.
const (
	leaseWorkers  = 2
	leaseBatchMax = 256
)

// leaseReq is one acquisition waiting for its batch. Its caller may stop
// waiting (its context ended, the store closed) once it was sent: the
// worker then owns what the statement did and undoes it.
type leaseReq struct {
	key, holder, replica string
	ttl                  time.Duration
	state                atomic.Int32 // reqPending, reqAbandoned, reqAnswered
	got                  bool
	err                  error
	done                 chan struct{}
	// settled is closed once nothing of the acquisition is left to do:
	// answered, or abandoned and what its statement wrote given back.
	settled chan struct{}
}

const (
	reqPending int32 = iota
	reqAbandoned
	reqAnswered
)

// acquire writes one lease row through a batch and reports whether it
// holds the key: false when another live replica's row holds it.
//
// One acquisition of a replica's key is in flight at a time: a caller
// that stopped waiting (an early call waits one statement's time) may
// leave its statement queued, and were the next acquisition of the key
// to land first, the older one's row — a replica retakes its own lease
// — would replace it and then be given back, freeing the lease that the
// newer one's turn holds for another replica to take. So the next
// acquisition waits until the older one has settled.
func (l *leaser) acquire(ctx context.Context, key, holder, replica string, ttl time.Duration) (bool, error) {
	r := &leaseReq{key: key, holder: holder, replica: replica, ttl: ttl, done: make(chan struct{}), settled: make(chan struct{})}
	if err := l.enter(ctx, r); err != nil {
		return false, err
	}
	select {
	case l.queue <- r:
	case <-ctx.Done():
		l.settle(r)
		return false, ctx.Err()
	case <-l.closed:
		l.settle(r)
		return false, ledger.ErrClosed
	}
	var gone error
	select {
	case <-r.done:
		return r.got, r.err
	case <-ctx.Done():
		gone = ctx.Err()
	case <-l.closed:
		gone = ledger.ErrClosed
	}
	if r.state.CompareAndSwap(reqPending, reqAbandoned) {
		return false, gone
	}
	<-r.done // answered meanwhile
	return r.got, r.err
}

// enter waits until no other acquisition of r's replica and key is in
// flight, then makes r the one (settle ends it).
func (l *leaser) enter(ctx context.Context, r *leaseReq) error {
	id := leaseID{replica: r.replica, key: r.key}
	for {
		l.flightMu.Lock()
		prev := l.inFlight[id]
		if prev == nil {
			if l.inFlight == nil {
				l.inFlight = map[leaseID]*leaseReq{}
			}
			l.inFlight[id] = r
			l.flightMu.Unlock()
			return nil
		}
		l.flightMu.Unlock()
		select {
		case <-prev.settled:
		case <-ctx.Done():
			return ctx.Err()
		case <-l.closed:
			return ledger.ErrClosed
		}
	}
}

// settle ends r's flight: the next acquisition of its key may go.
func (l *leaser) settle(r *leaseReq) {
	id := leaseID{replica: r.replica, key: r.key}
	l.flightMu.Lock()
	if l.inFlight[id] == r {
		delete(l.inFlight, id)
	}
	l.flightMu.Unlock()
	close(r.settled)
}

// answer gives r its outcome, or, when its caller stopped waiting, undoes
// what the statement may have done: a row it wrote is given back, and one
// an error left in doubt is deleted once the database answers. Either way
// r has settled when it returns.
func (l *leaser) answer(r *leaseReq, got bool, err error) {
	defer l.settle(r)
	if r.state.CompareAndSwap(reqPending, reqAnswered) {
		r.got, r.err = got, err
		close(r.done)
		if err != nil {
			// The insert may have landed with its answer lost: this
			// acquisition's row, if there is one, is deleted when the
			// database answers again (only this holder's).
			go l.retryUnlease(r.key, r.holder, r.ttl)
		}
		return
	}
	switch {
	case err != nil:
		go l.retryUnlease(r.key, r.holder, r.ttl)
	case got:
		l.giveBack([]leaseRow{{r.key, r.holder}}, r.ttl)
	}
}

// leaseWorker sends the waiting acquisitions, up to leaseBatchMax at a
// time, until the store closes.
func (l *leaser) leaseWorker() {
	defer l.workers.Done()
	batch := make([]*leaseReq, 0, leaseBatchMax)
	for {
		select {
		case r := <-l.queue:
			batch = append(batch[:0], r)
		case <-l.closed:
			return
		}
	fill:
		for len(batch) < leaseBatchMax {
			select {
			case r := <-l.queue:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		for len(batch) > 0 {
			batch = l.leaseRound(batch)
		}
	}
}

// pgAcquireLeases takes, in one statement, the leases of the given keys
// for the given holders and replicas: free ones, this replica's own, and
// those whose replica's heartbeat is older than $4 seconds. It returns the
// keys taken.
var pgAcquireLeases = `INSERT INTO session_leases (session_key, holder, replica, expires_at)
	SELECT g.k, g.h, g.r, now() FROM ` + pgArrayRows("k $1::text[]", "h $2::text[]", "r $3::text[]") + ` AS g
	ON CONFLICT (session_key) DO UPDATE SET holder = EXCLUDED.holder, replica = EXCLUDED.replica, expires_at = EXCLUDED.expires_at
	WHERE session_leases.replica = EXCLUDED.replica OR NOT EXISTS (SELECT 1 FROM replicas AS r
		WHERE r.id = session_leases.replica AND r.heartbeat_at >= now() - make_interval(secs => $4))
	RETURNING session_key`

// leaseRound sends, in one statement, the acquisitions of batch with
// distinct keys and the first one's ttl (a statement may write a row
// once), and returns the rest. Acquisitions abandoned before they were
// sent are dropped: they did nothing.
func (l *leaser) leaseRound(batch []*leaseReq) []*leaseReq {
	var round, rest []*leaseReq
	keys := map[string]*leaseReq{}
	for _, r := range batch {
		switch {
		case r.state.Load() != reqPending:
			l.settle(r) // abandoned before it was sent: it did nothing
		case keys[r.key] != nil || r.ttl != batch[0].ttl:
			rest = append(rest, r)
		default:
			keys[r.key] = r
			round = append(round, r)
		}
	}
	if len(round) == 0 {
		return rest
	}
	ks, hs, rs := make([]string, len(round)), make([]string, len(round)), make([]string, len(round))
	for i, r := range round {
		ks[i], hs[i], rs[i] = r.key, r.holder, r.replica
	}
	got := map[string]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), leaseStatementWait)
	defer cancel()
	rows, err := l.pool.QueryContext(ctx, pgAcquireLeases, ks, hs, rs, round[0].ttl.Seconds())
	if err == nil {
		for rows.Next() {
			var k string
			if err = rows.Scan(&k); err != nil {
				break
			}
			got[k] = true
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	for _, r := range round {
		l.answer(r, err == nil && got[r.key], err)
	}
	return rest
}

// leaseStatementWait bounds one batch's statement: its callers stop
// waiting when their own contexts end, and the next batch waits for it.
const leaseStatementWait = 10 * time.Second

func (l *leaser) unlease(key, holder string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := l.pool.ExecContext(ctx, `DELETE FROM session_leases WHERE session_key = $1 AND holder = $2`, key, holder)
	return err
}

// retryUnlease keeps trying to release a lease until it is released or
// the store closes (the process ends, and with its heartbeat its leases).
// Only this acquisition's row is deleted (holder is unique to it), so a
// late release never frees a lease taken again since.
func (l *leaser) retryUnlease(key, holder string, ttl time.Duration) {
	for wait := 100 * time.Millisecond; ; wait = min(wait*2, ttl/6) {
		select {
		case <-l.closed:
			return
		case <-time.After(wait):
		}
		if l.unlease(key, holder) == nil {
			return
		}
	}
}
