package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/query"
)

// storageCheck is the readiness check of the store: it answers a ping.
func storageCheck(db query.Pinger, mgr *sessions.Manager) func() error {
	return func() error {
		if since, down := mgr.Health().StorageDown(); down {
			// Every storage call of a turn has failed since then: the
			// turns wait (kept), and run once it answers again.
			return fmt.Errorf("unreachable since %s", since.UTC().Format(time.RFC3339))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := db.Ping(ctx); err != nil {
			return fmt.Errorf("ping failed: %w", err)
		}
		return nil
	}
}

// botState is what /readyz asks a channel bot that connects in the
// background: Ready once it reached its API, and Err, why not yet.
type botState interface {
	Ready() bool
	Err() error
}

// botCheck is the readiness check of a bot.
func botCheck(bot botState, connecting string) func() error {
	return func() error {
		if bot.Ready() {
			return nil
		}
		if err := bot.Err(); err != nil {
			return fmt.Errorf("%s (last error: %v)", connecting, err)
		}
		return errors.New(connecting)
	}
}
