package openai_test

import (
	"context"
	"testing"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/agent/openai"
	"github.com/chatgate/chatgate/internal/llmtest"
)

// A reply names the model as the operator configured it — a chosen
// model's name among agent.models, else agent.openai.model — which the
// usage is tallied under, and keeps the id the API reported (often a
// dated one) beside it; streamed or not.
func TestReplyNamesTheConfiguredModel(t *testing.T) {
	for _, stream := range []bool{false, true} {
		llm, backend := llmtest.AgentWith(t, openai.Config{Stream: stream})
		llm.Script(func(llmtest.Request) llmtest.Answer { return llmtest.Answer{Text: "hi"} })
		r, err := backend.Reply(context.Background(), agent.Request{Input: "x"}, nil)
		if err != nil || r.Model != "m" || r.APIModel != "m-1" {
			t.Fatalf("stream %t, the backend's model: %q / %q, %v", stream, r.Model, r.APIModel, err)
		}
		r, err = backend.Reply(context.Background(), agent.Request{Input: "x", Model: &agent.ModelSpec{Name: "Smart", ID: "smart-1"}}, nil)
		if err != nil || r.Model != "Smart" || r.APIModel != "m-1" || llm.Received()[1].Model != "smart-1" {
			t.Fatalf("stream %t, a chosen model: %q / %q (asked %q), %v", stream, r.Model, r.APIModel, llm.Received()[1].Model, err)
		}
	}
}
