package openai_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/internal/llmtest"
)

// The openai backend transcribes through the server's
// /audio/transcriptions endpoint: the official client's multipart upload
// (the model, the file with its name and type, response_format json),
// read back by a server that checks the form.
func TestOpenAITranscribes(t *testing.T) {
	llm, ag := llmtest.TranscribingAgent(t, false)
	tr := agent.TranscriberOf(ag)
	if tr == nil {
		t.Fatal("an openai backend with a transcription model has no transcriber")
	}
	voice := []byte("OggS\x00\x02voice-bytes")
	llm.AddAudio(voice, " remind me at five ")
	text, err := tr.Transcribe(context.Background(), bytes.NewReader(voice), "voice.ogg", "audio/ogg")
	if err != nil || text != "remind me at five" {
		t.Fatalf("Transcribe = %q, %v", text, err)
	}
	got := llm.Transcriptions()
	if len(got) != 1 || got[0].Model != llmtest.TranscriptionModel || got[0].FileName != "voice.ogg" ||
		got[0].ContentType != "audio/ogg" || got[0].ResponseFormat != "json" || !bytes.Equal(got[0].Data, voice) {
		t.Fatalf("server read %+v", got)
	}

	// A failing endpoint is an *agent.Error with its status.
	llm.FailTranscriptions(http.StatusInternalServerError)
	_, err = tr.Transcribe(context.Background(), bytes.NewReader(voice), "voice.ogg", "audio/ogg")
	var aerr *agent.Error
	if !errors.As(err, &aerr) || aerr.Status != http.StatusInternalServerError {
		t.Fatalf("failing endpoint: err = %v", err)
	}

	// Without a transcription model, and for echo, there is none.
	if _, plain := llmtest.Agent(t, false); agent.TranscriberOf(plain) != nil {
		t.Fatal("an openai backend without a transcription model transcribes")
	}
	if agent.TranscriberOf(agent.Echo{}) != nil {
		t.Fatal("echo transcribes")
	}
}
