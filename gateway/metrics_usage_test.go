package gateway

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/storetest"
)

// pricedEcho answers like the echo and reports 10 prompt and 4
// completion tokens at 0.5 each, from model "m1".
type pricedEcho struct{}

func (pricedEcho) Name() string  { return "priced" }
func (pricedEcho) Model() string { return "m1" }
func (pricedEcho) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	r, err := agent.Echo{}.Reply(ctx, req, onDelta)
	r.Usage, r.Cost, r.Model = agent.Usage{PromptTokens: 10, CompletionTokens: 4, TotalTokens: 14}, 7, "m1"
	return r, err
}

// The token and cost counters add what stored turns spent, by channel and
// model; a budget's refusals are counted by the budget.
func TestMetricsCountSpendAndRefusals(t *testing.T) {
	m := NewMetrics()
	mgr := sessions.New(storetest.SQLite(t), pricedEcho{}, sessions.Options{Logger: quiet, Observer: m,
		Policies: map[string]sessions.Policy{Channel: {MaxHistory: 10, Budget: sessions.BudgetPolicy{Default: sessions.Budget{CostPerDay: 14}}}}})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		mgr.Shutdown(ctx)
	})
	for _, text := range []string{"one", "two", "three"} {
		if _, err := mgr.Handle(context.Background(), sessions.Inbound{Channel: Channel, SessionKey: "websocket:ann", Text: text}, sessions.Hooks{}); err != nil {
			t.Fatal(err)
		}
	}
	text := scrape(t, m)
	for _, want := range []string{
		`chatgate_model_tokens_total{channel="websocket",kind="prompt",model="m1"} 20`,
		`chatgate_model_tokens_total{channel="websocket",kind="completion",model="m1"} 8`,
		`chatgate_model_cost_total{channel="websocket",model="m1"} 14`,
		`chatgate_budget_refusals_total{budget="cost_per_day",channel="websocket"} 1`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
