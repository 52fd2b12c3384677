package tgformat

import (
	"testing"

	"github.com/chatgate/chatgate/internal/telegramtest"
)

// TestHTML converts Markdown cases and checks each result with the strict
// checker of Telegram's HTML, and against the expected HTML.
func TestHTML(t *testing.T) {
	for _, tc := range []struct{ name, md, want string }{
		{"plain", "just text", "just text"},
		{"escaping", "a < b && c > d", "a &lt; b &amp;&amp; c &gt; d"},
		{"nested emphasis", "***both*** and **bold _italic_ ~~gone~~**",
			"<i><b>both</b></i> and <b>bold <i>italic</i> <s>gone</s></b>"},
		{"inline code with markup", "run `<tag>&amp;` now", "run <code>&lt;tag&gt;&amp;amp;</code> now"},
		{"code in bold leaves the bold", "**a `c` b**", "<b>a </b><code>c</code><b> b</b>"},
		{"fenced code with language", "```go\nif a < b && c {\n\tfmt.Println(\"<tag>&\")\n}\n```",
			"<pre><code class=\"language-go\">if a &lt; b &amp;&amp; c {\n\tfmt.Println(\"&lt;tag&gt;&amp;\")\n}</code></pre>"},
		{"fenced code without language", "```\nx\n```", "<pre>x</pre>"},
		{"odd language dropped", "```go\" onclick=\"x\ny\n```", "<pre>y</pre>"},
		{"indented code", "text\n\n    indented <code>\n", "text\n\n<pre>indented &lt;code&gt;</pre>"},
		{"unclosed fence is code", "look:\n```py\nprint(1)\n", "look:\n\n<pre><code class=\"language-py\">print(1)</code></pre>"},
		{"link with parentheses", "[Go](https://en.wikipedia.org/wiki/Go_(programming_language))",
			`<a href="https://en.wikipedia.org/wiki/Go_(programming_language)">Go</a>`},
		{"link with & and quote", `[q](<http://x.com/?a=1&b="2">)`, `<a href="http://x.com/?a=1&amp;b=%222%22">q</a>`},
		{"javascript link is text", "[click](javascript:alert(1)) me", "click me"},
		{"relative link is text", "[doc](/docs/x)", "doc"},
		{"mailto and tg links", "[m](mailto:a@b.c) [u](tg://user?id=1)", `<a href="mailto:a@b.c">m</a> <a href="tg://user?id=1">u</a>`},
		{"autolinks", "<https://go.dev> <a@b.c>", `<a href="https://go.dev">https://go.dev</a> <a href="mailto:a@b.c">a@b.c</a>`},
		{"code in a link is its text", "[`f()`](https://x.org)", `<a href="https://x.org">f()</a>`},
		{"image is its description, linked", "![a cat](https://x.org/cat.png)", `<a href="https://x.org/cat.png">a cat</a>`},
		{"unbalanced bold", "**bold but never closed", "**bold but never closed"},
		{"unbalanced bold inside", "a **b *c** d", "a *<i>b <i>c</i></i> d"},
		{"heading", "# Title *x*\n\ntext", "<b>Title <i>x</i></b>\n\ntext"},
		{"bullet list nested", "- one\n- two\n  - inner\n  - more\n- three",
			"• one\n• two\n  • inner\n  • more\n• three"},
		{"ordered list", "3. c\n4. d\n\n   second paragraph", "3. c\n\n4. d\n   second paragraph"},
		{"quote", "> quoted **bold**\n> > inner", "<blockquote>quoted <b>bold</b>\n\ninner</blockquote>"},
		{"thematic break", "a\n\n---\n\nb", "a\n\n———\n\nb"},
		{"hard and soft breaks", "one  \ntwo\nthree", "one\ntwo\nthree"},
		{"raw HTML is text", "<b>hi</b> <script>alert(1)</script>", "&lt;b&gt;hi&lt;/b&gt; &lt;script&gt;alert(1)&lt;/script&gt;"},
		{"HTML block is text", "<div onclick=\"x()\">\nhi\n</div>", "&lt;div onclick=\"x()\"&gt;\nhi\n&lt;/div&gt;"},
		{"entities and escapes", `&amp; &copy; &#65; \*not em\* &nbsp;x`, "&amp; © A *not em* \u00a0x"},
		{"table", "| name | n |\n|:--|--:|\n| apple | 3 |\n| kiwi <b> | 12 |",
			"<pre>name     |  n\n---------|---\napple    |  3\nkiwi &lt;b&gt; | 12</pre>"},
		{"only spaces", "   ", "   "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := HTML(tc.md)
			if err := telegramtest.CheckHTML(got); err != nil {
				t.Fatalf("HTML(%q) = %q, which Telegram refuses: %v", tc.md, got, err)
			}
			if got != tc.want {
				t.Fatalf("HTML(%q)\n got %q\nwant %q", tc.md, got, tc.want)
			}
			parts := Split(tc.md, 4096)
			if len(parts) != 1 || parts[0].HTML != got {
				t.Fatalf("Split of a short text = %+v, want one part of %q", parts, got)
			}
		})
	}
}
