package admin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/browsertest"
	"github.com/chatgate/chatgate/internal/llmtest"
	"github.com/chatgate/chatgate/sessions"
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

	// A message that replies to another shows what it replies to, above
	// it; then back to ann's conversation.
	quoted, err := e.mgr.Handle(context.Background(), sessions.Inbound{Channel: "telegram", SessionKey: "telegram:dm:7", UserID: "7", ChatID: "7",
		Text: "which one?", Quote: "the red one or the blue one"}, sessions.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	annConv, err := chromedp.Run(ctx, chromedp.Evaluate[string](`current.id`))
	if err != nil {
		t.Fatal(err)
	}
	err = chromedp.Do(ctx,
		chromedp.Evaluate[chromedp.Void](fmt.Sprintf("openConversation(%q)", quoted.ConversationID)),
		browsertest.WaitText("#transcript li.user .msg-quote", "the red one or the blue one"),
		browsertest.WaitJS(`[...document.querySelectorAll('#transcript .msg-quote')].some(q => q.nextElementSibling.textContent === 'which one?')`),
		chromedp.Evaluate[chromedp.Void](fmt.Sprintf("openConversation(%q)", annConv)),
		browsertest.WaitText("#conv-meta", "websocket:ann"),
	)
	if err != nil {
		t.Fatalf("quote: %v", err)
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

// TestAdminUsageInBrowser: the usage view shows the report, a click on a
// column's heading sorts by it (again: the other way), the totals row
// sums the report, and the CSV button downloads the report in the order
// shown.
func TestAdminUsageInBrowser(t *testing.T) {
	e := newEnv(t, &llmtest.Spender{})
	e.turn("websocket", "websocket:ann", "ann", "hello")                  // 5+7, 0.012
	e.turn("websocket", "websocket:bob", "bob", "a much longer question") // 22+7, 0.029
	e.turn("telegram", "telegram:dm:7", "7", "medium q")                  // 8+7, 0.015
	ctx := browsertest.New(t, 1200, 900)
	downloads := t.TempDir()
	begin := chromedp.Events(ctx, browser.DownloadWillBegin)
	progress := chromedp.Events(ctx, browser.DownloadProgress)

	users := `Array.from(document.querySelectorAll('#usage-rows td[data-col=user]'), td => td.textContent).join(' ')`
	err := chromedp.Do(ctx,
		signIn(e),
		browsertest.WaitText("#sessions td", "websocket:ann"),
		chromedp.Click("#tab-usage"),
		// By user, in the users' order, with the totals of all three.
		browsertest.WaitJS(users+` === 'telegram:dm:7 websocket:ann websocket:bob'`),
		browsertest.WaitText("#usage-totals td", "total · 3 rows"),
		browsertest.WaitText("#usage-totals td[data-col=cost]", "0.056"),
		browsertest.WaitText("#usage-totals td[data-col=prompt_tokens]", "35"),
		browsertest.WaitText("#usage-head th[aria-sort=ascending]", "user ▲"),
		browsertest.WaitJS(`location.hash === '#usage' && document.getElementById('sessions-view').hidden`),
	)
	if err != nil {
		t.Fatalf("usage view: %v", err)
	}
	costs, err := chromedp.Run(ctx, chromedp.Evaluate[string](`Array.from(document.querySelectorAll('#usage-rows td[data-col=cost]'), td => td.textContent).join(' ')`))
	if err != nil || costs != "0.015 0.012 0.029" {
		t.Fatalf("costs shown %q (%v), want 0.015 0.012 0.029", costs, err)
	}

	// Sort by cost: the biggest first; again: the smallest first.
	err = chromedp.Do(ctx,
		chromedp.Click("#usage-head th[data-col=cost] button"),
		browsertest.WaitJS(users+` === 'websocket:bob telegram:dm:7 websocket:ann'`),
		browsertest.WaitText("#usage-head th[aria-sort=descending]", "cost ▼"),
		chromedp.Click("#usage-head th[data-col=cost] button"),
		browsertest.WaitJS(users+` === 'websocket:ann telegram:dm:7 websocket:bob'`),
		browsertest.WaitText("#usage-head th[aria-sort=ascending]", "cost ▲"),
	)
	if err != nil {
		t.Fatalf("sorting by cost: %v", err)
	}

	// The CSV: the report as shown, downloaded through the API with the
	// token.
	err = chromedp.Do(ctx,
		chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
			_, err := chromedp.Call(ctx, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
				Behavior: browser.SetDownloadBehaviorBehaviorAllowAndName, DownloadPath: downloads, EventsEnabled: new(true)})
			return err
		}),
		chromedp.Click("#usage-csv"),
	)
	if err != nil {
		t.Fatalf("CSV download: %v", err)
	}
	var name string
	for ev, err := range begin {
		if err != nil {
			t.Fatal(err)
		}
		name = ev.SuggestedFilename
		break
	}
	var guid string
	for ev, err := range progress {
		if err != nil {
			t.Fatal(err)
		}
		if ev.State == browser.DownloadProgressStateCanceled {
			t.Fatal("the CSV download was cancelled")
		}
		if ev.State == browser.DownloadProgressStateCompleted {
			guid = ev.GUID
			break
		}
	}
	data, err := os.ReadFile(filepath.Join(downloads, guid))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(name, "usage-from-") || !strings.HasSuffix(name, ".csv") {
		t.Fatalf("the CSV is named %q, want usage-from-DAY.csv", name)
	}
	want := "user,prompt_tokens,completion_tokens,cost,turns,estimated_tokens\n" +
		"websocket:ann,5,7,0.012,1,0\n" +
		"telegram:dm:7,8,7,0.015,1,0\n" +
		"websocket:bob,22,7,0.029,1,0\n"
	if string(data) != want {
		t.Fatalf("CSV downloaded:\n%s\nwant:\n%s", data, want)
	}

	// Grouped by day too: a column more, and a bad filter is shown.
	err = chromedp.Do(ctx,
		chromedp.Click(`#usage-by input[value=day]`),
		browsertest.WaitJS(`document.querySelectorAll('#usage-head th').length === 7 && document.querySelectorAll('#usage-rows td[data-col=day]').length === 3`),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('u-until').value = '2000-01-01'`),
		chromedp.Click(`#usage-form button[type=submit]`),
		browsertest.WaitText("#error", "is after until (2000-01-01)"),
	)
	if err != nil {
		t.Fatalf("group by day, bad period: %v", err)
	}
}

// signIn opens the admin page and signs in with alice's token.
func signIn(e *env) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(
		chromedp.Navigate(e.url+"/admin/"),
		chromedp.WaitVisible("#token"),
		chromedp.SendKeys("#token", aliceToken),
		chromedp.Click("#save"),
	)
}
