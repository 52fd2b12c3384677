package config

import (
	"strings"
	"testing"
)

// TestCompactionLadder: enabled, keep_last and prompt follow the
// max_history ladder per channel; keep_last defaults to, and never goes
// above, max_history; max_history_tokens defaults to no budget.
func TestCompactionLadder(t *testing.T) {
	c := mustParse(t, `
session:
  max_history: 30
  max_history_tokens: 6000
  compaction:
    enabled: true
    model: small-model
channels:
  telegram:
    session:
      compaction:
        keep_last: 50
        prompt: "Summarise."
  websocket:
    session:
      max_history_tokens: 0
      compaction:
        enabled: false
`)
	tg, ws := c.Policy(ChannelTelegram), c.Policy(ChannelWebSocket)
	for _, tt := range []struct {
		name      string
		got, want any
		from      string
		wantFrom  string
	}{
		{"telegram enabled", tg.CompactionEnabled.V, true, tg.CompactionEnabled.From, "session.compaction.enabled (bot.yaml:5)"},
		{"telegram keep_last", tg.CompactionKeepLast.V, 30, tg.CompactionKeepLast.From, "channels.telegram.session.compaction.keep_last (bot.yaml:11), lowered to max_history"},
		{"telegram prompt", tg.CompactionPrompt.V, "Summarise.", tg.CompactionPrompt.From, "channels.telegram.session.compaction.prompt (bot.yaml:12)"},
		{"telegram tokens", tg.MaxHistoryTokens.V, 6000, tg.MaxHistoryTokens.From, "session.max_history_tokens (bot.yaml:3)"},
		{"websocket enabled", ws.CompactionEnabled.V, false, ws.CompactionEnabled.From, "channels.websocket.session.compaction.enabled (bot.yaml:17)"},
		{"websocket keep_last", ws.CompactionKeepLast.V, 30, ws.CompactionKeepLast.From, "default: max_history"},
		{"websocket prompt", ws.CompactionPrompt.V, "", ws.CompactionPrompt.From, "default"},
		{"websocket tokens", ws.MaxHistoryTokens.V, 0, ws.MaxHistoryTokens.From, "channels.websocket.session.max_history_tokens (bot.yaml:15)"},
	} {
		if tt.got != tt.want || tt.from != tt.wantFrom {
			t.Errorf("%s = %v from %q, want %v from %q", tt.name, tt.got, tt.from, tt.want, tt.wantFrom)
		}
	}
	var out strings.Builder
	c.Describe(&out)
	_, tgText, _ := strings.Cut(out.String(), "channel telegram")
	for _, row := range [][3]string{
		{"compaction.enabled", "true", "session.compaction.enabled (bot.yaml:5)"},
		{"compaction.keep_last", "30", "channels.telegram.session.compaction.keep_last (bot.yaml:11), lowered to max_history"},
		{"compaction.prompt", `"Summarise."`, "channels.telegram.session.compaction.prompt (bot.yaml:12)"},
		{"compaction.model", "small-model", "session.compaction.model (bot.yaml:6)"},
		{"max_history_tokens", "6000", "session.max_history_tokens (bot.yaml:3)"},
	} {
		if !hasRow(tgText, row[0], row[1], row[2]) {
			t.Errorf("gateway check lacks %v in\n%s", row, tgText)
		}
	}
}

func TestCompactionErrors(t *testing.T) {
	_, err := Parse([]byte(`
session:
  max_history_tokens: -1
  compaction:
    keep_last: 0
    prompt: "  "
channels:
  telegram:
    session:
      compaction:
        model: other
`), "bot.yaml", env(map[string]string{}))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		"bot.yaml:3: session.max_history_tokens: must be 0 or more (0: no token budget), got -1",
		"bot.yaml:5: session.compaction.keep_last: must be at least 1, got 0",
		"bot.yaml:6: session.compaction.prompt: must not be empty (leave it out for the built-in prompt)",
		"bot.yaml:11: channels.telegram.session.compaction.model: is a setting of the top-level session only",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("errors lack %q:\n%v", want, err)
		}
	}
}
