package gateway

import (
	"context"
	"encoding/base64"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/chatgate/chatgate/agent"
)

// textOnly is an agent that is not given images.
type textOnly struct{}

func (textOnly) Name() string  { return "text" }
func (textOnly) Model() string { return "text" }
func (textOnly) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	return agent.Echo{}.Reply(ctx, req, nil)
}

// Without a model that reads pictures the page does not offer to send
// them, and a pasted one is answered with a notice instead of being sent
// to a model that cannot see it.
func TestWebPageWithoutVisionOffersNoPictures(t *testing.T) {
	e := newEnv(t, textOnly{}, WSOptions{MaxFrameBytes: 1 << 20}, nil, nil)
	ctx := browser(t)
	paste := `(() => {
		const bytes = Uint8Array.from(atob('` + base64.StdEncoding.EncodeToString(testPNG(t, 20, 10)) + `'), c => c.charCodeAt(0));
		const dt = new DataTransfer();
		dt.items.add(new File([bytes], 'p.png', {type: 'image/png'}));
		document.getElementById('text').dispatchEvent(new ClipboardEvent('paste', {clipboardData: dt, bubbles: true, cancelable: true}));
		return true;
	})()`
	if err := chromedp.Do(ctx, chromedp.Navigate(e.srv.URL+"/?user=lee"), waitText("#status", "online as lee")); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](paste)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx,
		waitText(".notice", "Pictures are not read here"),
		waitJS(`document.getElementById('attach').hidden && document.getElementById('images').hidden`),
		// Hidden for the eye too: no style of the page shows them anyway.
		waitJS(`getComputedStyle(document.getElementById('attach')).display === 'none' && getComputedStyle(document.getElementById('images')).display === 'none'`),
	); err != nil {
		t.Fatal(err)
	}
	// With one that reads them, the button is there.
	e2 := newEnv(t, agent.Echo{}, WSOptions{}, nil, nil)
	if err := chromedp.Do(ctx, chromedp.Navigate(e2.srv.URL+"/?user=lee"), waitText("#status", "online as lee"),
		waitJS(`!document.getElementById('attach').hidden`)); err != nil {
		t.Fatal(err)
	}
}
