package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/clocktest"
	"github.com/chatgate/chatgate/sessions"
)

// The page's "Previous conversation" button takes the session back and
// shows the reopened history; an idle reset shows why, with the same
// offer in its notice line.
func TestPreviousConversationInBrowser(t *testing.T) {
	clock := clocktest.New(time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC))
	e := newEnv(t, agent.Echo{}, WSOptions{}, map[string]sessions.Policy{
		Channel: {MaxHistory: 50, Reset: sessions.ResetPolicy{Mode: sessions.ResetIdle, IdleFor: 45 * time.Minute}},
	}, clock.Now)
	ctx := browser(t)
	if err := chromedp.Do(ctx,
		twoConversations(e.srv.URL, "eve"),
	); err != nil {
		t.Fatalf("before going back: %v", err)
	}
	// This page's own reset offers nothing more.
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('.notice button.previous').length`)); err != nil || n != 0 {
		t.Fatalf("own reset: %d offers to go back, %v", n, err)
	}
	if err := chromedp.Do(ctx,
		chromedp.Click("#previous"),
		waitText(".notice", "Back to your previous conversation"),
		waitText(".msg.assistant", "echo: one (history: 0)"),
	); err != nil {
		t.Fatalf("going back: %v", err)
	}
	msgs, err := pageMessages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 2 || msgs[0].Text != "one" || msgs[1].Text != "echo: one (history: 0)" {
		t.Fatalf("after going back the page shows %+v", msgs)
	}
	if err := chromedp.Do(ctx, sendText("three"), waitText(".msg.assistant", "echo: three (history: 2)")); err != nil {
		t.Fatalf("after going back: %v", err)
	}

	// A sweep while the page is closed: when it comes back it says so and
	// offers the conversation back.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	if n, err := sessions.NewSweeper(e.mgr, nil).SweepIdle(context.Background()); n != 1 || err != nil {
		t.Fatalf("sweep = %d, %v", n, err)
	}
	if err := chromedp.Do(ctx,
		chromedp.Navigate(e.srv.URL+"/?user=eve"),
		waitText(".notice", "closed while you were away"),
		chromedp.Click(".notice button.previous"),
		waitText(".notice", "Back to your previous conversation"),
		waitText(".msg.assistant", "echo: three (history: 2)"),
	); err != nil {
		t.Fatalf("reset while away: %v", err)
	}

	// An idle sweep: the notice says why and offers the conversation back.
	clock.Advance(time.Hour)
	if n, err := sessions.NewSweeper(e.mgr, nil).SweepIdle(context.Background()); n != 1 || err != nil {
		t.Fatalf("sweep = %d, %v", n, err)
	}
	if err := chromedp.Do(ctx,
		waitText(".notice", "New conversation: the last one was idle for 45 minutes."),
		chromedp.Click(".notice button.previous"),
		waitText(".notice", "Back to your previous conversation"),
		waitText(".msg.assistant", "echo: three (history: 2)"),
	); err != nil {
		t.Fatalf("idle reset notice: %v", err)
	}
	// Nothing earlier: the page says so.
	e2 := newEnv(t, agent.Echo{}, WSOptions{}, nil, nil)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(e2.srv.URL+"/?user=fay"),
		waitText("#status", "online as fay"),
		chromedp.Click("#previous"),
		waitText(".notice", "no earlier conversation"),
	); err != nil {
		t.Fatalf("nothing to go back to: %v", err)
	}
}

// twoConversations opens the page as user, says "one", starts a new
// conversation and says "two" in it: the session then has a previous
// conversation to go back to.
func twoConversations(url, user string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(
		chromedp.Navigate(url+"/?user="+user),
		waitText("#status", "online as "+user),
		sendText("one"),
		waitText(".msg.assistant", "echo: one (history: 0)"),
		chromedp.Click("#reset"),
		waitText(".notice", "New conversation"),
		sendText("two"),
		waitText(".msg.assistant", "echo: two (history: 0)"),
	)
}
