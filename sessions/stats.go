package sessions

import (
	"context"
	"fmt"
)

// managerLoad is a Manager's turnLoad: its running turns and its bursts'
// waiting messages, read under its mu.
type managerLoad struct{ m *Manager }

func (l managerLoad) runningTurns() int {
	return l.m.life.runningTurns()
}

func (l managerLoad) waitingMessages() (messages, keys int) {
	m := l.m
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

// RunningTurns is how many turns run on this replica now (an agent call
// in progress, or storing its reply).
func (s *Standing) RunningTurns() int { return s.load.runningTurns() }

// WaitingMessages is how many stored user messages wait on this replica
// for their turn to start (debounce, or the turn before them), and across
// how many session keys.
func (s *Standing) WaitingMessages() (messages, keys int) { return s.load.waitingMessages() }

// AliveReplicas lists the gateways sharing the database whose heartbeat
// is fresh, this one first.
func (s *Standing) AliveReplicas(ctx context.Context) ([]string, error) {
	_, alive, err := s.store.Replicas(ctx, s.replica, s.leaseTTL)
	if err != nil {
		return nil, fmt.Errorf("replicas: %w", err)
	}
	return alive, nil
}
