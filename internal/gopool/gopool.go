// Package gopool runs a message's short-lived work on goroutines that
// ran earlier work, so that their stacks are grown already.
//
// A new goroutine starts with a small stack. As its calls deepen, the
// runtime allocates a larger stack and copies the old one into it,
// adjusting every frame on it. On a path that starts goroutines for each
// message (a connection's worker and writer, a turn's runner and early
// agent call, the waiter that delivers its reply) that is done again for
// every message, with the caches cold after the wait for the user: on two
// cores, about 0.1 ms of a message's way to the model
// (docs/performance.md, "Goroutines that keep their stacks"). A
// goroutine of the pool keeps its stack between uses and
// waits for the next; one that waited through a whole trim interval
// exits, so that an idle gateway keeps none.
//
// General-purpose pools recover a panic in the work and log it, which
// would leave a turn's locks held and its message unanswered with the
// process still up; here a panic ends the process, as it does on a
// goroutine of its own, and on restart the ledger finds the message
// unanswered.
package gopool

import (
	"sync"
	"time"
)

// DefaultTrim is how often the default pool lets go of the goroutines
// that waited for work through the whole interval: an idle gateway's
// last ones exit between one and two of it after their last work.
const DefaultTrim = 2 * time.Second

var std = New(DefaultTrim)

// Go runs f on a goroutine of the default pool.
func Go(f func()) { std.Go(f) }

// Pool is a set of goroutines waiting for work.
type Pool struct {
	trim time.Duration

	mu sync.Mutex
	// waiting holds each waiting goroutine's work channel, the most
	// recently used last; nil sent on one lets its goroutine go.
	waiting []chan func()
	low     int         // the fewest that waited since the last trim
	timer   *time.Timer // the next trim; nil while none waits
}

// New returns a pool that, every trim, lets go of the goroutines that
// waited through the whole interval.
func New(trim time.Duration) *Pool { return &Pool{trim: trim} }

// Go runs f on the goroutine that waited least long, or on a new one when
// none waits. It never blocks.
func (p *Pool) Go(f func()) {
	p.mu.Lock()
	if n := len(p.waiting); n > 0 {
		work := p.waiting[n-1]
		p.waiting[n-1] = nil
		p.waiting = p.waiting[:n-1]
		p.low = min(p.low, n-1)
		p.mu.Unlock()
		work <- f // buffered, and nothing else sends to it now
		return
	}
	p.mu.Unlock()
	go p.run(f, make(chan func(), 1))
}

// Waiting reports how many goroutines wait for work.
func (p *Pool) Waiting() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.waiting)
}

// run runs f, then each work the goroutine is handed, until it is let go.
func (p *Pool) run(f func(), work chan func()) {
	for f != nil {
		f()
		f = nil // what it holds is not kept while the goroutine waits
		p.mu.Lock()
		p.waiting = append(p.waiting, work)
		if p.timer == nil {
			p.low = len(p.waiting)
			p.timer = time.AfterFunc(p.trim, p.trimIdle)
		}
		p.mu.Unlock()
		f = <-work
	}
}

// trimIdle lets go of the goroutines that waited through the whole
// interval: as many as the fewest that waited at any time since the last
// trim, the least recently used.
func (p *Pool) trimIdle() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, work := range p.waiting[:p.low] {
		work <- nil
	}
	n := copy(p.waiting, p.waiting[p.low:])
	clear(p.waiting[n:])
	p.waiting = p.waiting[:n]
	p.low = n
	if n == 0 {
		p.timer = nil
		return
	}
	p.timer.Reset(p.trim)
}
