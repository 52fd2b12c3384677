package gateway

import (
	"context"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/sessions"
)

// Another device went back to the previous conversation while the page
// was closed: coming back, the page shows that conversation's history and
// does not call it new.
func TestPreviousFromAnotherDeviceWhileAway(t *testing.T) {
	e := newEnv(t, agent.Echo{}, WSOptions{}, nil, nil)
	ctx := browser(t)
	if err := chromedp.Do(ctx,
		twoConversations(e.srv.URL, "ned"),
		chromedp.Navigate("about:blank"),
	); err != nil {
		t.Fatal(err)
	}
	key := sessions.WebSocketKey("ned")
	if _, err := e.mgr.Conversations().ResumePrevious(context.Background(), sessions.Inbound{Channel: Channel, SessionKey: key, UserID: "ned"}); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx,
		chromedp.Navigate(e.srv.URL+"/?user=ned"),
		waitText(".msg.assistant", "echo: one (history: 0)"),
		waitText(".notice", "The conversation changed while you were away."),
	); err != nil {
		t.Fatal(err)
	}
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`Array.from(document.querySelectorAll('.notice')).filter(n => n.textContent.includes('New conversation')).length`))
	if err != nil || n != 0 {
		t.Fatalf("%d notices call it new, %v", n, err)
	}
}
