package gateway

import (
	"bytes"
	"context"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/chatgate/chatgate/internal/browsertest"
	"github.com/chatgate/chatgate/internal/mcptest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/tools"
)

// The web page fetches a tool's media with the session in a header (the
// gateway takes no ?session= in a URL) and shows each from a blob: URL
// under the page's policy: the picture in the reply, the audio in a
// player, the PDF as a download with its name. Reloaded, it shows them
// again from the history; a new conversation drops them and revokes
// their URLs.
func TestWebPageShowsToolMedia(t *testing.T) {
	e, _ := newToolEnv(t, tools.ApproveAuto, toolCall("call-1", mcptest.Media, map[string]any{"audio": true}))
	ctx := browser(t)
	const img = `document.querySelector('.msg.assistant .media img.tool-image')`
	const link = `document.querySelector('.msg.assistant .media a.download')`
	const audio = `document.querySelector('.msg.assistant .media audio.tool-audio')`
	loaded := chromedp.Steps(
		// The 2×2 picture loaded from a blob: URL.
		waitJS(`(() => { const i = `+img+`; return !!i && i.src.startsWith('blob:') && i.complete && i.naturalWidth === 2; })()`),
		waitJS(`(() => { const a = `+link+`; return !!a && a.href.startsWith('blob:') && a.getAttribute('download') === 'report.pdf' && a.textContent.includes('report.pdf'); })()`),
		// The clip plays: the player read its length (a tenth of a second).
		waitJS(`(() => { const a = `+audio+`; return !!a && a.src.startsWith('blob:') && a.controls && a.readyState >= 1 && Math.abs(a.duration - 0.1) < 0.01; })()`),
	)
	err := chromedp.Do(ctx,
		chromedp.Navigate(e.srv.URL+"/?user=ivy"),
		waitText("#status", "online as ivy"),
		sendText("draw it"),
		loaded,
	)
	if err != nil {
		t.Fatal(err)
	}
	// No element names the resume token.
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('[src*="session"], [href*="session"]').length`)); err != nil || n != 0 {
		t.Fatalf("%d elements name the session (%v)", n, err)
	}
	// The download's bytes are typed as bytes, not as the tool said: a
	// link opened in a tab of the page's origin renders nothing of a tool.
	typ, err := chromedp.Run(ctx, chromedp.Evaluate[string](link+`.dataset.type`))
	if err != nil || typ != "application/octet-stream" {
		t.Fatalf("the download's blob is typed %q (%v)", typ, err)
	}
	// The link downloads the file's bytes, by its name.
	name, data := browsertest.Download(t, ctx, chromedp.Click(".msg.assistant .media a.download"))
	if name != "report.pdf" || !bytes.Equal(data, mcptest.PDF) {
		t.Fatalf("downloaded %q: %q", name, data)
	}
	// Reloaded, the page shows them again from the history.
	if err := chromedp.Do(ctx, chromedp.Reload(), loaded); err != nil {
		t.Fatalf("after a reload: %v", err)
	}
	// A new conversation drops them: their object URLs are revoked (a
	// picture loads from one no more).
	url, err := chromedp.Run(ctx, chromedp.Evaluate[string](img+`.src`))
	if err != nil {
		t.Fatal(err)
	}
	loads := `new Promise(ok => { const i = new Image(); i.onload = () => ok(true); i.onerror = () => ok(false); i.src = ` + jsString(url) + `; })`
	if live, err := chromedp.Run(ctx, chromedp.Evaluate[bool](loads, chromedp.EvalAwaitPromise)); err != nil || !live {
		t.Fatalf("the shown picture's URL %s does not load (%v)", url, err)
	}
	err = chromedp.Do(ctx,
		chromedp.Click("#reset"),
		waitJS(`!document.querySelector('.msg.assistant')`),
	)
	if err != nil {
		t.Fatal(err)
	}
	if live, err := chromedp.Run(ctx, chromedp.Evaluate[bool](loads, chromedp.EvalAwaitPromise)); err != nil || live {
		t.Fatalf("the dropped picture's URL %s still loads (%v)", url, err)
	}
}

// An item that cannot be fetched leaves a plain note where it would be,
// and a reply whose media could not be read says so; the page goes on.
func TestWebPageSaysWhenToolMediaCannotLoad(t *testing.T) {
	e, _ := newToolEnv(t, tools.ApproveAuto, toolCall("call-1", mcptest.Media, map[string]any{}))
	ctx := browser(t)
	err := chromedp.Do(ctx,
		chromedp.Navigate(e.srv.URL+"/?user=ivy"),
		waitText("#status", "online as ivy"),
	)
	if err != nil {
		t.Fatal(err)
	}
	// A reply delivered outside a live turn (as the rescuer's are): one
	// item names no stored file (404), and another reply's media were
	// unread.
	e.ws.deliverStored(context.Background(), sessions.Delivery{SessionKey: sessions.WebSocketKey("ivy"), Reply: sessions.Reply{
		Seq: 1000, Text: "here it is", Status: "ok",
		Media: []sessions.Media{{ID: "gone", Kind: "file", Mime: "application/pdf", Name: "lost.pdf", Size: 10}}}})
	e.ws.deliverStored(context.Background(), sessions.Delivery{SessionKey: sessions.WebSocketKey("ivy"), Reply: sessions.Reply{
		Seq: 1002, Text: "and this", Status: "ok", MediaUnread: true}})
	err = chromedp.Do(ctx,
		waitText(".msg.assistant .media .media-failed", "could not load lost.pdf"),
		waitText(".msg.assistant .media .media-failed.unread", "could not be loaded now"),
		// The page still works.
		sendText("draw it"),
		waitJS(`(() => { const i = document.querySelector('.msg.assistant .media img.tool-image'); return !!i && i.complete && i.naturalWidth === 2; })()`),
	)
	if err != nil {
		t.Fatal(err)
	}
}
