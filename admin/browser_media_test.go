package admin

import (
	"bytes"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/chatgate/chatgate/internal/browsertest"
	"github.com/chatgate/chatgate/internal/mcptest"
)

// TestAdminDownloadsToolMediaInBrowser: in a transcript, the Download
// button of each item a tool returned saves its bytes, under its name.
func TestAdminDownloadsToolMediaInBrowser(t *testing.T) {
	e, out := mediaTurn(t)
	ctx := browsertest.New(t, 1200, 900)
	err := chromedp.Do(ctx,
		signIn(e),
		browsertest.WaitText("#sessions td", "websocket:ann"),
		chromedp.Click("#sessions tr"),
		browsertest.WaitText("#transcript .msg-media", "report.pdf"),
		browsertest.WaitJS(`document.querySelectorAll('#transcript .msg-media button').length === 2`),
	)
	if err != nil {
		t.Fatalf("transcript: %v", err)
	}
	for i, want := range []struct {
		button, name string
		data         []byte
	}{
		{"#transcript .msg-call + .msg-media button", "image-" + out.Reply.Media[0].ID + ".png", mcptest.PNG}, // Chrome adds the extension of the type,
		{"#transcript .msg-media + .msg-media button", "report.pdf", mcptest.PDF},
	} {
		name, data := browsertest.Download(t, ctx, chromedp.Click(want.button))
		if name != want.name || !bytes.Equal(data, want.data) {
			t.Fatalf("item %d downloaded as %q, %d bytes; want %q, %d bytes", i, name, len(data), want.name, len(want.data))
		}
	}
}
