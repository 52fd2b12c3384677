package telegramtest

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	tgbotapi "github.com/go-telegram-bot-api/telegram-bot-api/v5"
)

func TestCheckHTML(t *testing.T) {
	good := []string{
		"",
		"plain text",
		"<b>bold <i>italic bold <s>strike</s> <u>under</u></i></b>",
		"<strong>a</strong><em>b</em><ins>c</ins><strike>d</strike><del>e</del><tg-spoiler>f</tg-spoiler>",
		`<span class="tg-spoiler">hidden</span>`,
		`<a href="http://www.example.com/?a=1&amp;b=2">link</a>`,
		`<a href='tg://user?id=123'>mention</a>`,
		"<code>x &lt; y &amp;&amp; z &gt; 0 &quot;q&quot;</code>",
		"<pre>block\nof code</pre>",
		`<pre><code class="language-python">print(1)</code></pre>`,
		"<blockquote>quote <b>bold</b> <code>c</code></blockquote>",
		"<blockquote expandable>long</blockquote>",
		"&#65;&#x42;&#X1F600; done",
		"<B>upper-case tags</B>",
		`he said "hi"`,
	}
	for _, s := range good {
		if err := CheckHTML(s); err != nil {
			t.Errorf("CheckHTML(%q) = %v, want nil", s, err)
		}
	}
	bad := []string{
		"a < b",
		"a > b",
		"fish & chips",
		"&nbsp;",
		"&#0;",
		"&#xD800;",
		"&#x110000;",
		"&amp",
		"<b>unclosed",
		"closed</b>",
		"<b><i>crossed</b></i>",
		"<p>paragraph</p>",
		"<br>",
		"<b/>",
		"<!-- comment -->",
		`<b class="x">bold</b>`,
		"<a>no href</a>",
		`<a href="x" target="_blank">extra</a>`,
		`<a href=unquoted>x</a>`,
		`<a href="a<b">x</a>`,
		`<span>plain span</span>`,
		`<span class="other">x</span>`,
		`<code class="language-go">standalone</code>`,
		`<pre><code class="python">x</code></pre>`,
		"<code><b>bold in code</b></code>",
		"<pre><i>italic in pre</i></pre>",
		"<b><code>code in bold</code></b>",
		`<a href="http://x"><code>code in link</code></a>`,
		`<a href="http://x"><a href="http://y">link in link</a></a>`,
		"<blockquote><blockquote>nested</blockquote></blockquote>",
		`<pre>text <code class="language-go">and code</code></pre>`,
		"<script>alert(1)</script>",
		"\xff\xfe",
	}
	for _, s := range bad {
		if err := CheckHTML(s); err == nil {
			t.Errorf("CheckHTML(%q) = nil, want an error", s)
		}
	}
}

// TestSendMessageParseMode checks that the fake refuses what Telegram
// refuses, through the real client library: HTML that fails CheckHTML gets
// 400 "can't parse entities" and is not taken; valid HTML and plain text
// are taken with their parse_mode recorded; FailParse refuses valid HTML.
func TestSendMessageParseMode(t *testing.T) {
	a, api := newClient(t)
	send := func(text, mode string) error {
		msg := tgbotapi.NewMessage(5, text)
		msg.ParseMode = mode
		_, err := api.Send(msg)
		return err
	}
	refused := func(err error) bool {
		var apiErr *tgbotapi.Error
		return errors.As(err, &apiErr) && apiErr.Code == 400 && strings.HasPrefix(apiErr.Message, "Bad Request: can't parse entities: ")
	}
	if err := send("<b>unclosed", "HTML"); !refused(err) {
		t.Fatalf("invalid HTML: %v, want 400 can't parse entities", err)
	}
	if err := send("<b>unclosed", ""); err != nil {
		t.Fatalf("the same as plain text: %v", err)
	}
	if err := send("<b>bold</b> &amp; more", "HTML"); err != nil {
		t.Fatalf("valid HTML: %v", err)
	}
	a.FailParse(1)
	if err := send("<b>bold</b>", "HTML"); !refused(err) {
		t.Fatalf("FailParse: %v, want 400 can't parse entities", err)
	}
	if err := send("<b>bold</b>", "HTML"); err != nil {
		t.Fatalf("after FailParse ran out: %v", err)
	}
	got := a.Messages()
	want := []Sent{{ChatID: 5, Text: "<b>unclosed"}, {ChatID: 5, Text: "<b>bold</b> &amp; more"}, {ChatID: 5, Text: "<b>bold</b>"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("sent %+v, want %+v", got, want)
	}
	if modes := a.ParseModes(); !reflect.DeepEqual(modes, []string{"", "HTML", "HTML"}) {
		t.Fatalf("parse modes %q", modes)
	}
}
