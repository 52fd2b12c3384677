package admin

import (
	"sync"
	"time"

	"github.com/chatgate/chatgate/sessions"
)

// TurnCounter is a sessions.Observer that passes everything on to the one
// it wraps and counts the turns finished in the last minute, per second.
type TurnCounter struct {
	sessions.Observer
	now func() time.Time

	mu      sync.Mutex
	buckets [60]turnBucket
}

type turnBucket struct {
	sec int64 // the Unix second the count is of
	n   int
}

// CountTurns wraps next (metrics) with a turn counter. now is the clock
// (nil: time.Now).
func CountTurns(next sessions.Observer, now func() time.Time) *TurnCounter {
	if now == nil {
		now = time.Now
	}
	return &TurnCounter{Observer: next, now: now}
}

// ToolCalled passes a tool call on to the next observer, when it counts
// them (sessions.ToolObserver).
func (c *TurnCounter) ToolCalled(server, tool, outcome string, d time.Duration) {
	if o, ok := c.Observer.(sessions.ToolObserver); ok {
		o.ToolCalled(server, tool, outcome, d)
	}
}

// TurnDone implements sessions.Observer: a turn with a reply of its own
// (ok, failed or interrupted) counts; a duplicate, a refused message, a
// message merged into a later one's turn, or one another runner answers
// does not.
func (c *TurnCounter) TurnDone(channel, status string, d time.Duration) {
	if c.Observer != nil {
		c.Observer.TurnDone(channel, status, d)
	}
	switch status {
	case sessions.MsgOK, sessions.MsgFailed, sessions.MsgInterrupted:
	default:
		return
	}
	sec := c.now().Unix()
	c.mu.Lock()
	b := &c.buckets[sec%int64(len(c.buckets))]
	if b.sec != sec {
		*b = turnBucket{sec: sec}
	}
	b.n++
	c.mu.Unlock()
}

// LastMinute is how many turns finished in the last 60 seconds.
func (c *TurnCounter) LastMinute() int {
	now := c.now().Unix()
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, b := range c.buckets {
		if b.sec > now-int64(len(c.buckets)) && b.sec <= now {
			n += b.n
		}
	}
	return n
}

// FirstToken implements sessions.AgentObserver when the observer it wraps
// does: the turn counter passes agent calls on untouched.
func (c *TurnCounter) FirstToken(channel string, d time.Duration) {
	if o, ok := c.Observer.(sessions.AgentObserver); ok {
		o.FirstToken(channel, d)
	}
}

// AgentFailed implements sessions.AgentObserver like FirstToken.
func (c *TurnCounter) AgentFailed(channel string, err error) {
	if o, ok := c.Observer.(sessions.AgentObserver); ok {
		o.AgentFailed(channel, err)
	}
}
