package sessions

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// heartbeat is this replica's lease keeper: its heartbeat row is the
// lease of every turn it holds. The first beat is written before the
// replica takes any turn (ensure: Start, or the first turn or claim,
// whichever comes first), and one is written every third of the lease
// until end: a replica that took turns without one would look gone to
// the others, who would take its turns over. Each beat also looks
// whether other replicas live (peers), so that this one publishes its
// events only when somebody listens.
type heartbeat struct {
	store   Ledger
	replica string
	ttl     time.Duration
	log     *slog.Logger

	mu      sync.Mutex // one first beat at a time
	beating atomic.Bool
	started time.Time // when the first beat was written: the replica's start, as the others see it

	// peers: another replica is alive (heartbeats, or one of its events
	// arrived); known closes the first time it is.
	peers     atomic.Bool
	known     chan struct{}
	knownOnce sync.Once

	stop     chan struct{}
	stopOnce sync.Once
	loop     sync.WaitGroup
}

func newHeartbeat(store Ledger, replica string, ttl time.Duration, log *slog.Logger) *heartbeat {
	return &heartbeat{store: store, replica: replica, ttl: ttl, log: log, known: make(chan struct{}), stop: make(chan struct{})}
}

// ensure writes the first heartbeat and starts the beats, once; an error
// leaves it for the next call to try again.
func (h *heartbeat) ensure() error {
	if h.beating.Load() {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.beating.Load() {
		return nil
	}
	h.started = time.Now().UTC()
	if err := h.beat(context.Background()); err != nil {
		return err
	}
	h.beating.Store(true)
	h.loop.Add(1)
	go func() {
		defer h.loop.Done()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-h.stop:
				cancel() // a beat under way ends with the loop
			case <-ctx.Done():
			}
		}()
		t := time.NewTicker(h.ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-t.C:
				if err := h.beat(ctx); err != nil {
					h.log.Warn("heartbeat failed; other replicas take this one's turns if it stays down", slog.String("error", err.Error()))
				}
			}
		}
	}()
	return nil
}

// beat writes the heartbeat and looks for peers.
func (h *heartbeat) beat(ctx context.Context) error {
	if err := h.store.Heartbeat(ctx, h.replica, h.started); err != nil {
		return err
	}
	// When the others cannot be read, one is assumed alive: events cost
	// latency when missed, not correctness, and are cheap when sent to
	// nobody.
	_, alive, err := h.store.Replicas(ctx, h.replica, h.ttl)
	h.setPeers(err != nil || len(alive) > 1)
	return nil
}

// setPeers records whether another replica is known to be alive.
func (h *heartbeat) setPeers(alive bool) {
	h.peers.Store(alive)
	if alive {
		h.knownOnce.Do(func() { close(h.known) })
	}
}

// end stops the beats and, after a clean stop, tells the other replicas
// that this one is gone: they need not wait for its heartbeat to age.
func (h *heartbeat) end() {
	h.halt()
	if !h.beating.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := h.store.Retire(ctx, h.replica); err != nil {
		h.log.Warn("could not mark this replica stopped; others take over what it left when its heartbeat is old", slog.String("error", err.Error()))
	}
}

// halt stops the beats: the replica looks gone once its last one is
// older than the lease.
func (h *heartbeat) halt() {
	h.stopOnce.Do(func() { close(h.stop) })
	h.loop.Wait()
}
