package sessions

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/llmtest"
	"github.com/chatgate/chatgate/sessions/ledger"
	"github.com/chatgate/chatgate/sessions/store"
)

// storedUsage sums the stored messages' spend per user, day and model,
// the way the tallies must: what every conversation of the database holds.
func storedUsage(t *testing.T, db *store.DB) map[[3]string]ledger.UsageTotals {
	t.Helper()
	var rows []struct {
		SessionKey, Model          string
		CreatedAt                  time.Time
		PromptTokens, CompletionTk int64
		Cost                       float64
		Role, Status               string
		Seq, ReplyTo               int64
	}
	err := db.Gorm().Raw(`SELECT c.session_key, c.model, m.created_at, m.prompt_tokens, m.completion_tokens AS completion_tk, m.cost, m.role, m.status, m.seq, m.reply_to
		FROM messages m JOIN conversations c ON c.id = m.conversation_id WHERE m.role = 'assistant'`).Scan(&rows).Error
	if err != nil {
		t.Fatal(err)
	}
	out := map[[3]string]ledger.UsageTotals{}
	for _, r := range rows {
		k := [3]string{ledger.UsageUser(r.SessionKey), ledger.UsageDayKey(r.CreatedAt, time.UTC), ""}
		u := out[k]
		u.PromptTokens += r.PromptTokens
		u.CompletionTokens += r.CompletionTk
		u.Cost += r.Cost
		if r.Status == ledger.MsgOK {
			u.Turns++
		}
		out[k] = u
	}
	return out
}

// tallied is the tallies by user and day, their models summed.
func tallied(t *testing.T, db *store.DB) map[[3]string]ledger.UsageTotals {
	t.Helper()
	rows, err := db.UsageReport(context.Background(), store.UsageFilter{By: []string{"user", "day"}})
	if err != nil {
		t.Fatal(err)
	}
	out := map[[3]string]ledger.UsageTotals{}
	for _, r := range rows {
		out[[3]string{r.User, r.Day, ""}] = r.UsageTotals
	}
	return out
}

func sameUsage(t *testing.T, got, want map[[3]string]ledger.UsageTotals) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("tallies for %d user-days, stored messages for %d:\n got %v\nwant %v", len(got), len(want), got, want)
	}
	for k, w := range want {
		g := got[k]
		if g.PromptTokens != w.PromptTokens || g.CompletionTokens != w.CompletionTokens || g.Turns != w.Turns || math.Abs(g.Cost-w.Cost) > 1e-9 {
			t.Errorf("%v: tallied %+v, stored %+v", k, g, w)
		}
	}
}

// TestUsageTalliesAreTheStoredSpend: after a mixed run — several users,
// two models, topics, two days, concurrent turns — the tallies by user
// and day are exactly the stored replies' tokens and cost, and the
// report by model splits them.
func TestUsageTalliesAreTheStoredSpend(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		c := newClock(t0)
		ag := &llmtest.Spender{}
		m := newManager(t, db, ag, c, nil)
		run := func() {
			var wg sync.WaitGroup
			for u := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 5 {
						key := fmt.Sprintf("websocket:u%d", u)
						if i == 3 {
							key = fmt.Sprintf("telegram:dm:%d:topic:%d", u, i) // a topic: the same user as telegram:dm:u
						}
						text := fmt.Sprintf("hello %d %d", u, i)
						if i%2 == 1 {
							text = "m:large " + text
						}
						in := msg(key, text)
						if strings.HasPrefix(key, "telegram") {
							in.Channel = "telegram"
						}
						handle(t, m, in)
					}
				}()
			}
			wg.Wait()
		}
		run()
		c.Advance(24 * time.Hour)
		run()
		sameUsage(t, tallied(t, db), storedUsage(t, db))

		byModel, err := db.UsageReport(context.Background(), store.UsageFilter{By: []string{"model"}})
		if err != nil {
			t.Fatal(err)
		}
		// Tallied under the configured names, not the API's dated ids,
		// which the conversations record.
		if len(byModel) != 2 || byModel[0].Model != "large" || byModel[1].Model != "small" || byModel[0].Turns != 16 || byModel[1].Turns != 24 {
			t.Fatalf("by model: %+v, want large 16 turns and small 24", byModel)
		}
		var recorded []string
		if err := db.Gorm().Raw("SELECT DISTINCT model FROM conversations ORDER BY model").Scan(&recorded).Error; err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(recorded, "large-2026-01-01") || slices.Contains(recorded, "large") {
			t.Fatalf("conversations record the models %q, want the API's ids", recorded)
		}
		one, err := db.UsageReport(context.Background(), store.UsageFilter{User: "telegram:dm:2", Since: ledger.UsageDayKey(t0.Add(24*time.Hour), time.UTC)})
		if err != nil {
			t.Fatal(err)
		}
		if len(one) != 1 || one[0].Turns != 1 {
			t.Fatalf("telegram:dm:2 from the second day: %+v, want its one topic turn", one)
		}
	})
}

// TestUsageTalliesAcrossTwoReplicas: two replicas on one PostgreSQL
// database answering the same users at once tally every turn once.
func TestUsageTalliesAcrossTwoReplicas(t *testing.T) {
	dsn := postgresDSN(t)
	c := newClock(t0)
	replicas := []*Manager{
		newManager(t, openStore(t, store.DriverPostgres, dsn), &llmtest.Spender{}, c, queued),
		newManager(t, openStore(t, store.DriverPostgres, dsn), &llmtest.Spender{}, c, queued),
	}
	var wg sync.WaitGroup
	for r, m := range replicas {
		for u := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 6 {
					in := msg(fmt.Sprintf("websocket:u%d", u), fmt.Sprintf("r%d-%d", r, i))
					in.ClientMsgID = in.Text
					if _, err := m.Handle(context.Background(), in, Hooks{}); err != nil {
						t.Error(err)
					}
				}
			}()
		}
	}
	wg.Wait()
	db := openStore(t, store.DriverPostgres, dsn)
	want := storedUsage(t, db)
	sameUsage(t, tallied(t, db), want)
	var turns int64
	for _, u := range want {
		turns += u.Turns
	}
	if turns != 36 {
		t.Fatalf("%d turns tallied, want 36", turns)
	}
}

// TestBudgetRefusesWithoutCallingTheModel: a user over cost_per_day gets
// the budget reply, stored, and no model call; their message is kept; the
// next day (fake clock) they are answered again. Another user is not
// held back, and a user with a budget of their own goes on.
func TestBudgetRefusesWithoutCallingTheModel(t *testing.T) {
	drivers(t, func(t *testing.T, open func() *store.DB) {
		db := open()
		c := newClock(t0) // 09:00 UTC
		ag := &llmtest.Spender{}
		// Each turn of "hello" costs (5+7)/1000 = 0.012.
		p := Policy{MaxHistory: 10, Budget: BudgetPolicy{Default: Budget{CostPerDay: 0.02},
			Users: map[string]Budget{"websocket:vip": {CostPerDay: 1}}}}
		m := newManager(t, db, ag, c, map[string]Policy{"websocket": p})

		for i := range 2 {
			if out := handle(t, m, msg("websocket:ann", "hello")); out.Reply.Status != MsgOK {
				t.Fatalf("turn %d: %+v, want answered (under budget)", i, out.Reply)
			}
		}
		calls := ag.Calls()
		out := handle(t, m, msg("websocket:ann", "third"))
		if out.Reply.Status != MsgFailed || !strings.HasPrefix(out.Reply.Error, OverBudgetPrefix+"cost_per_day") {
			t.Fatalf("over budget: %+v, want the budget reply", out.Reply)
		}
		if !strings.Contains(out.Reply.Text, "today's spending limit") || !strings.Contains(out.Reply.Text, "Wed 11 Mar 00:00 UTC") || !strings.Contains(out.Reply.Text, "15 h 0 min") {
			t.Fatalf("budget reply %q: want the limit and when it resets", out.Reply.Text)
		}
		if got := ag.Calls(); got != calls {
			t.Fatalf("the model was called %d more times for a user over budget", got-calls)
		}
		tr := transcript(t, db, out.ConversationID)
		if u := tr[len(tr)-2]; u.Role != agent.RoleUser || u.Content != "third" {
			t.Fatalf("the refused message is not kept: %+v", u)
		}
		for range 2 {
			if out := handle(t, m, msg("websocket:vip", "hello")); out.Reply.Status != MsgOK {
				t.Fatalf("a user with a budget of their own: %+v", out.Reply)
			}
		}
		if out := handle(t, m, msg("websocket:bob", "hello")); out.Reply.Status != MsgOK {
			t.Fatalf("another user: %+v", out.Reply)
		}
		st, err := m.Standing().Usage(context.Background(), "websocket", "websocket:ann")
		if err != nil {
			t.Fatal(err)
		}
		if st.Day.Turns != 2 || math.Abs(st.Day.Cost-0.024) > 1e-9 || st.Over() != "cost_per_day" || !st.DayEnds.Equal(time.Date(2026, 3, 11, 0, 0, 0, 0, time.UTC)) {
			t.Fatalf("standing %+v", st)
		}

		c.Advance(15 * time.Hour) // 00:00 the next day
		if out := handle(t, m, msg("websocket:ann", "next day")); out.Reply.Status != MsgOK || ag.Calls() != calls+4 {
			t.Fatalf("the next day: %+v (%d calls), want answered", out.Reply, ag.Calls()-calls)
		}
		st, err = m.Standing().Usage(context.Background(), "websocket", "websocket:ann")
		if err != nil {
			t.Fatal(err)
		}
		if st.Day.Turns != 1 || st.Month.Turns != 3 {
			t.Fatalf("standing the next day %+v, want 1 turn today and 3 this month", st)
		}
	})
}

// TestBudgetRaisedLive: a user over budget is answered again once the
// policy gives them more, without a restart (the reload path).
func TestBudgetRaisedLive(t *testing.T) {
	db := openStore(t, store.DriverSQLite, t.TempDir()+"/b.db")
	c := newClock(t0)
	p := Policy{MaxHistory: 10, Budget: BudgetPolicy{Default: Budget{TokensPerDay: 10}}}
	m := newManager(t, db, &llmtest.Spender{}, c, map[string]Policy{"websocket": p})
	handle(t, m, msg("websocket:ann", "hello"))
	if out := handle(t, m, msg("websocket:ann", "hello")); !strings.HasPrefix(out.Reply.Error, OverBudgetPrefix+"tokens_per_day") {
		t.Fatalf("over tokens_per_day: %+v", out.Reply)
	}
	p.Budget.Users = map[string]Budget{"websocket:ann": {TokensPerDay: 1000}}
	m.Reconfigure(Settings{Policies: map[string]Policy{"websocket": p}})
	if out := handle(t, m, msg("websocket:ann", "hello")); out.Reply.Status != MsgOK {
		t.Fatalf("after the limit was raised: %+v", out.Reply)
	}
}

// TestBudgetHoldsAcrossReplicas: two replicas on one PostgreSQL database
// see each other's spend — the turn that crosses the budget on one is
// the last either answers that day.
func TestBudgetHoldsAcrossReplicas(t *testing.T) {
	dsn := postgresDSN(t)
	c := newClock(t0)
	p := map[string]Policy{"websocket": {MaxHistory: 10, Budget: BudgetPolicy{Default: Budget{CostPerDay: 0.02}}}}
	a := newManager(t, openStore(t, store.DriverPostgres, dsn), &llmtest.Spender{}, c, p)
	b := newManager(t, openStore(t, store.DriverPostgres, dsn), &llmtest.Spender{}, c, p)
	if out := handle(t, a, msg("websocket:ann", "hello")); out.Reply.Status != MsgOK {
		t.Fatalf("first turn, on a: %+v", out.Reply)
	}
	if out := handle(t, b, msg("websocket:ann", "hello")); out.Reply.Status != MsgOK {
		t.Fatalf("second turn, on b (0.012 of 0.02 spent): %+v", out.Reply)
	}
	for name, m := range map[string]*Manager{"a": a, "b": b} {
		if out := handle(t, m, msg("websocket:ann", "hello")); !strings.HasPrefix(out.Reply.Error, OverBudgetPrefix) {
			t.Fatalf("on %s after 0.024 spent: %+v, want the budget reply", name, out.Reply)
		}
	}
}
