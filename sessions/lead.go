package sessions

import (
	"context"
	"time"
)

// Lead takes or renews the role name (such as polling one Telegram bot's
// updates) for this replica for ttl, and reports whether this replica has
// it. See DB.Lead.
func (m *Manager) Lead(ctx context.Context, name string, ttl time.Duration) (bool, error) {
	return m.store.Lead(ctx, name, m.opts.ReplicaID, ttl)
}

// Resign gives up the role name if this replica has it, so that another
// replica can take it at once.
func (m *Manager) Resign(ctx context.Context, name string) error {
	return m.store.Resign(ctx, name, m.opts.ReplicaID)
}
