package llmtest

import (
	"context"
	"strings"
	"sync/atomic"

	"github.com/chatgate/chatgate/agent"
)

// Spender answers like the echo and reports what a model server would:
// the message's length in prompt tokens, 7 completion tokens, a cost of
// 0.001 a token, and the model the message names ("m:<model> …"; "small"
// otherwise) — as configured, with the API's dated id of it beside
// ("<model>-2026-01-01"). It counts its calls.
type Spender struct{ calls atomic.Int32 }

// Calls is how many times Reply was called.
func (s *Spender) Calls() int32 { return s.calls.Load() }

func (*Spender) Name() string  { return "spender" }
func (*Spender) Model() string { return "small" }

func (s *Spender) Reply(ctx context.Context, req agent.Request, onDelta func(string)) (agent.Reply, error) {
	s.calls.Add(1)
	r, err := agent.Echo{}.Reply(ctx, req, onDelta)
	if err != nil {
		return r, err
	}
	r.Model = "small"
	if rest, ok := strings.CutPrefix(req.Input, "m:"); ok {
		r.Model, _, _ = strings.Cut(rest, " ")
	}
	r.APIModel = r.Model + "-2026-01-01"
	r.Usage = agent.Usage{PromptTokens: int64(len(req.Input)), CompletionTokens: 7}
	r.Usage.TotalTokens = r.Usage.PromptTokens + r.Usage.CompletionTokens
	r.Cost = float64(r.Usage.TotalTokens) / 1000
	return r, nil
}
