package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/chatgate/chatgate/sessions/ledger"
)

// TestAppendsRunPrepared: after the first batch of a shape, a turn's
// appends run through prepared statements, store every value as given,
// and a duplicate client id met through a prepared statement is still
// ErrDuplicate.
func TestAppendsRunPrepared(t *testing.T) {
	ctx := context.Background()
	db := openStore(t, DriverSQLite, filepath.Join(t.TempDir(), "prep.db"))
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	conv := &ledger.Conversation{ID: "c1", SessionKey: "websocket:u1", Channel: "websocket", Status: ledger.StatusActive,
		StartedAt: at, LastActivityAt: at, AgentName: "echo"}
	if err := db.CreateConversation(ctx, conv); err != nil {
		t.Fatal(err)
	}
	due := at.Add(time.Minute)
	for i := int64(1); i <= 6; i += 2 {
		id := fmt.Sprint("m", i)
		user := ledger.Message{ConversationID: "c1", Seq: i, Role: "user", Content: "q" + id, ClientMsgID: &id, Status: ledger.MsgOK,
			CreatedAt: at, TurnState: ledger.TurnRunning, TurnOwner: "r1", TurnAttempt: 1, TurnLead: i, TurnTrack: true, TurnDue: &due}
		if err := db.Append(ctx, ledger.Append{Conv: conv, ExpectSeq: i - 1, RequireActive: true, Messages: []ledger.Message{user}, At: at}); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		reply := ledger.Message{ConversationID: "c1", Seq: i + 1, Role: "assistant", Content: "a" + id, ReplyTo: i, Status: ledger.MsgOK,
			PromptTokens: 3, CompletionTkns: 4, Cost: 0.5, CreatedAt: at}
		if err := db.Append(ctx, ledger.Append{Conv: conv, ExpectSeq: i, Messages: []ledger.Message{reply}, At: at, Tokens: 7, Cost: 0.5}); err != nil {
			t.Fatalf("append %d: %v", i+1, err)
		}
	}
	// Four texts: the conversation's UPDATE with the active guard (user
	// messages) and without (replies), the one-row INSERT both share, and
	// the replies' marking of their turns answered (which finds none here:
	// the channel confirms delivery). Each was compiled once, when first
	// met, and ran through its kept statement from then on: of the 15
	// statements 11 ran on a statement kept from before.
	if got, compiled := db.commit.stmts.prepared.Load(), db.commit.stmts.compiled.Load(); got != 11 || compiled != 4 {
		t.Errorf("%d statements ran on a kept statement and %d were compiled, want 11 and 4", got, compiled)
	}
	msgs, err := db.MessagesAfter(ctx, "c1", 0, 10)
	if err != nil || len(msgs) != 6 {
		t.Fatalf("stored %d messages, %v", len(msgs), err)
	}
	for _, m := range msgs {
		id := fmt.Sprint("m", m.Seq)
		if m.Role == "user" && (m.Content != "q"+id || m.ClientMsgID == nil || *m.ClientMsgID != id || m.TurnState != ledger.TurnRunning ||
			m.TurnOwner != "r1" || m.TurnAttempt != 1 || m.TurnLead != m.Seq || !m.TurnTrack || m.TurnDue == nil || !m.TurnDue.Equal(due)) {
			t.Errorf("user message stored as %+v", m)
		}
		if m.Role == "assistant" && (m.ReplyTo != m.Seq-1 || m.CompletionTkns != 4 || m.Cost != 0.5 || m.ClientMsgID != nil || m.TurnDue != nil) {
			t.Errorf("reply stored as %+v", m)
		}
	}
	// Times are stored as text in the format the driver writes them with
	// (sqliteTimeFormat), as before the committer bound them itself.
	var text, typ string
	if err := db.read.Raw("SELECT created_at || '', typeof(created_at) FROM messages WHERE seq = 1").Row().Scan(&text, &typ); err != nil ||
		text != at.Format(sqliteTimeFormat) || typ != "text" {
		t.Errorf("created_at stored as %s %q, %v; want text %q", typ, text, err, at.Format(sqliteTimeFormat))
	}
	got, err := db.ActiveConversation(ctx, "websocket:u1")
	if err != nil || got.LastSeq != 6 || got.TotalTokens != 21 || got.Cost != 1.5 {
		t.Fatalf("conversation %+v, %v", got, err)
	}

	dup := "m1"
	again := ledger.Message{ConversationID: "c1", Seq: 7, Role: "user", Content: "again", ClientMsgID: &dup, Status: ledger.MsgOK, CreatedAt: at,
		TurnState: ledger.TurnRunning, TurnOwner: "r1", TurnAttempt: 1, TurnLead: 7, TurnTrack: true, TurnDue: &due}
	before := db.commit.stmts.prepared.Load()
	if err := db.Append(ctx, ledger.Append{Conv: conv, ExpectSeq: 6, RequireActive: true, Messages: []ledger.Message{again}, At: at}); !errors.Is(err, ledger.ErrDuplicate) {
		t.Fatalf("a client id stored already: %v, want ErrDuplicate", err)
	}
	// The UPDATE and the failing INSERT both went through kept statements.
	if got := db.commit.stmts.prepared.Load() - before; got != 2 {
		t.Fatalf("%d of the duplicate's 2 statements ran prepared", got)
	}
}
