package telegram

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestSplit(t *testing.T) {
	word := "lorem ipsum dolor sit amet 🦀🚀 consectetur 漢字 "
	var b strings.Builder
	for b.Len() < 9000*2 && utf16Len(b.String()) < 9000 {
		b.WriteString(word)
		if b.Len()%7 == 0 {
			b.WriteString("\n")
		}
	}
	text := strings.TrimSpace(b.String())
	parts := Split(text, MaxMessageUnits)
	if len(parts) < 3 {
		t.Fatalf("%d parts for %d units", len(parts), utf16Len(text))
	}
	for i, p := range parts {
		if n := utf16Len(p); n > MaxMessageUnits || n == 0 {
			t.Fatalf("part %d has %d UTF-16 units", i, n)
		}
		if !utf8.ValidString(p) {
			t.Fatalf("part %d is not valid UTF-8: a character was cut", i)
		}
		if i < len(parts)-1 && utf16Len(p) < MaxMessageUnits/2 {
			t.Fatalf("part %d is only %d units: cut too early", i, utf16Len(p))
		}
	}
	checkParts(t, text, parts)
}

// checkParts checks that parts are text, byte for byte, cut at spaces or
// line breaks: each part is the text's next bytes exactly, and between two
// parts exactly one space or line break was dropped.
func checkParts(t *testing.T, text string, parts []string) {
	t.Helper()
	rest := text
	for i, p := range parts {
		if !strings.HasPrefix(rest, p) {
			t.Fatalf("part %d is not the text's next %d bytes: %q…", i, len(p), p[:min(len(p), 40)])
		}
		rest = rest[len(p):]
		if i == len(parts)-1 {
			break
		}
		if rest == "" || (rest[0] != ' ' && rest[0] != '\n') {
			t.Fatalf("cut after part %d is not at a space or line break: %q", i, rest[:min(len(rest), 10)])
		}
		rest = rest[1:]
	}
	if rest != "" {
		t.Fatalf("%d bytes of the text are in no part", len(rest))
	}
}

func TestSplitEdgeCases(t *testing.T) {
	if got := Split("", 10); len(got) != 1 || got[0] != "" {
		t.Fatalf("empty = %q", got)
	}
	if got := Split("short", 10); len(got) != 1 || got[0] != "short" {
		t.Fatalf("short = %q", got)
	}
	// No spaces at all: a hard cut between characters; an emoji (two
	// units) never straddles the limit.
	got := Split(strings.Repeat("🦀", 5), 3)
	if strings.Join(got, "|") != "🦀|🦀|🦀|🦀|🦀" {
		t.Fatalf("emoji cut = %q", got)
	}
	got = Split("aaaa bbbb\ncccc dddd", 12)
	if strings.Join(got, "|") != "aaaa bbbb|cccc dddd" {
		t.Fatalf("line break preferred: %q", got)
	}
}
