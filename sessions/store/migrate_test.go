package store

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/pgtest"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// Indexes earlier versions kept — on archived_at, one per sweep, one of
// replies, and the sweep index over last_activity_at itself — are dropped
// on open: every archive, reply or turn paid for them. A database of the
// version before activity_minute gets the column, computed for the rows
// it holds, and the sweep index over it.
func TestOpenDropsIndexesNoLongerKept(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		db := open()
		ctx := context.Background()
		now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
		idle := seedConversations(t, db, "idle", 2, now.Add(-2*time.Hour))
		fresh := seedConversations(t, db, "fresh", 1, now.Add(-30*time.Second))
		for _, stmt := range []string{
			"DROP INDEX " + sweepIndex,
			"ALTER TABLE conversations DROP COLUMN activity_minute",
			"CREATE INDEX ix_conversations_sweep ON conversations (channel, last_activity_at, started_at) WHERE status = 'active'",
			"CREATE INDEX idx_conversations_archived_at ON conversations (archived_at)",
			"CREATE INDEX ix_conversations_idle ON conversations (channel, last_activity_at) WHERE status = 'active'",
			"CREATE INDEX ix_conversations_daily ON conversations (channel, started_at) WHERE status = 'active'",
			"CREATE INDEX ix_messages_reply ON messages (conversation_id, reply_to) WHERE reply_to > 0",
		} {
			if err := db.Gorm().Exec(stmt).Error; err != nil {
				t.Fatal(err)
			}
		}
		if err := migrateModels(db.Gorm()); err != nil {
			t.Fatal(err)
		}
		for _, ix := range droppedIndexes {
			if db.Gorm().Migrator().HasIndex(ix.model, ix.name) {
				t.Errorf("index %s is still there after migrating", ix.name)
			}
		}
		if !db.Gorm().Migrator().HasIndex(&ledger.Conversation{}, sweepIndex) {
			t.Error("the sweep index is missing")
		}
		// Migrating again finds everything in place.
		if err := migrateModels(db.Gorm()); err != nil {
			t.Fatalf("second migration: %v", err)
		}
		var minutes []string
		if err := db.Gorm().Raw("SELECT CAST(activity_minute AS TEXT) FROM conversations ORDER BY id").Scan(&minutes).Error; err != nil {
			t.Fatal(err)
		}
		want := map[string][]string{
			DriverSQLite:   {"2026-03-10 11:59", "2026-03-10 10:00", "2026-03-10 10:00"},
			DriverPostgres: {"2026-03-10 11:59:00", "2026-03-10 10:00:00", "2026-03-10 10:00:00"},
		}[db.Driver()]
		if !slices.Equal(minutes, want) {
			t.Errorf("activity_minute of the earlier rows: %q, want %q", minutes, want)
		}
		var archived []string
		n, err := db.SweepIdle(ctx, "websocket", now.Add(-time.Hour), now, func(a []ledger.Archived) {
			for _, c := range a {
				archived = append(archived, c.ID)
			}
		})
		slices.Sort(archived)
		if err != nil || n != 2 || !slices.Equal(archived, idle) {
			t.Fatalf("idle sweep after migrating archived %d %v (%v), want %v and not %v", n, archived, err, idle, fresh)
		}
	})
}

// seedConversations stores n active websocket conversations that started
// and were last active at the given time, each with one message.
func seedConversations(t *testing.T, db *DB, prefix string, n int, at time.Time) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		c := &ledger.Conversation{ID: fmt.Sprintf("%s-%03d", prefix, i), SessionKey: fmt.Sprintf("websocket:%s-%d", prefix, i), Channel: "websocket",
			Status: ledger.StatusActive, StartedAt: at, LastActivityAt: at}
		if err := db.CreateConversation(context.Background(), c); err != nil {
			t.Fatal(err)
		}
		if err := db.Append(context.Background(), ledger.Append{Conv: c, Messages: []ledger.Message{{ConversationID: c.ID, Seq: 1, Role: agent.RoleUser, Content: "hi", Status: ledger.MsgOK, CreatedAt: at}}, At: at}); err != nil {
			t.Fatal(err)
		}
		ids[i] = c.ID
	}
	return ids
}

// Replicas starting together migrate one at a time: an Open waits while
// another holds its schema's migration lock, and goes on once it is let
// go. The lock is the schema's: a deployment in another schema of the
// same database migrates meanwhile. Replicas opening at once all open.
// An earlier version's migration, under its database-wide key, is waited
// for (an upgrade's replicas may start beside one of those).
func TestMigrationsWaitOnlyForTheirSchema(t *testing.T) {
	held, other := postgresDSN(t), postgresDSN(t)
	release := pgtest.HoldMigration(t, held, MigrationLockKeyQuery)
	ctx := context.Background()

	opened := make(chan error, 3)
	waiting := make(chan string, 3)
	// openAside opens dsn in a goroutine of its own, its log lines to
	// waiting and its outcome to opened.
	openAside := func(dsn string) {
		go func() {
			log := slog.New(slog.NewTextHandler(lineWriter(waiting), nil))
			db, err := Open(ctx, DriverPostgres, dsn, OpenOptions{Logger: log})
			if err == nil {
				db.Close()
			}
			opened <- err
		}()
	}
	for range 3 {
		openAside(held)
	}
	for range 3 {
		if line := within(t, waiting); !strings.Contains(line, "another gateway is migrating the schema; waiting for it") {
			t.Fatalf("an open said %q", line)
		}
	}
	// Another schema of the same database is not held up.
	openStore(t, DriverPostgres, other)
	select {
	case err := <-opened:
		t.Fatalf("an open went on while its schema's migration lock was held: %v", err)
	default:
	}
	release()
	for range 3 {
		if err := within(t, opened); err != nil {
			t.Fatal(err)
		}
	}

	// An earlier version migrating holds the database-wide key alone: an
	// open of any schema waits for it.
	legacy, err := sql.Open("pgx", held)
	if err != nil {
		t.Fatal(err)
	}
	defer legacy.Close()
	conn, err := legacy.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock(hashtext($1))", legacyMigrationKey); err != nil {
		t.Fatal(err)
	}
	openAside(other)
	if line := within(t, waiting); !strings.Contains(line, "another gateway is migrating the schema; waiting for it") {
		t.Fatalf("an open during an earlier version's migration said %q", line)
	}
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_unlock(hashtext($1))", legacyMigrationKey); err != nil {
		t.Fatal(err)
	}
	if err := within(t, opened); err != nil {
		t.Fatal(err)
	}
}

// lineWriter sends each write (a log line) to its channel while there
// is room, and drops it after.
type lineWriter chan<- string

func (w lineWriter) Write(p []byte) (int, error) {
	select {
	case w <- string(p):
	default:
	}
	return len(p), nil
}

// within is what c gives next, or the test's failure after a minute (a
// hang guard, in real time).
func within[T any](t *testing.T, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(time.Minute):
		t.Fatal("nothing came in a minute")
		panic("unreachable")
	}
}
