package sessions

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// RescuerConfig configures a Rescuer.
type RescuerConfig struct {
	// Every is how often it looks for claimable turns (default: the
	// manager's Options.RescueEvery).
	Every time.Duration
	// MaxAge: a turn found claimable longer than this after its message
	// arrived is not run; its user is asked to send it again (default:
	// the manager's Options.RecoveryMaxAge).
	MaxAge time.Duration
	Logger *slog.Logger // default: the manager's
}

// Rescuer runs what nobody runs: a full pass (Manager.Recover) when it
// starts, then a pass every Every, whenever the manager is woken (a turn
// was handed back, another replica's event) and as soon as one of this
// replica's owed conversations is due. A pass takes this replica's owed
// conversations first, then the turns that are due, then the turns of
// replicas whose heartbeat stopped — each through the same conditional
// claim as every other runner, so it is safe beside live traffic and on
// any replica. It stops when the manager drains, or at Stop. It is built
// and started in the gateway's wiring once the channels registered how
// they deliver.
type Rescuer struct {
	m   *Manager
	cfg RescuerConfig

	started  atomic.Bool
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

// NewRescuer returns the Rescuer of m, not yet started.
func NewRescuer(m *Manager, cfg RescuerConfig) *Rescuer {
	if cfg.Every <= 0 {
		cfg.Every = m.opts.RescueEvery
	}
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = m.opts.RecoveryMaxAge
	}
	if cfg.Logger == nil {
		cfg.Logger = m.log
	}
	return &Rescuer{m: m, cfg: cfg, stop: make(chan struct{}), done: make(chan struct{})}
}

// Start runs the passes in the background until the manager drains or
// Stop.
func (r *Rescuer) Start() {
	if r.started.CompareAndSwap(false, true) {
		go r.run()
	}
}

// Stop ends the passes and waits for the one under way: the turns it
// dispatched end with the manager's drain.
func (r *Rescuer) Stop() {
	r.stopOnce.Do(func() { close(r.stop) })
	if r.started.Load() {
		<-r.done
	}
}

func (r *Rescuer) run() {
	defer close(r.done)
	m := r.m
	t := time.NewTimer(r.cfg.Every) // (Reset discards a stale tick)
	defer t.Stop()
	_, _, err := m.Recover(m.draining, r.cfg.MaxAge)
	var logged string
	var loggedAt time.Time
	for {
		if err != nil && m.draining.Err() == nil {
			// Once per kind of failure, and then every half minute: a
			// database outage fails every pass.
			if msg := err.Error(); msg != logged || time.Since(loggedAt) > 30*time.Second {
				r.cfg.Logger.Error("recovery pass failed", slog.String("error", msg))
				logged, loggedAt = msg, time.Now()
			}
		} else if err == nil {
			logged = ""
		}
		// The next pass: after Every, or as soon as an owed conversation
		// is due.
		next := r.cfg.Every
		if d, ok := m.owed.next(); ok {
			next = min(next, max(d, 50*time.Millisecond))
		}
		t.Reset(next)
		select {
		case <-r.stop:
			return
		case <-m.draining.Done():
			return
		case <-t.C:
		case <-m.wake:
		}
		_, _, err = m.rescuePass(m.draining, r.cfg.MaxAge, false)
	}
}
