package sessions

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/chatgate/chatgate/internal/gopool"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// How messages become turns. Submit stores a message and acknowledges it
// at once, under the session key's short state lock; it never waits for a
// turn. The message joins its key's burst: the messages stored here and
// not yet answered. One runner per key and replica starts the next turn
// once the burst's debounce has passed and the turn before it has ended:
// it takes the key's turn lock (and, with several replicas, the key's
// lease), then claims in the ledger every claimable message of the
// conversation, oldest first, up to max_batch — messages stored by
// another replica included — as one turn with one agent call. The busy
// mode only shapes that: queue claims one message a turn, interrupt
// cancels the running turn when a message arrives (its messages are
// claimable again at once and join the next turn). What a turn answers is
// in the rows (every message of a burst names its lead, the newest, whose
// seq the reply answers), so a resend, a restart or another replica finds
// the same turn.

// errNewMessage cancels a turn for a newer message (busy mode interrupt).
var errNewMessage = errors.New(ledger.InterruptedByMessage)

// burst is a session key's messages stored here and not yet in a turn,
// and its runner. Guarded by Manager.mu.
type burst struct {
	key     string
	policy  BusyPolicy
	waiting []*Ticket
	first   time.Time // the first waiting message arrived (Options.Now)
	last    time.Time // and the newest
	kick    chan struct{}
	stop    bool // Stop came while nothing ran: the next turn is stopped
	fire    bool // the turn running is a fire's, which no message interrupts
	// failing: since when starting the next turn has failed (storage),
	// and the pause before the next try.
	failing time.Time
	backoff time.Duration
}

// startAt is when the burst's next turn may start.
func (b *burst) startAt() time.Time {
	return minTime(b.last.Add(b.policy.Debounce), b.first.Add(b.policy.DebounceMax))
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// idle reports whether nothing of the key waits or runs here.
func (m *Manager) idle(key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	running := m.life.isRunning(key)
	b := m.bursts[key]
	return !running && (b == nil || len(b.waiting) == 0)
}

// enqueue adds a stored message to its key's burst and makes sure a
// runner serves the burst. Called under the key's state lock, so a
// burst's tickets are in seq order.
func (m *Manager) enqueue(t *Ticket) {
	m.hold(t.ref)
	key := t.in.SessionKey
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.bursts[key]
	started := b == nil
	if started {
		b = &burst{key: key, kick: make(chan struct{}, 1)}
		m.bursts[key] = b
		m.life.join() // the runner, on a goroutine of the pool (internal/gopool)
		gopool.Go(func() { m.runBurst(b) })
	}
	b.policy = m.Policy(t.in.Channel).Busy.withDefaults()
	if len(b.waiting) == 0 {
		b.first = now
	}
	b.last = now
	b.waiting = append(b.waiting, t)
	if b.policy.Mode == BusyInterrupt && !t.resend && t.claimed == nil && !t.in.Scheduled && !b.fire {
		// (A message stored claimed interrupts nothing: nothing of the key
		// ran; what runs is its own early call. A fire's message
		// interrupts nothing, and a fire's turn is not interrupted: it
		// waits its place in the line as a queued message does.)
		m.life.cancelTurn(key, errNewMessage)
	}
	if started {
		return // the new runner reads the burst as it is
	}
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// runBurst runs a key's turns while its burst has messages: each turn
// starts once the debounce has passed (at once while draining), takes
// the key's turn lock, and claims what it answers.
func (m *Manager) runBurst(b *burst) {
	defer m.life.leave()
	for {
		m.mu.Lock()
		if len(b.waiting) == 0 {
			delete(m.bursts, b.key)
			m.mu.Unlock()
			return
		}
		at, stop := b.startAt(), b.stop
		m.mu.Unlock()
		if wait := at.Sub(m.now()); wait > 0 && !stop && m.life.draining.Err() == nil {
			select {
			case <-m.opts.After(wait):
			case <-b.kick:
				continue // a new message: the wait starts again
			case <-m.life.draining.Done():
			}
		}
		err := m.runNext(b)
		if err == nil {
			m.mu.Lock()
			b.failing, b.backoff = time.Time{}, 0
			m.mu.Unlock()
			continue
		}
		// Storage failing: the messages stay stored and waiting, held by
		// this runner, which tries again with backoff; their users are
		// told once when it lasts (Options.DelayNotice).
		now := m.now()
		m.mu.Lock()
		first := b.failing.IsZero()
		if first {
			b.failing = now
		}
		since := b.failing
		b.backoff = min(max(2*b.backoff, m.opts.RetryPause), 8*m.opts.RetryPause)
		wait := b.backoff
		waiting := slices.Clone(b.waiting)
		m.mu.Unlock()
		if first {
			m.log.Error("starting a turn failed; retrying until storage answers", slog.String("session_key", b.key), slog.String("error", err.Error()))
		}
		m.noticeDelay(waiting, since)
		backoff := time.NewTimer(wait)
		select {
		case <-backoff.C:
		case <-m.life.base.Done():
			backoff.Stop()
		}
	}
}

// runNext runs the turn of the burst's oldest message. An error means
// nothing was claimed (storage failed) and the burst waits as it was.
func (m *Manager) runNext(b *burst) error {
	m.mu.Lock()
	if len(b.waiting) == 0 {
		// Another runner here (the rescuer) took them meanwhile.
		m.mu.Unlock()
		return nil
	}
	head := b.waiting[0]
	m.mu.Unlock()
	in := head.in
	early := head.early
	head.early = nil // taken once: a retry after a storage failure runs as any turn
	var ctx context.Context
	var endTurn func(error)
	if early != nil {
		ctx, endTurn = early.trace, early.endTrace // begun with its call
	} else {
		ctx, endTurn = m.tr.traceTurn(m.life.base, in)
	}
	endLock := m.tr.startSpan(ctx, "lock wait")
	var release func()
	var err error
	if early != nil {
		release = early.unlock // taken with the call, before the commit
	} else {
		release, err = m.lockTurn(m.life.base, in.SessionKey, 0)
	}
	endLock(err)
	defer func() { endTurn(err) }()
	if err != nil && !errors.Is(err, ErrShuttingDown) {
		return err // storage: the burst waits as it is, and runBurst retries
	}
	if err != nil {
		// The gateway is stopping: the messages stay stored and pending;
		// the next start (or another replica) answers them.
		m.mu.Lock()
		waiting := b.waiting
		b.waiting = nil
		m.mu.Unlock()
		for _, t := range waiting {
			t.resolve(Outcome{}, ErrShuttingDown)
		}
		return nil
	}
	defer release()
	if early != nil {
		// The turn has started: like a turn whose call started here, it
		// stores its reply (a partial one, interrupted, if Shutdown cancels
		// the call) whenever Shutdown comes.
		ctx = context.WithoutCancel(ctx)
	}
	if in.Scheduled {
		m.mu.Lock()
		b.fire = true // the user's next message waits for it (enqueue)
		m.mu.Unlock()
		defer func() {
			m.mu.Lock()
			b.fire = false
			m.mu.Unlock()
		}()
	}
	_, b2, err := m.runBatch(ctx, in, head.ref.conv, nil, 0, head.claimed, early)
	if err != nil && b2 != nil {
		return nil // claimed, and the claim's tickets have their error
	}
	return err
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
