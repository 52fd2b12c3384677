package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/chatgate/chatgate/tools/mcpclient"

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

// toolSet is what /readyz asks of the tool servers (mcpclient.Set).
type toolSet interface {
	Starting() []string
	Servers() []mcpclient.ServerStatus
}

// toolsCheck holds readiness until every tool server was tried once —
// listed its tools, or failed to start, each within its timeout: traffic
// that comes once the gateway is ready finds the tools it will be offered.
func toolsCheck(set toolSet) func() error {
	return func() error {
		if starting := set.Starting(); len(starting) > 0 {
			return fmt.Errorf("starting: %s", strings.Join(starting, ", "))
		}
		return nil
	}
}

// toolsInfo names the tool servers that could not start (they are tried
// again in the background; their tools are not offered meanwhile).
func toolsInfo(set toolSet) func() string {
	return func() string {
		var down []string
		for _, st := range set.Servers() {
			if !st.Connected && st.LastError != "" {
				down = append(down, fmt.Sprintf("%s down (%s)", st.Name, st.LastError))
			}
		}
		return strings.Join(down, "; ")
	}
}
