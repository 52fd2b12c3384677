package gateway

import (
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/clocktest"
	"github.com/chatgate/chatgate/internal/llmtest"
	"github.com/chatgate/chatgate/internal/oteltest"
	"github.com/chatgate/chatgate/sessions"
	"github.com/chatgate/chatgate/sessions/store"
	"github.com/chatgate/chatgate/sessions/storetest"
)

// webmBytes is WebM audio by its EBML signature, which is what the type
// check reads; oggBytes is Ogg.
func webmBytes(fill string) []byte {
	return append([]byte("\x1a\x45\xdf\xa3\x9f\x42\x86\x81\x01"), fill...)
}
func oggBytes(fill string) []byte { return append([]byte("OggS\x00\x02\x00\x00"), fill...) }

// voiceEnv serves the WebSocket channel with the openai backend on a
// local server that answers chat calls and transcribes the audio it was
// given a transcript for.
func voiceEnv(t *testing.T, opts WSOptions) (*env, *llmtest.Server) {
	t.Helper()
	llm, ag := llmtest.TranscribingAgent(t, false)
	opts.Transcriber = agent.TranscriberOf(ag)
	if opts.MaxFrameBytes == 0 {
		opts.MaxFrameBytes = 1 << 20
	}
	return newEnv(t, ag, opts, nil, nil), llm
}

func audioFrame(id, text, mime string, data []byte) map[string]any {
	return map[string]any{"type": "message", "id": id, "text": text, "attachments": []map[string]any{
		{"kind": "audio", "mime": mime, "data": base64.StdEncoding.EncodeToString(data)}}}
}

// An audio attachment is transcribed before the message is stored: the
// transcript, then the frame's text, is the message's text, which the
// model answers; the attachment's metadata is stored, never its bytes.
func TestAudioMessageIsTranscribedAndAnswered(t *testing.T) {
	e, llm := voiceEnv(t, WSOptions{})
	c, ready := e.connect(map[string]any{"user": "ann"})
	if ready["audio"] != true || num(ready["max_audio_bytes"]) != agent.DefaultMaxAudioBytes {
		t.Fatalf("ready = %v: want audio true and the limit", ready)
	}
	clip := webmBytes(strings.Repeat("v", 3000))
	llm.AddAudio(clip, "what's the weather in Lisbon tomorrow?")
	c.send(audioFrame("a1", "answer briefly", "audio/webm;codecs=opus", clip))
	if ack := c.expect("ack"); ack["id"] != "a1" {
		t.Fatalf("ack = %v", ack)
	}
	if r := c.expect("reply"); r["reply_to"] != "a1" || r["text"] != llmtest.Reply {
		t.Fatalf("reply = %v", r)
	}
	want := "what's the weather in Lisbon tomorrow?\n\nanswer briefly"
	reqs := llm.Requests()
	if in := reqs[0][len(reqs[0])-1]; in.Text() != want {
		t.Fatalf("model got %q, want %q", in.Text(), want)
	}
	tr := llm.Transcriptions()
	if len(tr) != 1 || tr[0].FileName != "audio.webm" || tr[0].ContentType != "audio/webm" || string(tr[0].Data) != string(clip) {
		t.Fatalf("transcription requests = %+v", tr)
	}
	rows := userMessages(t, e, ready["conversation"].(string))
	if len(rows) != 1 || rows[0].Content != want || !strings.Contains(rows[0].Attachments, `"kind":"audio"`) ||
		!strings.Contains(rows[0].Attachments, `"mime":"audio/webm"`) || !strings.Contains(rows[0].Attachments, `"size":`+strconv.Itoa(len(clip))) ||
		strings.Contains(rows[0].Attachments, `"hash"`) || strings.Contains(rows[0].Attachments, base64.StdEncoding.EncodeToString(clip)[:40]) {
		t.Fatalf("stored = %+v", rows)
	}

	// Audio alone, with no text.
	note := oggBytes("note")
	llm.AddAudio(note, "thanks")
	c.send(audioFrame("a2", "", "audio/ogg", note))
	c.expect("reply")
	reqs = llm.Requests()
	if in := reqs[1][len(reqs[1])-1]; in.Text() != "thanks" {
		t.Fatalf("model got %q", in.Text())
	}
	// ready's history names the attachment.
	_, again := e.connect(map[string]any{"user": "ann", "session": ready["session"]})
	h := again["history"].([]any)
	if atts, _ := h[0].(map[string]any)["attachments"].([]any); len(atts) != 1 || atts[0].(map[string]any)["kind"] != "audio" {
		t.Fatalf("history = %v", h)
	}
}

// Without a transcriber, audio is refused with an error frame naming the
// message, and nothing is stored; ready says audio is not read.
func TestAudioWithoutTranscriberIsRefused(t *testing.T) {
	e := newEnv(t, agent.Echo{}, WSOptions{MaxFrameBytes: 1 << 20}, nil, nil)
	c, ready := e.connect(map[string]any{"user": "ann"})
	if ready["audio"] != false || ready["max_audio_bytes"] != nil {
		t.Fatalf("ready = %v", ready)
	}
	c.send(audioFrame("a1", "listen", "audio/ogg", oggBytes("x")))
	f := c.expect("error")
	if f["code"] != "unsupported" || f["id"] != "a1" || f["message"] != "this gateway does not transcribe audio; type the message instead" {
		t.Fatalf("error = %v", f)
	}
	c.send(map[string]any{"type": "message", "id": "t1", "text": "typed"})
	if r := c.expect("reply"); r["reply_to"] != "t1" {
		t.Fatalf("reply = %v", r)
	}
	if rows := userMessages(t, e, ready["conversation"].(string)); len(rows) != 1 || rows[0].Content != "typed" {
		t.Fatalf("stored = %+v", rows)
	}
}

// Bad audio attachments are bad frames naming the message: a type the
// endpoint does not take, bytes that are not the type declared, data that
// is not base64, audio over max_audio_bytes. Nothing is stored or
// transcribed.
func TestBadAudioAttachmentsAreRefused(t *testing.T) {
	e, llm := voiceEnv(t, WSOptions{MaxAudioBytes: 1024})
	c, ready := e.connect(map[string]any{"user": "bob"})
	for _, tc := range []struct {
		frame map[string]any
		want  string
	}{
		{audioFrame("b1", "", "audio/aac", oggBytes("x")), "audio mime must be one of"},
		{audioFrame("b2", "", "audio/ogg", pngBytes("x")), "data is not audio/ogg (it looks like image/png)"},
		{audioFrame("b3", "", "audio/ogg", webmBytes("x")), "data is not audio/ogg (it looks like video/webm)"},
		{audioFrame("b4", "", "audio/flac", oggBytes("x")), "data is not audio/flac"},
		{audioFrame("b5", "", "audio/ogg", []byte("plain words")), "it looks like text/plain"},
		{map[string]any{"type": "message", "id": "b6", "attachments": []map[string]any{{"kind": "audio", "mime": "audio/ogg", "data": "%%%"}}}, "not valid base64"},
		{audioFrame("b7", "", "audio/ogg", oggBytes(strings.Repeat("x", 2000))), "over this gateway's limit of 1024"},
	} {
		c.send(tc.frame)
		f := c.expect("error")
		if f["code"] != "bad_frame" || f["id"] != tc.frame["id"] || !strings.Contains(f["message"].(string), tc.want) {
			t.Fatalf("for %s: error = %v", tc.want, f)
		}
	}
	c.send(map[string]any{"type": "message", "id": "ok", "text": "fine"})
	if r := c.expect("reply"); r["reply_to"] != "ok" {
		t.Fatalf("reply = %v", r)
	}
	if rows := userMessages(t, e, ready["conversation"].(string)); len(rows) != 1 {
		t.Fatalf("stored = %+v", rows)
	}
	if n := len(llm.Transcriptions()); n != 0 {
		t.Fatalf("%d transcriptions of refused audio", n)
	}
}

// A failed transcription, or one that heard nothing, is refused with
// transcription_failed; nothing is stored and the model is not called.
// Sent again once the endpoint works, the same message is answered.
func TestAudioTranscriptionFailureIsRefused(t *testing.T) {
	e, llm := voiceEnv(t, WSOptions{})
	c, ready := e.connect(map[string]any{"user": "cat"})
	clip, silence := oggBytes("clip"), oggBytes("silence")
	llm.AddAudio(clip, "are you there?")
	llm.AddAudio(silence, "")
	llm.FailTranscriptions(http.StatusInternalServerError)
	c.send(audioFrame("a1", "", "audio/ogg", clip))
	if f := c.expect("error"); f["code"] != "transcription_failed" || f["id"] != "a1" ||
		f["message"] != "the audio could not be transcribed; send it again or type it" {
		t.Fatalf("error = %v", f)
	}
	llm.FailTranscriptions(0)
	c.send(audioFrame("a2", "", "audio/ogg", silence))
	if f := c.expect("error"); f["code"] != "transcription_failed" || f["id"] != "a2" || !strings.Contains(f["message"].(string), "no speech") {
		t.Fatalf("error = %v", f)
	}
	if rows := userMessages(t, e, ready["conversation"].(string)); len(rows) != 0 {
		t.Fatalf("stored = %+v", rows)
	}
	if n := len(llm.Requests()); n != 0 {
		t.Fatalf("%d model calls", n)
	}
	c.send(audioFrame("a1", "", "audio/ogg", clip))
	if r := c.expect("reply"); r["reply_to"] != "a1" {
		t.Fatalf("reply = %v", r)
	}
}

// With tracing, a message frame is a span "websocket message" whose
// children are the "transcribe" of its audio (size, limit, type) and the
// session manager's "message".
func TestTracingWebSocketTranscription(t *testing.T) {
	rec := oteltest.New(t)
	llm, ag := llmtest.TranscribingAgent(t, false)
	db, err := store.Open(t.Context(), store.DriverSQLite, t.TempDir()+"/g.db", store.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mgr := sessions.New(db, ag, sessions.Options{Logger: quiet, TracerProvider: rec})
	e := serveEnv(t, db, mgr, WSOptions{TracerProvider: rec, MaxFrameBytes: 1 << 20, MaxAudioBytes: 65536, Transcriber: agent.TranscriberOf(ag)}, false)
	c, _ := e.connect(map[string]any{"user": "ann"})
	clip := oggBytes("traced")
	llm.AddAudio(clip, "trace me")
	c.send(audioFrame("a1", "", "audio/ogg", clip))
	c.expect("reply")
	rec.WaitEnded(t, "websocket message", 1)
	rec.WaitEnded(t, "message", 1)
	parent := rec.Named("websocket message")[0]
	tr := rec.Named("transcribe")
	if len(tr) != 1 || tr[0].Parent.SpanID() != parent.SpanContext.SpanID() {
		t.Fatalf("transcribe spans %v: want one, the frame's child; spans %v", tr, rec.Names())
	}
	for key, want := range map[string]string{
		"audio.bytes": strconv.Itoa(len(clip)), "audio.limit_bytes": "65536", "audio.mime": "audio/ogg", "chatgate.channel": Channel,
	} {
		if got := oteltest.Attr(tr[0], key); got != want {
			t.Errorf("transcribe %s = %q, want %q", key, got, want)
		}
	}
	if m := rec.Named("message")[0]; m.Parent.SpanID() != parent.SpanContext.SpanID() {
		t.Error("the message span is not the frame's child")
	}
	if oteltest.Attr(parent, "chatgate.client_msg_id") != "a1" {
		t.Errorf("websocket message attributes = %v", parent.Attributes)
	}
}

// A transcription is a model call the user causes, so a user over their
// budget causes none: their audio message is refused with over_budget,
// saying which limit they reached and when it frees up; nothing is
// transcribed or stored. Under budget, and again once the day is over,
// audio is transcribed and answered. The spend is a real answered turn's,
// tallied by the store (each answer of llmtest spends 2 tokens).
func TestAudioOverBudgetIsNotTranscribed(t *testing.T) {
	storetest.Drivers(t, func(t *testing.T, open func() *store.DB) {
		llm, ag := llmtest.TranscribingAgent(t, false)
		clock := clocktest.New(time.Date(2026, 3, 10, 9, 0, 0, 0, time.UTC))
		db := open()
		mgr := sessions.New(db, ag, sessions.Options{Logger: quiet, Now: clock.Now,
			Policies: map[string]sessions.Policy{Channel: {MaxHistory: 100,
				Budget: sessions.BudgetPolicy{Default: sessions.Budget{TokensPerDay: 2}}}}})
		e := serveEnv(t, db, mgr, WSOptions{Transcriber: agent.TranscriberOf(ag), MaxFrameBytes: 1 << 20, Now: clock.Now}, false)
		c, ready := e.connect(map[string]any{"user": "ann"})
		first, second := webmBytes("first"), oggBytes("second")
		llm.AddAudio(first, "what's on today?")
		llm.AddAudio(second, "and tomorrow?")

		c.send(audioFrame("a1", "", "audio/webm", first))
		if r := c.expect("reply"); r["reply_to"] != "a1" || r["text"] != llmtest.Reply {
			t.Fatalf("reply under budget = %v", r)
		}

		c.send(audioFrame("a2", "briefly", "audio/ogg", second))
		want := "You have reached today's limit of 2 tokens, so I did not listen to that audio message (it is not kept). " +
			"You can send it again from Wed 11 Mar 00:00 UTC (in 15 h 0 min)."
		if f := c.expect("error"); f["code"] != "over_budget" || f["id"] != "a2" || f["message"] != want {
			t.Fatalf("error over budget = %v, want over_budget saying %q", f, want)
		}
		if tr := llm.Transcriptions(); len(tr) != 1 {
			t.Fatalf("%d transcription requests, want only the one under budget", len(tr))
		}
		if n := len(llm.Requests()); n != 1 {
			t.Fatalf("%d model calls", n)
		}
		if rows := userMessages(t, e, ready["conversation"].(string)); len(rows) != 1 || rows[0].Content != "what's on today?" {
			t.Fatalf("stored = %+v, want the first audio message only", rows)
		}

		clock.Advance(15 * time.Hour) // the budget's next day
		c.send(audioFrame("a3", "", "audio/ogg", second))
		if r := c.expect("reply"); r["reply_to"] != "a3" || r["text"] != llmtest.Reply {
			t.Fatalf("reply the next day = %v", r)
		}
	})
}
