package store

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/chatgate/chatgate/sessions/store/notifier"
)

// openEvents builds the PostgreSQL store's notifier (LISTEN/NOTIFY between
// replicas, package notifier); SQLite has none. It publishes on the lease
// pool (synchronous_commit off: a notification has nothing to make
// durable), and another replica's request for a lease kept here reaches
// the leaser through it.
func (s *DB) openEvents(ctx context.Context, leasePool *sql.DB, dsn string, timeout time.Duration, log *slog.Logger) error {
	if s.driver != DriverPostgres {
		return nil
	}
	var schema string
	if err := s.read.WithContext(ctx).Raw("SELECT current_schema()").Scan(&schema).Error; err != nil {
		return fmt.Errorf("find the schema's event channel: %w", err)
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	connect := func(ctx context.Context) (*pgx.Conn, error) {
		cfg, err := pgConfig(dsn, timeout, nil)
		if err != nil {
			return nil, redactErr(err, dsn)
		}
		// So that an operator can tell it apart in pg_stat_activity.
		cfg.RuntimeParams["application_name"] = "chatgate listen"
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return nil, redactErr(err, dsn)
		}
		return conn, nil
	}
	s.events = notifier.New(notifier.Config{Pool: leasePool, Connect: connect, Schema: schema, Silence: timeout, Logger: log})
	return nil
}

// Events is the store's notifier: what replicas sharing a PostgreSQL
// database tell each other. It is nil on SQLite, which serves one
// gateway per file; a nil *notifier.Notifier publishes and hears nothing.
func (s *DB) Events() *notifier.Notifier { return s.events }
