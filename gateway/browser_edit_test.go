package gateway

import (
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions"
)

// A person edits their last message after its reply: the Edit button puts
// its text in the composer, sending shows the new text marked edited, and
// the gateway answers the edit as a new message that quotes it.
func TestWebPageEditsTheLastMessage(t *testing.T) {
	e := newEnv(t, agent.Echo{}, WSOptions{}, nil, nil)
	ctx := browser(t)
	quoted := "echo: " + sessions.EditedText("helo", "hello") + " (history: 2)"
	err := chromedp.Do(ctx,
		chromedp.Navigate(e.srv.URL+"/?user=ann"),
		waitText("#status", "online as ann"),
		sendText("helo"),
		waitText(".msg.assistant", "echo: helo (history: 0)"),
		// The reply, not only its delta: the page settles its bubbles and
		// the Edit button when the reply frame comes.
		waitJS(`document.querySelector('#log .msg.assistant.streaming') === null && document.getElementById('stop').hidden`),
		chromedp.Click("#log .edit-last"),
		waitJS(`document.getElementById('text').value === 'helo' && document.getElementById('send').textContent === 'Save edit'`),
	)
	if err != nil {
		t.Fatalf("opening the edit: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('text').value = ''`)); err != nil {
		t.Fatal(err)
	}
	err = chromedp.Do(ctx,
		chromedp.SendKeys("#text", "hello"),
		chromedp.Click("#send"),
		waitJS(`document.querySelectorAll('#log .msg.assistant').length === 2`),
	)
	if err != nil {
		t.Fatalf("editing: %v", err)
	}
	msgs, err := pageMessages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 3 || msgs[0].Class != "msg user edited" || msgs[0].Text != "hello" ||
		msgs[1].Text != "echo: helo (history: 0)" || msgs[2].Text != quoted {
		t.Fatalf("page shows %+v; want the edited message, its first reply, and the reply quoting the edit %q", msgs, quoted)
	}
}
