package sessions

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// Rescuer runs what nobody runs: a full pass (Recover) when it starts,
// then a pass every Options.RescueEvery, whenever woken (Wake: a turn was
// handed back, another replica's event) and as soon as one of this
// replica's owed conversations is due. A pass takes this replica's owed
// conversations first, then the turns that are due, then the turns of
// replicas whose heartbeat stopped — each through the same conditional
// claim as every other runner, so it is safe beside live traffic and on
// any replica. It also keeps trying the settles storage refused
// (keepTrying) until the drain ends them.
//
// The session manager builds it, since its turns tell it from their first
// storage call what to look at again (owe, Wake); the gateway's wiring
// reaches it through Manager.Rescuer, subscribes it to the other
// replicas' events (Listen) and starts it once the channels registered
// how they deliver. Its passes stop when the manager drains, or at Stop.
type Rescuer struct {
	store    rescueStore
	turns    turnRunner // the turn path: the Manager
	routes   *Routes    // which channels deliver here, and how
	life     *lifecycle
	hb       *heartbeat
	relay    *relay
	health   *StorageHealth
	tr       *tracing
	observer Observer
	now      func() time.Time
	cfg      rescuerConfig

	owed      *owedSet // conversations to look at again
	wake      chan struct{}
	rescanAll atomic.Bool    // the next pass reads the whole horizon
	loops     sync.WaitGroup // the settles' retries (keepTrying)
	stopLoops chan struct{}
	endOnce   sync.Once

	started  atomic.Bool
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

// rescuerConfig configures a Rescuer; the manager fills it from its
// Options.
type rescuerConfig struct {
	replica string        // Options.ReplicaID: whose owed turns it claims again
	every   time.Duration // Options.RescueEvery: how often it looks for claimable turns
	// maxAge: a turn found claimable longer than this after its message
	// arrived is not run; its user is asked to send it again
	// (Options.RecoveryMaxAge).
	maxAge      time.Duration
	concurrency int           // Options.RecoveryConcurrency: turns run at once
	pause       time.Duration // Options.RetryPause: the first backoff of owed looks and settle retries
	log         *slog.Logger
}

// rescueStore is what a Rescuer reads and claims in the ledger (beside
// the turn path's own calls).
type rescueStore interface {
	DueTurns(ctx context.Context, now time.Time, limit int) ([]ledger.DueTurn, error)
	OrphanTurns(ctx context.Context, since time.Time, alive []string, limit int) ([]ledger.DueTurn, error)
	OwnTurns(ctx context.Context, convID, owner string) ([]ledger.DueTurn, error)
	TurnAt(ctx context.Context, convID string, seq int64) (*ledger.Turn, error)
	ForgetReplica(ctx context.Context, id string, heartbeat time.Time) error
}

// turnRunner is what a rescue needs of the turn path (the Manager): the
// turns a runner here holds, the key's turn lock, running a turn, and the
// outcome of one answered before.
type turnRunner interface {
	holding(k turnKey) bool
	lockTurn(ctx context.Context, key string, leaseWait time.Duration) (func(), error)
	runBatch(ctx context.Context, in Inbound, conv string, alive []string, maxAge time.Duration, claimed *ledger.Batch, early *earlyCall) (string, *ledger.Batch, error)
	claim(ctx context.Context, convID string, seq int64, seenOwner string, seenAttempt int) (*ledger.Claimed, error)
	unhold(k turnKey)
	storedOutcome(ctx context.Context, t *ledger.Turn) (Outcome, error)
}

// newRescuer returns the Rescuer of the turns turns runs, not yet
// started.
func newRescuer(st rescueStore, turns turnRunner, routes *Routes, life *lifecycle, hb *heartbeat, rl *relay, health *StorageHealth, tr *tracing,
	observer Observer, now func() time.Time, cfg rescuerConfig) *Rescuer {
	return &Rescuer{store: st, turns: turns, routes: routes, life: life, hb: hb, relay: rl, health: health, tr: tr, observer: observer, now: now, cfg: cfg,
		owed: newOwedSet(cfg.pause), wake: make(chan struct{}, 1), stopLoops: make(chan struct{}),
		stop: make(chan struct{}), done: make(chan struct{})}
}

// Listen subscribes the manager to the other replicas' events, when its
// store carries them (PostgreSQL): they wake the Rescuer and reach the
// channels' routes (Route.Reply, Route.Reset). It writes the heartbeat
// first: a replica that listens (and takes turns over) is one the others
// must see alive, and publish to. Register the channels' routes first.
func (r *Rescuer) Listen() {
	if err := r.hb.ensure(); err != nil {
		r.cfg.log.Warn("first heartbeat failed; retried with the next turn", slog.String("error", err.Error()))
	}
	r.relay.listen()
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

// Wake makes the Rescuer look for claimable turns now (another replica
// released some, or a notification says so).
func (r *Rescuer) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// rescan makes the next pass read the whole recovery horizon, and wakes
// it: a channel registered, whose turns passes left alone.
func (r *Rescuer) rescan() {
	r.rescanAll.Store(true)
	r.Wake()
}

// owe marks conv owed (watcher.After): looked at again at once.
func (r *Rescuer) owe(conv string) { r.owed.owe(conv) }

// keepTrying retries a settle's write in the background, with backoff,
// until it lands or the database refuses it for good — then the passes
// are woken — or until the gateway stops (endLoops); unhold runs when it
// ends.
func (r *Rescuer) keepTrying(unhold func(), write func(ctx context.Context) error) {
	r.loops.Add(1)
	go func() {
		defer r.loops.Done()
		defer unhold()
		for wait := r.cfg.pause; ; wait = min(wait*2, 20*r.cfg.pause) {
			select {
			case <-r.stopLoops:
				return
			case <-time.After(wait):
			}
			if err := write(r.life.base); err == nil || definite(err) {
				r.Wake()
				return
			}
		}
	}()
}

// endLoops ends the settles' retries.
func (r *Rescuer) endLoops() {
	r.endOnce.Do(func() { close(r.stopLoops) })
	r.loops.Wait()
}

func (r *Rescuer) run() {
	defer close(r.done)
	draining := r.life.draining
	t := time.NewTimer(r.cfg.every) // (Reset discards a stale tick)
	defer t.Stop()
	_, _, err := r.Recover(draining, r.cfg.maxAge)
	var logged string
	var loggedAt time.Time
	for {
		if err != nil && draining.Err() == nil {
			// Once per kind of failure, and then every half minute: a
			// database outage fails every pass.
			if msg := err.Error(); msg != logged || time.Since(loggedAt) > 30*time.Second {
				r.cfg.log.Error("recovery pass failed", slog.String("error", msg))
				logged, loggedAt = msg, time.Now()
			}
		} else if err == nil {
			logged = ""
		}
		// The next pass: after every, or as soon as an owed conversation
		// is due.
		next := r.cfg.every
		if d, ok := r.owed.next(); ok {
			next = min(next, max(d, 50*time.Millisecond))
		}
		t.Reset(next)
		select {
		case <-r.stop:
			return
		case <-draining.Done():
			return
		case <-t.C:
		case <-r.wake:
		}
		_, _, err = r.rescuePass(draining, r.cfg.maxAge, false)
	}
}
