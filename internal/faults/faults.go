// Package faults makes a store's ledger calls fail, for tests: the k-th
// call and every one after it, until healed (an outage that starts at
// step k), either before the call reaches the database or after it (the
// call landed, and its answer was lost — a commit whose connection was
// reset). Run a scenario once without faults to count its calls (N), then
// once for every k in 1..N: a fault lands at every step.
//
// The injector is a hook of the store (ledger.Hook), the interception
// point every ledger call passes, as the session manager's own watcher
// is: it sees every call the store makes, and whatever the manager is
// given the store through, the manager sees exactly what the injector
// does to it — the same errors, and the same events.
package faults

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/chatgate/chatgate/sessions/ledger"
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

// Injector fails a store's ledger calls on demand.
type Injector struct {
	mu       sync.Mutex
	counted  int      // ledger calls seen (periodic ones not counted)
	steps    []string // the counted calls, in order
	from     int      // fail counted calls from this one on (0: none)
	mode     Mode
	failing  bool          // an outage is on (started at from, not healed)
	failures int           // calls failed by the outage
	failed   chan struct{} // closed (and replaced) at each failure
	healed   bool
	byName   map[string]int  // every call made, periodic ones too, by name
	losing   map[uint64]bool // calls made whose answer After loses
	rejects  map[string]int  // calls to refuse for good, by name, and how many more
}

// Observed is a store whose ledger calls pass hooks (store.DB).
type Observed interface {
	Observe(h ledger.Hook) (remove func())
}

// New installs an injector on s, ahead of any hook installed after it
// (the session manager's watcher, when s is given to one afterwards).
func New(s Observed) *Injector {
	f := &Injector{}
	s.Observe(f)
	return f
}

// Outage makes every ledger call from the from-th counted one on fail
// (periodic calls too, once it started), in mode, until Heal.
func (f *Injector) Outage(from int, mode Mode) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.from, f.mode, f.healed = from, mode, false
}

// Refusal is the error Reject fails a call with: PostgreSQL's refusal
// of text it cannot store, which will be refused on every try. The store
// reports it as ledger.ErrRejected, as it does the database's own.
var Refusal = &pgconn.PgError{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: "22021",
	Message: `invalid byte sequence for encoding "UTF8": 0x00 (injected)`}

// Reject makes the next n calls named name (as Steps names them: an
// append by what it stores) fail before they reach the database with
// Refusal, a refusal for good rather than an outage.
func (f *Injector) Reject(name string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rejects == nil {
		f.rejects = map[string]int{}
	}
	f.rejects[name] = n
}

// Down starts an outage now: every call fails, in mode, until Heal.
func (f *Injector) Down(mode Mode) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mode, f.failing, f.healed = mode, true, false
}

// Count is how many calls named name were made (or failed), periodic
// ones included.
func (f *Injector) Count(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.byName[name]
}

// Heal ends the outage: every call reaches the database again.
func (f *Injector) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.healed, f.failing = true, false
}

// Calls is how many counted ledger calls were made.
func (f *Injector) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counted
}

// Steps are the counted calls' names, in order.
func (f *Injector) Steps() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.steps...)
}

// Failures is how many calls the outage failed.
func (f *Injector) Failures() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failures
}

// Failing reports whether the outage is on.
func (f *Injector) Failing() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failing
}

// WaitFailures waits until the outage has failed n calls, or d passed;
// it reports whether it had.
func (f *Injector) WaitFailures(n int, d time.Duration) bool {
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

// HealAfter ends the outage once it has failed n calls, or d passed
// without them, in the background; the channel it returns is closed
// then.
func (f *Injector) HealAfter(n int, d time.Duration) <-chan struct{} {
	healed := make(chan struct{})
	go func() {
		defer close(healed)
		f.WaitFailures(n, d)
		f.Heal()
	}()
	return healed
}

// failedLocked is the channel the next failure closes; f.mu is held.
func (f *Injector) failedLocked() chan struct{} {
	if f.failed == nil {
		f.failed = make(chan struct{})
	}
	return f.failed
}

// periodic are the calls of the heartbeat and the rescuer's scans: they
// are not steps of a turn, so that steps are numbered alike from run to
// run.
var periodic = map[string]bool{"DueTurns": true, "OrphanTurns": true, "Heartbeat": true, "Replicas": true,
	"ForgetReplica": true, "Retire": true}

// name is how a call is counted: an append by what it stores.
func name(c ledger.Call) string {
	if c.Op != "Append" || c.Append == nil {
		return c.Op
	}
	if len(c.Append.Messages) > 0 && c.Append.Messages[0].Role != "user" {
		return "Append(reply)"
	}
	return "Append(user)"
}

// asideKey marks a context whose calls the injector leaves alone.
type asideKey struct{}

// Aside marks ctx as a test's own look at the store: calls made with it
// are neither counted nor failed, so that checking what a run stored does
// not add steps to it (the injector sees every call the store makes, not
// only the manager's).
func Aside(ctx context.Context) context.Context { return context.WithValue(ctx, asideKey{}, true) }

func aside(ctx context.Context) bool { return ctx.Value(asideKey{}) != nil }

// Before fails the call without making it, in mode Before, when an
// outage is on.
func (f *Injector) Before(ctx context.Context, c ledger.Call) error {
	if aside(ctx) {
		return nil
	}
	mode, ok := f.enter(name(c), !periodic[c.Op])
	if f.reject(name(c)) {
		return fmt.Errorf("%s: %w", name(c), Refusal)
	}
	switch {
	case ok:
		return nil
	case mode == After:
		f.mu.Lock()
		if f.losing == nil {
			f.losing = map[uint64]bool{}
		}
		f.losing[c.ID] = true
		f.mu.Unlock()
		return nil
	}
	return fmt.Errorf("%s: %w", name(c), ErrInjected)
}

// After fails a call that landed, in mode After, when an outage is on:
// its answer is lost.
func (f *Injector) After(ctx context.Context, c ledger.Call, err error) error {
	if aside(ctx) {
		return err
	}
	f.mu.Lock()
	lose := f.losing[c.ID]
	delete(f.losing, c.ID)
	f.mu.Unlock()
	if err != nil || !lose {
		return err
	}
	return fmt.Errorf("%s: %w", name(c), ErrInjected)
}

// reject reports whether a call named name is to be refused, counting it.
func (f *Injector) reject(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rejects[name] <= 0 {
		return false
	}
	f.rejects[name]--
	return true
}

// enter decides the fate of one call: counted says whether it is a step
// of a turn. It returns the mode to fail in, or ok. A call failed in mode
// After is remembered until After sees it.
func (f *Injector) enter(name string, counted bool) (Mode, bool) {
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
