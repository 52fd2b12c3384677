package sessions

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions/store"
)

func TestSearchCountAndPurgeOne(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		ctx := context.Background()
		db := open()
		m := New(db, agent.Echo{}, Options{})
		defer m.Shutdown(ctx)
		for _, in := range []Inbound{
			{Channel: "websocket", SessionKey: "websocket:ann", UserID: "ann"},
			{Channel: "websocket", SessionKey: "websocket:annette", UserID: "annette"},
			{Channel: "websocket", SessionKey: "websocket:a_n%", UserID: "odd"},
			{Channel: "telegram", SessionKey: "telegram:dm:7", UserID: "7", ChatID: "7"},
		} {
			in.Text = "hi"
			if _, err := m.Handle(ctx, in, Hooks{}); err != nil {
				t.Fatal(err)
			}
		}
		keys := func(f store.ListFilter) string {
			convs, err := db.ListConversations(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			n, err := db.CountConversations(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, c := range convs {
				out = append(out, c.SessionKey)
			}
			return fmt.Sprintf("%d %v", n, out)
		}
		for f, want := range map[store.ListFilter]string{
			{KeyContains: "ann"}:                  "2 [websocket:annette websocket:ann]",
			{KeyContains: "_"}:                    "1 [websocket:a_n%]",
			{KeyContains: "%"}:                    "1 [websocket:a_n%]",
			{KeyContains: "a_n"}:                  "1 [websocket:a_n%]",
			{Channel: "telegram"}:                 "1 [telegram:dm:7]",
			{UserID: "ann"}:                       "1 [websocket:ann]",
			{Channel: "websocket", Limit: 1}:      "3 [websocket:a_n%]",
			{Channel: "websocket", Offset: 2}:     "3 [websocket:ann]",
			{Status: StatusArchived}:              "0 []",
			{SessionKey: "websocket:ann"}:         "1 [websocket:ann]",
			{KeyContains: "ann", Channel: "tele"}: "0 []",
		} {
			if got := keys(f); got != want {
				t.Errorf("%+v: %s, want %s", f, got, want)
			}
		}

		active, err := db.ActiveConversation(ctx, "telegram:dm:7")
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := db.PurgeConversation(ctx, active.ID); ok || err != nil {
			t.Fatalf("purge of an active conversation: %v %v", ok, err)
		}
		if _, err := db.ResetKey(ctx, "telegram:dm:7", m.now()); err != nil {
			t.Fatal(err)
		}
		if ok, err := db.PurgeConversation(ctx, active.ID); !ok || err != nil {
			t.Fatalf("purge: %v %v", ok, err)
		}
		if c, _ := db.Conversation(ctx, active.ID); c != nil {
			t.Fatal("purged conversation still there")
		}
		if msgs, _ := db.MessagesAfter(ctx, active.ID, 0, 0); len(msgs) != 0 {
			t.Fatalf("purged conversation's messages: %d", len(msgs))
		}
		if ok, err := db.PurgeConversation(ctx, active.ID); ok || err != nil {
			t.Fatalf("second purge: %v %v", ok, err)
		}
	})
}

func TestExportTurnStates(t *testing.T) {
	ctx := context.Background()
	db := openStore(t, store.DriverSQLite, t.TempDir()+"/g.db")
	m := New(db, agent.Echo{}, Options{})
	defer m.Shutdown(ctx)
	out, err := m.Handle(ctx, Inbound{Channel: "websocket", SessionKey: "websocket:ann", Text: "hello\n# heading"}, Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	ex, err := db.ExportConversation(ctx, out.ConversationID)
	if err != nil || ex == nil {
		t.Fatal(ex, err)
	}
	u := ex.Messages[0]
	// The reply's transaction marked the row answered.
	row, _ := db.Message(ctx, out.ConversationID, 1)
	if row.TurnState != TurnAnswered || u.TurnState != TurnAnswered || u.ReplySeq != 2 || u.TurnOwner != m.ReplicaID() || u.TurnAttempt != 1 {
		t.Fatalf("row %q, export %+v", row.TurnState, u)
	}
	for format, want := range map[string]string{
		store.FormatJSON:     `"turn_state": "answered"`,
		store.FormatText:     "   1 user      hello\n# heading\n",
		store.FormatMarkdown: "## 1 · user · turn answered\n\n",
	} {
		var b bytes.Buffer
		if err := ex.Write(&b, format); err != nil || !strings.Contains(b.String(), want) {
			t.Errorf("%s: %v\n%s", format, err, b.String())
		}
	}
	if err := ex.Write(&bytes.Buffer{}, "pdf"); err == nil {
		t.Fatal("format pdf accepted")
	}
	if none, err := db.ExportConversation(ctx, "nope"); none != nil || err != nil {
		t.Fatal(none, err)
	}
}
