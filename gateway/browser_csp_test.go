package gateway

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/chatgate/chatgate/agent"
)

// The page shows pictures only from object URLs of the user's own files
// (blob:); a data: image — which the page never makes, and which a
// sanitizer slip would let a reply carry, as a tracking pixel's or a
// spoofed picture's way in — does not load.
func TestWebPagePolicyImages(t *testing.T) {
	e := newEnv(t, agent.Echo{}, WSOptions{}, nil, nil)
	ctx := browser(t)
	png64 := base64.StdEncoding.EncodeToString(testPNG(t, 12, 10))
	load := func(src string) string {
		return `new Promise(resolve => {
			const i = document.createElement('img');
			i.onload = () => resolve('loaded ' + i.naturalWidth);
			i.onerror = () => resolve('refused');
			i.src = ` + src + `;
			document.body.appendChild(i);
		})`
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(e.srv.URL+"/?user=pol"), waitText("#status", "online as pol")); err != nil {
		t.Fatal(err)
	}
	blob, err := chromedp.Run(ctx, chromedp.Evaluate[string](load(`URL.createObjectURL(new Blob([Uint8Array.from(atob('`+png64+`'), c => c.charCodeAt(0))], {type: 'image/png'}))`),
		chromedp.EvalAwaitPromise))
	if err != nil || blob != "loaded 12" {
		t.Fatalf("blob: image: %q, %v", blob, err)
	}
	data, err := chromedp.Run(ctx, chromedp.Evaluate[string](load(`'data:image/png;base64,`+png64+`'`), chromedp.EvalAwaitPromise))
	if err != nil || !strings.HasPrefix(data, "refused") {
		t.Fatalf("data: image: %q, %v", data, err)
	}
}
