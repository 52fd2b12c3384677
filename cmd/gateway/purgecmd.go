package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/config"
	"github.com/chatgate/chatgate/sessions"
)

// purge runs the retention purge the gateway runs hourly, once, now,
// through a session manager of its own on db.
func purge(ctx context.Context, cfg *config.Config, db sessions.Store, stdout, stderr io.Writer) int {
	m := sessions.New(db, agent.Echo{}, sessions.Options{
		Logger:        slog.New(slog.DiscardHandler),
		RetentionDays: cfg.Storage.RetentionDays,
		ResumeTTL:     cfg.Channels.WebSocket.ResumeTTL.D(),
	})
	p, err := sessions.NewSweeper(m, nil).RunRetention(ctx)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	kept := "storage.retention_days is 0: conversations are kept"
	if cfg.Storage.RetentionDays > 0 {
		kept = fmt.Sprintf("older than %d days", cfg.Storage.RetentionDays)
	}
	fmt.Fprintf(stdout, "purged %d conversations (%s), %d channel states (resume tokens expired or of gone principals) and %d settled schedule fires\n",
		p.Conversations, kept, p.States, p.Fires)
	return 0
}
