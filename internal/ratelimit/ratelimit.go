// Package ratelimit is the token buckets of a channel: one per principal
// (or user), shared by everything that principal has open, kept in a
// bounded least-recently-used map, and an optional ceiling for the whole
// channel.
package ratelimit

import (
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/time/rate"
)

// Which limit refused a message, as metrics label it.
const (
	LimitGlobal = "global"
)

// DefaultMaxKeys bounds how many principals' buckets are kept.
const DefaultMaxKeys = 100_000

// Options configures a Limiter.
type Options struct {
	// PerSecond and Burst are each key's bucket.
	PerSecond float64
	Burst     int
	// GlobalPerSecond and GlobalBurst are the channel's bucket; 0 means
	// no ceiling.
	GlobalPerSecond float64
	GlobalBurst     int
	// KeyLimit names the per-key limit in Allow's answer ("principal",
	// "user").
	KeyLimit string
	// MaxKeys bounds the buckets kept (default DefaultMaxKeys). The least
	// recently used is dropped beyond it: a key that comes back starts
	// with a full bucket, as one idle that long would have anyway.
	MaxKeys int
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Limiter decides whether a key may send one more message.
type Limiter struct {
	opts   Options
	mu     sync.Mutex // makes get-or-create of a key's bucket atomic
	keys   *lru.Cache[string, *rate.Limiter]
	global atomic.Pointer[rate.Limiter] // nil: no ceiling
}

// New returns a Limiter.
func New(opts Options) *Limiter {
	if opts.MaxKeys <= 0 {
		opts.MaxKeys = DefaultMaxKeys
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.KeyLimit == "" {
		opts.KeyLimit = "key"
	}
	keys, _ := lru.New[string, *rate.Limiter](opts.MaxKeys)
	l := &Limiter{opts: opts, keys: keys}
	if opts.GlobalPerSecond > 0 && opts.GlobalBurst > 0 {
		l.global.Store(rate.NewLimiter(rate.Limit(opts.GlobalPerSecond), opts.GlobalBurst))
	}
	return l
}

func (l *Limiter) bucket(key string) *rate.Limiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.keys.Get(key)
	if !ok {
		b = rate.NewLimiter(rate.Limit(l.opts.PerSecond), l.opts.Burst)
		l.keys.Add(key, b)
	}
	return b
}

// Allow takes a token for key and one from the channel's ceiling. It
// returns "" when the message may go on, else the limit that refused it:
// Options.KeyLimit or LimitGlobal. A refused message takes no token from
// either bucket.
func (l *Limiter) Allow(key string) string {
	now := l.opts.Now()
	b := l.bucket(key)
	r := b.ReserveN(now, 1)
	if !r.OK() || r.DelayFrom(now) > 0 {
		r.CancelAt(now)
		return l.opts.KeyLimit
	}
	if global := l.global.Load(); global != nil {
		g := global.ReserveN(now, 1)
		if !g.OK() || g.DelayFrom(now) > 0 {
			g.CancelAt(now)
			r.CancelAt(now)
			return LimitGlobal
		}
	}
	return ""
}

// Len is how many keys' buckets are kept.
func (l *Limiter) Len() int { return l.keys.Len() }

// Rates are the rates and bursts in force: each key's and the channel's
// ceiling (0, 0 without one).
func (l *Limiter) Rates() (perSecond float64, burst int, globalPerSecond float64, globalBurst int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.opts.PerSecond, l.opts.Burst, l.opts.GlobalPerSecond, l.opts.GlobalBurst
}

// Set changes the rates and bursts of a running Limiter (a configuration
// reload). Every kept bucket takes the new rate and burst at once, keeping
// the tokens it has (up to the new burst), so a reload neither refills
// nor empties anyone's bucket. A changed ceiling starts full.
func (l *Limiter) Set(perSecond float64, burst int, globalPerSecond float64, globalBurst int) {
	now := l.opts.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if perSecond != l.opts.PerSecond || burst != l.opts.Burst {
		l.opts.PerSecond, l.opts.Burst = perSecond, burst
		for _, b := range l.keys.Values() {
			b.SetLimitAt(now, rate.Limit(perSecond))
			b.SetBurstAt(now, burst)
		}
	}
	if globalPerSecond == l.opts.GlobalPerSecond && globalBurst == l.opts.GlobalBurst {
		return
	}
	l.opts.GlobalPerSecond, l.opts.GlobalBurst = globalPerSecond, globalBurst
	if globalPerSecond > 0 && globalBurst > 0 {
		l.global.Store(rate.NewLimiter(rate.Limit(globalPerSecond), globalBurst))
	} else {
		l.global.Store(nil)
	}
}
