package main

import (
	"context"
	"io"
	"sync/atomic"

	"github.com/chatgate/chatgate/agent"
	"github.com/chatgate/chatgate/agent/openai"
	"github.com/chatgate/chatgate/config"
	"github.com/chatgate/chatgate/sessions"
)

func newAgent(cfg *config.Config) agent.Agent {
	if cfg.Agent.Backend == "openai" {
		o := cfg.Agent.OpenAI
		return openai.New(openai.Config{
			Name: cfg.Agent.Name, BaseURL: o.BaseURL, APIKey: o.APIKey, Model: o.Model,
			Timeout: o.Timeout.D(), MaxRetries: cfg.OpenAIMaxRetries(), Stream: cfg.OpenAIStream(),
			PricePer1KPrompt: o.PricePer1KPrompt, PricePer1KCompletion: o.PricePer1KCompletion,
			Vision: o.Vision, TranscriptionModel: o.TranscriptionModel,
		})
	}
	return agent.Echo{}
}

// models are agent.models as the session manager takes them: each with
// its prices resolved (its own, else agent.openai's).
func models(cfg *config.Config) []sessions.Model {
	var out []sessions.Model
	for _, m := range cfg.Agent.ResolvedModels() {
		out = append(out, sessions.Model{Name: m.Name, ID: m.Model, ContextTokens: m.ContextTokens,
			PricePer1KPrompt: m.PricePer1KPrompt, PricePer1KCompletion: m.PricePer1KCompletion})
	}
	return out
}

// newCompactor is the agent that writes compaction's summaries when
// session.compaction.model names a model of its own (nil: the agent
// writes them).
func newCompactor(cfg *config.Config) agent.Agent {
	model := cfg.Session.Compaction.Model
	if model == "" || cfg.Agent.Backend != "openai" {
		return nil
	}
	o := cfg.Agent.OpenAI
	return openai.New(openai.Config{
		Name: cfg.Agent.Name, BaseURL: o.BaseURL, APIKey: o.APIKey, Model: model,
		Timeout: o.Timeout.D(), MaxRetries: cfg.OpenAIMaxRetries(),
		PricePer1KPrompt: o.PricePer1KPrompt, PricePer1KCompletion: o.PricePer1KCompletion,
	})
}

// liveTranscriber is the channels' transcriber: the current agent's, so
// that a reload's new api_key, base_url or timeout reaches it too. Whether
// there is one at all (transcription_model) is read at start.
type liveTranscriber struct {
	cur atomic.Pointer[agent.Transcriber]
}

// newTranscriber returns the transcriber of ag, or nil when it has none.
func newTranscriber(ag agent.Agent) *liveTranscriber {
	t := agent.TranscriberOf(ag)
	if t == nil {
		return nil
	}
	lt := &liveTranscriber{}
	lt.cur.Store(&t)
	return lt
}

// follow takes the transcriber of a reloaded agent; one without (the
// model was taken out, which needs a restart) leaves the one in use.
func (lt *liveTranscriber) follow(ag agent.Agent) {
	if lt == nil {
		return
	}
	if t := agent.TranscriberOf(ag); t != nil {
		lt.cur.Store(&t)
	}
}

// Transcribe implements agent.Transcriber.
func (lt *liveTranscriber) Transcribe(ctx context.Context, audio io.Reader, name, mime string) (string, error) {
	return (*lt.cur.Load()).Transcribe(ctx, audio, name, mime)
}

// channelTranscriber is lt for a channel's options: a nil interface, not a
// nil pointer in one, when there is none.
func (lt *liveTranscriber) channelTranscriber() agent.Transcriber {
	if lt == nil {
		return nil
	}
	return lt
}
