package config

import (
	"slices"
	"testing"
)

// TestSamePolicies: two files resolve to the same policies when every
// value is the same, wherever it is written; any value of a policy that
// differs — budgets, a user's budget and tool lists included — makes them
// differ.
func TestSamePolicies(t *testing.T) {
	const base = "session:\n  max_history: 10\n  limits:\n    tokens_per_day: 100\n    users:\n      websocket:ann: {cost_per_day: 1}\n"
	for _, tt := range []struct {
		name, other string
		same        bool
	}{
		{"the same file", base, true},
		{"moved to other lines", "\n\nsession:\n  limits:\n    users:\n      websocket:ann: {cost_per_day: 1}\n    tokens_per_day: 100\n  max_history: 10\n", true},
		{"a channel's own, equal", base + "channels:\n  websocket:\n    session:\n      limits: {tokens_per_day: 100}\n", true},
		{"max_history", "session:\n  max_history: 11\n  limits:\n    tokens_per_day: 100\n    users:\n      websocket:ann: {cost_per_day: 1}\n", false},
		{"tokens_per_day raised", "session:\n  max_history: 10\n  limits:\n    tokens_per_day: 200\n    users:\n      websocket:ann: {cost_per_day: 1}\n", false},
		{"a user's budget lowered", "session:\n  max_history: 10\n  limits:\n    tokens_per_day: 100\n    users:\n      websocket:ann: {cost_per_day: 0.5}\n", false},
		{"a user's budget taken away", "session:\n  max_history: 10\n  limits:\n    tokens_per_day: 100\n", false},
		{"a channel's budget", base + "channels:\n  telegram:\n    session:\n      limits: {cost_per_month: 3}\n", false},
	} {
		a, b := mustParse(t, base), mustParse(t, tt.other)
		if got := SamePolicies(a.Policies(), b.Policies()); got != tt.same {
			t.Errorf("%s: SamePolicies = %t, want %t", tt.name, got, tt.same)
		}
	}
	const servers = "agent:\n  tools:\n    servers:\n      - {name: notes, url: http://127.0.0.1:1/mcp}\n"
	a, b := mustParse(t, servers), mustParse(t, servers+"channels:\n  telegram:\n    session:\n      tools: []\n")
	if SamePolicies(a.Policies(), b.Policies()) {
		t.Error("a channel's tools taken away: SamePolicies = true, want false")
	}
}

func TestKeysAndLookup(t *testing.T) {
	keys := Keys()
	for _, want := range []string{"gateway.listen", "session.limits.tokens_per_day", "session.limits.users", "channels.telegram.session.limits.users", "agent.models", "log.level"} {
		if !slices.Contains(keys, want) {
			t.Errorf("Keys() lacks %s", want)
		}
	}
	c := mustParse(t, "session:\n  limits:\n    tokens_per_day: 7\nlocks:\n  max_entries: 5\n")
	for path, want := range map[string]any{
		"session.limits.tokens_per_day":                    int64(7),
		"session.limits.cost_per_day":                      nil,
		"locks.max_entries":                                5,
		"channels.websocket.session.limits.tokens_per_day": nil,
	} {
		if got, ok := c.Lookup(path); !ok || got != want {
			t.Errorf("Lookup(%s) = %v, %t; want %v", path, got, ok, want)
		}
	}
	if _, ok := c.Lookup("session.limits.nope"); ok {
		t.Error("Lookup of a key that does not exist is ok")
	}
}
