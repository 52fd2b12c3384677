package gateway

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chatgate/chatgate/internal/llmtest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
)

// summaryNotes is the store as the session manager sees it, telling of
// each summary it stored.
type summaryNotes struct {
	*store.DB
	stored chan struct{}
}

func (n summaryNotes) Append(ctx context.Context, a ledger.Append) error {
	err := n.DB.Append(ctx, a)
	if err == nil && len(a.Messages) == 1 && a.Messages[0].Role == sessions.RoleSummary {
		n.stored <- struct{}{}
	}
	return err
}

// summaryLeaves waits, summary by summary, until conversation conv's
// newest summary leaves keep messages after what it covers.
func summaryLeaves(t *testing.T, n summaryNotes, conv string, keep int) {
	t.Helper()
	for {
		exp, err := n.ExportConversation(context.Background(), conv)
		if err != nil {
			t.Fatal(err)
		}
		covered, after := int64(-1), 0
		for _, m := range exp.Messages {
			if m.Role == sessions.RoleSummary {
				covered, after = m.ReplyTo, 0
			}
		}
		for _, m := range exp.Messages {
			if covered >= 0 && m.Seq > covered && m.Role != sessions.RoleSummary {
				after++
			}
		}
		if covered >= 0 && after == keep {
			return
		}
		select {
		case <-n.stored:
		case <-time.After(10 * time.Second):
			t.Fatalf("no summary leaving %d messages (covered %d, %d after)", keep, covered, after)
		}
	}
}

// TestCompactionOverWebSocket: 60 turns with max_history 20 and
// compaction on, against a model server. Once the window is full, the
// model gets, on every turn, the summary as a system message and then
// the last 20 messages; the summary calls carry the compaction prompt.
// A compact frame sums up at once.
func TestCompactionOverWebSocket(t *testing.T) {
	llm, ag := llmtest.Agent(t, false)
	policies := map[string]sessions.Policy{Channel: {MaxHistory: 20, Compaction: sessions.CompactionPolicy{Enabled: true}}}
	db, err := store.Open(context.Background(), store.DriverSQLite, filepath.Join(t.TempDir(), "g.db"), store.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	notes := summaryNotes{DB: db, stored: make(chan struct{}, 256)}
	mgr := sessions.New(notes, ag, sessions.Options{Logger: quiet, Policies: policies})
	e := serveEnv(t, db, mgr, WSOptions{RatePerSecond: 1000, RateBurst: 1000}, false)
	c, ready := e.connect(map[string]any{"user": "ann"})
	conv := ready["conversation"].(string)
	for i := 1; i <= 60; i++ {
		c.send(map[string]any{"type": "message", "id": fmt.Sprintf("m%d", i), "text": fmt.Sprintf("m%d", i)})
		if r := c.expect("reply"); r["text"] != llmtest.Reply {
			t.Fatalf("turn %d: %v", i, r)
		}
		if i >= 11 {
			summaryLeaves(t, notes, conv, 20)
		}
	}
	var turns, summaries int
	for _, req := range llm.Requests() {
		if req[0].Role == "system" && req[0].Text() == sessions.DefaultCompactionPrompt {
			summaries++
			continue
		}
		turns++
		input := req[len(req)-1].Text()
		var n int
		fmt.Sscanf(input, "m%d", &n)
		if n <= 11 {
			if len(req) != 2*n-1 {
				t.Fatalf("turn %d sent %d messages", n, len(req))
			}
			continue
		}
		if len(req) != 22 || req[0].Role != "system" || !strings.HasPrefix(req[0].Text(), sessions.SummaryIntro) {
			exp, _ := e.db.ExportConversation(context.Background(), conv)
			for _, m := range exp.Messages[:30] {
				t.Logf("%d %s %.20q reply_to=%d", m.Seq, m.Role, m.Content, m.ReplyTo)
			}
			t.Fatalf("turn %d sent %d messages, the first %+v", n, len(req), req[0])
		}
		if got, want := req[1].Text(), fmt.Sprintf("m%d", n-10); got != want {
			t.Fatalf("turn %d: the window after the summary starts with %q, want %q", n, got, want)
		}
	}
	// One summary a turn from the eleventh on, and every summary call
	// stored. A turn's compaction may run twice: the next message, sent
	// as soon as the summary is stored, asks for another look while the
	// first is still finishing, and that look may find the message stored
	// and its reply not yet, and sum up one more message; the reply's own
	// compaction then makes the next summary.
	exp, err := e.db.ExportConversation(context.Background(), conv)
	if err != nil {
		t.Fatal(err)
	}
	stored := 0
	for _, m := range exp.Messages {
		if m.Role == sessions.RoleSummary {
			stored++
		}
	}
	if turns != 60 || summaries < 50 || summaries != stored {
		t.Fatalf("%d turn calls, %d summary calls and %d summaries stored, want 60 turn calls and at least 50 summaries, each stored",
			turns, summaries, stored)
	}

	c.send(map[string]any{"type": "compact"})
	if f := c.expect("compacted"); f["messages"] != float64(18) {
		t.Fatalf("compacted = %v, want the 18 messages before the last exchange", f)
	}
}

// TestCompactFrameWithCompactionOff: the compact frame is refused as
// unsupported, and nothing is stored.
func TestCompactFrameWithCompactionOff(t *testing.T) {
	_, ag := llmtest.Agent(t, false)
	e := newEnv(t, ag, WSOptions{}, nil, nil)
	c, _ := e.connect(map[string]any{"user": "ann"})
	c.send(map[string]any{"type": "message", "id": "m1", "text": "hi"})
	c.expect("reply")
	c.send(map[string]any{"type": "compact"})
	if f := c.expect("error"); f["code"] != "unsupported" {
		t.Fatalf("compact with compaction off = %v", f)
	}
}
