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
	if b.policy.Mode == BusyInterrupt && !t.resend && t.claimed == nil {
		// (A message stored claimed interrupts nothing: nothing of the key
		// ran; what runs is its own early call.)
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

// noticeDelay tells the users of tickets whose turn has waited on the
// database since since, when that is longer than Options.DelayNotice:
// once per session key until a turn of the key is stored again (a user
// with a burst of waiting messages is told once), through the first of
// the key's tickets that has an OnDelay hook.
func (m *Manager) noticeDelay(tickets []*Ticket, since time.Time) {
	if d := m.health.DelayNotice(); d <= 0 || m.now().Sub(since) < d {
		return
	}
	for _, t := range tickets {
		if t.hooks.OnDelay == nil || t.delayed.Load() {
			continue
		}
		key := t.in.SessionKey
		told := m.health.tell(key)
		t.delayed.Store(true)
		if !told {
			t.hooks.OnDelay(Delay{ConversationID: t.ref.conv, Seq: t.ref.seq, Since: since})
		}
	}
}

// delayOver: a turn of key was stored; a later delay is told again.
func (m *Manager) delayOver(key string) {
	m.health.untell(key)
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
	_, b2, err := m.runBatch(ctx, in, head.ref.conv, nil, 0, head.claimed, early)
	if err != nil && b2 != nil {
		return nil // claimed, and the claim's tickets have their error
	}
	return err
}

// takeTickets removes from the key's burst the tickets of conversation
// conv that pick chooses and returns them. A ticket leaves the burst only
// for the batch that holds its message, or for a claim that found its
// message taken: never on the guess that another runner has it.
func (m *Manager) takeTickets(key, conv string, pick func(*Ticket) bool) []*Ticket {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.bursts[key]
	if b == nil {
		return nil
	}
	var took []*Ticket
	kept := b.waiting[:0]
	for _, t := range b.waiting {
		if t.ref.conv == conv && pick(t) {
			took = append(took, t)
		} else {
			kept = append(kept, t)
		}
	}
	clear(b.waiting[len(kept):])
	b.waiting = kept
	return took
}

// takeStop consumes a Stop that came while the key's burst waited.
func (m *Manager) takeStop(key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if b := m.bursts[key]; b != nil && b.stop {
		b.stop = false
		return true
	}
	return false
}
