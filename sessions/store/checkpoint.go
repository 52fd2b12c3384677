package store

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"
)

// checkpointInterval is how often the background checkpointer looks for
// new commits to copy from the write-ahead log into the database file.
const checkpointInterval = 100 * time.Millisecond

// walBackstopPages is the WAL size (in pages) past which the writer
// checkpoints by itself, should the background checkpointer fall behind.
const walBackstopPages = 10000

// checkpointer copies SQLite's write-ahead log into the database file in
// the background, on a connection of its own: a passive checkpoint runs
// beside the writer instead of inside one of its commits, so turns never
// wait for it. It runs only when something was committed since its last
// run.
type checkpointer struct {
	db   *sql.DB
	log  *slog.Logger
	kick chan struct{}
	stop chan struct{}
	done chan struct{}
}

func newCheckpointer(db *sql.DB, log *slog.Logger) *checkpointer {
	c := &checkpointer{db: db, log: log, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go c.run()
	return c
}

// committed tells the checkpointer there is something to copy.
func (c *checkpointer) committed() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *checkpointer) run() {
	defer close(c.done)
	tick := time.NewTicker(checkpointInterval)
	defer tick.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-tick.C:
		}
		select {
		case <-c.kick:
		default:
			continue
		}
		if _, _, err := c.checkpoint(context.Background()); err != nil {
			c.log.Warn("sqlite checkpoint failed; the writer will checkpoint instead", slog.String("error", err.Error()))
		}
	}
}

// checkpoint runs one passive checkpoint and reports the WAL's size in
// frames and how many of them are now in the database file.
func (c *checkpointer) checkpoint(ctx context.Context) (walFrames, copied int, err error) {
	var busy int
	if err := c.db.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &walFrames, &copied); err != nil {
		return 0, 0, fmt.Errorf("wal checkpoint: %w", err)
	}
	return walFrames, copied, nil
}

// close stops the checkpointer and closes its connection.
func (c *checkpointer) close() error {
	close(c.stop)
	<-c.done
	return c.db.Close()
}
