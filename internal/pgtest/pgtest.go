// Package pgtest gives tests a PostgreSQL database of their own: a fresh
// schema on the server named by CHATGATE_TEST_POSTGRES_DSN, dropped when the
// test ends. Tests skip with a clear message when the variable is unset.
package pgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// EnvVar names the variable holding the test server's DSN.
const EnvVar = "CHATGATE_TEST_POSTGRES_DSN"

// DSN returns a DSN whose search_path is a new, empty schema.
func DSN(t testing.TB) string {
	t.Helper()
	base := os.Getenv(EnvVar)
	if base == "" {
		t.Skip("PostgreSQL tests skipped: set " + EnvVar + " (for example postgres://postgres@127.0.0.1:5432/chatgate_test?sslmode=disable)")
	}
	var b [6]byte
	rand.Read(b[:])
	schema := "t_" + hex.EncodeToString(b[:])
	admin, err := gorm.Open(postgres.Open(base), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatalf("connect to %s: %v", EnvVar, err)
	}
	if err := admin.Exec("CREATE SCHEMA " + schema).Error; err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		admin.Exec("DROP SCHEMA " + schema + " CASCADE")
		if db, err := admin.DB(); err == nil {
			db.Close()
		}
	})
	if strings.Contains(base, "://") {
		sep := "?"
		if strings.Contains(base, "?") {
			sep = "&"
		}
		return base + sep + "search_path=" + schema
	}
	return base + " search_path=" + schema
}

// HoldMigration takes the migration lock of dsn's schema, whose key
// keyQuery reads (store.MigrationLockKeyQuery), as a replica migrating
// it holds it, on a connection of its own; release lets it go. The lock
// is let go when the test ends in any case.
func HoldMigration(t testing.TB, dsn, keyQuery string) (release func()) {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	var key int32
	if err := conn.QueryRowContext(ctx, keyQuery).Scan(&key); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", key); err != nil {
			t.Fatal(err)
		}
	}
}
