// Package storetest opens real stores for tests across the layers: an
// SQLite file in the test's temporary directory, and PostgreSQL on a
// fresh schema of the test server (CHATGATE_TEST_POSTGRES_DSN, else the
// test is skipped). No test double: the store under test is the one the
// gateway runs.
package storetest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/chatgate/chatgate/internal/pgtest"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
)

// Drivers runs fn once per database: SQLite always, PostgreSQL when
// CHATGATE_TEST_POSTGRES_DSN is set. open opens the subtest's database
// (again: a second open is another process on the same data).
func Drivers(t *testing.T, fn func(t *testing.T, open func() *store.DB)) {
	DriversWith(t, store.OpenOptions{}, fn)
}

// DriversWith is Drivers, opening the stores with opts.
func DriversWith(t *testing.T, opts store.OpenOptions, fn func(t *testing.T, open func() *store.DB)) {
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "gateway.db")
		fn(t, func() *store.DB { return Open(t, store.DriverSQLite, path, opts) })
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := pgtest.DSN(t)
		fn(t, func() *store.DB { return Open(t, store.DriverPostgres, dsn, opts) })
	})
}

// Open opens a store, closed when the test ends.
func Open(t testing.TB, driver, dsn string, opts store.OpenOptions) *store.DB {
	t.Helper()
	db, err := store.Open(context.Background(), driver, dsn, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// SQLite opens a store on a new SQLite file.
func SQLite(t testing.TB) *store.DB {
	t.Helper()
	return Open(t, store.DriverSQLite, filepath.Join(t.TempDir(), "gateway.db"), store.OpenOptions{})
}

// Transcript returns every message row of a conversation, by seq.
func Transcript(t testing.TB, db *store.DB, convID string) []ledger.Message {
	t.Helper()
	var msgs []ledger.Message
	if err := db.Gorm().Where("conversation_id = ?", convID).Order("seq").Find(&msgs).Error; err != nil {
		t.Fatal(err)
	}
	return msgs
}

// Conversations returns every conversation of a session key, oldest first.
func Conversations(t testing.TB, db *store.DB, key string) []ledger.Conversation {
	t.Helper()
	var convs []ledger.Conversation
	if err := db.Gorm().Where("session_key = ?", key).Order("started_at, id").Find(&convs).Error; err != nil {
		t.Fatal(err)
	}
	return convs
}

// HoldWrites holds db's writes until release, as a transaction of another
// writer would, while reads go on: on SQLite a transaction holds the
// database's write lock on the store's one writer connection; on
// PostgreSQL a transaction locks the tables every write changes. A write
// made meanwhile waits in the database, its commit in flight.
func HoldWrites(t testing.TB, db *store.DB) (release func()) {
	t.Helper()
	tx := db.Gorm().Begin()
	if tx.Error != nil {
		t.Fatal(tx.Error)
	}
	if db.Driver() == store.DriverSQLite {
		// An immediate transaction: the write lock is taken at BEGIN.
		if err := tx.Exec("UPDATE channel_states SET value = value WHERE 0").Error; err != nil {
			t.Fatal(err)
		}
	} else if err := tx.Exec("LOCK TABLE conversations, messages IN SHARE MODE").Error; err != nil {
		t.Fatal(err)
	}
	return func() { tx.Rollback() }
}

// OpenTurns returns the seqs of a conversation's user messages whose turns
// are open (ledger.OpenStates): those the index of open turns holds.
func OpenTurns(t testing.TB, db *store.DB, convID string) []int64 {
	t.Helper()
	var seqs []int64
	if err := db.Gorm().Raw("SELECT seq FROM messages WHERE conversation_id = ? AND role = 'user' AND turn_state IN ? ORDER BY seq",
		convID, ledger.OpenStates).Scan(&seqs).Error; err != nil {
		t.Fatal(err)
	}
	return seqs
}
