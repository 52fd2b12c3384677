package admin

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/browsertest"
)

// browser is a headless Chromium on a desktop-size screen for this test.
func browser(t *testing.T) context.Context {
	t.Helper()
	return browsertest.New(t, 1200, 900)
}

// waitText waits until some element matching sel contains text.
func waitText(sel, text string) chromedp.Action[chromedp.Void] {
	return browsertest.WaitText(sel, text)
}

func TestAdminPageInBrowser(t *testing.T) {
	e := newEnv(t, agent.Echo{})
	ann := e.connect("ann")
	ann.say("a-1", "hello from ann")
	e.turn("telegram", "telegram:dm:7", "7", "hello from telegram")
	ctx := browser(t)

	// A wrong token is refused and the login stays.
	err := chromedp.Do(ctx,
		chromedp.Navigate(e.url+"/admin/"),
		chromedp.WaitVisible("#token"),
		chromedp.SendKeys("#token", "not-the-token-at-all"),
		chromedp.Click("#save"),
		waitText("#error", "refused"),
	)
	if err != nil {
		t.Fatalf("wrong token: %v", err)
	}

	// The right token: the session list and live stats.
	err = chromedp.Do(ctx,
		chromedp.SendKeys("#token", aliceToken),
		chromedp.Click("#save"),
		waitText("#sessions td", "websocket:ann"),
		waitText("#sessions td", "telegram:dm:7"),
		waitText("#s-conns", "1"),
		waitText("#s-rate", "(2)"),
	)
	if err != nil {
		t.Fatalf("session list: %v", err)
	}

	// Search, then open the transcript with its turn states.
	err = chromedp.Do(ctx,
		chromedp.SendKeys("#q", "ann"),
		chromedp.Click("#search button[type=submit]"),
		chromedp.Poll[chromedp.Void](`document.querySelectorAll('#sessions tr').length === 1 && document.querySelector('#sessions td').textContent === 'websocket:ann'`,
			chromedp.WithPollingInterval(50*time.Millisecond)),
		chromedp.Click("#sessions tr"),
		waitText("#transcript li.user .msg-text", "hello from ann"),
		waitText("#transcript li.assistant .msg-text", "echo: hello from ann"),
		waitText("#transcript li.user .turn", "turn "),
		waitText("#conv-meta", "websocket:ann"),
	)
	if err != nil {
		t.Fatalf("transcript: %v", err)
	}
	state, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#transcript li.user .turn').textContent`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(state, "turn answered") && !strings.HasPrefix(state, "turn delivered") {
		t.Fatalf("turn shown as %q", state)
	}

	// Reset with the confirm accepted: the client is told, the page shows
	// the archived conversation.
	err = chromedp.Do(ctx,
		chromedp.Evaluate[chromedp.Void](`window.confirm = () => true`),
		chromedp.Click("#reset"),
		waitText("#conv-meta", "archived (manual)"),
	)
	if err != nil {
		t.Fatalf("reset: %v", err)
	}
	ann.expect("reset")

	// Drain and undrain from the page.
	err = chromedp.Do(ctx,
		chromedp.Click("#drain"),
		waitText("#s-ready", "drained by alice"),
	)
	if err != nil {
		t.Fatalf("drain: %v", err)
	}
	if not := e.srv.NotReady(); len(not) != 1 || !strings.HasPrefix(not[0], "admin: drained by alice") {
		t.Fatalf("readiness after the page's drain: %v", not)
	}
	if err := chromedp.Do(ctx, chromedp.Click("#drain"), waitText("#s-ready", "serving")); err != nil {
		t.Fatalf("undrain: %v", err)
	}
	if not := e.srv.NotReady(); len(not) != 0 {
		t.Fatalf("readiness after the page's undrain: %v", not)
	}
}
