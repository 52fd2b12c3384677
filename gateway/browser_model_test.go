package gateway

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/clocktest"
	"github.com/chatgate/chatgate/internal/llmtest"
	"github.com/chatgate/chatgate/sessions"
)

// statusRow is the text of the status panel's row name ("model", "today", …).
func statusRow(name string) string {
	return `(document.querySelector('#status-lines dd[data-row="` + name + `"]') || {}).textContent || ""`
}

// The page's model picker, shown when the gateway offers models, chooses
// the model of the next message; the Status button shows the status.
func TestWebPagePicksAModelAndShowsStatus(t *testing.T) {
	clock := clocktest.New(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	e, llm := modelEnv(t, wsModels, sessions.Policy{MaxHistory: 100,
		Reset: sessions.ResetPolicy{Mode: sessions.ResetIdle, IdleFor: time.Hour}}, clock)
	ctx := browser(t)
	err := chromedp.Do(ctx,
		chromedp.Navigate(e.srv.URL+"/?user=ada"),
		waitText("#status", "online as ada"),
		waitJS(`!document.getElementById('model-picker').hidden`),
		waitJS(`Array.from(document.querySelectorAll('#model option')).map(o => o.value + '=' + o.textContent).join(',') === 'Fast=Fast,Smart=Smart,=Default (m)'`),
		waitJS(`document.getElementById('model').value === ''`),
		sendText("hi"),
		waitText(".msg.assistant", llmtest.Reply),
	)
	if err != nil {
		t.Fatal(err)
	}
	if got := lastModelAsked(t, llm); got != "m" {
		t.Fatalf("before a choice the request asks for %q", got)
	}
	// Picked as a user does: the select's value, then its change event.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => { const s = document.getElementById('model'); s.value = 'Smart'; s.dispatchEvent(new Event('change')); return true; })()`)); err != nil {
		t.Fatal(err)
	}
	err = chromedp.Do(ctx,
		sendText("hello"),
		waitJS(`document.querySelectorAll('.msg.assistant').length === 2`),
		waitJS(`document.getElementById('model').value === 'Smart'`),
	)
	if err != nil {
		t.Fatal(err)
	}
	if got := lastModelAsked(t, llm); got != "smart-1" {
		t.Fatalf("after picking Smart the request asks for %q", got)
	}
	err = chromedp.Do(ctx,
		chromedp.Click("#show-status"),
		waitJS(`!document.getElementById('status-panel').hidden`),
		waitJS(statusRow("model")+` === 'Smart (smart-1)'`),
		waitJS(statusRow("conversation")+`.startsWith('4 messages since')`),
		waitJS(statusRow("history")+`.includes("% of the model's 8000-token context")`),
		waitJS(statusRow("today")+`.startsWith('2 answers, 4 tokens')`),
		waitJS(statusRow("busy mode")+`.startsWith('collect')`),
		waitJS(statusRow("next reset")+`.endsWith('(idle)')`),
	)
	if err != nil {
		rows, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('status-lines').innerText`))
		t.Fatalf("status panel: %v\n%s", err, rows)
	}
	wide, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth`))
	if err != nil || wide {
		t.Fatalf("the page is wider than a phone's screen with the picker and the panel (%v)", err)
	}
	// Closed with ×; another tab's choice reaches the picker.
	err = chromedp.Do(ctx,
		chromedp.Click("#close-status"),
		waitJS(`document.getElementById('status-panel').hidden`),
	)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := e.connect(map[string]any{"user": "ada"})
	c.send(map[string]any{"type": "model", "name": "Fast"})
	c.expect("model")
	if err := chromedp.Do(ctx, waitJS(`document.getElementById('model').value === 'Fast'`)); err != nil {
		t.Fatalf("the picker did not follow another tab's choice: %v", err)
	}
}

// Without agent.models the page shows no picker; Status still works.
func TestWebPageWithoutModels(t *testing.T) {
	e := newEnv(t, agent.Echo{}, WSOptions{}, nil, nil)
	ctx := browser(t)
	err := chromedp.Do(ctx,
		chromedp.Navigate(e.srv.URL+"/?user=ada"),
		waitText("#status", "online as ada"),
		chromedp.Click("#show-status"),
		waitJS(statusRow("model")+` === 'Default (echo)'`),
		waitJS(`document.getElementById('model-picker').hidden`),
	)
	if err != nil {
		t.Fatal(err)
	}
}
