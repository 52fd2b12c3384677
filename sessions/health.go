package sessions

import (
	"context"
	"sync"
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

// DelayNotice is how long a message waits on the database before its
// user is told, once, that it is kept (0: never).
func (m *Manager) DelayNotice() time.Duration { return time.Duration(m.delay.Load()) }

// SetDelayNotice changes DelayNotice for the waits that pass it from now
// on (a reload).
func (m *Manager) SetDelayNotice(d time.Duration) { m.delay.Store(int64(max(d, 0))) }

// StorageDown reports since when the database has failed every call this
// process made, or false while it answers.
func (m *Manager) StorageDown() (since time.Time, down bool) { return m.health.down() }

// WaitingOnStorage is how many turns of this replica wait for the
// database now: stored messages whose turn could not start, replies kept
// in memory until they can be stored, and conversations whose turns are
// to be claimed again once it answers.
func (m *Manager) WaitingOnStorage() int {
	n := int(m.unstored.Load())
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, b := range m.bursts {
		if !b.failing.IsZero() {
			n += len(b.waiting)
		}
	}
	return n + m.owed.count()
}

// replicas is Store.Replicas as the judge of which replicas are gone:
// until this process has reached the database steadily for a lease TTL
// (health.steady), none is — every known replica counts as alive.
func (m *Manager) replicas(ctx context.Context) (gone []ledger.Replica, alive []string, err error) {
	gone, alive, err = m.store.Replicas(ctx, m.opts.ReplicaID, m.opts.LeaseTTL)
	if err == nil && len(gone) > 0 && !m.health.steady(time.Now(), m.opts.LeaseTTL) {
		for _, r := range gone {
			alive = append(alive, r.ID)
		}
		gone = nil
	}
	return gone, alive, err
}
