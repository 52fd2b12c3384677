package gateway

import (
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/chatgate/chatgate/agent"
)

// A message sent right after "Previous conversation" (before the reset
// frame came) is stored in the reopened conversation: the page, switching
// to it, keeps showing the message, and its reply after it.
func TestMessageRightAfterPreviousStaysShown(t *testing.T) {
	e := newEnv(t, agent.Echo{}, WSOptions{}, nil, nil)
	ctx := browser(t)
	if err := chromedp.Do(ctx,
		twoConversations(e.srv.URL, "gil"),
	); err != nil {
		t.Fatalf("before going back: %v", err)
	}
	// Both frames go out in one task: the reset frame can only come after.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => {
		document.getElementById('previous').click();
		document.getElementById('text').value = 'three';
		document.getElementById('send').click();
		return true;
	})()`)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx,
		waitText(".notice", "Back to your previous conversation"),
		waitText(".msg.assistant", "echo: three (history: 2)"),
	); err != nil {
		t.Fatalf("going back: %v", err)
	}
	msgs, err := pageMessages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, m := range msgs {
		texts = append(texts, m.Text)
	}
	want := []string{"one", "echo: one (history: 0)", "three", "echo: three (history: 2)"}
	if len(texts) != len(want) {
		t.Fatalf("the page shows %q, want %q", texts, want)
	}
	for i := range want {
		if texts[i] != want[i] {
			t.Fatalf("the page shows %q, want %q", texts, want)
		}
	}
	if msgs[2].Class != "msg user" {
		t.Fatalf("the message is shown as %q, want answered", msgs[2].Class)
	}
}
