package llmtest

import (
	"net/http/httptest"
	"testing"

	"github.com/chatgate/chatgate/agent/openai"
)

// Agent serves a new Server on loopback until the test ends and returns
// it with the gateway's openai backend pointed at it: no retries, images
// sent to the model when vision is set.
func Agent(t testing.TB, vision bool) (*Server, *openai.Backend) {
	t.Helper()
	return serve(t, openai.Config{Vision: vision})
}

// TranscribingAgent is Agent with transcription on: its Transcriber
// uploads to the server's transcription endpoint with
// TranscriptionModel.
func TranscribingAgent(t testing.TB, vision bool) (*Server, *openai.Backend) {
	t.Helper()
	return serve(t, openai.Config{Vision: vision, TranscriptionModel: TranscriptionModel})
}

// AgentWith is Agent with the rest of cfg (streaming, vision, prices…):
// its base URL, key and model ("m") are the server's, without retries.
func AgentWith(t testing.TB, cfg openai.Config) (*Server, *openai.Backend) {
	t.Helper()
	return serve(t, cfg)
}

func serve(t testing.TB, cfg openai.Config) (*Server, *openai.Backend) {
	llm := &Server{}
	srv := httptest.NewServer(llm)
	t.Cleanup(srv.Close)
	cfg.BaseURL, cfg.APIKey, cfg.Model, cfg.MaxRetries = srv.URL+"/v1", "k", "m", 0
	return llm, openai.New(cfg)
}
