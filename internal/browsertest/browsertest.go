// Package browsertest runs pages in a real headless Chromium through
// chromedp for tests: one browser per test, with the waits the page tests
// share.
package browsertest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
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

// Download runs steps (such as a click on a download link) with the
// browser's downloads going to a new temporary directory, and returns the
// name the page suggested for the first download and its bytes once it
// completed. A cancelled download fails the test.
func Download(t testing.TB, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) (name string, data []byte) {
	t.Helper()
	dir := t.TempDir()
	begin := chromedp.Events(ctx, browser.DownloadWillBegin)
	progress := chromedp.Events(ctx, browser.DownloadProgress)
	allow := chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		_, err := chromedp.Call(ctx, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
			Behavior: browser.SetDownloadBehaviorBehaviorAllowAndName, DownloadPath: dir, EventsEnabled: new(true)})
		return err
	})
	if err := chromedp.Do(ctx, append([]chromedp.Action[chromedp.Void]{allow}, steps...)...); err != nil {
		t.Fatalf("download: %v", err)
	}
	for ev, err := range begin {
		if err != nil {
			t.Fatalf("download: %v", err)
		}
		name = ev.SuggestedFilename
		break
	}
	var guid string
	for ev, err := range progress {
		if err != nil {
			t.Fatalf("download: %v", err)
		}
		if ev.State == browser.DownloadProgressStateCanceled {
			t.Fatalf("the download of %q was cancelled", name)
		}
		if ev.State == browser.DownloadProgressStateCompleted {
			guid = ev.GUID
			break
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, guid))
	if err != nil {
		t.Fatal(err)
	}
	return name, data
}
