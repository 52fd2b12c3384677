package sessions

import (
	"context"
	"sync"
)

// lifecycle is the drain of a Manager: it counts the work under way — turns
// (and the messages being stored for them), sweeps, purges and summaries —
// so that Manager.Shutdown can wait for it, keeps the running turns'
// cancels, and owns the two contexts a shutdown ends: draining, done when
// it begins (lock waits end, debounces are cut short), and base, the parent
// of every turn, cancelled once the drain's deadline has passed.
//
// Its lock is taken after Manager.mu, never before: the burst runner and
// Stop look at the bursts and the running turns at once.
type lifecycle struct {
	base     context.Context // parent of every turn; cancelled at the end of a drain
	cancel   context.CancelCauseFunc
	draining context.Context // done when Shutdown starts: lock waits end
	drain    context.CancelFunc
	// unwatch ends the watch on the store (watcher), the drain's last step.
	unwatch func()

	mu      sync.Mutex
	closing bool
	running map[string]context.CancelCauseFunc // the turns running here, by session key
	turns   sync.WaitGroup
	sweeps  sync.WaitGroup // running cron sweeps and purges, and summaries
}

func newLifecycle() *lifecycle {
	base, cancel := context.WithCancelCause(context.Background())
	draining, drain := context.WithCancel(context.Background())
	return &lifecycle{base: base, cancel: cancel, draining: draining, drain: drain, unwatch: func() {},
		running: map[string]context.CancelCauseFunc{}}
}

// enter counts a turn for the drain; false once Shutdown has begun.
func (l *lifecycle) enter() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closing {
		return false
	}
	l.turns.Add(1)
	return true
}

// join counts one more turn from work already counted (a burst's runner,
// started by a message being stored): the drain is still waiting for it.
func (l *lifecycle) join() { l.turns.Add(1) }

// leave ends what enter or join counted.
func (l *lifecycle) leave() { l.turns.Done() }

// enterSweep counts a sweep, purge or summary (or the hand-on of another
// replica's ask, relay.askInOrder) for the drain; false once Shutdown has
// begun.
func (l *lifecycle) enterSweep() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closing {
		return false
	}
	l.sweeps.Add(1)
	return true
}

// leaveSweep ends what enterSweep counted.
func (l *lifecycle) leaveSweep() { l.sweeps.Done() }

// closed reports whether Shutdown has begun.
func (l *lifecycle) closed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closing
}

// startTurn returns the context of a running turn, which Stop and Shutdown
// cancel, and the func that ends it.
func (l *lifecycle) startTurn(key string) (context.Context, func()) {
	turnCtx, cancel := context.WithCancelCause(l.base)
	l.mu.Lock()
	l.running[key] = cancel
	l.mu.Unlock()
	return turnCtx, func() {
		l.mu.Lock()
		delete(l.running, key)
		l.mu.Unlock()
		cancel(nil)
	}
}

// cancelTurn cancels the turn of key running here with cause, and reports
// whether one ran.
func (l *lifecycle) cancelTurn(key string, cause error) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	cancel, ok := l.running[key]
	if ok {
		cancel(cause)
	}
	return ok
}

// isRunning reports whether a turn of key runs here.
func (l *lifecycle) isRunning(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.running[key]
	return ok
}

// runningTurns is how many turns run here now.
func (l *lifecycle) runningTurns() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.running)
}

// close is the drain's first phase: nothing new is counted from now on,
// and lock waits and debounces end.
func (l *lifecycle) close() {
	l.mu.Lock()
	l.closing = true
	l.mu.Unlock()
	l.drain()
}

// wait is its second: it returns once every counted turn, sweep, purge
// and summary has ended.
func (l *lifecycle) wait() {
	l.turns.Wait()
	l.sweeps.Wait()
}

// interrupt is its third, once the deadline has passed: it cancels what
// still runs, each turn storing its partial reply as interrupted, and
// says how many turns ran.
func (l *lifecycle) interrupt() int {
	n := l.runningTurns()
	l.cancel(errShutdown)
	return n
}
