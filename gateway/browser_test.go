package gateway

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/gorilla/websocket"
)

// chromium finds a Chromium binary: $CHROMIUM_PATH, /usr/bin/chromium, or
// one on PATH.
func chromium() string {
	if p := os.Getenv("CHROMIUM_PATH"); p != "" {
		return p
	}
	for _, name := range []string{"/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

func browser(t *testing.T) context.Context {
	t.Helper()
	bin := chromium()
	if bin == "" {
		t.Skip("browser test skipped: no Chromium found (apt-get install chromium, or set CHROMIUM_PATH)")
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.WindowSize(390, 844), // a phone-width screen
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	return ctx
}

// waitText waits until some element matching sel contains text.
func waitText(sel, text string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](`Array.from(document.querySelectorAll(`+jsString(sel)+`)).some(e => e.textContent.includes(`+jsString(text)+`))`,
		chromedp.WithPollingInterval(50*time.Millisecond))
}

func jsString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

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
