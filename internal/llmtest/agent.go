package llmtest

import (
	"net/http/httptest"
	"testing"

	"github.com/chatgate/chatgate/agent"
)

// Agent serves a new Server on loopback until the test ends and returns
// it with the gateway's openai backend pointed at it: no retries, images
// sent to the model when vision is set.
func Agent(t testing.TB, vision bool) (*Server, *agent.OpenAI) {
	t.Helper()
	llm := &Server{}
	srv := httptest.NewServer(llm)
	t.Cleanup(srv.Close)
	return llm, agent.NewOpenAI(agent.OpenAIConfig{BaseURL: srv.URL + "/v1", APIKey: "k", Model: "m", MaxRetries: 0, Vision: vision})
}
