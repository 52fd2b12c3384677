package sessions

import (
	"context"
	"fmt"
)

// RunningTurns is how many turns run on this replica now (an agent call
// in progress, or storing its reply).
func (m *Manager) RunningTurns() int {
	return m.life.runningTurns()
}

// WaitingMessages is how many stored user messages wait on this replica
// for their turn to start (debounce, or the turn before them), and across
// how many session keys.
func (m *Manager) WaitingMessages() (messages, keys int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, b := range m.bursts {
		n := 0
		for _, t := range b.waiting {
			// A message stored claimed is its own turn, running or about
			// to (its call may have started before the runner took it).
			if t.claimed == nil {
				n++
			}
		}
		if n > 0 {
			messages += n
			keys++
		}
	}
	return messages, keys
}

// AliveReplicas lists the gateways sharing the database whose heartbeat
// is fresh, this one first.
func (m *Manager) AliveReplicas(ctx context.Context) ([]string, error) {
	_, alive, err := m.store.Replicas(ctx, m.opts.ReplicaID, m.opts.LeaseTTL)
	if err != nil {
		return nil, fmt.Errorf("replicas: %w", err)
	}
	return alive, nil
}
