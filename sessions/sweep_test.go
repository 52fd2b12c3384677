package sessions

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
)

// seedConversations stores n active websocket conversations that started
// and were last active at the given time, each with one message.
func seedConversations(t *testing.T, db *DB, prefix string, n int, at time.Time) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		c := &Conversation{ID: fmt.Sprintf("%s-%03d", prefix, i), SessionKey: fmt.Sprintf("websocket:%s-%d", prefix, i), Channel: "websocket",
			Status: StatusActive, StartedAt: at, LastActivityAt: at}
		if err := db.CreateConversation(context.Background(), c); err != nil {
			t.Fatal(err)
		}
		if err := db.Append(context.Background(), Append{Conv: c, Messages: []Message{{ConversationID: c.ID, Seq: 1, Role: agent.RoleUser, Content: "hi", Status: MsgOK, CreatedAt: at}}, At: at}); err != nil {
			t.Fatal(err)
		}
		ids[i] = c.ID
	}
	return ids
}

func TestSweepArchivesInChunks(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		db := open()
		db.chunk = 3
		c := newClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
		due := seedConversations(t, db, "due", 7, c.Now().Add(-2*time.Hour))
		seedConversations(t, db, "fresh", 2, c.Now().Add(-10*time.Minute))
		m := newManager(t, db, agent.Echo{}, c, map[string]Policy{"websocket": {MaxHistory: 10, Reset: ResetPolicy{Mode: ResetIdle, IdleFor: time.Hour}}})
		var got []string
		m.OnReset(func(e ResetEvent) { got = append(got, e.OldConversation) })

		if n, err := m.SweepIdle(context.Background()); err != nil || n != 7 {
			t.Fatalf("idle sweep archived %d (%v), want 7 in chunks of 3", n, err)
		}
		sort.Strings(got)
		if fmt.Sprint(got) != fmt.Sprint(due) {
			t.Fatalf("reset events for %v, want %v", got, due)
		}
		if n, err := m.SweepIdle(context.Background()); err != nil || n != 0 {
			t.Fatalf("repeated sweep archived %d (%v)", n, err)
		}
		var active int64
		db.Gorm().Model(&Conversation{}).Where("status = ?", StatusActive).Count(&active)
		if active != 2 {
			t.Fatalf("%d active conversations, want the 2 fresh ones", active)
		}
		for _, id := range due {
			conv, _ := db.Conversation(context.Background(), id)
			if conv.Status != StatusArchived || conv.ResetReason != ReasonIdle || conv.ArchivedAt == nil || !conv.ArchivedAt.Equal(c.Now()) {
				t.Fatalf("swept conversation %+v", conv)
			}
			if len(transcript(t, db, id)) != 1 {
				t.Fatalf("conversation %s lost its messages", id)
			}
		}
	})
}

func TestPurgeDeletesOnlyOldArchivedConversations(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		db := open()
		db.chunk = 2
		ctx := context.Background()
		start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		old := seedConversations(t, db, "old", 5, start)
		recent := seedConversations(t, db, "recent", 2, start)
		active := seedConversations(t, db, "active", 2, start)
		for i, id := range append(old, recent...) {
			at := start.AddDate(0, 0, 1) // old: archived on day 1
			if i >= len(old) {
				at = start.AddDate(0, 0, 20)
			}
			if ok, err := db.Archive(ctx, id, ReasonManual, at, -1); !ok || err != nil {
				t.Fatalf("archive %s: %v %v", id, ok, err)
			}
		}
		n, err := db.Purge(ctx, start.AddDate(0, 0, 10))
		if err != nil || n != int64(len(old)) {
			t.Fatalf("purge deleted %d (%v), want %d", n, err, len(old))
		}
		for _, id := range old {
			if conv, _ := db.Conversation(ctx, id); conv != nil {
				t.Fatalf("purged conversation %s is still there", id)
			}
			if len(transcript(t, db, id)) != 0 {
				t.Fatalf("purged conversation %s left messages", id)
			}
		}
		for _, id := range append(recent, active...) {
			if conv, _ := db.Conversation(ctx, id); conv == nil || len(transcript(t, db, id)) != 1 {
				t.Fatalf("conversation %s (recent or active) was purged", id)
			}
		}
		if n, err := db.Purge(ctx, start.AddDate(0, 0, 10)); n != 0 || err != nil {
			t.Fatalf("repeated purge deleted %d (%v)", n, err)
		}
	})
}

// Indexes earlier versions kept — on archived_at, one per sweep, and one of
// replies — are dropped on open: every archive or reply paid for them.
func TestOpenDropsIndexesNoLongerKept(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		db := open()
		for _, stmt := range []string{
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
		if !db.Gorm().Migrator().HasIndex(&Conversation{}, "ix_conversations_sweep") {
			t.Error("the sweep index is missing")
		}
	})
}

// A sweep commits chunk by chunk: a turn that arrives while it runs is
// stored between two chunks, not after the whole sweep.
func TestTurnsCommitBetweenSweepChunks(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		db := open()
		db.chunk = 2
		c := newClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
		seedConversations(t, db, "due", 5, c.Now().Add(-2*time.Hour))
		m := newManager(t, db, agent.Echo{}, c, map[string]Policy{"websocket": {MaxHistory: 10, Reset: ResetPolicy{Mode: ResetIdle, IdleFor: time.Hour}}})
		var (
			events   int
			archived int64 = -1
			turnErr  error
		)
		m.OnReset(func(ResetEvent) {
			events++
			if events != 1 {
				return
			}
			// The first chunk has committed; the sweep waits for this
			// callback before it queues the next chunk.
			done := make(chan struct{})
			go func() {
				defer close(done)
				_, turnErr = m.Handle(context.Background(), msg("websocket:newcomer", "hi"), Hooks{})
				db.Gorm().Model(&Conversation{}).Where("status = ?", StatusArchived).Count(&archived)
			}()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Error("a turn waited for the whole sweep")
			}
		})
		if n, err := m.SweepIdle(context.Background()); err != nil || n != 5 {
			t.Fatalf("sweep archived %d (%v), want 5", n, err)
		}
		if turnErr != nil || archived != 2 {
			t.Fatalf("turn during the sweep: err %v, %d conversations archived when it was stored; want nil, 2 (one chunk)", turnErr, archived)
		}
		if rows := transcript(t, db, conversations(t, db, "websocket:newcomer")[0].ID); len(rows) != 2 {
			t.Fatalf("the newcomer's turn stored %d rows, want 2", len(rows))
		}
	})
}
