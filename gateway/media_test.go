package gateway

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/chatgate/chatgate/internal/mcptest"
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
