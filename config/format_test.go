package config

import (
	"strings"
	"testing"
)

// TestTelegramFormat: format defaults to html, takes plain, and refuses
// anything else with the file and line.
func TestTelegramFormat(t *testing.T) {
	c, err := parse(t, "channels:\n  telegram:\n    group_scope: user\n")
	if err != nil || c.Channels.Telegram.Format != "html" {
		t.Fatalf("default format %q (%v), want html", c.Channels.Telegram.Format, err)
	}
	c, err = parse(t, "channels:\n  telegram:\n    format: plain\n")
	if err != nil || c.Channels.Telegram.Format != "plain" {
		t.Fatalf("format %q (%v), want plain", c.Channels.Telegram.Format, err)
	}
	_, err = parse(t, "channels:\n  telegram:\n    format: markdown\n")
	want := `bot.yaml:3: channels.telegram.format: "markdown" is not one of [html plain]`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want %q", err, want)
	}
}
