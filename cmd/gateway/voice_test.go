package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/config"
	"github.com/chatgate/chatgate/internal/llmtest"
	"github.com/chatgate/chatgate/internal/telegramtest"
)

// TestServeTranscribesVoice drives the wiring of voice: with
// agent.openai.transcription_model set, a Telegram voice note and a
// WebSocket audio attachment are transcribed by the configured server's
// /audio/transcriptions endpoint and answered from their transcript.
func TestServeTranscribesVoice(t *testing.T) {
	llm := &llmtest.Server{}
	model := httptest.NewServer(llm)
	defer model.Close()
	api := telegramtest.New(t)
	botAPI := httptest.NewServer(api)
	defer botAPI.Close()
	addr := freeAddr(t)
	path := writeConfig(t, fmt.Sprintf(`
gateway:
  listen: %s
storage:
  dsn: %s
agent:
  backend: openai
  openai:
    base_url: %s/v1
    api_key: k
    model: m
    stream: false
    max_retries: 0
    transcription_model: %s
    max_audio_bytes: 64KiB
channels:
  websocket:
    max_frame_bytes: 1048576
  telegram:
    token: %q
    api_url: %s
    poll_timeout: 1s
    streaming: "off"
log:
  level: error
`, addr, filepath.Join(t.TempDir(), "g.db"), model.URL, llmtest.TranscriptionModel, telegramtest.Token, botAPI.URL))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var stderr syncBuffer
	go func() { done <- run(ctx, []string{"-c", path}, &bytes.Buffer{}, &stderr) }()
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("exit %d\n%s", code, stderr.String())
		}
	}()
	waitHealthy(t, "http://"+addr)

	voice := []byte("OggS\x00voice")
	llm.AddAudio(voice, "book a table for two")
	api.AddFile("v1", voice)
	api.Push(telegramtest.VoiceOf(7, "", "v1", len(voice)))
	if got := api.WaitSent(t, 1)[0].Text; got != "<blockquote>book a table for two</blockquote>\n\n"+llmtest.Reply {
		t.Fatalf("telegram reply = %q", got)
	}

	c, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.WriteJSON(map[string]any{"type": "hello", "user": "ann"})
	var ready map[string]any
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if err := c.ReadJSON(&ready); err != nil || ready["audio"] != true || ready["max_audio_bytes"] != float64(64<<10) {
		t.Fatalf("ready = %v, %v", ready, err)
	}
	clip := []byte("OggS\x00clip")
	llm.AddAudio(clip, "and a taxi at eight")
	c.WriteJSON(map[string]any{"type": "message", "id": "a1", "attachments": []map[string]any{
		{"kind": "audio", "mime": "audio/ogg", "data": base64.StdEncoding.EncodeToString(clip)}}})
	if f := readReply(t, c); f["text"] != llmtest.Reply || f["reply_to"] != "a1" {
		t.Fatalf("websocket reply = %v", f)
	}
	reqs := llm.Requests()
	var inputs []string
	for _, r := range reqs {
		inputs = append(inputs, r[len(r)-1].Text())
	}
	if strings.Join(inputs, "|") != "book a table for two|and a taxi at eight" {
		t.Fatalf("the model was given %q", inputs)
	}
}

// A reload's new agent settings reach the channels' transcriber; turning
// transcription on or off, or its size limit, needs a restart.
func TestReloadedAgentTranscribes(t *testing.T) {
	first, second := &llmtest.Server{}, &llmtest.Server{}
	for _, s := range []*llmtest.Server{first, second} {
		srv := httptest.NewServer(s)
		defer srv.Close()
		s.AddAudio([]byte("OggS\x00x"), "hi")
		if s == first {
			t.Setenv("FIRST_URL", srv.URL+"/v1")
		} else {
			t.Setenv("SECOND_URL", srv.URL+"/v1")
		}
	}
	parse := func(body string) *config.Config {
		t.Helper()
		cfg, err := config.Parse([]byte(body), "bot.yaml", os.LookupEnv)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	conf := func(url, model, limit string) *config.Config {
		return parse(fmt.Sprintf("agent:\n  backend: openai\n  openai:\n    base_url: %s\n    model: m\n    api_key: k\n    max_retries: 0\n    transcription_model: %q\n    max_audio_bytes: %s\n", url, model, limit))
	}
	started := conf("${FIRST_URL}", llmtest.TranscriptionModel, "1MiB")
	lt := newTranscriber(newAgent(started))
	moved := conf("${SECOND_URL}", llmtest.TranscriptionModel, "1MiB")
	lt.follow(newAgent(moved))
	lt.follow(newAgent(conf("${SECOND_URL}", "", "1MiB"))) // off needs a restart: the one in use stays
	if text, err := lt.Transcribe(context.Background(), bytes.NewReader([]byte("OggS\x00x")), "voice.ogg", "audio/ogg"); err != nil || text != "hi" {
		t.Fatalf("Transcribe = %q, %v", text, err)
	}
	if len(first.Transcriptions()) != 0 || len(second.Transcriptions()) != 1 {
		t.Fatalf("transcriptions: first %d, second %d; want the reloaded server's", len(first.Transcriptions()), len(second.Transcriptions()))
	}
	if keys := restartKeys(started, moved); len(keys) != 0 {
		t.Fatalf("restart keys of a moved server = %v", keys)
	}
	if keys := restartKeys(started, conf("${FIRST_URL}", "", "2MiB")); strings.Join(keys, ",") != "agent.openai.transcription_model,agent.openai.max_audio_bytes" {
		t.Fatalf("restart keys = %v", keys)
	}
	if newTranscriber(agent.Echo{}) != nil || newTranscriber(agent.Echo{}).channelTranscriber() != nil {
		t.Fatal("echo has a transcriber")
	}
}
