package gateway

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"

	"github.com/chatgate/chatgate/agent"
)

// mdAgent replies with fixed Markdown. It first streams pieces (on its
// first call only, when firstOnly is set); when release is set it then
// tells streamed and waits for release before returning final, the text
// that is stored.
type mdAgent struct {
	pieces    []string
	firstOnly bool
	final     string
	streamed  chan struct{}
	release   chan struct{}

	mu    sync.Mutex
	calls int
}

func (a *mdAgent) Name() string  { return "md" }
func (a *mdAgent) Model() string { return "md" }
func (a *mdAgent) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	a.mu.Lock()
	a.calls++
	stream := a.calls == 1 || !a.firstOnly
	a.mu.Unlock()
	for _, p := range a.pieces {
		if onDelta != nil && stream {
			onDelta(p)
		}
	}
	if a.release != nil {
		a.streamed <- struct{}{}
		select {
		case <-ctx.Done():
			return agent.Reply{}, ctx.Err()
		case <-a.release:
		}
	}
	return agent.Reply{Messages: []agent.Message{{Role: agent.RoleAssistant, Content: a.final}}, Model: "md"}, nil
}

// hostile is a reply that tries every way in: raw HTML with event
// handlers, script links, a script in a code block, an image that would
// make a request.
const hostile = "Look <img src=x onerror=\"document.title='pwned';window.pwned=1\"> at " +
	"[x](javascript:void(document.title='pwned')) and <b onmouseover=\"window.pwned=1\">hover me</b>.\n\n" +
	"<script>window.pwned=1</script>\n\n" +
	"<a href=\"javascript:window.pwned=1\">raw link</a> <iframe src=\"javascript:window.pwned=1\"></iframe>\n\n" +
	"[site](https://example.com/a_(b)) [mail](mailto:ann@example.com) [rel](/ws) [data](data:text/html,hi) [ent](jav&#x61;script:window.pwned=1) [case](JaVaScRiPt:window.pwned=1)\n\n" +
	"```html\n<script>window.pwned=1</script>\n```\n\n" +
	"**bold** _it_ ~~gone~~ `a<b>&`\n\n" +
	"- one\n- two\n\n" +
	"> quoted\n\n" +
	"## Heading\n\n" +
	"| k | v |\n|---|---|\n| 1 | 2 |\n\n" +
	"![pic](https://example.com/p.png)\n"

// renderCheck is what the page shows of a reply, as checkPage reads it.
type renderCheck struct {
	Pwned     bool     `json:"pwned"`
	Bad       int      `json:"bad"`     // img, script, iframe, object, embed, style, input elements
	OnAttrs   []string `json:"onAttrs"` // elements with on… attributes
	Hrefs     []string `json:"hrefs"`
	BadLinks  []string `json:"badLinks"` // links without target=_blank rel="noopener noreferrer"
	Text      string   `json:"text"`
	Strong    string   `json:"strong"`
	Em        string   `json:"em"`
	Del       string   `json:"del"`
	Inline    string   `json:"inline"`
	Items     int      `json:"items"`
	Quote     string   `json:"quote"`
	Heading   string   `json:"heading"`
	Cells     int      `json:"cells"`
	CodeHTML  string   `json:"codeHTML"`
	CodeBlock int      `json:"codeBlocks"`
	Buttons   int      `json:"buttons"`
}

// checkPage fires every event handler an element could carry, then reads
// the last reply.
const checkPage = `(() => {
  const all = Array.from(document.querySelectorAll('#log *'));
  for (const el of all) { el.dispatchEvent(new MouseEvent('mouseover', {bubbles: true})); }
  const msgs = document.querySelectorAll('#log .msg.assistant');
  const m = msgs[msgs.length - 1];
  const q = s => { const e = m.querySelector(s); return e ? e.textContent : ''; };
  return {
    pwned: window.pwned !== undefined || document.title !== 'chatgate',
    bad: document.querySelectorAll('#log img, #log script, #log iframe, #log object, #log embed, #log style, #log input').length,
    onAttrs: all.filter(e => Array.from(e.attributes).some(a => a.name.startsWith('on'))).map(e => e.outerHTML),
    hrefs: Array.from(m.querySelectorAll('[href]')).map(a => a.getAttribute('href')),
    badLinks: Array.from(m.querySelectorAll('a[href]')).filter(a => a.target !== '_blank' || a.rel !== 'noopener noreferrer').map(a => a.outerHTML),
    text: m.textContent,
    strong: q('strong'), em: q('em'), del: q('del'), inline: q('p > code'),
    items: m.querySelectorAll('ul > li').length,
    quote: q('blockquote'), heading: q('h2'),
    cells: m.querySelectorAll('table td').length,
    codeHTML: q('.code pre > code.language-html'),
    codeBlocks: m.querySelectorAll('pre > code').length,
    buttons: m.querySelectorAll('.code button.copy').length,
  };
})()`

// checkHostile asserts that the hostile reply ran nothing, loaded
// nothing, kept only safe links and still shows everything as text.
func checkHostile(t *testing.T, ctx context.Context, where string) {
	t.Helper()
	c, err := chromedp.Run(ctx, chromedp.Evaluate[renderCheck](checkPage))
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	if c.Pwned {
		t.Errorf("%s: the reply ran code", where)
	}
	if c.Bad != 0 {
		t.Errorf("%s: %d img/script/iframe/input elements in the log", where, c.Bad)
	}
	if len(c.OnAttrs) != 0 {
		t.Errorf("%s: elements with event handler attributes: %q", where, c.OnAttrs)
	}
	wantHrefs := []string{"https://example.com/a_(b)", "mailto:ann@example.com", "https://example.com/p.png"}
	if strings.Join(c.Hrefs, " ") != strings.Join(wantHrefs, " ") {
		t.Errorf("%s: links %q, want only %q", where, c.Hrefs, wantHrefs)
	}
	if len(c.BadLinks) != 0 {
		t.Errorf("%s: links without target=_blank rel=\"noopener noreferrer\": %q", where, c.BadLinks)
	}
	for _, s := range []string{
		`<img src=x onerror="document.title='pwned';window.pwned=1">`,
		`<b onmouseover="window.pwned=1">hover me</b>`,
		`<script>window.pwned=1</script>`,
		`<a href="javascript:window.pwned=1">raw link</a>`,
		"Look ", " at x and ", "site mail rel data ent case", "pic",
	} {
		if !strings.Contains(c.Text, s) {
			t.Errorf("%s: the reply's text lacks %q; it shows %q", where, s, c.Text)
		}
	}
	if c.Strong != "bold" || c.Em != "it" || c.Del != "gone" || c.Inline != "a<b>&" || c.Items != 2 ||
		!strings.Contains(c.Quote, "quoted") || c.Heading != "Heading" || c.Cells != 2 {
		t.Errorf("%s: Markdown not rendered: %+v", where, c)
	}
	if c.CodeBlock != 1 || c.CodeHTML != "<script>window.pwned=1</script>\n" || c.Buttons != 1 {
		t.Errorf("%s: code block: %d blocks, %d copy buttons, html code %q", where, c.CodeBlock, c.Buttons, c.CodeHTML)
	}
}

// saveScreenshot writes the page to $CHATGATE_SCREENSHOT_DIR, when set, to
// look at.
func saveScreenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("CHATGATE_SCREENSHOT_DIR")
	if dir == "" {
		return
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), shot, 0o644); err != nil {
		t.Fatal(err)
	}
}

// withoutCSP serves h with its Content-Security-Policy header removed, so
// that a test sees what the sanitizer alone lets through.
func withoutCSP(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(dropCSP{w}, r)
	})
}

type dropCSP struct{ http.ResponseWriter }

func (d dropCSP) WriteHeader(code int) {
	d.Header().Del("Content-Security-Policy")
	d.ResponseWriter.WriteHeader(code)
}

func (d dropCSP) Write(b []byte) (int, error) {
	d.Header().Del("Content-Security-Policy")
	return d.ResponseWriter.Write(b)
}

func TestWebPageRendersMarkdownSafely(t *testing.T) {
	ctx := browser(t)
	for _, variant := range []string{"as served", "without CSP"} {
		// The first reply streams; the second comes as a reply frame only.
		ag := &mdAgent{pieces: []string{hostile}, firstOnly: true, final: hostile}
		e := newEnv(t, ag, WSOptions{}, nil, nil)
		url := e.srv.URL
		if variant == "without CSP" {
			// The page's CSP already stops inline handlers; the
			// sanitizer must hold on its own.
			mux := http.NewServeMux()
			mux.Handle("GET /ws", e.ws)
			mux.Handle("GET /", withoutCSP(WebPage()))
			hs := httptest.NewServer(mux)
			t.Cleanup(hs.Close)
			url = hs.URL
		}
		if err := chromedp.Do(ctx,
			chromedp.Navigate(url+"/?user=ann"),
			waitText("#status", "online as ann"),
			sendText("show me"),
			waitJS(`document.querySelector('#log .msg.assistant:not(.streaming) .md') !== null`),
		); err != nil {
			t.Fatalf("%s: %v", variant, err)
		}
		checkHostile(t, ctx, variant+", reply")

		// After a reload the same reply comes from ready's history.
		if err := chromedp.Do(ctx,
			chromedp.Reload(),
			waitText("#status", "online as ann"),
			waitJS(`document.querySelector('#log .msg.assistant .md') !== null`),
		); err != nil {
			t.Fatalf("%s, reload: %v", variant, err)
		}
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#log .msg').length`))
		if err != nil || n != 2 {
			t.Fatalf("%s, reload: %d messages shown (%v), want 2", variant, n, err)
		}
		checkHostile(t, ctx, variant+", history")

		// Another turn, answered without deltas, proves the page went on
		// running: an error event or a handler of the hostile reply would
		// have fired by now.
		if err := chromedp.Do(ctx,
			sendText("again"),
			waitJS(`document.querySelectorAll('#log .msg.assistant:not(.streaming) .md').length === 2`),
		); err != nil {
			t.Fatalf("%s, second turn: %v", variant, err)
		}
		checkHostile(t, ctx, variant+", after another turn")
		if variant == "as served" {
			saveScreenshot(t, ctx, "webchat-markdown.png")
		}
	}
}

func TestWebPageStreamsMarkdown(t *testing.T) {
	ag := &mdAgent{
		pieces: []string{
			"Here is **bo",
			"ld** text:\n\n- a\n- b\n\n```go\nfunc main() {\n",
			"\tprintln(\"<hi>\")\n",
		},
		final:    "Here is **bold** text:\n\n- a\n- b\n\n```go\nfunc main() {\n\tprintln(\"<hi>\")\n}\n```\n\nSee [the docs](https://example.com/docs).\n\n```\n" + strings.Repeat("wide ", 80) + "\n```",
		streamed: make(chan struct{}, 1),
		release:  make(chan struct{}),
	}
	e := newEnv(t, ag, WSOptions{}, nil, nil)
	ctx := browser(t)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(e.srv.URL+"/?user=sam"),
		waitText("#status", "online as sam"),
		sendText("stream it"),
	); err != nil {
		t.Fatal(err)
	}
	<-ag.streamed
	// The agent holds the reply: what is on the page is the streamed text,
	// rendered as it came, the unclosed fence as code.
	type streamView struct {
		Strong string `json:"strong"`
		Items  int    `json:"items"`
		Code   string `json:"code"`
		Copy   int    `json:"copy"`
		Text   string `json:"text"`
	}
	const view = `(() => { const m = document.querySelector('#log .msg.assistant');
	  const q = s => { const e = m.querySelector(s); return e ? e.textContent : ''; };
	  return {strong: q('strong'), items: m.querySelectorAll('li').length, code: q('pre > code.language-go'),
	          copy: m.querySelectorAll('.code button.copy').length, text: m.textContent}; })()`
	if err := chromedp.Do(ctx, waitJS(`(() => { const c = document.querySelector('#log .msg.assistant.streaming pre > code');
	  return c !== null && c.textContent.includes('println'); })()`)); err != nil {
		t.Fatalf("streamed code never rendered: %v", err)
	}
	v, err := chromedp.Run(ctx, chromedp.Evaluate[streamView](view))
	if err != nil {
		t.Fatal(err)
	}
	if v.Strong != "bold" || v.Items != 2 || v.Code != "func main() {\n\tprintln(\"<hi>\")\n" || v.Copy != 1 || strings.Contains(v.Text, "**") {
		t.Fatalf("while streaming the page shows %+v", v)
	}

	close(ag.release)
	if err := chromedp.Do(ctx, waitJS(`document.querySelector('#log .msg.assistant:not(.streaming) a[href]') !== null`)); err != nil {
		t.Fatalf("final reply: %v", err)
	}
	v, err = chromedp.Run(ctx, chromedp.Evaluate[streamView](view))
	if err != nil {
		t.Fatal(err)
	}
	if v.Strong != "bold" || v.Code != "func main() {\n\tprintln(\"<hi>\")\n}\n" || v.Copy != 2 || !strings.Contains(v.Text, "See the docs.") {
		t.Fatalf("the final reply shows %+v", v)
	}
	links, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('#log a')).map(a => a.outerHTML)`))
	if err != nil {
		t.Fatal(err)
	}
	if len(links) != 1 || links[0] != `<a href="https://example.com/docs" target="_blank" rel="noopener noreferrer">the docs</a>` {
		t.Fatalf("links: %q", links)
	}
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#log .msg.assistant').length`))
	if err != nil || n != 1 {
		t.Fatalf("%d reply bubbles (%v), want the streamed one replaced by the final one", n, err)
	}
	// A long code line scrolls inside its block; the page itself stays
	// as wide as the (phone-sized) window.
	wide, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth ||
	  document.getElementById('log').scrollWidth > document.getElementById('log').clientWidth`))
	if err != nil || wide {
		t.Fatalf("a long code line widens the page (%v)", err)
	}
	saveScreenshot(t, ctx, "webchat-streamed.png")

	// The copy button puts the code, and only the code, on the clipboard.
	for _, perm := range []string{"clipboard-read", "clipboard-write"} {
		if _, err := chromedp.CallBrowser(ctx, cdpbrowser.SetPermission, cdpbrowser.SetPermissionParams{
			Permission: &cdpbrowser.PermissionDescriptor{Name: perm},
			Setting:    cdpbrowser.PermissionSettingGranted,
			Origin:     e.srv.URL,
		}); err != nil {
			t.Fatalf("clipboard permission: %v", err)
		}
	}
	if err := chromedp.Do(ctx,
		chromedp.Click("#log .code button.copy"),
		waitText("#log .code button.copy", "Copied"),
	); err != nil {
		t.Fatalf("copy: %v", err)
	}
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`navigator.clipboard.readText()`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("reading the clipboard: %v", err)
	}
	if got != "func main() {\n\tprintln(\"<hi>\")\n}\n" {
		t.Fatalf("copied %q", got)
	}

	// Where the clipboard API is refused (as on a plain-http page that is
	// not localhost) the button copies the old way.
	if _, err := chromedp.CallBrowser(ctx, cdpbrowser.SetPermission, cdpbrowser.SetPermissionParams{
		Permission: &cdpbrowser.PermissionDescriptor{Name: "clipboard-write"},
		Setting:    cdpbrowser.PermissionSettingDenied,
		Origin:     e.srv.URL,
	}); err != nil {
		t.Fatalf("clipboard permission: %v", err)
	}
	refused, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`navigator.clipboard.writeText('x').then(() => false, () => true)`, chromedp.EvalAwaitPromise))
	if err != nil || !refused {
		t.Fatalf("the clipboard API still writes (%v)", err)
	}
	if err := chromedp.Do(ctx,
		chromedp.Click("#log .md > .code:last-of-type button.copy"),
		waitText("#log .md > .code:last-of-type button.copy", "Copied"),
	); err != nil {
		t.Fatalf("copy without the clipboard API: %v", err)
	}
	got, err = chromedp.Run(ctx, chromedp.Evaluate[string](`navigator.clipboard.readText()`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("reading the clipboard: %v", err)
	}
	if got != strings.Repeat("wide ", 80)+"\n" {
		t.Fatalf("copied %q without the clipboard API", got)
	}
}

// TestWebPageScriptsAreLocal checks the page's CSP and that every script it
// loads is a file of its own, served as JavaScript.
func TestWebPageScriptsAreLocal(t *testing.T) {
	e := newEnv(t, agent.Echo{}, WSOptions{}, nil, nil)
	get := func(path string) (*http.Response, string) {
		t.Helper()
		resp, err := http.Get(e.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s = %d", path, resp.StatusCode)
		}
		return resp, string(b)
	}
	resp, page := get("/")
	csp := resp.Header.Get("Content-Security-Policy")
	if !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
		t.Fatalf("CSP %q", csp)
	}
	if regexp.MustCompile(`<script(\s[^>]*)?>[^<]`).MatchString(page) || !strings.Contains(page, `<script src="render.js">`) {
		t.Fatalf("the page has an inline script, or no render.js:\n%s", page)
	}
	srcs := regexp.MustCompile(`<script src="([^"]+)"></script>`).FindAllStringSubmatch(page, -1)
	if len(srcs) < 4 {
		t.Fatalf("scripts %q", srcs)
	}
	for _, m := range srcs {
		if strings.Contains(m[1], ":") || strings.HasPrefix(m[1], "//") {
			t.Fatalf("script %q is not one of the page's own files", m[1])
		}
		resp, body := get("/" + m[1])
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/javascript") || len(body) < 100 {
			t.Fatalf("GET %s: %s, %d bytes", m[1], ct, len(body))
		}
	}
	for _, lic := range []string{"/vendor/LICENSE.marked", "/vendor/LICENSE.dompurify"} {
		get(lic)
	}
}
