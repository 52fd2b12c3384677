package tgformat

import (
	"fmt"
	"html"
	"strings"
	"testing"

	"github.com/chatgate/chatgate/internal/telegramtest"
)

// visible is the text Telegram shows for valid HTML: tags dropped,
// entities decoded.
func visible(h string) string {
	var b strings.Builder
	for i := 0; i < len(h); i++ {
		if h[i] == '<' {
			i += strings.IndexByte(h[i:], '>')
			continue
		}
		b.WriteByte(h[i])
	}
	return html.UnescapeString(b.String())
}

// checkParts checks what every split must keep: each part valid on its
// own, within the limit, its Plain what its HTML shows, and the parts
// together the whole reply. At limits so small that whitespace alone
// fills a part (left out, as Telegram refuses an empty message), only the
// visible characters are compared.
func checkParts(t *testing.T, md string, limit int, parts []Part) {
	t.Helper()
	var joined strings.Builder
	for i, p := range parts {
		if err := telegramtest.CheckHTML(p.HTML); err != nil {
			t.Fatalf("part %d of %d is refused: %v\n%q", i, len(parts), err, p.HTML)
		}
		if n := Units(p.Plain); n > limit {
			t.Fatalf("part %d has %d units of text, limit %d", i, n, limit)
		}
		if v := visible(p.HTML); v != p.Plain {
			t.Fatalf("part %d: Plain %q, but its HTML shows %q", i, p.Plain, v)
		}
		if strings.TrimSpace(p.Plain) == "" {
			t.Fatalf("part %d is empty: %q", i, p.HTML)
		}
		joined.WriteString(p.Plain)
	}
	whole, got := visible(HTML(md)), joined.String()
	if limit < 10 {
		whole, got = strings.Join(strings.Fields(whole), ""), strings.Join(strings.Fields(got), "")
	}
	if strings.TrimSpace(got) != strings.TrimSpace(whole) {
		t.Fatalf("the parts show %d bytes, the whole %d:\n%q\n%q", len(got), len(whole), got, whole)
	}
}

// longReply is a reply of about n characters: paragraphs with markup, a
// list, and Go code blocks of 100 lines, longer than a message, so that
// they are cut inside.
func longReply(n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "Paragraph %d has **bold**, _italic_, `a<b>&c` and a [link](https://x.org/a_(b)?q=1&r=2). ", i)
		b.WriteString("More words follow here so the paragraph wraps a few lines in any client 😀.\n\n")
		b.WriteString("- item one\n- item two\n  - nested <item>\n\n")
		b.WriteString("```go\n")
		for l := 0; l < 100; l++ {
			fmt.Fprintf(&b, "\tif x%d < y && z > 0 { fmt.Println(\"<tag>&amp;\", %d) }\n", l, l)
		}
		b.WriteString("```\n\n")
	}
	return b.String()
}

func TestSplitLongReply(t *testing.T) {
	md := longReply(10000)
	if len(md) < 10000 {
		t.Fatalf("reply of %d bytes", len(md))
	}
	parts := Split(md, 4096)
	if len(parts) < 3 {
		t.Fatalf("%d parts for %d units of text", len(parts), Units(visible(HTML(md))))
	}
	checkParts(t, md, 4096, parts)
	// A part cut inside a code block closes it, and the next reopens it
	// in the same language.
	reopened := 0
	for i := 1; i < len(parts); i++ {
		if strings.HasPrefix(parts[i].HTML, `<pre><code class="language-go">`) {
			if strings.HasSuffix(parts[i-1].HTML, "</code></pre>") {
				reopened++
			}
		}
	}
	if reopened == 0 {
		t.Fatalf("no part goes on inside a code block; starts: %q", starts(parts))
	}
	// The cut inside a code block is at the end of a line.
	for i := 1; i < len(parts); i++ {
		if strings.HasPrefix(parts[i].HTML, "<pre>") && !strings.HasSuffix(parts[i-1].Plain, "\n") {
			t.Fatalf("part %d ends inside a line of code: …%q", i-1, tail(parts[i-1].Plain))
		}
	}
	// Every part but the last is at least half full.
	for i, p := range parts[:len(parts)-1] {
		if Units(p.Plain) < 2048 {
			t.Fatalf("part %d has only %d units", i, Units(p.Plain))
		}
	}
}

func tail(s string) string { return s[max(len(s)-60, 0):] }

func starts(parts []Part) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p.HTML[:min(len(p.HTML), 40)])
	}
	return out
}

// TestSplitPrefersBlocks: a cut falls where a block ends rather than
// inside the paragraph that follows.
func TestSplitPrefersBlocks(t *testing.T) {
	md := strings.Repeat("word ", 30) + "\n\n" + strings.Repeat("more ", 10)
	parts := Split(md, 190)
	if len(parts) != 2 || parts[0].Plain != strings.Repeat("word ", 29)+"word\n\n" {
		t.Fatalf("parts %q", parts)
	}
	checkParts(t, md, 190, parts)
}

// TestSplitSmallLimits cuts every kind of Markdown at many small limits.
func TestSplitSmallLimits(t *testing.T) {
	md := "# Head *x*\n\n> quote **b `c` d** [l](https://e.org)\n\n1. one\n2. two 😀😀😀\n   - n\n\n" +
		"| a | b |\n|---|---|\n| 1 | 2 |\n\n```rust\nfn main() { println!(\"<>&\"); }\n```\n\n<b>raw</b> ~~s~~ ***bi***"
	for limit := 2; limit < 80; limit++ {
		checkParts(t, md, limit, Split(md, limit))
	}
}

// TestSplitEmoji: a character outside the BMP counts two units and is
// never cut in half.
func TestSplitEmoji(t *testing.T) {
	md := strings.Repeat("😀", 10)
	parts := Split(md, 5)
	if len(parts) != 5 || parts[0].Plain != "😀😀" {
		t.Fatalf("parts %q", parts)
	}
	checkParts(t, md, 5, parts)
}

func FuzzHTML(f *testing.F) {
	for _, s := range []string{"**a", "```go\n<x>", "[a](javascript:x)", "| a |\n|--|\n| <b> |",
		"> > q\n- l\n  1. m", "&#0; &amp; \\& <!-- c -->", "`a\nb`", "*a **b** c*", "![i](http://x/\"y)", longReply(3000)} {
		f.Add(s, uint16(100))
	}
	f.Fuzz(func(t *testing.T, md string, limit uint16) {
		l := int(limit)%5000 + 2
		h := HTML(md)
		if err := telegramtest.CheckHTML(h); err != nil {
			t.Fatalf("HTML(%q) = %q: %v", md, h, err)
		}
		for i, p := range Split(md, l) {
			if err := telegramtest.CheckHTML(p.HTML); err != nil {
				t.Fatalf("part %d of %q at limit %d = %q: %v", i, md, l, p.HTML, err)
			}
			if Units(p.Plain) > l {
				t.Fatalf("part %d has %d units, limit %d", i, Units(p.Plain), l)
			}
		}
	})
}
