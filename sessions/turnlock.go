package sessions

// The locks of a session key: the state lock (storing a message,
// starting a turn) and the turn lock (one turn at a time, here and,
// through a lease, across replicas).

import (
	"context"
	"time"
)

// acquire counts work for the drain and takes the session key's state
// lock; the returned func gives both back.
func (m *Manager) acquire(ctx context.Context, key string) (func(), error) {
	if !m.life.enter() {
		return nil, ErrShuttingDown
	}
	if err := m.hb.ensure(); err != nil {
		m.life.leave()
		return nil, err
	}
	release, err := m.lockState(ctx, key, true)
	if err != nil {
		m.life.leave()
		return nil, err
	}
	return func() { release(); m.life.leave() }, nil
}

// lockState takes the session key's state lock, which guards its cached
// conversation and every store of a message to it. It is held for
// moments (never across an agent call); waiting ends when ctx does and,
// with drainEnds (new work), when a shutdown starts.
func (m *Manager) lockState(ctx context.Context, key string, drainEnds bool) (func(), error) {
	if ctx.Err() == nil && (!drainEnds || m.life.draining.Err() == nil) {
		// Free, and nobody waits for it: taken at once, with no
		// cancellable wait to set up (most locks, on every turn).
		if release, ok := m.locks.TryAcquire(key); ok {
			return release, nil
		}
	}
	waitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if drainEnds {
		stop := context.AfterFunc(m.life.draining, cancel)
		defer stop()
	}
	release, err := m.locks.Acquire(waitCtx, key)
	if err != nil {
		if ctx.Err() == nil {
			return nil, ErrShuttingDown
		}
		return nil, err
	}
	return release, nil
}

// lockTurn takes the session key's turn lock, then the replicas' lease,
// so that one user's turns never overlap, here or across gateways sharing
// a database; the returned func gives both back. With leaseWait 0 it
// waits for both as long as ctx lasts. With leaseWait > 0 it does not
// wait for the turn lock (errBusy when the key's turn runs here) and waits
// at most leaseWait for the lease (errBusy when another replica holds it
// longer). It is the one way a turn is locked: the burst runner waits,
// the rescuer tries, an early call tries for one statement's time.
func (m *Manager) lockTurn(ctx context.Context, key string, leaseWait time.Duration) (func(), error) {
	var release func()
	if leaseWait > 0 {
		var ok bool
		if release, ok = m.turnLocks.TryAcquire(key); !ok {
			return nil, errBusy
		}
	} else {
		var err error
		if release, err = m.turnLocks.Acquire(ctx, key); err != nil {
			return nil, ErrShuttingDown
		}
	}
	lctx := ctx
	if leaseWait > 0 {
		var cancel context.CancelFunc
		lctx, cancel = context.WithTimeout(ctx, leaseWait)
		defer cancel()
	}
	releaseLease, err := m.store.Lease(lctx, key, m.opts.ReplicaID, m.opts.LeaseTTL)
	if err != nil {
		release()
		switch {
		case ctx.Err() != nil:
			return nil, ErrShuttingDown
		case lctx.Err() != nil:
			return nil, errBusy
		}
		return nil, err
	}
	return func() { releaseLease(); release() }, nil
}
