package gateway

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/chatgate/chatgate/agent"
)

func testPNG(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for x := range w {
		img.Set(x, x%h, color.RGBA{R: 200, A: 255})
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestWebPageSendsPictures(t *testing.T) {
	e := newEnv(t, agent.Echo{}, WSOptions{MaxFrameBytes: 1 << 20}, nil, nil)
	ctx := browser(t)
	pasted, picked := testPNG(t, 40, 30), testPNG(t, 64, 48)
	file := filepath.Join(t.TempDir(), "picked.png")
	if err := os.WriteFile(file, picked, 0o600); err != nil {
		t.Fatal(err)
	}
	// Paste a picture into the message, as a clipboard with an image file.
	paste := `(() => {
		const bytes = Uint8Array.from(atob('` + base64.StdEncoding.EncodeToString(pasted) + `'), c => c.charCodeAt(0));
		const dt = new DataTransfer();
		dt.items.add(new File([bytes], 'pasted.png', {type: 'image/png'}));
		document.getElementById('text').dispatchEvent(new ClipboardEvent('paste', {clipboardData: dt, bubbles: true, cancelable: true}));
		return true;
	})()`
	err := chromedp.Do(ctx,
		chromedp.Navigate(e.srv.URL+"/?user=ivy"),
		waitText("#status", "online as ivy"),
	)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](paste)); err != nil {
		t.Fatalf("paste: %v", err)
	}
	err = chromedp.Do(ctx,
		waitJS(`document.querySelectorAll('#images img').length === 1 && !document.getElementById('images').hidden`),
		sendText("what is this"),
		waitText(".msg.assistant", fmt.Sprintf("echo: what is this [image image/png, %d bytes] (history: 0)", len(pasted))),
		// The user's own message shows the picture (loaded: the page's
		// policy allows it), and the composer is empty again.
		waitJS(`(() => { const i = document.querySelector('.msg.user img.attached'); return i && i.complete && i.naturalWidth === 40; })()`),
		waitJS(`document.getElementById('images').hidden && document.querySelectorAll('#images img').length === 0`),
	)
	if err != nil {
		t.Fatalf("pasted picture: %v", err)
	}
	// Pick one with the file picker and send it alone.
	err = chromedp.Do(ctx,
		chromedp.SetUploadFiles("#file", []string{file}),
		waitJS(`document.querySelectorAll('#images img').length === 1`),
		chromedp.Click("#send"),
		waitText(".msg.assistant", fmt.Sprintf("echo: [image image/png, %d bytes] (history: 2)", len(picked))),
		waitJS(`document.querySelectorAll('.msg.user img.attached').length === 2`),
	)
	if err != nil {
		t.Fatalf("picked picture: %v", err)
	}
	// After a reload, history names the pictures.
	if err := chromedp.Do(ctx, chromedp.Reload(), waitText("#status", "online as ivy"),
		waitJS(`document.querySelectorAll('.msg.user .attachment').length === 2`)); err != nil {
		t.Fatalf("reload: %v", err)
	}
}
