package gateway

import (
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/chatgate/chatgate/internal/mcptest"
	"github.com/chatgate/chatgate/tools"
)

// The web page shows a tool's picture in the reply (fetched with the
// session, under the page's policy) and offers its PDF as a download.
func TestWebPageShowsToolMedia(t *testing.T) {
	e, _ := newToolEnv(t, tools.ApproveAuto, toolCall("call-1", mcptest.Media, map[string]any{}))
	ctx := browser(t)
	err := chromedp.Do(ctx,
		chromedp.Navigate(e.srv.URL+"/?user=ivy"),
		waitText("#status", "online as ivy"),
		sendText("draw it"),
		// The 2×2 picture loaded: the fetch was authenticated, and the
		// page's policy allows it.
		waitJS(`(() => { const i = document.querySelector('.msg.assistant .media img.tool-image'); return !!i && i.complete && i.naturalWidth === 2; })()`),
		waitJS(`(() => { const a = document.querySelector('.msg.assistant .media a.download'); return !!a && a.getAttribute('download') === 'report.pdf' && a.textContent.includes('report.pdf'); })()`),
	)
	if err != nil {
		t.Fatal(err)
	}
	// The link fetches the file's bytes.
	pdf, err := chromedp.Run(ctx, chromedp.Evaluate[string](`fetch(document.querySelector('.msg.assistant .media a.download').href).then(r => r.text())`,
		chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	if pdf != string(mcptest.PDF) {
		t.Fatalf("the download's bytes = %q", pdf)
	}
	// Reloaded, the page shows them again from the history.
	err = chromedp.Do(ctx,
		chromedp.Reload(),
		waitJS(`(() => { const i = document.querySelector('.msg.assistant .media img.tool-image'); return !!i && i.complete && i.naturalWidth === 2; })()`),
		waitJS(`!!document.querySelector('.msg.assistant .media a.download')`),
	)
	if err != nil {
		t.Fatalf("after a reload: %v", err)
	}
}
