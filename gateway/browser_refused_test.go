package gateway

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/chatgate/chatgate/agent"
)

// A message the server refuses for what it is (here: text over the
// input limit) is marked on the page and no longer resent: it is not
// left pending, refused again on every reconnect.
func TestRefusedMessageIsNotResent(t *testing.T) {
	e := newEnv(t, agent.Echo{}, WSOptions{MaxFrameBytes: 1 << 20}, nil, nil)
	ctx := browser(t)
	err := chromedp.Do(ctx,
		chromedp.Navigate(e.srv.URL+"/?user=ida"),
		waitText("#status", "online as ida"),
	)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 70<<10) // over the 64 KiB input limit
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById('text').value = '`+long+`'; document.getElementById('send').click(); true`)); err != nil {
		t.Fatal(err)
	}
	err = chromedp.Do(ctx,
		waitText(".notice", "message"),
		waitJS(`document.querySelectorAll('.msg.user.failed').length === 1`),
		waitJS(`localStorage.getItem('chatgate.pending') === '[]'`),
		// Nothing is resent after a reconnect, and the page goes on.
		chromedp.Reload(),
		waitText("#status", "online as ida"),
		sendText("short"),
		waitText(".msg.assistant", "echo: short (history: 0)"),
	)
	if err != nil {
		t.Fatal(err)
	}
	notices, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('.notice')).map(n => n.textContent)`))
	if err != nil || len(notices) != 0 {
		t.Fatalf("notices after the reload: %q, %v", notices, err)
	}
}

// An error about a message names it, also when the frame itself was
// refused.
func TestMessageErrorsCarryTheID(t *testing.T) {
	e := newEnv(t, agent.Echo{}, WSOptions{MaxFrameBytes: 1 << 20}, nil, nil)
	c, _ := e.connect(map[string]any{"user": "jo"})
	c.send(map[string]any{"type": "message", "id": "m-long", "text": strings.Repeat("y", 70<<10)})
	if f := c.expect("error"); f["code"] != "too_large" || f["id"] != "m-long" {
		t.Fatalf("too long: %v", f)
	}
	c.send(map[string]any{"type": "message", "id": "m-pic", "attachments": []map[string]any{{"kind": "image", "mime": "image/png", "data": "aGVsbG8="}}})
	if f := c.expect("error"); f["code"] != "bad_frame" || f["id"] != "m-pic" {
		t.Fatalf("bad picture: %v", f)
	}
	c.send(map[string]any{"type": "stop"})
	if f := c.expect("error"); f["code"] != "not_found" || f["id"] != nil {
		t.Fatalf("stop: %v", f)
	}
}
