package config

import (
	"strings"
	"testing"
)

const limitsYAML = `
session:
  limits:
    tokens_per_day: 100000
    cost_per_day: 0.5
    users:
      "telegram:dm:42": {cost_per_day: 2}
channels:
  telegram:
    token: "123456:abcdefghijklmnop"
    session:
      limits:
        cost_per_month: 10
        users:
          "telegram:dm:42": {tokens_per_day: 5000}
`

func TestLimitsLadder(t *testing.T) {
	c := mustParse(t, limitsYAML)
	ws, tg := c.Policy(ChannelWebSocket), c.Policy(ChannelTelegram)
	if ws.Budget.TokensPerDay.V != 100000 || ws.Budget.CostPerDay.V != 0.5 || ws.Budget.CostPerMonth.V != 0 {
		t.Fatalf("websocket budget %+v", ws.Budget)
	}
	if tg.Budget.CostPerMonth.V != 10 || tg.Budget.CostPerDay.V != 0.5 || !strings.HasPrefix(tg.Budget.CostPerMonth.From, "channels.telegram.session.limits.cost_per_month (bot.yaml:") {
		t.Fatalf("telegram budget %+v", tg.Budget)
	}
	u := tg.UserBudgets["telegram:dm:42"]
	// tokens from the channel's users, cost_per_day from the top level's
	// users, cost_per_month from the channel.
	if u.TokensPerDay.V != 5000 || u.CostPerDay.V != 2 || u.CostPerMonth.V != 10 {
		t.Fatalf("user budget %+v", u)
	}
	if !strings.HasPrefix(u.TokensPerDay.From, "channels.telegram.session.limits.users.telegram:dm:42.tokens_per_day (bot.yaml:") ||
		!strings.HasPrefix(u.CostPerDay.From, "session.limits.users.telegram:dm:42.cost_per_day (bot.yaml:") ||
		u.CostPerMonth.From != tg.Budget.CostPerMonth.From {
		t.Fatalf("user budget provenance %+v", u)
	}
	if w := ws.UserBudgets["telegram:dm:42"]; w.CostPerDay.V != 2 || w.TokensPerDay.V != 100000 {
		t.Fatalf("the top level's user on websocket: %+v", w)
	}

	var out strings.Builder
	c.Describe(&out)
	for _, want := range []string{
		"limits.cost_per_month  10",
		"user telegram:dm:42 limits.tokens_per_day  5000",
		"session.limits.tokens_per_day (bot.yaml:3)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("gateway check does not say %q:\n%s", want, out.String())
		}
	}
}

func TestNoLimitsPrintNothing(t *testing.T) {
	c := mustParse(t, "session:\n  max_history: 5\n")
	var out strings.Builder
	c.Describe(&out)
	if strings.Contains(out.String(), "limits.") {
		t.Fatalf("no budget configured, yet gateway check prints one:\n%s", out.String())
	}
}

func TestLimitsRefuseNegatives(t *testing.T) {
	_, err := parse(t, `
session:
  limits:
    cost_per_day: -1
channels:
  websocket:
    session:
      limits:
        users:
          "websocket:ann": {tokens_per_day: -5}
`)
	if err == nil {
		t.Fatal("negative budgets accepted")
	}
	for _, want := range []string{"bot.yaml:3", "session.limits.cost_per_day", "channels.websocket.session.limits.users.websocket:ann.tokens_per_day", "must be 0 or more"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}
