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
	var rejoined []string
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
		rejoined = append(rejoined, p)
	}
	// Cuts fall on spaces or line breaks, which are the only bytes dropped.
	joined := strings.Join(rejoined, "")
	strip := strings.NewReplacer(" ", "", "\n", "")
	if strip.Replace(joined) != strip.Replace(text) {
		t.Fatal("splitting lost or changed text")
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
