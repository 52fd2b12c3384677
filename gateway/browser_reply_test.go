package gateway

import (
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/llmtest"
)

// The page's Reply button on the bot's message shows that message above
// the input; the next message is sent with reply_to, and the model gets
// the bot's words quoted before it.
func TestWebPageRepliesToAMessage(t *testing.T) {
	llm, ag := llmtest.AgentWith(t, agent.OpenAIConfig{})
	e := newEnv(t, ag, WSOptions{}, nil, nil)
	ctx := browser(t)
	err := chromedp.Do(ctx,
		chromedp.Navigate(e.srv.URL+"/?user=ada"),
		waitText("#status", "online as ada"),
		sendText("two things, please"),
		waitText(".msg.assistant", llmtest.Reply),
		chromedp.Click(".msg.assistant button.reply"),
		waitJS(`!document.getElementById('replying').hidden`),
		waitText("#replying .quote", llmtest.Reply),
		sendText("what did you mean?"),
		waitJS(`document.querySelectorAll('.msg.assistant').length === 2 && document.getElementById('replying').hidden`),
	)
	if err != nil {
		t.Fatal(err)
	}
	reqs := llm.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2", len(reqs))
	}
	if got, want := reqs[1][len(reqs[1])-1].Text(), "> "+llmtest.Reply+"\n\nwhat did you mean?"; got != want {
		t.Fatalf("the model got %q, want %q", got, want)
	}
	// Cancelled, the next message goes without a quote.
	err = chromedp.Do(ctx,
		chromedp.Click(".msg.user button.reply"),
		waitText("#replying .quote", "two things, please"),
		chromedp.Click("#cancel-reply"),
		waitJS(`document.getElementById('replying').hidden`),
		sendText("never mind"),
		waitJS(`document.querySelectorAll('.msg.assistant').length === 3`),
	)
	if err != nil {
		t.Fatal(err)
	}
	if reqs := llm.Requests(); reqs[2][len(reqs[2])-1].Text() != "never mind" {
		t.Fatalf("after a cancelled reply the model got %q", reqs[2][len(reqs[2])-1].Text())
	}
}
