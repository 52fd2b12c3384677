package admin

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/browsertest"
)

func TestAdminPageInBrowser(t *testing.T) {
	e := newEnv(t, agent.Echo{})
	ann := e.connect("ann")
	ann.say("a-1", "hello from ann")
	e.turn("telegram", "telegram:dm:7", "7", "hello from telegram")
	ctx := browsertest.New(t, 1200, 900)

	// A wrong token is refused and the login stays.
	err := chromedp.Do(ctx,
		chromedp.Navigate(e.url+"/admin/"),
		chromedp.WaitVisible("#token"),
		chromedp.SendKeys("#token", "not-the-token-at-all"),
		chromedp.Click("#save"),
		browsertest.WaitText("#error", "refused"),
	)
	if err != nil {
		t.Fatalf("wrong token: %v", err)
	}

	// The right token: the session list and live stats.
	err = chromedp.Do(ctx,
		chromedp.SendKeys("#token", aliceToken),
		chromedp.Click("#save"),
		browsertest.WaitText("#sessions td", "websocket:ann"),
		browsertest.WaitText("#sessions td", "telegram:dm:7"),
		browsertest.WaitText("#s-conns", "1"),
		browsertest.WaitText("#s-rate", "(2)"),
	)
	if err != nil {
		t.Fatalf("session list: %v", err)
	}

	// Search, then open the transcript with its turn states.
	err = chromedp.Do(ctx,
		chromedp.SendKeys("#q", "ann"),
		chromedp.Click("#search button[type=submit]"),
		browsertest.WaitJS(`document.querySelectorAll('#sessions tr').length === 1 && document.querySelector('#sessions td').textContent === 'websocket:ann'`),
		chromedp.Click("#sessions tr"),
		browsertest.WaitText("#transcript li.user .msg-text", "hello from ann"),
		browsertest.WaitText("#transcript li.assistant .msg-text", "echo: hello from ann"),
		browsertest.WaitText("#transcript li.user .turn", "turn "),
		browsertest.WaitText("#conv-meta", "websocket:ann"),
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
		browsertest.WaitText("#conv-meta", "archived (manual)"),
	)
	if err != nil {
		t.Fatalf("reset: %v", err)
	}
	ann.expect("reset")

	// Drain and undrain from the page.
	err = chromedp.Do(ctx,
		chromedp.Click("#drain"),
		browsertest.WaitText("#s-ready", "drained by alice"),
	)
	if err != nil {
		t.Fatalf("drain: %v", err)
	}
	if not := e.srv.NotReady(); len(not) != 1 || !strings.HasPrefix(not[0], "admin: drained by alice") {
		t.Fatalf("readiness after the page's drain: %v", not)
	}
	if err := chromedp.Do(ctx, chromedp.Click("#drain"), browsertest.WaitText("#s-ready", "serving")); err != nil {
		t.Fatalf("undrain: %v", err)
	}
	if not := e.srv.NotReady(); len(not) != 0 {
		t.Fatalf("readiness after the page's undrain: %v", not)
	}
}
