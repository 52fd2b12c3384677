package gateway

import (
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/chatgate/chatgate/agent/openai"
	"github.com/chatgate/chatgate/internal/llmtest"
)

// The page's Reply button on the bot's message shows that message above
// the input; the next message is sent with reply_to, and the model gets
// the bot's words quoted before it.
func TestWebPageRepliesToAMessage(t *testing.T) {
	llm, ag := llmtest.AgentWith(t, openai.Config{})
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
	// The message shows what it replied to, as text, now and after a
	// reload (from ready's history); replying to it quotes its own words.
	quoteOf := `(function () { const q = [...document.querySelectorAll('.msg.user')].find(function (m) { return m.textContent.includes('what did you mean?'); }); ` +
		`return q && q.querySelector(':scope > .quoted') ? q.querySelector(':scope > .quoted').textContent : ''; })()`
	for _, step := range []string{"sent", "reloaded"} {
		if step == "reloaded" {
			if err := chromedp.Do(ctx, chromedp.Reload(), waitText("#status", "online as ada"),
				waitJS(`document.querySelectorAll('.msg.assistant').length === 2`)); err != nil {
				t.Fatal(err)
			}
		}
		got, err := chromedp.Run(ctx, chromedp.Evaluate[string](quoteOf))
		if err != nil {
			t.Fatal(err)
		}
		if got != llmtest.Reply {
			t.Fatalf("%s: the message's quote shows %q, want %q", step, got, llmtest.Reply)
		}
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](
		`[...document.querySelectorAll('.msg.user')].find(function (m) { return m.textContent.includes('what did you mean?'); }).querySelector('button.reply').click() === undefined`)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, waitJS(`!document.getElementById('replying').hidden`)); err != nil {
		t.Fatal(err)
	}
	preview, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#replying .quote').textContent`))
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Click("#cancel-reply")); err != nil {
		t.Fatal(err)
	}
	if preview != "what did you mean?" {
		t.Fatalf("replying to a message that quotes previews %q, want its own words", preview)
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
