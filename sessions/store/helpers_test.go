package store

import (
	"context"
	"log/slog"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/chatgate/chatgate/internal/pgtest"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// drivers runs fn once per database: SQLite always, PostgreSQL when
// CHATGATE_TEST_POSTGRES_DSN is set.
func drivers(t *testing.T, fn func(t *testing.T, open func() *DB)) {
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "gateway.db")
		fn(t, func() *DB { return openStore(t, DriverSQLite, path) })
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := postgresDSN(t)
		fn(t, func() *DB { return openStore(t, DriverPostgres, dsn) })
	})
}

func openStore(t testing.TB, driver, dsn string) *DB {
	t.Helper()
	db, err := Open(context.Background(), driver, dsn, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// postgresDSN returns a DSN on a fresh schema of the test server, or skips.
func postgresDSN(t testing.TB) string { return pgtest.DSN(t) }

// transcript returns every message row of a conversation, by seq.
func transcript(t testing.TB, db *DB, convID string) []ledger.Message {
	t.Helper()
	var msgs []ledger.Message
	if err := db.Gorm().Where("conversation_id = ?", convID).Order("seq").Find(&msgs).Error; err != nil {
		t.Fatal(err)
	}
	return msgs
}

var quiet = slog.New(slog.DiscardHandler)

// waitQueue yields while goroutines line up in the commit queue.
func waitQueue() { runtime.Gosched() }
