package gateway

import (
	"image"
	"image/color"
	"image/png"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/chatgate/chatgate/agent"
)

// A picture whose frame is over max_frame_bytes is not sent: the page says
// so and keeps it in the composer, instead of sending a frame that closes
// the connection (1009) and resending it on every reconnect.
func TestWebPagePictureOverFrameLimit(t *testing.T) {
	e := newEnv(t, agent.Echo{}, WSOptions{MaxFrameBytes: 8 << 10}, nil, nil)
	ctx := browser(t)
	// Noise does not compress: a PNG of about 30 KB.
	img := image.NewRGBA(image.Rect(0, 0, 100, 100))
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range img.Pix {
		img.Pix[i] = uint8(rng.IntN(256))
	}
	img.Set(0, 0, color.RGBA{A: 255})
	file := filepath.Join(t.TempDir(), "big.png")
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := png.Encode(f, img); err != nil {
		t.Fatal(err)
	}
	f.Close()
	err = chromedp.Do(ctx,
		chromedp.Navigate(e.srv.URL+"/?user=max"),
		waitText("#status", "online as max"),
		chromedp.SetUploadFiles("#file", []string{file}),
		waitJS(`document.querySelectorAll('#images img').length === 1`),
		chromedp.Click("#send"),
		waitText(".notice", "too large for the server (at most 8 KiB"),
	)
	if err != nil {
		t.Fatalf("sending a picture over the limit: %v", err)
	}
	// Still connected, nothing stored or waiting; the picture is still
	// in the composer, and can be taken out.
	err = chromedp.Do(ctx,
		waitText("#status", "online as max"),
		waitJS(`document.querySelectorAll('#images img').length === 1 && document.querySelectorAll('.msg').length === 0`),
		chromedp.Click("#images button"),
		waitJS(`document.getElementById('images').hidden`),
		sendText("just text"),
		waitText(".msg.assistant", "echo: just text (history: 0)"),
	)
	if err != nil {
		t.Fatalf("after the refused picture: %v", err)
	}
	if n := e.ws.Connections(); n != 1 {
		t.Fatalf("%d connections, want the page's one", n)
	}
}
