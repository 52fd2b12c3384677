package gateway

import (
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/chatgate/chatgate/agent"
)

// A message of pictures only that was not acknowledged before the page
// was reloaded lost its pictures (they are kept in memory only): the page
// says so and forgets it, instead of resending an empty message that is
// refused on every reconnect.
func TestReloadedPictureOnlyMessageIsNotResent(t *testing.T) {
	e := newEnv(t, agent.Echo{}, WSOptions{}, nil, nil)
	ctx := browser(t)
	err := chromedp.Do(ctx,
		chromedp.Navigate(e.srv.URL+"/?user=hal"),
		waitText("#status", "online as hal"),
	)
	if err != nil {
		t.Fatal(err)
	}
	// As the page leaves it when reloaded while offline, after sending a
	// picture alone and a text.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`localStorage.setItem('chatgate.pending', JSON.stringify([{id: 'c-pic', text: ''}, {id: 'c-txt', text: 'and words'}])); true`)); err != nil {
		t.Fatal(err)
	}
	err = chromedp.Do(ctx,
		chromedp.Reload(),
		waitText("#status", "online as hal"),
		waitText(".msg.assistant", "echo: and words (history: 0)"),
		waitText(".notice", "was not delivered: send it again"),
	)
	if err != nil {
		t.Fatal(err)
	}
	left, err := chromedp.Run(ctx, chromedp.Evaluate[string](`localStorage.getItem('chatgate.pending')`))
	if err != nil || left != "[]" {
		t.Fatalf("pending after ready: %s, %v", left, err)
	}
	msgs, err := pageMessages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 2 || msgs[0].Text != "and words" {
		t.Fatalf("the page shows %+v", msgs)
	}
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`Array.from(document.querySelectorAll('.notice')).filter(n => n.textContent.includes('empty')).length`))
	if err != nil || n != 0 {
		t.Fatalf("%d notices of an empty message, %v", n, err)
	}
}
