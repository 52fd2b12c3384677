package store

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// The times as the earlier driver, glebarez/go-sqlite v1.21.2, wrote them:
// it bound a time.Time as text in the layout sqliteTimeFormat keeps.
// Literals, so that no test links that driver's engine.
const (
	earlierStarted   = "2026-03-01 09:30:15.123456789+00:00"
	earlierIdleSince = "2026-03-01 10:00:00+00:00"
)

// TestDatabaseOfEarlierDriver opens a database holding rows as the earlier
// driver (glebarez/go-sqlite) wrote them: their times read back exactly,
// the store writes times in the same text format, and a sweep compares old
// and new rows' times in order.
func TestDatabaseOfEarlierDriver(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	openStore(t, DriverSQLite, path).Close() // the schema

	old, err := sql.Open(sqliteDriverName, "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	started := time.Date(2026, 3, 1, 9, 30, 15, 123456789, time.UTC)
	idleSince := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	if _, err := old.Exec(`INSERT INTO conversations (id, session_key, channel, status, started_at, last_activity_at, agent_name, model, last_seq)
		VALUES ('c-old', 'websocket:old', 'websocket', 'active', ?, ?, 'echo', '', 1)`, earlierStarted, earlierIdleSince); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Exec(`INSERT INTO messages (conversation_id, seq, role, content, reply_to, status, prompt_tokens, completion_tokens, cost, created_at)
		VALUES ('c-old', 1, 'user', 'hi', 0, 'ok', 0, 0, 0, ?)`, earlierStarted); err != nil {
		t.Fatal(err)
	}
	var oldText string
	if err := old.QueryRow("SELECT CAST(started_at AS TEXT) FROM conversations WHERE id = 'c-old'").Scan(&oldText); err != nil {
		t.Fatal(err)
	}
	old.Close()

	db := openStore(t, DriverSQLite, path)
	c, err := db.ActiveConversation(ctx, "websocket:old")
	if err != nil || c == nil {
		t.Fatalf("conversation written by the earlier driver: %v, %v", c, err)
	}
	if !c.StartedAt.Equal(started) || !c.LastActivityAt.Equal(idleSince) {
		t.Fatalf("times read back as %v / %v, want %v / %v", c.StartedAt, c.LastActivityAt, started, idleSince)
	}
	msgs, err := db.MessagesAfter(ctx, "c-old", 0, 10)
	if err != nil || len(msgs) != 1 || !msgs[0].CreatedAt.Equal(started) {
		t.Fatalf("message written by the earlier driver: %+v, %v", msgs, err)
	}

	// A conversation the store writes now, active since a later time.
	later := idleSince.Add(90 * time.Minute)
	if err := db.CreateConversation(ctx, &ledger.Conversation{ID: "c-new", SessionKey: "websocket:new", Channel: "websocket",
		Status: ledger.StatusActive, StartedAt: later, LastActivityAt: later, AgentName: "echo"}); err != nil {
		t.Fatal(err)
	}
	var newText string
	if err := db.Gorm().Raw("SELECT CAST(started_at AS TEXT) FROM conversations WHERE id = 'c-old'").Scan(&newText).Error; err != nil {
		t.Fatal(err)
	}
	if want := started.Format(sqliteTimeFormat); oldText != want {
		t.Fatalf("the earlier driver wrote %q, the store's format gives %q", oldText, want)
	}
	if err := db.Gorm().Raw("SELECT CAST(started_at AS TEXT) FROM conversations WHERE id = 'c-new'").Scan(&newText).Error; err != nil {
		t.Fatal(err)
	}
	if want := later.Format(sqliteTimeFormat); newText != want {
		t.Fatalf("the store wrote %q, want the earlier format %q", newText, want)
	}

	// Idle for an hour at 11:00: the old row (idle since 10:00) goes, the
	// new one (active since 11:30) stays.
	n, err := db.SweepIdle(ctx, "websocket", idleSince.Add(time.Hour), idleSince.Add(2*time.Hour), func([]ledger.Archived) {})
	if err != nil || n != 1 {
		t.Fatalf("idle sweep archived %d, %v; want 1", n, err)
	}
	if c, err := db.ActiveConversation(ctx, "websocket:new"); err != nil || c == nil {
		t.Fatalf("the newer conversation was swept: %v, %v", c, err)
	}
}
