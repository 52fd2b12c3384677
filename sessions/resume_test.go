package sessions

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
)

// A transcript carries user messages and final replies, not tool calls or
// tool results, and its last seq counts every message read.
func TestOpenTranscript(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		ctx := context.Background()
		db := open()
		c := newClock(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))
		m := newManager(t, db, &recorder{}, c, nil)
		in := msg("websocket:ann", "")
		first, err := m.Conversations().Open(ctx, in, -1, 10)
		if err != nil || first.Conversation == "" || first.LastSeq != 0 || len(first.Entries) != 0 {
			t.Fatalf("Open of a new key = %+v, %v", first, err)
		}
		conv, err := db.Conversation(ctx, first.Conversation)
		if err != nil {
			t.Fatal(err)
		}
		id := "c-1"
		now := c.Now()
		rows := []Message{
			{ConversationID: conv.ID, Seq: 1, Role: "user", Content: "weather?", ClientMsgID: &id, Status: MsgOK, CreatedAt: now},
			{ConversationID: conv.ID, Seq: 2, Role: "assistant", ToolCalls: `[{"id":"t1","name":"weather","arguments":"{}"}]`, ReplyTo: 1, Status: MsgOK, CreatedAt: now},
			{ConversationID: conv.ID, Seq: 3, Role: "tool", Content: "sunny", ToolCallID: "t1", ReplyTo: 1, Status: MsgOK, CreatedAt: now},
			{ConversationID: conv.ID, Seq: 4, Role: "assistant", Content: "Sunny.", ReplyTo: 1, Status: MsgOK, CreatedAt: now},
			{ConversationID: conv.ID, Seq: 5, Role: "user", Content: "and tomorrow?", Status: MsgOK, CreatedAt: now},
			{ConversationID: conv.ID, Seq: 6, Role: "assistant", ToolCalls: `[{"id":"t2","name":"weather","arguments":"{}"}]`, ReplyTo: 5, Status: MsgOK, CreatedAt: now},
		}
		if err := db.Append(ctx, ledger.Append{Conv: conv, RequireActive: true, At: now, Messages: rows}); err != nil {
			t.Fatal(err)
		}
		want := []Entry{
			{Seq: 1, Role: "user", Text: "weather?", Status: MsgOK, ClientMsgID: "c-1"},
			{Seq: 4, Role: "assistant", Text: "Sunny.", Status: MsgOK, ReplyTo: 1},
			{Seq: 5, Role: "user", Text: "and tomorrow?", Status: MsgOK},
		}
		all, err := m.Conversations().Open(ctx, in, -1, 10)
		if err != nil || all.Conversation != conv.ID || all.LastSeq != 6 || !reflect.DeepEqual(all.Entries, want) {
			t.Fatalf("Open(-1, 10) = %+v, %v; want last seq 6 and %+v", all, err, want)
		}
		after, err := m.Conversations().Open(ctx, in, 1, 3)
		if err != nil || after.LastSeq != 6 || !reflect.DeepEqual(after.Entries, want[1:2]) {
			t.Fatalf("Open(1, 3) = %+v, %v; want %+v", after, err, want[1:2])
		}
		tail, err := m.Conversations().Open(ctx, in, -1, 2)
		if err != nil || tail.LastSeq != 6 || !reflect.DeepEqual(tail.Entries, want[2:]) {
			t.Fatalf("Open(-1, 2) = %+v, %v; want %+v", tail, err, want[2:])
		}
	})
}
