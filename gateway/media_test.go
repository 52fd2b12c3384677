package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatgate/chatgate/internal/mcptest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/tools"
)

// fetch GETs path on e's server with query, and returns the status, the
// body and the response.
func (e *env) fetch(path string, query url.Values, header http.Header) (int, []byte, *http.Response) {
	e.t.Helper()
	req, err := http.NewRequest("GET", e.srv.URL+path+"?"+query.Encode(), nil)
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body, resp
}

// A tool's picture and PDF reach a WebSocket client with the reply, and
// fetch with their bytes — by their owner only.
func TestReplyCarriesToolMediaFetchedByItsOwnerOnly(t *testing.T) {
	e, _ := newToolEnv(t, tools.ApproveAuto, toolCall("call-1", mcptest.Media, map[string]any{}))
	c, ready := e.connect(map[string]any{"user": "ann"})
	c.send(map[string]any{"type": "message", "id": "m1", "text": "draw it"})
	frames := c.until("reply")
	r := frames[len(frames)-1]
	atts, _ := r["attachments"].([]any)
	if len(atts) != 2 {
		t.Fatalf("reply = %v, want two attachments", r)
	}
	want := []struct {
		kind, mime, name, typ, disposition string
		data                               []byte
	}{
		{"image", "image/png", "", "image/png", "inline; filename=image-", mcptest.PNG},
		{"file", "application/pdf", "report.pdf", "application/pdf", "attachment; filename=report.pdf", mcptest.PDF},
	}
	session := http.Header{"Authorization": {"Session " + ready["session"].(string)}}
	for i, w := range want {
		a := atts[i].(map[string]any)
		if a["kind"] != w.kind || a["mime"] != w.mime || (w.name != "" && a["name"] != w.name) || num(a["size"]) != int64(len(w.data)) ||
			a["url"] != MediaPath+a["id"].(string) {
			t.Fatalf("attachment %d = %v", i, a)
		}
		status, body, resp := e.fetch(a["url"].(string), nil, session)
		if status != 200 || !bytes.Equal(body, w.data) || resp.Header.Get("Content-Type") != w.typ ||
			resp.Header.Get("X-Content-Type-Options") != "nosniff" || !bytes.HasPrefix([]byte(resp.Header.Get("Content-Disposition")), []byte(w.disposition)) {
			t.Fatalf("fetch %d: %d %q %v", i, status, body, resp.Header)
		}
		// Nobody unauthenticated, and no other principal, gets it.
		if status, _, _ := e.fetch(a["url"].(string), nil, nil); status != http.StatusUnauthorized {
			t.Fatalf("fetch without a session: %d, want 401", status)
		}
		if status, _, _ := e.fetch(a["url"].(string), nil, http.Header{"Authorization": {"Session not-a-token"}}); status != http.StatusUnauthorized {
			t.Fatalf("fetch with an unknown session: %d, want 401", status)
		}
		// The resume token is not taken from the URL, where it would be
		// logged and kept in the browser's history.
		status, _, resp = e.fetch(a["url"].(string), url.Values{"session": {ready["session"].(string)}}, nil)
		if status != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("WWW-Authenticate"), "Session") {
			t.Fatalf("fetch with ?session=: %d %v, want 401", status, resp.Header)
		}
	}
	_, bob := e.connect(map[string]any{"user": "bob"})
	other := http.Header{"Authorization": {"Session " + bob["session"].(string)}}
	if status, _, _ := e.fetch(atts[0].(map[string]any)["url"].(string), nil, other); status != http.StatusNotFound {
		t.Fatalf("another principal's fetch: %d, want 404", status)
	}
	if status, _, _ := e.fetch(MediaPath+"no-such-id", nil, session); status != http.StatusNotFound {
		t.Fatalf("an unknown id: %d, want 404", status)
	}
}

// With auth tokens, the principal's token fetches it too, and another
// principal's token gets 404.
func TestToolMediaFetchedByAuthToken(t *testing.T) {
	e, _ := newToolEnv(t, tools.ApproveAuto, toolCall("call-1", mcptest.Media, map[string]any{}))
	e.ws.Reconfigure(WSSettings{AuthTokens: map[string]string{"ann": "tok-ann", "bob": "tok-bob"}})
	c, _ := e.connect(map[string]any{"token": "tok-ann"})
	c.send(map[string]any{"type": "message", "id": "m1", "text": "draw it"})
	frames := c.until("reply")
	r := frames[len(frames)-1]
	atts, _ := r["attachments"].([]any)
	if len(atts) != 2 {
		t.Fatalf("reply = %v", r)
	}
	u := atts[1].(map[string]any)["url"].(string)
	if status, body, _ := e.fetch(u, nil, http.Header{"Authorization": {"Bearer tok-ann"}}); status != 200 || !bytes.Equal(body, mcptest.PDF) {
		t.Fatalf("owner's fetch: %d %q", status, body)
	}
	if status, _, _ := e.fetch(u, url.Values{"token": {"tok-bob"}}, nil); status != http.StatusNotFound {
		t.Fatalf("another principal's fetch: %d, want 404", status)
	}
}

// A client coming back finds the media on the reply in its history.
func TestResumedHistoryCarriesToolMedia(t *testing.T) {
	e, _ := newToolEnv(t, tools.ApproveAuto, toolCall("call-1", mcptest.Media, map[string]any{}))
	c, ready := e.connect(map[string]any{"user": "ann"})
	c.send(map[string]any{"type": "message", "id": "m1", "text": "draw it"})
	frames := c.until("reply")
	live := frames[len(frames)-1]["attachments"].([]any)
	c.c.Close()
	_, again := e.connect(map[string]any{"user": "ann", "session": ready["session"]})
	var reply map[string]any
	for _, h := range again["history"].([]any) {
		if item := h.(map[string]any); item["role"] == "assistant" {
			reply = item
		}
	}
	atts, _ := reply["attachments"].([]any)
	if len(atts) != 2 {
		t.Fatalf("history reply = %v", reply)
	}
	for i, a := range atts {
		if a.(map[string]any)["url"] != live[i].(map[string]any)["url"] || a.(map[string]any)["id"] == "" {
			t.Fatalf("history attachment %d = %v, live %v", i, a, live[i])
		}
	}
	// The user's own message has none.
	for _, h := range again["history"].([]any) {
		if item := h.(map[string]any); item["role"] == "user" && item["attachments"] != nil {
			t.Fatalf("user item = %v", item)
		}
	}
}

// mediaGate is a mediaHook that tells the test each move of a media
// fetch, keeps count of the bytes held (and the most at once), and holds
// each fetch that has room until the test lets one go (release).
type mediaGate struct {
	waiting, serving, done chan string
	release                chan struct{}
	stop                   chan struct{} // closed when the test ends: nothing is held

	mu        sync.Mutex
	held, max int64
}

func newMediaGate() *mediaGate {
	return &mediaGate{waiting: make(chan string, 16), serving: make(chan string, 16), done: make(chan string, 16), release: make(chan struct{}), stop: make(chan struct{})}
}

func (g *mediaGate) Waiting(id string, _ int64) { g.waiting <- id }

func (g *mediaGate) Serving(id string, n int64) {
	g.mu.Lock()
	g.held += n
	g.max = max(g.max, g.held)
	g.mu.Unlock()
	g.serving <- id
	select {
	case <-g.release:
	case <-g.stop:
	}
}

func (g *mediaGate) Done(id string, n int64) {
	g.mu.Lock()
	g.held -= n
	g.mu.Unlock()
	g.done <- id
}

func (g *mediaGate) counts() (held, most int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held, g.max
}

// fetched is the outcome of a fetch run on its own goroutine.
type fetched struct {
	status     int
	body       []byte
	retryAfter string
	err        error
}

// fetchAsync GETs url with header on a goroutine of its own, under ctx.
func fetchAsync(ctx context.Context, url string, header http.Header) <-chan fetched {
	out := make(chan fetched, 1)
	go func() {
		req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
		if err != nil {
			out <- fetched{err: err}
			return
		}
		req.Header = header
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- fetched{err: err}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		out <- fetched{status: resp.StatusCode, body: body, retryAfter: resp.Header.Get("Retry-After"), err: err}
	}()
	return out
}

// bigPicture is the media tool's picture padded to 1 MiB.
const bigPicture = 1 << 20

// newBoundEnv is a tool env whose channel serves at most bound bytes of
// media at once, a fetch waiting up to wait; the reply to one message
// there carries a 1 MiB picture (its url, and what it fetches), and the
// header that authenticates its fetches.
func newBoundEnv(t *testing.T, bound int64, wait time.Duration) (e *env, g *mediaGate, url string, want []byte, auth http.Header) {
	t.Helper()
	e, _ = newToolEnvWith(t, nil, "", WSOptions{MediaServeBytes: bound, MediaWait: wait}, tools.ApproveAuto,
		toolCall("call-1", mcptest.Media, map[string]any{"png_bytes": bigPicture}))
	g = newMediaGate()
	e.ws.mediaHook = g
	t.Cleanup(func() { close(g.stop) }) // before the server closes: a failed test holds nothing
	c, ready := e.connect(map[string]any{"user": "ann"})
	c.send(map[string]any{"type": "message", "id": "m1", "text": "draw it"})
	frames := c.until("reply")
	atts, _ := frames[len(frames)-1]["attachments"].([]any)
	if len(atts) != 2 || num(atts[0].(map[string]any)["size"]) != bigPicture {
		t.Fatalf("reply = %v", frames[len(frames)-1])
	}
	want = append(bytes.Clone(mcptest.PNG), make([]byte, bigPicture-len(mcptest.PNG))...)
	return e, g, e.srv.URL + atts[0].(map[string]any)["url"].(string), want,
		http.Header{"Authorization": {"Session " + ready["session"].(string)}}
}

// Fetches of large items hold no more bytes at once than the bound: with
// room for two 1 MiB pictures, a third fetch waits until one of them is
// done, then is served.
func TestToolMediaServedWithinTheBound(t *testing.T) {
	const bound = 5 << 19 // 2.5 MiB
	_, g, url, want, auth := newBoundEnv(t, bound, time.Minute)
	var results []<-chan fetched
	for range 3 {
		results = append(results, fetchAsync(t.Context(), url, auth))
	}
	// Two are served, and the third finds no room.
	served, waited := 0, 0
	for served < 2 || waited < 1 {
		select {
		case <-g.serving:
			if served++; served > 2 {
				_, most := g.counts()
				t.Fatalf("three fetches served at once (%d bytes, the bound is %d)", most, bound)
			}
		case <-g.waiting:
			waited++
		}
	}
	g.release <- struct{}{} // one is done…
	<-g.done
	<-g.serving // …and the third has its room
	g.release <- struct{}{}
	g.release <- struct{}{}
	for i, r := range results {
		got := <-r
		if got.err != nil || got.status != 200 || !bytes.Equal(got.body, want) {
			t.Fatalf("fetch %d: %d, %d bytes, %v", i, got.status, len(got.body), got.err)
		}
	}
	<-g.done
	<-g.done
	if held, most := g.counts(); held != 0 || most > bound || most != 2*bigPicture {
		t.Fatalf("bytes held %d, at most %d; want 0, at most %d (two pictures)", held, most, bound)
	}
}

// A fetch that cannot get room within the wait is answered 503 with
// Retry-After, and those being served go on.
func TestToolMediaBusyIsAnswered503(t *testing.T) {
	_, g, url, want, auth := newBoundEnv(t, bigPicture, time.Millisecond)
	first := fetchAsync(t.Context(), url, auth)
	<-g.serving // holds the whole bound
	second := fetchAsync(t.Context(), url, auth)
	<-g.waiting
	got := <-second
	if got.err != nil || got.status != http.StatusServiceUnavailable || got.retryAfter != mediaRetryAfter {
		t.Fatalf("a fetch finding no room: %d, Retry-After %q, %v; want 503 with Retry-After", got.status, got.retryAfter, got.err)
	}
	<-g.done // it gave up its wait
	g.release <- struct{}{}
	if got := <-first; got.status != 200 || !bytes.Equal(got.body, want) {
		t.Fatalf("the fetch served: %d, %d bytes", got.status, len(got.body))
	}
	<-g.done
	if held, _ := g.counts(); held != 0 {
		t.Fatalf("bytes held after both: %d", held)
	}
}

// A client that leaves while its fetch waits for room ends the wait: the
// handler returns at once (not after the wait's bound), and the room is
// whole again when the others are done.
func TestToolMediaWaitEndsWithItsClient(t *testing.T) {
	_, g, url, want, auth := newBoundEnv(t, bigPicture, time.Hour)
	first := fetchAsync(t.Context(), url, auth)
	<-g.serving
	ctx, cancel := context.WithCancel(t.Context())
	left := fetchAsync(ctx, url, auth)
	<-g.waiting
	cancel()
	if got := <-left; got.err == nil {
		t.Fatalf("the cancelled fetch got %d", got.status)
	}
	<-g.done // its handler gave up waiting
	g.release <- struct{}{}
	if got := <-first; got.status != 200 || !bytes.Equal(got.body, want) {
		t.Fatalf("the fetch served: %d, %d bytes", got.status, len(got.body))
	}
	<-g.done
	// The whole bound is free: the next fetch is served without waiting.
	next := fetchAsync(t.Context(), url, auth)
	select {
	case <-g.serving:
	case id := <-g.waiting:
		t.Fatalf("fetch of %s waits with nothing served", id)
	}
	g.release <- struct{}{}
	if got := <-next; got.status != 200 {
		t.Fatalf("the next fetch: %d", got.status)
	}
}

// A reply whose media could not be read from storage says so
// (attachments_unread); a client that reconnects finds them on the reply
// in its history.
func TestReplyFrameSaysItsMediaWereUnread(t *testing.T) {
	e, _ := newToolEnv(t, tools.ApproveAuto, toolCall("call-1", mcptest.Media, map[string]any{}))
	c, ready := e.connect(map[string]any{"user": "ann"})
	c.send(map[string]any{"type": "message", "id": "m1", "text": "draw it"})
	frames := c.until("reply")
	r := frames[len(frames)-1]
	if _, ok := r["attachments_unread"]; ok || len(r["attachments"].([]any)) != 2 {
		t.Fatalf("reply with its media read = %v", r)
	}
	// The same reply as the session manager hands it when storage could
	// not give its media (a delivery outside the live turn).
	e.ws.deliverStored(context.Background(), sessions.Delivery{Channel: Channel, SessionKey: sessions.WebSocketKey("ann"), ClientMsgID: "m1",
		Reply: sessions.Reply{Seq: num(r["seq"]), Text: r["text"].(string), Status: "ok", MediaUnread: true}})
	f := c.until("reply")[0]
	if f["attachments_unread"] != true || f["attachments"] != nil || f["seq"] != r["seq"] {
		t.Fatalf("reply with its media unread = %v", f)
	}
	c.c.Close()
	_, again := e.connect(map[string]any{"user": "ann", "session": ready["session"]})
	for _, h := range again["history"].([]any) {
		if item := h.(map[string]any); item["role"] == "assistant" && len(item["attachments"].([]any)) != 2 {
			t.Fatalf("history reply = %v", item)
		}
	}
}

// doneHook tells the test when a media fetch is done (its share of the
// bound given back).
type doneHook struct{ done chan string }

func (doneHook) Waiting(string, int64)     {}
func (doneHook) Serving(string, int64)     {}
func (h doneHook) Done(id string, _ int64) { h.done <- id }

// A client that does not read what it fetched holds its share of the
// bound only until its write time runs out: then its write fails and
// the share is freed.
func TestToolMediaSlowReaderFreesItsShare(t *testing.T) {
	const size = 9_000_000 // more than loopback's socket buffers hold unread, within max_bytes
	e, _ := newToolEnvWith(t, nil, "", WSOptions{}, tools.ApproveAuto, toolCall("call-1", mcptest.Media, map[string]any{"png_bytes": size}))
	hook := doneHook{done: make(chan string, 4)}
	e.ws.mediaHook = hook
	e.ws.mediaWriteTime = func(int64) time.Duration { return 200 * time.Millisecond }
	c, ready := e.connect(map[string]any{"user": "ann"})
	c.send(map[string]any{"type": "message", "id": "m1", "text": "draw it"})
	frames := c.until("reply")
	atts, _ := frames[len(frames)-1]["attachments"].([]any)
	if len(atts) != 2 {
		t.Fatalf("reply = %v", frames[len(frames)-1])
	}
	conn, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: gateway\r\nAuthorization: Session %s\r\n\r\n", atts[0].(map[string]any)["url"], ready["session"])
	// The client reads nothing.
	select {
	case <-hook.done:
	case <-time.After(30 * time.Second):
		t.Fatal("a client that reads nothing still holds its share of the bound")
	}
}
