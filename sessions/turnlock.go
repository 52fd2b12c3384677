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
	if !m.enter() {
		return nil, ErrShuttingDown
	}
	if err := m.startHeartbeat(); err != nil {
		m.turns.Done()
		return nil, err
	}
	release, err := m.lockState(ctx, key, true)
	if err != nil {
		m.turns.Done()
		return nil, err
	}
	return func() { release(); m.turns.Done() }, nil
}

// startTurn returns the context of a running turn, which Stop and Shutdown
// cancel, and the func that ends it.
func (m *Manager) startTurn(key string) (context.Context, func()) {
	turnCtx, cancel := context.WithCancelCause(m.base)
	m.mu.Lock()
	m.running[key] = cancel
	m.mu.Unlock()
	return turnCtx, func() {
		m.mu.Lock()
		delete(m.running, key)
		m.mu.Unlock()
		cancel(nil)
	}
}

// lockState takes the session key's state lock, which guards its cached
// conversation and every store of a message to it. It is held for
// moments (never across an agent call); waiting ends when ctx does and,
// with drainEnds (new work), when a shutdown starts.
func (m *Manager) lockState(ctx context.Context, key string, drainEnds bool) (func(), error) {
	waitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if drainEnds {
		stop := context.AfterFunc(m.draining, cancel)
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
// a database. Waiting ends when ctx does.
func (m *Manager) lockTurn(ctx context.Context, key string) (func(), error) {
	release, err := m.turnLocks.Acquire(ctx, key)
	if err != nil {
		return nil, ErrShuttingDown
	}
	releaseLease, err := m.store.Lease(ctx, key, m.opts.ReplicaID, m.opts.LeaseTTL)
	if err != nil {
		release()
		if ctx.Err() != nil {
			return nil, ErrShuttingDown
		}
		return nil, err
	}
	return func() { releaseLease(); release() }, nil
}

// tryLockTurn is lockTurn without waiting: errBusy when the key's turn
// runs here, or its lease is held elsewhere for longer than a moment.
func (m *Manager) tryLockTurn(ctx context.Context, key string) (func(), error) {
	release, ok := m.turnLocks.TryAcquire(key)
	if !ok {
		return nil, errBusy
	}
	lctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
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
