package sessions

import (
	"context"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions/ledger"
)

// A turn cut by a shutdown and run again has two replies to its message:
// the cut one, then the one that settles it. The media its calls
// returned go on the one that settles it, in a transcript and in a
// stored reply read for another replica; the cut one carries none.
func TestMediaGoOnTheReplyThatSettlesTheTurn(t *testing.T) {
	db := openStore(t, "sqlite", t.TempDir()+"/g.db")
	m := New(db, agent.Echo{}, Options{Logger: quiet})
	defer m.Shutdown(context.Background())
	out := handle(t, m, msg("websocket:ann", "hi"))
	conv := out.ConversationID
	now := time.Now()
	g := db.Gorm()
	mk := func(seq int64, role, content, status, why, calls string, replyTo int64) {
		if err := g.Create(&ledger.Message{ConversationID: conv, Seq: seq, Role: role, Content: content, Status: status, Error: why,
			ToolCalls: calls, ReplyTo: replyTo, CreatedAt: now}).Error; err != nil {
			t.Fatal(err)
		}
	}
	mk(10, "user", "draw", "ok", "", "", 0)
	mk(11, "assistant", "", "ok", "", `[{"id":"c1","name":"t__media","arguments":"{}"}]`, 10)
	mk(12, "tool", "[image]", "ok", "", "", 10)
	mk(13, "assistant", "partial", "interrupted", ledger.InterruptedByShutdown, "", 10)
	mk(14, "assistant", "final", "ok", "", "", 10)
	if err := g.Create(&ledger.ToolMedia{ID: "med1", ConversationID: conv, TurnSeq: 10, ToolCallID: 1, Idx: 0, SessionKey: "websocket:ann",
		Kind: "image", Mime: "image/png", Size: 3, Data: []byte("abc"), CreatedAt: now}).Error; err != nil {
		t.Fatal(err)
	}
	tr, err := m.Conversations().ConversationTranscript(context.Background(), conv, 100)
	if err != nil {
		t.Fatal(err)
	}
	on := map[int64]int{}
	for _, e := range tr.Entries {
		if len(e.Media) > 0 {
			on[e.Seq] = len(e.Media)
		}
	}
	if len(on) != 1 || on[14] != 1 {
		t.Fatalf("media on entries %v, want on the final reply (14) only", on)
	}
	for seq, want := range map[int64]int{13: 0, 14: 1} {
		_, r, err := m.Conversations().StoredReply(context.Background(), conv, 10, seq)
		if err != nil || len(r.Media) != want {
			t.Fatalf("stored reply %d: %d media, %v; want %d", seq, len(r.Media), err, want)
		}
	}
}
