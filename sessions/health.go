package sessions

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// DelayText is what a user is told, once, when their stored message has
// waited on the database longer than Options.DelayNotice.
const DelayText = "I have your message, but I can't reach my storage right now. I'll answer it as soon as it is back — no need to send it again."

// Delay tells a channel that a stored message's turn has waited on the
// database since Since (Hooks.OnDelay): the message is kept and will be
// answered once storage is back.
type Delay struct {
	ConversationID string
	Seq            int64
	Since          time.Time
}

// health is what this process knows of its database: since when every
// call failed (zero while the last one succeeded), and since when it has
// answered again after the last outage.
type health struct {
	mu      sync.Mutex
	downAt  time.Time
	lastOK  time.Time
	upSince time.Time // zero: never down
}

// observe records the outcome of one storage call.
func (h *health) observe(err error, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		if !h.downAt.IsZero() {
			h.upSince = now
		}
		h.downAt = time.Time{}
		h.lastOK = now
		return
	}
	if h.downAt.IsZero() {
		h.downAt = now
	}
}

// steady reports whether the database has answered this process for at
// least d since its last outage (or was never down). Only then does a
// stale heartbeat of another replica say that replica is gone: during an
// outage nobody could write one, and after it each replica needs a
// heartbeat's time to write its next.
func (h *health) steady(now time.Time, d time.Duration) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.downAt.IsZero() && (h.upSince.IsZero() || now.Sub(h.upSince) >= d)
}

func (h *health) down() (time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.downAt, !h.downAt.IsZero()
}

// StorageHealth is what this replica knows of its database and of what
// waits on it: since when every call failed (fed by watcher), the replies
// kept in memory until they can be stored, which session keys were told
// their turn waits on it, and the delay notice — how long a message waits
// before its user is told, once, that it is kept. It also judges which
// other replicas are gone (replicas), which a stale heartbeat says only
// while the database answers steadily. The Manager builds it; channels
// reach it through Manager.Health.
type StorageHealth struct {
	store   replicaLister
	replica string
	ttl     time.Duration // the lease (Options.LeaseTTL)

	health   health
	delay    atomic.Int64 // the delay notice (Options.DelayNotice), reloadable
	unstored atomic.Int64 // replies waiting in Manager.appendReply for storage

	mu   sync.Mutex
	told map[string]bool // keys told of a delay, until a turn of theirs is stored
}

// replicaLister is how a StorageHealth reads the replicas' heartbeats.
type replicaLister interface {
	Replicas(ctx context.Context, self string, ttl time.Duration) (gone []ledger.Replica, alive []string, err error)
}

// newStorageHealth returns the health of st as replica sees it, whose
// lease lasts ttl, with the delay notice delay.
func newStorageHealth(st replicaLister, replica string, ttl, delay time.Duration) *StorageHealth {
	h := &StorageHealth{store: st, replica: replica, ttl: ttl, told: map[string]bool{}}
	h.SetDelayNotice(delay)
	return h
}

// DelayNotice is how long a message waits on the database before its
// user is told, once, that it is kept (0: never).
func (h *StorageHealth) DelayNotice() time.Duration { return time.Duration(h.delay.Load()) }

// SetDelayNotice changes DelayNotice for the waits that pass it from now
// on (a reload).
func (h *StorageHealth) SetDelayNotice(d time.Duration) { h.delay.Store(int64(max(d, 0))) }

// StorageDown reports since when the database has failed every call this
// process made, or false while it answers.
func (h *StorageHealth) StorageDown() (since time.Time, down bool) { return h.health.down() }

// observe records the outcome of one storage call (watcher.After).
func (h *StorageHealth) observe(err error, now time.Time) { h.health.observe(err, now) }

// keepUnstored counts a reply waiting for storage, and reports whether it
// is within maxUnstored (kept in memory as long as it takes); done ends
// the count.
func (h *StorageHealth) keepUnstored() (kept bool, done func()) {
	return h.unstored.Add(1) <= maxUnstored, func() { h.unstored.Add(-1) }
}

// waitingReplies is how many replies wait for storage now.
func (h *StorageHealth) waitingReplies() int { return int(h.unstored.Load()) }

// tell marks key told of a delay and reports whether it was already.
func (h *StorageHealth) tell(key string) (already bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	already = h.told[key]
	h.told[key] = true
	return already
}

// untell forgets that key was told: a turn of it was stored.
func (h *StorageHealth) untell(key string) {
	h.mu.Lock()
	delete(h.told, key)
	h.mu.Unlock()
}

// replicas is Store.Replicas as the judge of which replicas are gone:
// until this process has reached the database steadily for a lease TTL
// (health.steady), none is — every known replica counts as alive.
func (h *StorageHealth) replicas(ctx context.Context) (gone []ledger.Replica, alive []string, err error) {
	gone, alive, err = h.store.Replicas(ctx, h.replica, h.ttl)
	if err == nil && len(gone) > 0 && !h.health.steady(time.Now(), h.ttl) {
		for _, r := range gone {
			alive = append(alive, r.ID)
		}
		gone = nil
	}
	return gone, alive, err
}

// Health is what this replica knows of its database, and its delay
// notice (Options.DelayNotice), which a reload changes.
func (m *Manager) Health() *StorageHealth { return m.health }

// WaitingOnStorage is how many turns of this replica wait for the
// database now: stored messages whose turn could not start, replies kept
// in memory until they can be stored, and conversations whose turns are
// to be claimed again once it answers.
func (m *Manager) WaitingOnStorage() int {
	n := m.health.waitingReplies()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, b := range m.bursts {
		if !b.failing.IsZero() {
			n += len(b.waiting)
		}
	}
	return n + m.rescue.owed.count()
}
