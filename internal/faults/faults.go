// Package faults wraps a sessions.Store so that a test can make its
// ledger calls fail: the k-th call and every one after it, until healed
// (an outage that starts at step k), either before the call reaches the
// database or after it (the call landed, and its answer was lost — a
// commit whose connection was reset). Run a scenario once without faults
// to count its calls (N), then once for every k in 1..N: a fault lands at
// every step.
package faults

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/chatgate/chatgate/sessions"
)

// ErrInjected is the error an injected fault returns.
var ErrInjected = errors.New("injected storage fault: the database is unreachable")

// Mode says where a fault strikes.
type Mode int

const (
	// Before: the call fails without reaching the database.
	Before Mode = iota
	// After: the call is made, then reported failed.
	After
)

func (m Mode) String() string {
	if m == After {
		return "after"
	}
	return "before"
}

// Store is a sessions.Store whose ledger calls fail on demand.
type Store struct {
	sessions.Store

	mu       sync.Mutex
	counted  int      // ledger calls seen (periodic ones not counted)
	steps    []string // the counted calls, in order
	from     int      // fail counted calls from this one on (0: none)
	mode     Mode
	failing  bool          // an outage is on (started at from, not healed)
	failures int           // calls failed by the outage
	failed   chan struct{} // closed (and replaced) at each failure
	healed   bool
	byName   map[string]int // every call made, periodic ones too, by name
}

// New wraps s.
func New(s sessions.Store) *Store { return &Store{Store: s} }

// Outage makes every ledger call from the from-th counted one on fail
// (periodic calls too, once it started), in mode, until Heal.
func (f *Store) Outage(from int, mode Mode) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.from, f.mode, f.healed = from, mode, false
}

// Down starts an outage now: every call fails, in mode, until Heal.
func (f *Store) Down(mode Mode) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mode, f.failing, f.healed = mode, true, false
}

// Count is how many calls named name were made (or failed), periodic
// ones included.
func (f *Store) Count(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.byName[name]
}

// Heal ends the outage: every call reaches the database again.
func (f *Store) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.healed, f.failing = true, false
}

// Calls is how many counted ledger calls were made.
func (f *Store) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counted
}

// Steps are the counted calls' names, in order.
func (f *Store) Steps() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.steps...)
}

// Failures is how many calls the outage failed.
func (f *Store) Failures() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failures
}

// Failing reports whether the outage is on.
func (f *Store) Failing() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failing
}

// WaitFailures waits until the outage has failed n calls, or d passed;
// it reports whether it had.
func (f *Store) WaitFailures(n int, d time.Duration) bool {
	timeout := time.NewTimer(d)
	defer timeout.Stop()
	for {
		f.mu.Lock()
		if f.failures >= n {
			f.mu.Unlock()
			return true
		}
		next := f.failedLocked()
		f.mu.Unlock()
		select {
		case <-next:
		case <-timeout.C:
			return false
		}
	}
}

// failedLocked is the channel the next failure closes; f.mu is held.
func (f *Store) failedLocked() chan struct{} {
	if f.failed == nil {
		f.failed = make(chan struct{})
	}
	return f.failed
}

// enter decides the fate of one call: counted says whether it is a step
// of a turn (periodic calls of the heartbeat and the rescuer are not, so
// that steps are numbered alike from run to run). It returns the mode to
// fail in, or ok.
func (f *Store) enter(name string, counted bool) (Mode, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.byName == nil {
		f.byName = map[string]int{}
	}
	f.byName[name]++
	if counted {
		f.counted++
		f.steps = append(f.steps, name)
		if !f.healed && f.from > 0 && f.counted >= f.from {
			f.failing = true
		}
	}
	if !f.failing {
		return 0, true
	}
	f.failures++
	close(f.failedLocked())
	f.failed = nil
	return f.mode, false
}

// call runs one ledger call through the fault plan.
func call[T any](f *Store, name string, counted bool, fn func() (T, error)) (T, error) {
	mode, ok := f.enter(name, counted)
	if ok {
		return fn()
	}
	var zero T
	if mode == After {
		v, err := fn()
		if err != nil {
			return v, err
		}
		// Landed; its answer is lost.
		if release, ok := any(v).(func()); ok {
			// A lease: the store gives back an acquisition whose answer
			// it lost (sessions.DB.Lease), once the database answers.
			release()
		}
		return zero, fmt.Errorf("%s: %w", name, ErrInjected)
	}
	return zero, fmt.Errorf("%s: %w", name, ErrInjected)
}

func call0(f *Store, name string, counted bool, fn func() error) error {
	_, err := call(f, name, counted, func() (struct{}, error) { return struct{}{}, fn() })
	return err
}

func (f *Store) ActiveConversation(ctx context.Context, key string) (*sessions.Conversation, error) {
	return call(f, "ActiveConversation", true, func() (*sessions.Conversation, error) { return f.Store.ActiveConversation(ctx, key) })
}

func (f *Store) Conversation(ctx context.Context, id string) (*sessions.Conversation, error) {
	return call(f, "Conversation", true, func() (*sessions.Conversation, error) { return f.Store.Conversation(ctx, id) })
}

func (f *Store) CreateConversation(ctx context.Context, c *sessions.Conversation) error {
	return call0(f, "CreateConversation", true, func() error { return f.Store.CreateConversation(ctx, c) })
}

func (f *Store) RecentMessages(ctx context.Context, convID string, limit int) ([]sessions.Message, error) {
	return call(f, "RecentMessages", true, func() ([]sessions.Message, error) { return f.Store.RecentMessages(ctx, convID, limit) })
}

func (f *Store) MessageByClientID(ctx context.Context, convID, clientID string) (*sessions.Message, error) {
	return call(f, "MessageByClientID", true, func() (*sessions.Message, error) { return f.Store.MessageByClientID(ctx, convID, clientID) })
}

func (f *Store) EditPending(ctx context.Context, convID string, seq int64, text string) (bool, error) {
	return call(f, "EditPending", true, func() (bool, error) { return f.Store.EditPending(ctx, convID, seq, text) })
}

func (f *Store) Message(ctx context.Context, convID string, seq int64) (*sessions.Message, error) {
	return call(f, "Message", true, func() (*sessions.Message, error) { return f.Store.Message(ctx, convID, seq) })
}

func (f *Store) FinalReply(ctx context.Context, convID string, userSeq int64) (*sessions.Message, error) {
	return call(f, "FinalReply", true, func() (*sessions.Message, error) { return f.Store.FinalReply(ctx, convID, userSeq) })
}

func (f *Store) Append(ctx context.Context, a sessions.Append) error {
	name := "Append(user)"
	if len(a.Messages) > 0 && a.Messages[0].Role != "user" {
		name = "Append(reply)"
	}
	return call0(f, name, true, func() error {
		if f.Failing() {
			// The caller sees a failed append, whatever landed: the store
			// updates its copy of the conversation only on success.
			conv := *a.Conv
			a.Conv = &conv
		}
		return f.Store.Append(ctx, a)
	})
}

func (f *Store) Archive(ctx context.Context, convID, reason string, at time.Time, expectSeq int64) (bool, error) {
	return call(f, "Archive", true, func() (bool, error) { return f.Store.Archive(ctx, convID, reason, at, expectSeq) })
}

func (f *Store) TurnAt(ctx context.Context, convID string, seq int64) (*sessions.Turn, error) {
	return call(f, "TurnAt", true, func() (*sessions.Turn, error) { return f.Store.TurnAt(ctx, convID, seq) })
}

func (f *Store) TurnByClientID(ctx context.Context, key, clientID string) (*sessions.Turn, error) {
	return call(f, "TurnByClientID", true, func() (*sessions.Turn, error) { return f.Store.TurnByClientID(ctx, key, clientID) })
}

func (f *Store) DueTurns(ctx context.Context, now time.Time, limit int) ([]sessions.DueTurn, error) {
	return call(f, "DueTurns", false, func() ([]sessions.DueTurn, error) { return f.Store.DueTurns(ctx, now, limit) })
}

func (f *Store) OrphanTurns(ctx context.Context, since time.Time, alive []string, limit int) ([]sessions.DueTurn, error) {
	return call(f, "OrphanTurns", false, func() ([]sessions.DueTurn, error) { return f.Store.OrphanTurns(ctx, since, alive, limit) })
}

func (f *Store) OwnTurns(ctx context.Context, convID, owner string) ([]sessions.DueTurn, error) {
	return call(f, "OwnTurns", true, func() ([]sessions.DueTurn, error) { return f.Store.OwnTurns(ctx, convID, owner) })
}

func (f *Store) ClaimTurn(ctx context.Context, convID string, seq int64, seenOwner string, seenAttempt int, owner string, now time.Time) (*sessions.Claimed, error) {
	return call(f, "ClaimTurn", true, func() (*sessions.Claimed, error) {
		return f.Store.ClaimTurn(ctx, convID, seq, seenOwner, seenAttempt, owner, now)
	})
}

func (f *Store) ClaimBatch(ctx context.Context, c sessions.Claim) (*sessions.Batch, error) {
	return call(f, "ClaimBatch", true, func() (*sessions.Batch, error) { return f.Store.ClaimBatch(ctx, c) })
}

func (f *Store) Covers(ctx context.Context, convID string, lead int64) ([]sessions.BatchRow, error) {
	return call(f, "Covers", true, func() ([]sessions.BatchRow, error) { return f.Store.Covers(ctx, convID, lead) })
}

func (f *Store) ReleaseTurn(ctx context.Context, convID string, seq int64, owner string, attempt int, dueAt time.Time, why string) error {
	return call0(f, "ReleaseTurn", true, func() error { return f.Store.ReleaseTurn(ctx, convID, seq, owner, attempt, dueAt, why) })
}

func (f *Store) MarkDelivered(ctx context.Context, convID string, seq int64, owner string, attempt int, ref, failure string, at time.Time) error {
	return call0(f, "MarkDelivered", true, func() error {
		return f.Store.MarkDelivered(ctx, convID, seq, owner, attempt, ref, failure, at)
	})
}

func (f *Store) Heartbeat(ctx context.Context, replica string, started time.Time) error {
	return call0(f, "Heartbeat", false, func() error { return f.Store.Heartbeat(ctx, replica, started) })
}

func (f *Store) Replicas(ctx context.Context, self string, ttl time.Duration) ([]sessions.Replica, []string, error) {
	type both struct {
		gone  []sessions.Replica
		alive []string
	}
	r, err := call(f, "Replicas", false, func() (both, error) {
		g, a, err := f.Store.Replicas(ctx, self, ttl)
		return both{g, a}, err
	})
	return r.gone, r.alive, err
}

func (f *Store) ForgetReplica(ctx context.Context, id string, heartbeat time.Time) error {
	return call0(f, "ForgetReplica", false, func() error { return f.Store.ForgetReplica(ctx, id, heartbeat) })
}

func (f *Store) Retire(ctx context.Context, replica string) error {
	return call0(f, "Retire", false, func() error { return f.Store.Retire(ctx, replica) })
}

func (f *Store) Lease(ctx context.Context, key, replica string, ttl time.Duration) (func(), error) {
	return call(f, "Lease", true, func() (func(), error) { return f.Store.Lease(ctx, key, replica, ttl) })
}
