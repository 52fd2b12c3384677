// Package locks provides a keyed lock cache: one FIFO mutex per key, with the
// set of idle keys bounded by an LRU and a TTL.
//
// The cache exists so that every message of one user runs in arrival order and
// never concurrently with another of the same user, however many users there
// are. An entry that is held or awaited is never evicted: evicting it would let
// a second caller create a fresh entry for the same key and hold it at the same
// time as the first, which is the bug this package exists to prevent. Only idle
// entries (nobody holds or waits) count towards MaxEntries and expire after TTL;
// dropping them loses nothing, because an idle lock carries no state.
package locks

import (
	"container/list"
	"context"
	"sync"
	"time"
)

// Defaults used when Options leaves a field zero.
const (
	DefaultMaxEntries = 10_000
	DefaultTTL        = time.Hour
)

// Options configures a Cache.
type Options struct {
	// MaxEntries bounds the number of idle entries kept (default 10,000).
	MaxEntries int
	// TTL is how long an idle entry is kept (default 1h).
	TTL time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Cache is a keyed lock cache. The zero value is not usable; call New.
type Cache struct {
	mu      sync.Mutex
	entries map[string]*entry
	idle    idleList // most recently released at the front
	max     int
	ttl     time.Duration
	now     func() time.Time
}

type entry struct {
	key     string
	held    bool
	waiters list.List // of *waiter, in arrival order
	// grants counts the times the lock was given: a release func
	// releases only the grant it was made for, so that calling it again
	// does nothing.
	grants uint64
	// The idle list's links (idle is true while on it).
	idle               bool
	idlePrev, idleNext *entry
	idleSince          time.Time
}

// idleList is a doubly linked list threaded through the entries, so that
// a release, which puts its entry on it, allocates nothing.
type idleList struct {
	front, back *entry
	n           int
}

func (l *idleList) pushFront(e *entry) {
	e.idle, e.idlePrev, e.idleNext = true, nil, l.front
	if l.front != nil {
		l.front.idlePrev = e
	} else {
		l.back = e
	}
	l.front = e
	l.n++
}

func (l *idleList) remove(e *entry) {
	if e.idlePrev != nil {
		e.idlePrev.idleNext = e.idleNext
	} else {
		l.front = e.idleNext
	}
	if e.idleNext != nil {
		e.idleNext.idlePrev = e.idlePrev
	} else {
		l.back = e.idlePrev
	}
	e.idle, e.idlePrev, e.idleNext = false, nil, nil
	l.n--
}

type waiter struct {
	ready   chan struct{}
	granted bool // set under Cache.mu when ownership is handed over
}

// New returns a Cache with the given options.
func New(opts Options) *Cache {
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = DefaultMaxEntries
	}
	if opts.TTL <= 0 {
		opts.TTL = DefaultTTL
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Cache{
		entries: make(map[string]*entry),
		max:     opts.MaxEntries,
		ttl:     opts.TTL,
		now:     opts.Now,
	}
}

// Acquire takes the lock for key, waiting behind earlier callers in arrival
// order. It returns a release function, which is safe to call more than once
// (calls after the first do nothing), or ctx's error if ctx ends first, in which
// case the lock is not held.
func (c *Cache) Acquire(ctx context.Context, key string) (release func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	e := c.entries[key]
	if e == nil {
		e = &entry{key: key}
		c.entries[key] = e
	} else if e.idle {
		c.idle.remove(e)
	}
	if !e.held {
		e.held = true
		release := c.releaser(e)
		c.mu.Unlock()
		return release, nil
	}
	w := &waiter{ready: make(chan struct{})}
	elem := e.waiters.PushBack(w)
	c.mu.Unlock()

	select {
	case <-w.ready:
		// (The grant was counted before ready closed, and nobody else
		// changes it while this caller holds the lock.)
		return c.releaser(e), nil
	case <-ctx.Done():
	}
	c.mu.Lock()
	if w.granted {
		// Ownership arrived while ctx ended: pass it on rather than leak it.
		grant := e.grants
		c.mu.Unlock()
		c.release(e, grant)
		return nil, ctx.Err()
	}
	e.waiters.Remove(elem)
	c.mu.Unlock()
	return nil, ctx.Err()
}

// TryAcquire takes the lock for key only if nobody holds or awaits it.
func (c *Cache) TryAcquire(key string) (release func(), ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[key]
	if e == nil {
		e = &entry{key: key}
		c.entries[key] = e
	} else if e.held {
		return nil, false
	} else if e.idle {
		c.idle.remove(e)
	}
	e.held = true
	return c.releaser(e), true
}

// releaser is the release func of e's current grant: one allocation,
// where a sync.Once and its closures were three.
func (c *Cache) releaser(e *entry) func() {
	grant := e.grants
	return func() { c.release(e, grant) }
}

// release ends grant of e, unless it ended already: the lock goes to the
// first waiter, or e becomes idle.
func (c *Cache) release(e *entry, grant uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.grants != grant || !e.held {
		return // released before
	}
	e.grants++
	if front := e.waiters.Front(); front != nil {
		w := e.waiters.Remove(front).(*waiter)
		w.granted = true
		close(w.ready) // e.held stays true: ownership moves to the waiter
		return
	}
	e.held = false
	now := c.now()
	e.idleSince = now
	c.idle.pushFront(e)
	c.evictLocked(now)
}

// evictLocked drops idle entries beyond MaxEntries and idle entries older than
// TTL, oldest first. Each call removes what is due; the work is amortised O(1)
// per release because every entry enters the idle list once per release.
func (c *Cache) evictLocked(now time.Time) {
	for e := c.idle.back; e != nil; e = c.idle.back {
		if c.idle.n <= c.max && now.Sub(e.idleSince) < c.ttl {
			return
		}
		c.idle.remove(e)
		delete(c.entries, e.key)
	}
}

// Sweep drops idle entries whose TTL has passed. Release already does this
// as it goes; Sweep lets an otherwise quiet process give the memory back.
func (c *Cache) Sweep() {
	c.mu.Lock()
	c.evictLocked(c.now())
	c.mu.Unlock()
}

// Stats is a point-in-time view of a Cache.
type Stats struct {
	Entries int // all entries: held, awaited and idle
	Idle    int // entries nobody holds or awaits
}

// Stats reports the number of entries.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{Entries: len(c.entries), Idle: c.idle.n}
}
