package gateway

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/llmtest"
	"github.com/chatgate/chatgate/sessions"
)

// pngBytes is a PNG by its signature, which is what the type check reads.
func pngBytes(fill string) []byte {
	return append([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"), fill...)
}

func visionEnv(t *testing.T, opts WSOptions) (*env, *llmtest.Server) {
	t.Helper()
	llm, ag := llmtest.Agent(t, true)
	return newEnv(t, ag, opts, nil, nil), llm
}

func imageFrame(id, text string, img []byte) map[string]any {
	return map[string]any{"type": "message", "id": id, "text": text, "attachments": []map[string]any{
		{"kind": "image", "mime": "image/png", "data": base64.StdEncoding.EncodeToString(img)}}}
}

func userMessages(t *testing.T, e *env, conv string) []sessions.Message {
	t.Helper()
	msgs, err := e.db.RecentMessages(context.Background(), conv, 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []sessions.Message
	for _, m := range msgs {
		if m.Role == agent.RoleUser {
			out = append(out, m)
		}
	}
	return out
}

func TestImageMessageReachesModel(t *testing.T) {
	one, two := pngBytes(strings.Repeat("1", 1000)), pngBytes(strings.Repeat("2", 1000))
	// Room for one image: the second evicts the first.
	e, llm := visionEnv(t, WSOptions{MaxFrameBytes: 1 << 20, ImageCacheBytes: int64(len(one) + 100)})
	c, ready := e.connect(map[string]any{"user": "ann"})
	c.send(imageFrame("m1", "what is it?", one))
	if r := c.expect("reply"); r["text"] != llmtest.Reply || r["reply_to"] != "m1" {
		t.Fatalf("reply = %v", r)
	}
	url := func(b []byte) string { return "data:image/png;base64," + base64.StdEncoding.EncodeToString(b) }
	reqs := llm.Requests()
	if in := reqs[0][len(reqs[0])-1]; in.Text() != "what is it?" || len(in.Images()) != 1 || in.Images()[0] != url(one) {
		t.Fatalf("model got %+v", in)
	}
	// An image alone, with no text.
	c.send(imageFrame("m2", "", two))
	c.expect("reply")
	reqs = llm.Requests()
	if in := reqs[1][len(reqs[1])-1]; len(in.Parts) != 1 || len(in.Images()) != 1 || in.Images()[0] != url(two) {
		t.Fatalf("model got %+v", in)
	}
	// A later turn: the image still in memory is sent again; the one the
	// cache let go is told as no longer available.
	c.send(map[string]any{"type": "message", "id": "m3", "text": "compare them"})
	c.expect("reply")
	reqs = llm.Requests()
	hist := reqs[2]
	if len(hist) != 5 || hist[0].Text() != "what is it?\n"+agent.MissingImageText || len(hist[0].Images()) != 0 ||
		len(hist[2].Images()) != 1 || hist[2].Images()[0] != url(two) {
		t.Fatalf("third request = %+v", hist)
	}
	rows := userMessages(t, e, ready["conversation"].(string))
	if len(rows) != 3 || !strings.Contains(rows[0].Attachments, `"mime":"image/png"`) || !strings.Contains(rows[0].Attachments, `"hash":"`) ||
		strings.Contains(rows[0].Attachments, base64.StdEncoding.EncodeToString(one)) || rows[1].Content != "" || rows[2].Attachments != "" {
		t.Fatalf("stored = %+v", rows)
	}
	// ready's history names the attachments.
	c2, ready2 := e.connect(map[string]any{"user": "ann", "session": ready["session"]})
	_ = c2
	h := ready2["history"].([]any)
	first := h[0].(map[string]any)
	if atts, _ := first["attachments"].([]any); len(atts) != 1 || atts[0].(map[string]any)["mime"] != "image/png" {
		t.Fatalf("history = %v", h)
	}
}

func TestBadAttachmentFramesAreRefused(t *testing.T) {
	e, llm := visionEnv(t, WSOptions{MaxFrameBytes: 8 << 20})
	c, ready := e.connect(map[string]any{"user": "bob"})
	png := base64.StdEncoding.EncodeToString(pngBytes("x"))
	jpeg := base64.StdEncoding.EncodeToString([]byte("\xff\xd8\xff\xe0\x00\x10JFIF\x00"))
	att := func(kind, mime, data string) map[string]any {
		return map[string]any{"type": "message", "id": "b", "text": "t", "attachments": []map[string]any{{"kind": kind, "mime": mime, "data": data}}}
	}
	many := att("image", "image/png", png)
	many["attachments"] = []map[string]any{{"kind": "image", "mime": "image/png", "data": png}, {"kind": "image", "mime": "image/png", "data": png},
		{"kind": "image", "mime": "image/png", "data": png}, {"kind": "image", "mime": "image/png", "data": png}, {"kind": "image", "mime": "image/png", "data": png}}
	for _, tc := range []struct {
		frame map[string]any
		want  string
	}{
		{att("file", "image/png", png), `kind must be "image"`},
		{att("image", "image/bmp", png), "mime must be"},
		{att("image", "image/png", "not base64!"), "not valid base64"},
		{att("image", "image/png", ""), "data is empty"},
		{att("image", "image/png", jpeg), "data is not image/png (it looks like image/jpeg)"},
		{att("image", "image/png", strings.Repeat("A", (MaxImageBytes/3+10)*4)), "over"},
		{many, "at most 4 attachments"},
		{map[string]any{"type": "message", "id": "b", "text": "", "attachments": []any{}}, "empty"},
	} {
		c.send(tc.frame)
		f := c.expect("error")
		if f["code"] != "bad_frame" || !strings.Contains(f["message"].(string), tc.want) {
			t.Fatalf("for %s: error = %v", tc.want, f)
		}
	}
	c.send(map[string]any{"type": "message", "id": "ok", "text": "fine"})
	if r := c.expect("reply"); r["reply_to"] != "ok" {
		t.Fatalf("reply = %v", r)
	}
	if rows := userMessages(t, e, ready["conversation"].(string)); len(rows) != 1 || rows[0].Content != "fine" {
		t.Fatalf("stored = %+v", rows)
	}
	if n := len(llm.Requests()); n != 1 {
		t.Fatalf("%d model calls, want 1", n)
	}
}
