package telegram

// Tests of sending: long replies split at the limit, 429s waited out.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/telegramtest"
)

// longAgent is an LLM stand-in that answers with a long text.
type longAgent struct{ text string }

func (l longAgent) Name() string  { return "long" }
func (l longAgent) Model() string { return "long" }
func (l longAgent) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	return agent.Reply{Messages: []agent.Message{{Role: agent.RoleAssistant, Content: l.text}}}, nil
}

func TestLongReplyIsSplit(t *testing.T) {
	var b strings.Builder
	for i := 0; utf16Len(b.String()) < 9000; i++ {
		fmt.Fprintf(&b, "Line %d: emoji 🦀🚀 and 漢字 keep their shape.", i)
		if i%5 == 4 {
			b.WriteString("\n")
		} else {
			b.WriteString(" ")
		}
	}
	long := strings.TrimSpace(b.String())
	api := telegramtest.New(t)
	// Plain text, split as written (TestLongMarkdownReplyIsSplitValid
	// splits HTML).
	start(t, api, t.TempDir(), setup{agent: longAgent{text: long}, opts: Options{Format: FormatPlain}})
	api.Push(telegramtest.DM(7, "tell me everything"))
	api.WaitSent(t, 3)
	// The chat's next message runs after the long reply's every part went
	// out: its answer closes the count.
	next := api.Push(telegramtest.DM(7, "thanks"))
	sent := api.WaitSent(t, 4)
	if sent[3].ReplyTo != next {
		t.Fatalf("message 4 is %q, not the next reply's first part: the long reply was not 3 parts", sent[3].Text)
	}
	sent = sent[:3]
	var joined []string
	for i, m := range sent {
		if n := utf16Len(m.Text); n > MaxMessageUnits {
			t.Fatalf("part %d has %d UTF-16 units", i, n)
		}
		if i > 0 && m.ReplyTo != 0 {
			t.Fatal("only the first part replies to the message")
		}
		joined = append(joined, m.Text)
	}
	checkParts(t, long, joined)
}

func TestTooManyRequestsIsWaitedOut(t *testing.T) {
	api := telegramtest.New(t)
	api.Fail429(1)
	h := start(t, api, t.TempDir(), setup{})
	api.Push(telegramtest.DM(7, "hi"))
	if got := api.WaitSent(t, 1); len(got) != 1 || got[0].Text != "echo: hi (history: 0)" {
		t.Fatalf("sent = %+v", got)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	found := false
	for _, w := range h.waits {
		found = found || w == 3*time.Second
	}
	if !found {
		t.Fatalf("waits %v do not include retry_after 3s", h.waits)
	}
}
