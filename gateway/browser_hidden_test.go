package gateway

import (
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/chatgate/chatgate/agent"
)

// Elements the page hides are not shown: the strip of pictures waiting
// to be sent is a flex box, which would otherwise show an empty bar.
func TestWebPageHiddenIsHidden(t *testing.T) {
	e := newEnv(t, agent.Echo{}, WSOptions{}, nil, nil)
	ctx := browser(t)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(e.srv.URL+"/?user=max"),
		waitText("#status", "online as max"),
		waitJS(`document.getElementById('images').hidden && getComputedStyle(document.getElementById('images')).display === 'none'`),
		waitJS(`document.getElementById('stop').hidden && getComputedStyle(document.getElementById('stop')).display === 'none'`),
	); err != nil {
		t.Fatal(err)
	}
}
