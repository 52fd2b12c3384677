package telegram

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/telegramtest"
	"github.com/chatgate/chatgate/sessions"
)

// previewThenCut is an echo agent whose first call writes a first piece,
// waits until the bot has shown it in a preview message, then waits
// until its turn is cancelled.
type previewThenCut struct {
	calls
	api     *telegramtest.Server
	started chan struct{}
}

func (c *previewThenCut) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	if c.count() > 0 {
		return c.calls.Reply(ctx, req, onDelta)
	}
	c.calls.Reply(ctx, req, nil)
	onDelta("Once upon a time, ")
	c.api.WaitCalls(func(calls []telegramtest.Call) bool {
		for _, call := range calls {
			if call.Method == "sendMessage" {
				return true
			}
		}
		return false
	}, 20*time.Second)
	close(c.started)
	<-ctx.Done()
	return agent.Reply{}, ctx.Err()
}

// TestInterruptedStreamLeavesNoPreview: in busy mode interrupt with
// edited previews, a turn cut by a newer message had started a preview
// message; the next turn answers both messages in a message of its own,
// and the cut turn's preview, half a reply nobody finishes, is deleted.
func TestInterruptedStreamLeavesNoPreview(t *testing.T) {
	api := telegramtest.New(t)
	ag := &previewThenCut{api: api, started: make(chan struct{})}
	deliveries := make(chan string, 4)
	start(t, api, t.TempDir(), setup{agent: ag, policies: busy(sessions.BusyPolicy{Mode: sessions.BusyInterrupt}),
		opts: Options{Streaming: StreamEdits},
		sess: func(m *sessions.Manager) Sessions { return deliveryNotes{Manager: m, ch: deliveries} }})
	long := api.Push(telegramtest.DM(7, "tell me a long story"))
	<-ag.started
	short := api.Push(telegramtest.DM(7, "actually, a short one"))
	select {
	case <-deliveries:
	case <-time.After(20 * time.Second):
		t.Fatal("no delivery recorded")
	}
	sent, ids := api.Messages(), api.SentIDs()
	if len(sent) != 2 || sent[0].ReplyTo != long || sent[1].ReplyTo != short {
		t.Fatalf("sent %+v, want the cut turn's preview, then the reply to the newer message", sent)
	}
	if want := "echo: tell me a long story\nactually, a short one (history: 0)"; sent[1].Text != want {
		t.Fatalf("reply %q, want %q", sent[1].Text, want)
	}
	if !api.Deleted(7, ids[0]) {
		t.Fatalf("the cut turn's preview %q stays in the chat", sent[0].Text)
	}
	if api.Deleted(7, ids[1]) {
		t.Fatal("the reply was deleted")
	}
}

// TestHistoryEntriesRenderApart: /history with format html converts each
// line of the history on its own, so a code block cut short in one line
// does not take the lines after it into it; every message is valid HTML.
func TestHistoryEntriesRenderApart(t *testing.T) {
	api := telegramtest.New(t)
	start(t, api, t.TempDir(), setup{})
	// The message fits in a line of the history, its echo is cut inside
	// the code block.
	code := "see:\n```\n" + strings.Repeat("x <y> ", 47) + "\n```"
	if n := len([]rune(code)); n > historyLineRunes || n+len("echo: ") < historyLineRunes {
		t.Fatalf("the message is %d runes", n)
	}
	api.Push(telegramtest.DM(7, code))
	api.WaitSent(t, 1)
	api.Push(telegramtest.DM(7, "thanks"))
	api.WaitSent(t, 2)
	api.Push(telegramtest.DM(7, "/history"))
	got := api.WaitSent(t, 3)[2:]
	modes := api.ParseModes()[2:]
	all := ""
	for i, m := range got {
		if modes[i] != "HTML" {
			t.Fatalf("/history part %d sent with parse mode %q, want HTML", i, modes[i])
		}
		if err := telegramtest.CheckHTML(m.Text); err != nil {
			t.Fatalf("/history part %d is invalid HTML: %v\n%s", i, err, m.Text)
		}
		all += m.Text
	}
	at := strings.Index(all, "You: thanks")
	if at < 0 {
		t.Fatalf("/history lacks the last message:\n%s", all)
	}
	if before := all[:at]; strings.Count(before, "<pre>") != strings.Count(before, "</pre>") {
		t.Fatalf("the last message is inside the code block of the line before:\n%s", all)
	}
	if !strings.Contains(all, "x &lt;y&gt;") {
		t.Fatalf("the code is not escaped:\n%s", all)
	}
}

// fixedReply answers every message with text.
type fixedReply struct{ text string }

func (fixedReply) Name() string  { return "fixed" }
func (fixedReply) Model() string { return "fixed" }
func (f fixedReply) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	return agent.Reply{Messages: []agent.Message{{Role: agent.RoleAssistant, Content: f.text}}}, nil
}

// TestEmptyReplySaysSo: a model answer with no visible text, which
// Telegram refuses to send ("message text is empty"), reaches the user as
// a short notice, delivered, in both formats, instead of nothing.
func TestEmptyReplySaysSo(t *testing.T) {
	for _, format := range []string{FormatHTML, FormatPlain} {
		for _, text := range []string{"", " \n "} {
			t.Run(format+"/"+strconv.Quote(text), func(t *testing.T) {
				api := telegramtest.New(t)
				deliveries := make(chan string, 4)
				h := start(t, api, t.TempDir(), setup{agent: fixedReply{text}, opts: Options{Format: format},
					sess: func(m *sessions.Manager) Sessions { return deliveryNotes{Manager: m, ch: deliveries} }})
				id := api.Push(telegramtest.DM(7, "hm?"))
				select {
				case <-deliveries:
				case <-time.After(20 * time.Second):
					t.Fatal("no delivery recorded")
				}
				if sent := api.Messages(); len(sent) != 1 || sent[0] != (telegramtest.Sent{ChatID: 7, Text: emptyReplyText, ReplyTo: id}) {
					t.Fatalf("sent %+v, want the empty-answer notice", sent)
				}
				stored(t, h, sessions.TelegramDMKey(7))
			})
		}
	}
}
