package store

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/chatgate/chatgate/sessions/ledger"
)

func TestStorableText(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"plain ü", "plain ü"},
		{"", ""},
		{"a\x00b", "a\uFFFDb"},
		{"\x00\x00", "\uFFFD\uFFFD"},
		{"bad \xff\xfe end", "bad \uFFFD end"},
		{"cut \xe2\x82", "cut \uFFFD"},
		{"both \x00 and \xc3", "both \uFFFD and \uFFFD"},
	} {
		if got := ledger.StorableText(c.in); got != c.want {
			t.Errorf("StorableText(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestUnstorableTextIsStoredAlike: text with NUL bytes and invalid UTF-8
// reaches every column through every write path — a conversation
// created, a single append and merged appends (SQLite's prepared
// statements, PostgreSQL's pipeline), a tool call recorded and ended,
// GORM's own statements — and both stores keep the same text, NUL and
// invalid bytes replaced by U+FFFD; a lookup by such text finds what was
// stored. Before the rule, PostgreSQL refused every one of these writes
// (22021) and SQLite stored the bytes as they came.
func TestUnstorableTextIsStoredAlike(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *DB) {
		db := open()
		ctx := context.Background()
		now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		const bad, want = "x\x00y\xffz", "x\uFFFDy\uFFFDz"
		c := &ledger.Conversation{ID: "conv-nul", SessionKey: "websocket:nul", Channel: "websocket", UserID: "u" + bad,
			Status: ledger.StatusActive, StartedAt: now, LastActivityAt: now, Model: "m" + bad}
		if err := db.CreateConversation(ctx, c); err != nil {
			t.Fatal(err)
		}
		others := createConversations(t, db, 2, now, "")
		client := "id" + bad
		user := ledger.Message{ConversationID: c.ID, Seq: 1, Role: "user", Content: "said " + bad, Quote: "quoted " + bad, ClientMsgID: &client,
			Status: ledger.MsgOK, CreatedAt: now, TurnState: ledger.TurnPending}
		if err := db.Append(ctx, ledger.Append{Conv: c, Messages: []ledger.Message{user}, At: now, RequireActive: true}); err != nil {
			t.Fatalf("single append: %v", err)
		}
		// Merged appends: one batch, one statement (or pipeline) for all.
		release := holdWriter(db)
		var writes []func() error
		for i, o := range others {
			a := ledger.Append{Conv: o, Messages: []ledger.Message{{ConversationID: o.ID, Seq: 1, Role: "user", Content: bad, Status: ledger.MsgOK,
				CreatedAt: now, TurnState: ledger.TurnPending}}, At: now, Model: bad}
			if i == 1 {
				a.Messages = append(a.Messages, ledger.Message{ConversationID: o.ID, Seq: 2, Role: "assistant", Content: "answer " + bad,
					ToolCalls: `[{"id":"c\u0000","name":"t__echo","arguments":"{}"}]` + bad, Error: "why " + bad, ReplyTo: 1, Status: ledger.MsgFailed, CreatedAt: now})
			}
			writes = append(writes, func() error { return db.Append(ctx, a) })
		}
		for i, err := range queueInOrder(db, release, writes) {
			if err != nil {
				t.Fatalf("merged append %d: %v", i, err)
			}
		}
		rows, err := db.OpenToolCalls(ctx, []ledger.ToolCall{{ConversationID: c.ID, MessageSeq: 1, CallID: "call" + bad, TurnSeq: 1,
			SessionKey: c.SessionKey, UserID: "u" + bad, Name: "t__echo" + bad, Arguments: `{"text":"` + bad + `"}`, CreatedAt: now}})
		if err != nil || len(rows) != 1 {
			t.Fatalf("open tool calls: %+v, %v", rows, err)
		}
		if err := db.EndTool(ctx, ledger.ToolEnd{ID: rows[0].ID, From: ledger.ToolNew, State: ledger.ToolDenied, Result: "result " + bad, IsError: true, At: now}); err != nil {
			t.Fatalf("end tool: %v", err)
		}
		if err := db.Gorm().Exec("UPDATE conversations SET reset_reason = ? WHERE id = ?", bad, others[0].ID).Error; err != nil {
			t.Fatalf("GORM statement: %v", err)
		}

		got := transcript(t, db, c.ID)
		if len(got) != 1 || got[0].Content != "said "+want || got[0].Quote != "quoted "+want || *got[0].ClientMsgID != "id"+want {
			t.Fatalf("stored user message = %+v", got)
		}
		if m, err := db.MessageByClientID(ctx, c.ID, client); err != nil || m == nil || m.Seq != 1 {
			t.Fatalf("lookup by the client id as sent: %+v, %v", m, err)
		}
		if conv, err := db.Conversation(ctx, c.ID); err != nil || conv.Model != "m"+want || conv.UserID != "u"+want {
			t.Fatalf("conversation = %+v, %v", conv, err)
		}
		got = transcript(t, db, others[1].ID)
		if len(got) != 2 || got[0].Content != want || got[1].Content != "answer "+want || got[1].Error != "why "+want ||
			got[1].ToolCalls != `[{"id":"c\u0000","name":"t__echo","arguments":"{}"}]`+want {
			t.Fatalf("merged messages = %+v", got)
		}
		if conv, _ := db.Conversation(ctx, others[1].ID); conv.Model != want {
			t.Fatalf("merged conversation's model = %q", conv.Model)
		}
		call, err := db.ToolCall(ctx, rows[0].ID)
		if err != nil || call.CallID != "call"+want || call.Name != "t__echo"+want || call.Arguments != `{"text":"`+want+`"}` ||
			call.Result != "result "+want || call.UserID != "u"+want || call.State != ledger.ToolDenied {
			t.Fatalf("tool call = %+v, %v", call, err)
		}
		var reason string
		db.Gorm().Raw("SELECT reset_reason FROM conversations WHERE id = ?", others[0].ID).Scan(&reason)
		if reason != want {
			t.Fatalf("GORM-written reset_reason = %q", reason)
		}
	})
}

// TestPermanentRefusalIsRejected: an error the database gives for every
// try of a call is ledger.ErrRejected, as its callers see it; one that may
// pass is not.
func TestPermanentRefusalIsRejected(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Severity: "ERROR", Code: "22021", Message: `invalid byte sequence for encoding "UTF8": 0x00`}, true},
		{&pgconn.PgError{Severity: "ERROR", Code: "22003", Message: "bigint out of range"}, true},
		{&pgconn.PgError{Severity: "ERROR", Code: "54000", Message: "index row size exceeds btree version 4 maximum"}, true},
		{&pgconn.PgError{Severity: "ERROR", Code: "40001", Message: "could not serialize access"}, false},
		{&pgconn.PgError{Severity: "FATAL", Code: "57P01", Message: "terminating connection"}, false},
		{errors.New("connection reset by peer"), false},
	} {
		if got := errors.Is(rejected(c.err), ledger.ErrRejected); got != c.want {
			t.Errorf("rejected(%v) is ErrRejected: %v, want %v", c.err, got, c.want)
		}
	}
	// A real one, through a ledger call: a conversation's token count
	// past bigint's range (PostgreSQL; SQLite turns the sum into a real).
	t.Run("postgres", func(t *testing.T) {
		db := openStore(t, DriverPostgres, postgresDSN(t))
		ctx := context.Background()
		now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		c := createConversations(t, db, 1, now, "")[0]
		msg := func(seq int64) []ledger.Message {
			return []ledger.Message{{ConversationID: c.ID, Seq: seq, Role: "assistant", Content: "r", Status: ledger.MsgOK, CreatedAt: now}}
		}
		if err := db.Append(ctx, ledger.Append{Conv: c, Messages: msg(1), At: now, Tokens: math.MaxInt64}); err != nil {
			t.Fatal(err)
		}
		err := db.Append(ctx, ledger.Append{Conv: c, ExpectSeq: 1, Messages: msg(2), At: now, Tokens: math.MaxInt64})
		if !errors.Is(err, ledger.ErrRejected) {
			t.Fatalf("append past bigint's range: %v, want ErrRejected", err)
		}
	})
}
