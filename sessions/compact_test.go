package sessions

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/agent/openai"
	"github.com/chatgate/chatgate/internal/llmtest"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
)

// summariser writes numbered summaries, each naming the newest message it
// was given; with fail set it fails.
type summariser struct {
	mu     sync.Mutex
	calls  int
	fail   bool
	inputs []string
	failed chan struct{} // told of each failed call, when set
}

func (s *summariser) Name() string  { return "summariser" }
func (s *summariser) Model() string { return "small" }
func (s *summariser) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	s.inputs = append(s.inputs, req.Input)
	if s.fail {
		if s.failed != nil {
			s.failed <- struct{}{}
		}
		return agent.Reply{}, errors.New("summary model down")
	}
	if req.Instructions != DefaultCompactionPrompt {
		return agent.Reply{}, fmt.Errorf("instructions %q", req.Instructions)
	}
	return agent.Reply{Messages: []agent.Message{{Role: agent.RoleAssistant, Content: fmt.Sprintf("summary %d", s.calls)}}}, nil
}

func (s *summariser) setFail(v bool) { s.mu.Lock(); s.fail = v; s.mu.Unlock() }

// summaryNotes is the store as the manager sees it, telling of each
// summary it stored.
type summaryNotes struct {
	*store.DB
	stored chan struct{}
}

func newSummaryNotes(db *store.DB) summaryNotes {
	return summaryNotes{DB: db, stored: make(chan struct{}, 256)}
}

func (n summaryNotes) Append(ctx context.Context, a ledger.Append) error {
	err := n.DB.Append(ctx, a)
	if err == nil && len(a.Messages) == 1 && a.Messages[0].Role == RoleSummary {
		n.stored <- struct{}{}
	}
	return err
}

// waitSummarised waits, summary by summary, until the newest summary of
// conv leaves exactly keep messages after what it covers, and returns
// the rows.
func waitSummarised(t *testing.T, n summaryNotes, conv string, keep int) []Message {
	t.Helper()
	for {
		rows := transcript(t, n.DB, conv)
		if s := newestSummary(pointers(rows)); s != nil {
			after := 0
			for _, r := range rows {
				if r.Seq > s.ReplyTo && r.Role != RoleSummary {
					after++
				}
			}
			if after == keep {
				return rows
			}
		}
		select {
		case <-n.stored:
		case <-time.After(10 * time.Second):
			for _, r := range rows {
				t.Logf("%d %s %q reply_to=%d", r.Seq, r.Role, r.Content, r.ReplyTo)
			}
			t.Fatalf("no summary leaving %d messages after it; rows: %d", keep, len(rows))
		}
	}
}

// TestCompactionKeepsWhatFallsOut: 60 turns with max_history 20 and
// compaction on. Once the window is full, every turn's model call gets a
// summary, then exactly the last 20 messages; summaries are rows of their
// own, in the export, and no message is deleted. A failing summary call
// leaves the turn answered (trimmed plainly), and the next turn catches
// up.
func TestCompactionKeepsWhatFallsOut(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		rec := &recorder{}
		sum := &summariser{failed: make(chan struct{}, 4)}
		notes := newSummaryNotes(db)
		policies := map[string]Policy{"websocket": {MaxHistory: 20, Compaction: CompactionPolicy{Enabled: true}}}
		m := New(notes, rec, Options{Policies: policies, Now: newClock(time.Now()).Now, Logger: quiet, Compactor: sum})
		t.Cleanup(func() { m.Shutdown(context.Background()) })
		key := "websocket:long"
		var conv string
		for i := 1; i <= 60; i++ {
			if i == 30 {
				sum.setFail(true)
			}
			out := handle(t, m, msg(key, fmt.Sprintf("m%d", i)))
			if want := fmt.Sprintf("echo: m%d", i); !strings.HasPrefix(out.Reply.Text, want) {
				t.Fatalf("turn %d answered %q", i, out.Reply.Text)
			}
			conv = out.ConversationID
			req := rec.last()
			switch {
			case i <= 11:
				if len(req.History) != 2*(i-1) {
					t.Fatalf("turn %d sent %d history messages, want %d", i, len(req.History), 2*(i-1))
				}
			case i == 31:
				// The summary of turn 30 failed: the old summary, then the
				// newest 20 (what fell out since is plainly trimmed).
				fallthrough
			default:
				if len(req.History) != 21 || req.History[0].Role != agent.RoleSystem || !strings.HasPrefix(req.History[0].Content, SummaryIntro+"summary ") {
					t.Fatalf("turn %d history: %d messages, first %+v", i, len(req.History), req.History[0])
				}
				if got, want := req.History[1].Content, fmt.Sprintf("m%d", i-10); got != want {
					t.Fatalf("turn %d: the window after the summary starts with %q, want %q", i, got, want)
				}
			}
			switch {
			case i == 30:
				// The summary call fails; the next turn goes on without
				// the summary of what fell out meanwhile.
				select {
				case <-sum.failed:
				case <-time.After(10 * time.Second):
					t.Fatal("no summary call after turn 30")
				}
				sum.setFail(false)
			case i > 10:
				// The window is full: the next turn's summary is stored
				// before it starts.
				waitSummarised(t, notes, conv, 20)
			}
		}
		rows := transcript(t, db, conv)
		var users, replies, summaries int
		for _, r := range rows {
			switch r.Role {
			case agent.RoleUser:
				users++
			case agent.RoleAssistant:
				replies++
			case RoleSummary:
				summaries++
			}
		}
		if users != 60 || replies != 60 || summaries < 45 {
			t.Fatalf("stored %d messages, %d replies, %d summaries; want 60, 60 and a summary a turn", users, replies, summaries)
		}
		exp, err := db.ExportConversation(context.Background(), conv)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := exp.Write(&buf, store.FormatText); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(buf.String(), "summary   [messages 1–") {
			t.Fatalf("the export shows no summary:\n%s", buf.String())
		}
	})
}

// TestCompactNow: Compact summarises all but the last exchange at once;
// with compaction off it says so.
func TestCompactNow(t *testing.T) {
	db := openStore(t, store.DriverSQLite, t.TempDir()+"/g.db")
	sum := &summariser{}
	policies := map[string]Policy{"websocket": {MaxHistory: 20, Compaction: CompactionPolicy{Enabled: true}}}
	m := New(db, agent.Echo{}, Options{Policies: policies, Logger: quiet, Compactor: sum})
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	for i := 1; i <= 3; i++ {
		handle(t, m, msg("websocket:a", fmt.Sprintf("m%d", i)))
	}
	n, err := m.Compact(context.Background(), msg("websocket:a", ""))
	if err != nil || n != 4 {
		t.Fatalf("Compact = %d, %v; want the 4 messages before the last exchange", n, err)
	}
	if !strings.Contains(sum.inputs[0], "user: m1") || strings.Contains(sum.inputs[0], "m3") {
		t.Fatalf("summary input %q", sum.inputs[0])
	}
	out := handle(t, m, msg("websocket:a", "m4"))
	if !strings.HasSuffix(out.Reply.Text, "(history: 3)") { // the summary and the last exchange
		t.Fatalf("after /compact: %q", out.Reply.Text)
	}
	off := New(db, agent.Echo{}, Options{Logger: quiet})
	t.Cleanup(func() { off.Shutdown(context.Background()) })
	if _, err := off.Compact(context.Background(), msg("websocket:a", "")); !errors.Is(err, ErrCompactionOff) {
		t.Fatalf("Compact with compaction off: %v", err)
	}
}

// A summary is asked for in one piece even when the agent streams its
// replies (agent.openai.stream): nobody watches it being written.
func TestSummaryCallsDoNotStream(t *testing.T) {
	db := openStore(t, store.DriverSQLite, t.TempDir()+"/g.db")
	llm, ag := llmtest.AgentWith(t, openai.Config{Stream: true})
	policies := map[string]Policy{"websocket": {MaxHistory: 20, Compaction: CompactionPolicy{Enabled: true}}}
	m := New(db, ag, Options{Policies: policies, Logger: quiet})
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	for i := 1; i <= 3; i++ {
		handle(t, m, msg("websocket:a", fmt.Sprintf("m%d", i)))
	}
	if _, err := m.Compact(context.Background(), msg("websocket:a", "")); err != nil {
		t.Fatal(err)
	}
	got := llm.Received()
	if len(got) != 4 {
		t.Fatalf("%d model requests, want 3 replies and a summary", len(got))
	}
	for i, r := range got {
		if r.Stream != (i < 3) {
			t.Fatalf("request %d streamed: %v; want the replies streamed and the summary not", i, r.Stream)
		}
	}
}

// A tool call is summed up with its results, never apart from them: a
// fold that would end between them takes the results too, and the
// summary's input names the call.
func TestCompactionKeepsAToolCallWithItsResults(t *testing.T) {
	calls := encodeToolCalls([]agent.ToolCall{{ID: "c1", Name: "notes__add", Arguments: `{"text":"milk"}`}})
	rows := []ledger.Message{
		{Seq: 1, Role: agent.RoleUser, Content: "note milk"},
		{Seq: 2, Role: agent.RoleAssistant, ToolCalls: calls, ReplyTo: 1, Status: ledger.MsgOK},
		{Seq: 3, Role: agent.RoleTool, ToolCallID: "c1", Content: "noted", ReplyTo: 1, Status: ledger.MsgOK},
		{Seq: 4, Role: agent.RoleAssistant, Content: "Noted.", ReplyTo: 1, Status: ledger.MsgOK},
	}
	el := eligible(pointers(rows))
	if got := withResults(el, el[:2]); len(got) != 3 || got[2].Seq != 3 {
		t.Fatalf("fold ends at seq %d, want 3 (the call's result)", got[len(got)-1].Seq)
	}
	if got := withResults(el, el[:1]); len(got) != 1 {
		t.Fatalf("a fold ending at a user message grew to %d", len(got))
	}
	in := compactionInput("", el[:3])
	if !strings.Contains(in, `assistant called the tool notes__add with {"text":"milk"}`) || !strings.Contains(in, "tool: noted") {
		t.Fatalf("summary input:\n%s", in)
	}
	// The window after such a fold is whole: history keeps what is left.
	if h := History(rows[3:], 10); len(h) != 1 || h[0].Content != "Noted." {
		t.Fatalf("history after the fold = %+v", h)
	}
}
