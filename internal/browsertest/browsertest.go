// Package browsertest runs pages in a real headless Chromium through
// chromedp for tests: one browser per test, with the waits the page tests
// share.
package browsertest

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Chromium finds a Chromium binary: $CHROMIUM_PATH, /usr/bin/chromium, or
// one on PATH; "" when there is none.
func Chromium() string {
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

// New starts a headless Chromium with a window of width × height and a
// profile of its own, and returns its context, bounded to 90 s (a hang
// guard) and closed when the test ends. Without Chromium the test is
// skipped.
func New(t testing.TB, width, height int) context.Context {
	t.Helper()
	bin := Chromium()
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
		chromedp.WindowSize(width, height),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	return ctx
}

// WaitText waits until some element matching sel contains text.
func WaitText(sel, text string) chromedp.Action[chromedp.Void] {
	return WaitJS(`Array.from(document.querySelectorAll(` + JSString(sel) + `)).some(e => e.textContent.includes(` + JSString(text) + `))`)
}

// WaitJS waits until the JavaScript expression is true.
func WaitJS(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(50*time.Millisecond))
}

// JSString quotes s as a JavaScript string literal.
func JSString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
