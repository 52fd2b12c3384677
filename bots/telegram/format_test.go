package telegram

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/bots/telegram/tgformat"
	"github.com/chatgate/chatgate/internal/telegramtest"
	"github.com/chatgate/chatgate/sessions"
)

const markdownReply = "**Hi** <you> & friends: `a<b>&c` and [docs](https://go.dev/doc/(x)).\n\n" +
	"```go\nif a < b && c > d {\n}\n```\n\n- one\n- two"

// replyTurn is the stored turn the reply to the first message of key
// belongs to.
func replyTurn(t *testing.T, h *harness, key string) *sessions.Turn {
	t.Helper()
	rows := transcript(t, h, key)
	for _, r := range rows {
		if r.Role == agent.RoleAssistant {
			turn, err := h.db.TurnAt(context.Background(), r.ConversationID, r.ReplyTo)
			if err != nil || turn == nil {
				t.Fatalf("turn of %+v: %v", r, err)
			}
			return turn
		}
	}
	t.Fatalf("no reply stored: %+v", rows)
	return nil
}

// TestMarkdownReplyIsHTML: a reply in Markdown goes with parse_mode HTML,
// as the conversion of the stored text, valid for Telegram; the bot's own
// texts (help) go as written, without a parse mode.
func TestMarkdownReplyIsHTML(t *testing.T) {
	api := telegramtest.New(t)
	start(t, api, t.TempDir(), setup{agent: longAgent{text: markdownReply}})
	id := api.Push(telegramtest.DM(7, "hello"))
	sent := api.WaitSent(t, 1)
	want := tgformat.HTML(markdownReply)
	if sent[0] != (telegramtest.Sent{ChatID: 7, Text: want, ReplyTo: id}) {
		t.Fatalf("sent %+v, want the HTML %q", sent[0], want)
	}
	if !strings.Contains(want, "<b>Hi</b> &lt;you&gt; &amp; friends") || !strings.Contains(want, `<pre><code class="language-go">`) {
		t.Fatalf("the conversion lost the markup: %q", want)
	}
	if err := telegramtest.CheckHTML(sent[0].Text); err != nil {
		t.Fatal(err)
	}
	help := api.Push(telegramtest.DM(7, "/help"))
	sent = api.WaitSent(t, 2)
	if sent[1] != (telegramtest.Sent{ChatID: 7, Text: helpText, ReplyTo: help}) {
		t.Fatalf("help = %+v", sent[1])
	}
	if modes := api.ParseModes(); len(modes) != 2 || modes[0] != "HTML" || modes[1] != "" {
		t.Fatalf("parse modes %q, want the reply in HTML and the help text plain", modes)
	}
}

// TestRefusedHTMLIsSentPlain: when Telegram answers 400 "can't parse
// entities" to a part, that part goes again as its plain text, and the
// reply is delivered once, with the plain message's id.
func TestRefusedHTMLIsSentPlain(t *testing.T) {
	api := telegramtest.New(t)
	api.FailParse(1)
	h := start(t, api, t.TempDir(), setup{agent: longAgent{text: markdownReply}})
	id := api.Push(telegramtest.DM(7, "hello"))
	api.WaitSent(t, 1)
	// The chat's next message is answered after the first reply's
	// delivery was recorded.
	api.Push(telegramtest.DM(7, "/help"))
	sent := api.WaitSent(t, 2)
	plain := tgformat.Split(markdownReply, MaxMessageUnits)[0].Plain
	if sent[0] != (telegramtest.Sent{ChatID: 7, Text: plain, ReplyTo: id}) {
		t.Fatalf("sent %+v, want the plain text %q", sent[0], plain)
	}
	if strings.ContainsAny(plain, "*`") || !strings.Contains(plain, "Hi <you> & friends: a<b>&c and docs.") {
		t.Fatalf("plain text %q is not the reply as shown", plain)
	}
	calls := api.Calls("sendMessage")
	if len(calls) != 3 || calls[0].Params.Get("parse_mode") != "HTML" || calls[1].Params.Get("parse_mode") != "" ||
		calls[0].Params.Get("reply_to_message_id") != strconv.Itoa(id) || calls[1].Params.Get("reply_to_message_id") != strconv.Itoa(id) {
		t.Fatalf("sendMessage calls %+v, want the refused HTML, the plain re-send, the help", calls)
	}
	turn := replyTurn(t, h, sessions.TelegramDMKey(7))
	// The fake numbers pushed and sent messages in one sequence; the
	// refused call took no number, so the plain message is the next one.
	if turn.State != sessions.TurnDelivered || turn.DeliveryRef != strconv.Itoa(id+1) {
		t.Fatalf("turn %+v, want delivered once, as message %d", turn, id+1)
	}
}

// TestPlainFormatSendsText: with format plain the reply goes as written.
func TestPlainFormatSendsText(t *testing.T) {
	api := telegramtest.New(t)
	start(t, api, t.TempDir(), setup{agent: longAgent{text: markdownReply}, opts: Options{Format: FormatPlain}})
	id := api.Push(telegramtest.DM(7, "hello"))
	sent := api.WaitSent(t, 1)
	if sent[0] != (telegramtest.Sent{ChatID: 7, Text: markdownReply, ReplyTo: id}) {
		t.Fatalf("sent %+v, want the reply as written", sent[0])
	}
	if modes := api.ParseModes(); modes[0] != "" {
		t.Fatalf("parse mode %q", modes[0])
	}
}

// TestLongMarkdownReplyIsSplitValid: a long Markdown reply with code
// blocks goes in parts of at most 4096 units of text, each valid HTML,
// code cut across parts closed and reopened, only the first a reply.
func TestLongMarkdownReplyIsSplitValid(t *testing.T) {
	var b strings.Builder
	for i := 0; b.Len() < 10000; i++ {
		fmt.Fprintf(&b, "Step %d: **bold** & `x<y>`.\n\n```python\n", i)
		for l := 0; l < 150; l++ {
			fmt.Fprintf(&b, "print(%d < %d and '<tag>&')\n", l, i)
		}
		b.WriteString("```\n\n")
	}
	long := b.String()
	want := tgformat.Split(long, MaxMessageUnits)
	api := telegramtest.New(t)
	start(t, api, t.TempDir(), setup{agent: longAgent{text: long}})
	id := api.Push(telegramtest.DM(7, "all of it"))
	sent := api.WaitSent(t, len(want))
	if len(want) < 3 {
		t.Fatalf("%d parts", len(want))
	}
	var shown strings.Builder
	for i, m := range sent[:len(want)] {
		if err := telegramtest.CheckHTML(m.Text); err != nil {
			t.Fatalf("part %d: %v", i, err)
		}
		if m.Text != want[i].HTML || tgformat.Units(want[i].Plain) > MaxMessageUnits {
			t.Fatalf("part %d differs from the split, or is over the limit", i)
		}
		if (i == 0) != (m.ReplyTo == id) {
			t.Fatalf("part %d replies to %d", i, m.ReplyTo)
		}
		if i > 0 && strings.HasPrefix(m.Text, `<pre><code class="language-python">`) && strings.HasSuffix(sent[i-1].Text, "</code></pre>") &&
			!strings.HasSuffix(want[i-1].Plain, "\n\n") {
			shown.WriteString("reopened;")
		}
	}
	if !strings.Contains(shown.String(), "reopened") {
		t.Fatal("no code block was cut across two parts")
	}
}
