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
	mu  sync.Mutex
	now time.Time
}

// New returns a clock standing at now.
func New(now time.Time) *Clock { return &Clock{now: now} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Set puts the clock at t, forward or back.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}
