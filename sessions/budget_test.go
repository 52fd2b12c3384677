package sessions

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/agent/openai"
	"github.com/chatgate/chatgate/internal/llmtest"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
)

// isSummaryCall reports whether req is a summary's model call: its
// instructions are the compaction prompt.
func isSummaryCall(req llmtest.Request) bool {
	return len(req.Messages) > 0 && req.Messages[0].Role == "system" && req.Messages[0].Text() == DefaultCompactionPrompt
}

// TestBudgetBoundsCompaction is the reproduction: a budget of 300
// tokens a day, compaction on, a turn costing 120 tokens and a summary 40,
// against the scripted model server. The summary made while the user is
// under budget is tallied as theirs; the turn that crosses the budget is
// the last model call of the day — no summary after it, however many
// refused messages follow (each is stored and grows the history) — so
// the day ends at the crossing turn's spend.
func TestBudgetBoundsCompaction(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		notes := newSummaryNotes(db)
		llm, ag := llmtest.AgentWith(t, openai.Config{})
		llm.Script(func(req llmtest.Request) llmtest.Answer {
			if isSummaryCall(req) {
				return llmtest.Answer{Text: "what was said", Usage: &llmtest.Usage{PromptTokens: 30, CompletionTokens: 10}}
			}
			return llmtest.Answer{Text: "an answer", Usage: &llmtest.Usage{PromptTokens: 100, CompletionTokens: 20}}
		})
		c := newClock(t0)
		p := Policy{MaxHistory: 2, Compaction: CompactionPolicy{Enabled: true}, Budget: BudgetPolicy{Default: Budget{TokensPerDay: 300}}}
		m := New(notes, ag, Options{Policies: map[string]Policy{"websocket": p}, Now: c.Now, Logger: quiet, Events: events(db)})
		t.Cleanup(func() { m.Shutdown(context.Background()) })
		key := "websocket:ann"

		// 120, then 240 and its summary: 280. A summary runs beside the
		// next turn; each message here waits for the last one's summary
		// (if any) to be made, so that the day's calls come in one order.
		for i := 1; i <= 2; i++ {
			if out := handle(t, m, msg(key, fmt.Sprintf("m%d", i))); out.Reply.Status != MsgOK {
				t.Fatalf("turn %d: %+v, want answered", i, out.Reply)
			}
			waitNoCompaction(t, m)
		}
		select {
		case <-notes.stored:
		case <-time.After(10 * time.Second):
			t.Fatal("no summary after the second turn")
		}
		st, err := m.Standing().Usage(context.Background(), "websocket", key)
		if err != nil {
			t.Fatal(err)
		}
		if st.Day.Tokens() != 280 {
			t.Fatalf("today's tally %d tokens, want 280: two turns and the summary, tallied as the user's", st.Day.Tokens())
		}
		// 280 < 300: this turn runs, and crosses the budget (400).
		if out := handle(t, m, msg(key, "m3")); out.Reply.Status != MsgOK {
			t.Fatalf("the crossing turn: %+v, want answered", out.Reply)
		}
		waitNoCompaction(t, m)
		calls := len(llm.Received())
		for i := 4; i <= 7; i++ {
			out := handle(t, m, msg(key, fmt.Sprintf("m%d", i)))
			if !strings.HasPrefix(out.Reply.Error, OverBudgetPrefix+"tokens_per_day") {
				t.Fatalf("message %d: %+v, want the budget reply", i, out.Reply)
			}
		}
		// The drain waits for every summary under way: after it, nothing
		// more can be called.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		m.Shutdown(ctx)
		if got := llm.Received()[calls:]; len(got) != 0 {
			t.Fatalf("%d model calls after the turn that crossed the budget (%d of them summaries), want none", len(got), summaryCallsIn(got))
		}
		day, _, err := db.UserUsage(context.Background(), key, "2026-03-10", "2026-03-01")
		if err != nil {
			t.Fatal(err)
		}
		if day.Tokens() != 400 || day.Turns != 3 {
			t.Fatalf("the day ended at %d tokens and %d turns, want 400 and 3: the overshoot is the crossing turn's", day.Tokens(), day.Turns)
		}

		// A summary the user asks for (/compact), after a restart, is
		// refused too, and calls nothing.
		m2 := New(db, ag, Options{Policies: map[string]Policy{"websocket": p}, Now: c.Now, Logger: quiet, Events: events(db)})
		t.Cleanup(func() { m2.Shutdown(context.Background()) })
		if _, err := m2.Compact(context.Background(), msg(key, "")); !errors.Is(err, ErrOverBudget) {
			t.Fatalf("Compact over budget: %v, want ErrOverBudget", err)
		}
		if got := len(llm.Received()); got != calls {
			t.Fatalf("Compact over budget called the model")
		}
	})
}

func summaryCallsIn(reqs []llmtest.Request) int {
	n := 0
	for _, r := range reqs {
		if isSummaryCall(r) {
			n++
		}
	}
	return n
}

// TestStoppedRepliesCountAgainstTheBudget: with the openai backend
// streaming from the scripted model server, a user who stops every
// answer after its first words — before the server sends its usage —
// still spends: each stopped turn's prompt (estimated from the request)
// and what streamed (estimated from its text) are tallied, marked
// estimated, on the stored partial reply too; enough stops put the user
// over budget, and their next message is refused without a model call.
func TestStoppedRepliesCountAgainstTheBudget(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		llm, ag := llmtest.AgentWith(t, openai.Config{Stream: true, PricePer1KPrompt: 1, PricePer1KCompletion: 2})
		const streamed = "one two three "
		llm.Script(func(llmtest.Request) llmtest.Answer {
			return llmtest.Answer{Text: streamed + "four five six seven eight", StallAfter: 3,
				Usage: &llmtest.Usage{PromptTokens: 1000, CompletionTokens: 1000}}
		})
		c := newClock(t0)
		p := Policy{MaxHistory: 20, Budget: BudgetPolicy{Default: Budget{TokensPerDay: 100}}}
		m := newManager(t, db, ag, c, map[string]Policy{"websocket": p})
		key := "websocket:ann"

		// stopMidStream sends text and stops its answer once three pieces
		// of it have streamed.
		stopMidStream := func(text string) Outcome {
			deltas := make(chan struct{}, 16)
			type result struct {
				out Outcome
				err error
			}
			done := make(chan result, 1)
			go func() {
				out, err := m.Handle(context.Background(), msg(key, text), Hooks{OnDelta: func(string) {
					deltas <- struct{}{}
				}})
				done <- result{out, err}
			}()
			for range 3 {
				select {
				case <-deltas:
				case r := <-done:
					t.Fatalf("%q ended before three pieces streamed: %+v, %v", text, r.out.Reply, r.err)
				case <-time.After(10 * time.Second):
					t.Fatalf("%q: no answer streaming", text)
				}
			}
			if !m.Stop(key) {
				t.Fatalf("%q: no turn running to stop", text)
			}
			r := <-done
			if r.err != nil {
				t.Fatal(r.err)
			}
			return r.out
		}

		var stops int
		var before ledger.UsageTotals
		for stops = 1; stops <= 10; stops++ {
			calls := len(llm.Received())
			out := handle0(t, m, key, fmt.Sprintf("question %d", stops), stopMidStream)
			if strings.HasPrefix(out.Reply.Error, OverBudgetPrefix) {
				if len(llm.Received()) != calls {
					t.Fatal("the refused message called the model")
				}
				break
			}
			if out.Reply.Status != ledger.MsgInterrupted || out.Reply.Text != streamed {
				t.Fatalf("stop %d: %+v, want the interrupted partial reply %q", stops, out.Reply, streamed)
			}
			day, _, err := db.UserUsage(context.Background(), key, "2026-03-10", "2026-03-01")
			if err != nil {
				t.Fatal(err)
			}
			added := day.Tokens() - before.Tokens()
			wantCompletion := int64(agent.EstimateTokens(len(streamed)))
			if added <= wantCompletion || day.CompletionTokens-before.CompletionTokens != wantCompletion {
				t.Fatalf("stop %d added %d tokens (%d completion), want the estimated prompt and %d completion tokens",
					stops, added, day.CompletionTokens-before.CompletionTokens, wantCompletion)
			}
			if day.EstimatedTokens != day.Tokens() || day.Turns != 0 {
				t.Fatalf("stop %d: today's tally %+v, want every token marked estimated and no turn answered", stops, day)
			}
			tr := transcript(t, db, out.ConversationID)
			row := tr[len(tr)-1]
			if row.Seq != out.Reply.Seq || row.PromptTokens+row.CompletionTkns != added || row.Cost <= 0 {
				t.Fatalf("stop %d: the stored partial reply %+v carries no spend (tallied %d tokens)", stops, row, added)
			}
			before = day
		}
		if stops > 10 {
			t.Fatalf("ten stopped answers and still under a budget of 100 tokens a day: %+v", before)
		}
		if stops < 3 {
			t.Fatalf("over budget after %d stops: the estimate is too big (%+v)", stops-1, before)
		}
		t.Logf("over budget after %d stopped answers: %+v", stops-1, before)
		st, err := m.Standing().Usage(context.Background(), "websocket", key)
		if err != nil {
			t.Fatal(err)
		}
		if st.Over() != "tokens_per_day" || st.Day.EstimatedTokens != st.Day.Tokens() {
			t.Fatalf("standing %+v, want over tokens_per_day on estimated tokens", st)
		}
	})
}

// handle0 runs the first messages through stop (which stops their
// answers mid-stream) and, once the user is over budget, answers like
// handle: a refused message streams nothing to stop.
func handle0(t *testing.T, m *Manager, key, text string, stop func(string) Outcome) Outcome {
	t.Helper()
	st, err := m.Standing().Usage(context.Background(), "websocket", key)
	if err != nil {
		t.Fatal(err)
	}
	if st.Over() != "" {
		return handle(t, m, msg(key, text))
	}
	return stop(text)
}

// waitNoCompaction waits until no summary is being made: a turn's reply
// is stored, and its summary (if any) counted for the drain, before its
// caller hears of it, so after handle this waits for that turn's
// summary. (No sweep runs in these tests: the drain's count is the
// summaries'.)
func waitNoCompaction(t *testing.T, m *Manager) {
	t.Helper()
	m.life.sweeps.Wait()
}
