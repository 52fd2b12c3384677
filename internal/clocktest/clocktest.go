// Package clocktest is a clock for tests that moves only when the test
// moves it, so that what depends on time (limits, TTLs, resets, rates)
// is tested without waiting.
package clocktest

import (
	"sync"
	"time"
)

// Clock is a fake clock, safe for concurrent use: pass its Now where the
// code under test takes a clock.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []timer
	made   int           // timers made by After so far
	newer  chan struct{} // closed when After makes one
}

// timer is an After waiting for the clock to reach at.
type timer struct {
	at time.Time
	ch chan time.Time
}

// New returns a clock standing at now.
func New(now time.Time) *Clock { return &Clock{now: now} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d, firing the timers it passes.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.fireLocked()
	c.mu.Unlock()
}

// Set puts the clock at t, forward or back, firing the timers it passes.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.fireLocked()
	c.mu.Unlock()
}

// After is time.After on this clock: the channel gets the time once the
// clock has been moved d past now.
func (c *Clock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	c.timers = append(c.timers, timer{at: c.now.Add(d), ch: ch})
	c.made++
	if c.newer != nil {
		close(c.newer)
		c.newer = nil
	}
	c.fireLocked()
	return ch
}

// Made is how many timers After has made so far, and a channel closed
// when it makes the next: what waits on the clock has looked at it again.
func (c *Clock) Made() (int, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.newer == nil {
		c.newer = make(chan struct{})
	}
	return c.made, c.newer
}

// WaitTimers waits until After has made n timers in all — the code under
// test is waiting on the clock — and reports false if that takes longer
// than within (real time: a hang guard).
func (c *Clock) WaitTimers(n int, within time.Duration) bool {
	guard := time.NewTimer(within)
	defer guard.Stop()
	for {
		c.mu.Lock()
		if c.made >= n {
			c.mu.Unlock()
			return true
		}
		if c.newer == nil {
			c.newer = make(chan struct{})
		}
		newer := c.newer
		c.mu.Unlock()
		select {
		case <-newer:
		case <-guard.C:
			return false
		}
	}
}

func (c *Clock) fireLocked() {
	kept := c.timers[:0]
	for _, t := range c.timers {
		if t.at.After(c.now) {
			kept = append(kept, t)
			continue
		}
		t.ch <- c.now
	}
	c.timers = kept
}
