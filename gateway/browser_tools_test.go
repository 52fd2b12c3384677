package gateway

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/clocktest"
	"github.com/chatgate/chatgate/internal/mcptest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/tools"
)

// The web page shows a call that needs approval as a card; Allow runs the
// tool once and the reply follows, with the call's line marked done.
func TestWebPageToolApproval(t *testing.T) {
	e, srv := newToolEnv(t, tools.ApproveAsk, toolCall("call-1", mcptest.Counter, map[string]string{"key": "k"}))
	ctx := browser(t)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(e.srv.URL+"/?user=tia"),
		waitText("#status", "online as tia"),
		sendText("count it"),
		waitText(".tool-card .title", "Allow t__counter?"),
	); err != nil {
		t.Fatalf("asking: %v", err)
	}
	args, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('.tool-card pre.args').textContent`))
	if err != nil || args != "{\n  \"key\": \"k\"\n}" {
		t.Fatalf("arguments shown as %q (%v)", args, err)
	}
	if n := srv.Count(); n != 0 {
		t.Fatalf("the tool ran %d times before it was allowed", n)
	}
	saveScreenshot(t, ctx, "tool-ask.png")
	if err := chromedp.Do(ctx,
		chromedp.Click(".tool-card button.allow"),
		waitText(".msg.assistant", "answer: 1"),
		waitText(".tool.done .line", "🔧 t__counter — ✓"),
		waitJS(`document.querySelector('.tool-card') === null`),
	); err != nil {
		t.Fatalf("allowing: %v", err)
	}
	if n := srv.Count(); n != 1 {
		t.Fatalf("the tool ran %d times, want once", n)
	}
	saveScreenshot(t, ctx, "tool-done.png")
	// Top to bottom: the message, its tool line, the reply.
	order, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('#log > .msg, #log > .tools')).map(e => e.className.trim())`))
	if err != nil || strings.Join(order, ",") != "msg user,tools,msg assistant" {
		t.Fatalf("page order %q (%v)", order, err)
	}

	// A reload while a call waits shows its card again; Deny ends it.
	if err := chromedp.Do(ctx,
		sendText("count again"),
		waitJS(`document.querySelectorAll('.tool-card').length === 1`),
		chromedp.Reload(),
		waitText("#status", "online as tia"),
		waitText(".tool-card .title", "Allow t__counter?"),
		chromedp.Click(".tool-card button.deny"),
		waitText(".tool.denied .line", "🔧 t__counter — denied"),
		waitText(".msg.assistant", "answer: The user denied this call."),
	); err != nil {
		t.Fatalf("after reload: %v", err)
	}
	saveScreenshot(t, ctx, "tool-denied.png")
	if n := srv.Count(); n != 1 {
		t.Fatalf("the tool ran %d times, want once", n)
	}
}

// Tool names and arguments are the model's text: the page shows them as
// text, never as markup.
func TestWebPageToolTextIsNotMarkup(t *testing.T) {
	evil := `<img src=x onerror="window.pwned=1">`
	e, _ := newToolEnv(t, tools.ApproveAsk,
		toolCall("call-1", mcptest.Echo, map[string]string{"text": evil}),
		agent.ToolCall{ID: "call-2", Name: `t__<img src=x onerror="window.pwned=2">`, Arguments: `{}`})
	ctx := browser(t)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(e.srv.URL+"/?user=xss"),
		waitText("#status", "online as xss"),
		sendText("go"),
		waitText(".tool-card .title", "Allow t__echo?"),
		waitText(".tool.denied .line", `🔧 t__<img src=x onerror="window.pwned=2"> — denied`),
	); err != nil {
		t.Fatalf("asking: %v", err)
	}
	args, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('.tool-card pre.args').textContent`))
	if err != nil || !strings.Contains(args, `"text": "<img src=x onerror=\"window.pwned=1\">"`) {
		t.Fatalf("arguments shown as %q (%v)", args, err)
	}
	if err := chromedp.Do(ctx,
		chromedp.Click(".tool-card button.allow"),
		waitText(".tool.done .line", "🔧 t__echo — ✓"),
		waitText(".msg.assistant", "answer:"),
	); err != nil {
		t.Fatalf("allowing: %v", err)
	}
	got, err := chromedp.Run(ctx, chromedp.Evaluate[[]any](`[document.querySelectorAll('#log img').length, window.pwned === undefined]`))
	if err != nil || got[0] != float64(0) || got[1] != true {
		t.Fatalf("markup of a tool call ran: images %v, not pwned %v (%v)", got[0], got[1], err)
	}
}

// A card for a call whose ask has expired — shown by a replica the page
// connected to before the expiry, while the turn that waits for the
// decision runs elsewhere and has not ended the ask yet — ends as expired
// when Allow is tapped after it: its buttons go and never come back, and
// nothing runs.
func TestWebPageToolDecisionAfterTheExpiry(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.db")
	call := toolCall("call-1", mcptest.Counter, map[string]string{"key": "k"})
	runs, srv := newToolEnvAt(t, nil, path, tools.ApproveAsk, call)
	ctx := browser(t)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(runs.srv.URL+"/?user=tia"),
		waitText("#status", "online as tia"),
		sendText("count it"),
		waitText(".tool-card .title", "Allow t__counter?"),
	); err != nil {
		t.Fatalf("asking: %v", err)
	}
	clock := clocktest.New(time.Now())
	late, _ := newToolEnvAt(t, clock, path, tools.ApproveAsk, call)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(late.srv.URL+"/?user=tia"),
		waitText("#status", "online as tia"),
		waitText(".tool-card .title", "Allow t__counter?"),
	); err != nil {
		t.Fatalf("asked again by another replica: %v", err)
	}
	clock.Advance(sessions.DefaultApproveTimeout + time.Minute)
	if err := chromedp.Do(ctx,
		chromedp.Click(".tool-card button.allow"),
		waitText(".tool.expired .line", "🔧 t__counter — expired, not run"),
		waitText(".notice", "has expired"),
	); err != nil {
		t.Fatalf("deciding after the expiry: %v", err)
	}
	saveScreenshot(t, ctx, "tool-expired.png")
	buttons, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('.tool-card, .tool button').length`))
	if err != nil || buttons != 0 {
		t.Fatalf("after the refusal: %d cards or buttons (%v)", buttons, err)
	}
	if n := srv.Count(); n != 0 {
		t.Fatalf("an expired call ran %d times", n)
	}
}
