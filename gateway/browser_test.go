package gateway

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/gorilla/websocket"

	"github.com/chatgate/chatgate/internal/browsertest"
	"github.com/chatgate/chatgate/sessions"
)

// browser is a headless Chromium on a phone-width screen for this test.
func browser(t *testing.T) context.Context {
	t.Helper()
	return browsertest.New(t, 390, 844)
}

// waitText waits until some element matching sel contains text.
func waitText(sel, text string) chromedp.Action[chromedp.Void] {
	return browsertest.WaitText(sel, text)
}

// waitJS waits until the JavaScript expression is true.
func waitJS(expr string) chromedp.Action[chromedp.Void] { return browsertest.WaitJS(expr) }

// shownMsg is a message bubble on the page.
type shownMsg struct {
	Class string `json:"cls"`
	Text  string `json:"text"`
	// After is the bubble's ::after content, such as the interrupted mark.
	After string `json:"after"`
}

// pageMessages lists the page's message bubbles, top to bottom.
func pageMessages(ctx context.Context) ([]shownMsg, error) {
	return chromedp.Run(ctx, chromedp.Evaluate[[]shownMsg](`Array.from(document.querySelectorAll('#log .msg')).map(e => ({cls: e.className, text: e.textContent, after: getComputedStyle(e, '::after').content}))`))
}

// sendText types a message and sends it.
func sendText(text string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(chromedp.SendKeys("#text", text), chromedp.Click("#send"))
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string { return browsertest.JSString(s) }

func TestWebPageInBrowser(t *testing.T) {
	g := newGate()
	e := newEnv(t, g, WSOptions{}, nil, nil)
	ctx := browser(t)
	url := e.srv.URL + "/?user=ann"

	// Send a message and see the streamed, then final, reply.
	err := chromedp.Do(ctx,
		chromedp.Navigate(url),
		waitText("#status", "online as ann"),
		chromedp.SendKeys("#text", "hello browser"),
		chromedp.Click("#send"),
		waitText(".msg.assistant.streaming", "partial"),
	)
	if err != nil {
		t.Fatalf("sending: %v", err)
	}
	<-g.started
	close(g.release)
	if err := chromedp.Do(ctx, waitText(".msg.assistant", "echo: hello browser (history: 0)")); err != nil {
		t.Fatalf("reply: %v", err)
	}

	// A reload restores the conversation from the server.
	err = chromedp.Do(ctx,
		chromedp.Reload(),
		waitText("#status", "online as ann"),
		waitText(".msg.assistant", "echo: hello browser (history: 0)"),
	)
	if err != nil {
		t.Fatalf("reload: %v", err)
	}
	userMsgs, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('.msg.user').length`))
	if err != nil {
		t.Fatal(err)
	}
	replies, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('.msg.assistant').length`))
	if err != nil {
		t.Fatal(err)
	}
	if userMsgs != 1 || replies != 1 {
		t.Fatalf("after reload: %d user messages and %d replies, want 1 and 1", userMsgs, replies)
	}

	// The connection drops while a reply is being written: the page
	// reconnects by itself and shows the reply it missed.
	g2 := newGate()
	e2 := newEnv(t, g2, WSOptions{}, nil, nil)
	err = chromedp.Do(ctx,
		chromedp.Navigate(e2.srv.URL+"/?user=bea"),
		waitText("#status", "online as bea"),
		chromedp.SendKeys("#text", "are you there"),
		chromedp.Click("#send"),
	)
	if err != nil {
		t.Fatalf("second page: %v", err)
	}
	<-g2.started
	e2.ws.dropAll(websocket.CloseServiceRestart)
	close(g2.release)
	if err := chromedp.Do(ctx,
		waitText("#status", "offline"),
		waitText("#status", "online as bea"),
		waitText(".msg.assistant", "echo: are you there (history: 0)"),
	); err != nil {
		t.Fatalf("reconnect: %v", err)
	}

	// New conversation.
	if err := chromedp.Do(ctx,
		chromedp.Click("#reset"),
		waitText(".notice", "New conversation"),
		chromedp.SendKeys("#text", "fresh"),
		chromedp.Click("#send"),
		waitText(".msg.assistant", "echo: fresh (history: 0)"),
	); err != nil {
		t.Fatalf("new conversation: %v", err)
	}

	// Busy mode interrupt: a second message cuts the first one's turn,
	// whose partial text stays with an "interrupted" mark; one reply then
	// answers both.
	g4 := newGate()
	e4 := newEnv(t, g4, WSOptions{}, map[string]sessions.Policy{
		Channel: {MaxHistory: 100, Busy: sessions.BusyPolicy{Mode: sessions.BusyInterrupt}},
	}, nil)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(e4.srv.URL+"/?user=dee"),
		waitText("#status", "online as dee"),
		sendText("one"),
		waitText(".msg.assistant.streaming", "partial"),
	); err != nil {
		t.Fatalf("interrupt, first message: %v", err)
	}
	<-g4.started
	if err := chromedp.Do(ctx, sendText("two"), waitText(".msg.assistant.interrupted", "partial")); err != nil {
		t.Fatalf("interrupt, second message: %v", err)
	}
	<-g4.started // the turn answering both
	close(g4.release)
	if err := chromedp.Do(ctx, waitText(".msg.assistant", "two (history: 0)")); err != nil {
		t.Fatalf("interrupt, the reply to both: %v", err)
	}
	msgs, err := pageMessages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 4 || msgs[0].Text != "one" || msgs[1].Text != "partial " || !strings.Contains(msgs[1].Class, "interrupted") ||
		!strings.Contains(msgs[1].After, "interrupted") || msgs[2].Text != "two" || msgs[3].Text != "echo: one\ntwo (history: 0)" ||
		strings.Contains(msgs[0].Class, "waiting") || strings.Contains(msgs[2].Class, "waiting") {
		t.Fatalf("interrupt: the page shows %+v", msgs)
	}

	// Busy mode collect: three messages sent while a turn runs are
	// answered by one reply, shown once, after the last of them, and none
	// of them is left waiting.
	g3 := newGate()
	e3 := newEnv(t, g3, WSOptions{}, map[string]sessions.Policy{
		Channel: {MaxHistory: 100, Busy: sessions.BusyPolicy{Mode: sessions.BusyCollect}},
	}, nil)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(e3.srv.URL+"/?user=cy"),
		waitText("#status", "online as cy"),
		sendText("first"),
		waitText(".msg.assistant.streaming", "partial"),
	); err != nil {
		t.Fatalf("burst, first message: %v", err)
	}
	<-g3.started // the first turn runs until released
	if err := chromedp.Do(ctx,
		sendText("two"), sendText("three"), sendText("four"),
		// All four stored (acknowledged), none answered yet.
		waitJS(`document.querySelectorAll('.msg.user.waiting').length === 4`),
	); err != nil {
		t.Fatalf("burst: %v", err)
	}
	close(g3.release)
	if err := chromedp.Do(ctx,
		waitText(".msg.assistant", "four (history: 2)"),
		waitJS(`document.querySelectorAll('.msg.user.waiting, .msg.user.pending').length === 0`),
	); err != nil {
		t.Fatalf("burst reply: %v", err)
	}
	msgs, err = pageMessages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, m := range msgs {
		texts = append(texts, m.Text)
	}
	want := []string{"first", "echo: first (history: 0)", "two", "three", "four", "echo: two\nthree\nfour (history: 2)"}
	if strings.Join(texts, "|") != strings.Join(want, "|") {
		t.Fatalf("burst: the page shows %q, want %q", texts, want)
	}
	g3.mu.Lock()
	calls := g3.calls
	g3.mu.Unlock()
	if calls != 2 {
		t.Fatalf("burst: %d agent calls, want 2", calls)
	}

	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 300 || b.Dy() < 300 {
		t.Fatalf("screenshot is %v", b)
	}
	if dir := os.Getenv("CHATGATE_SCREENSHOT_DIR"); dir != "" {
		os.WriteFile(filepath.Join(dir, "webchat.png"), shot, 0o644)
	}
}
